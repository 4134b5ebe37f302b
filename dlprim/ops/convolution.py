"""The convolution operators (declarations: see ops/declare.py)."""
from .declare import declare

FAMILY = "convolution"

_T = "dlprim.torch.ops_conv."

declare("convolution", FAMILY, "launcher",
        "1-D to 3-D convolution and transposed convolution (groups, stride, padding, "
        "dilation, output_padding): 2-D launchers for 1-D/2-D, column unrolling + GEMM for 3-D",
        dtypes=("float",), aten=("convolution",), onnx="Conv", launch=_T + "_convolution")
declare("convolution_backward", FAMILY, "launcher",
        "the input, weight and bias gradients of convolution and transposed convolution",
        dtypes=("float",), aten=("convolution_backward",), launch=_T + "_convolution_backward")
