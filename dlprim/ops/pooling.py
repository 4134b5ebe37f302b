"""The pooling operators (declarations: see ops/declare.py)."""
from .declare import declare

FAMILY = "pooling"

_T = "dlprim.torch.ops_conv."

declare("max_pool", FAMILY, "launcher",
        "2-D and 3-D max pooling with indices (dilation, ceil_mode; 1-D through 2-D) and "
        "its gradient", dtypes=("float", "int"),
        aten=("max_pool2d_with_indices", "max_pool2d_with_indices_backward",
              "max_pool3d_with_indices", "max_pool3d_with_indices_backward"),
        onnx="MaxPool", launch=_T + "_max_pool")
declare("avg_pool", FAMILY, "launcher",
        "2-D and 3-D average pooling (count_include_pad, divisor_override, ceil_mode; 1-D "
        "through 2-D) and its gradient", dtypes=("float", "int"),
        aten=("avg_pool2d", "avg_pool2d_backward", "avg_pool3d", "avg_pool3d_backward"),
        onnx="AveragePool", launch=_T + "_avg_pool")
declare("adaptive_max_pool", FAMILY, "launcher",
        "2-D and 3-D adaptive max pooling with indices and its gradient",
        dtypes=("float", "int"),
        aten=("adaptive_max_pool2d", "adaptive_max_pool2d_backward", "adaptive_max_pool3d",
              "adaptive_max_pool3d_backward"), launch=_T + "_adaptive")
declare("adaptive_avg_pool", FAMILY, "launcher",
        "2-D and 3-D adaptive average pooling (interpolate's area mode) and its gradient",
        dtypes=("float", "int"),
        aten=("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d",
              "_adaptive_avg_pool3d_backward"), launch=_T + "_adaptive")
declare("max_unpool", FAMILY, "launcher",
        "2-D and 3-D max_unpool: values scattered to their pooling indices, zeros elsewhere",
        dtypes=("float", "int"), aten=("max_unpool2d", "max_unpool3d"), onnx="MaxUnpool",
        launch=_T + "_max_unpool")
