"""Softmax and log-softmax along a dim (declarations: see ops/declare.py)."""
from .declare import declare

FAMILY = "softmax"

declare("softmax", FAMILY, "launcher", "e^x / sum(e^x) along a dim (safe: all -inf gives 0)",
        dtypes=("float",), aten=("_softmax", "_softmax_backward_data", "_safe_softmax"),
        onnx="Softmax", layer="Softmax", launch="dlprim.core.softmax.SoftmaxOps")
declare("log_softmax", FAMILY, "launcher", "x - log(sum(e^x)) along a dim",
        dtypes=("float",), aten=("_log_softmax", "_log_softmax_backward_data"),
        onnx="LogSoftmax", layer="Softmax", launch="dlprim.core.softmax.SoftmaxOps")
