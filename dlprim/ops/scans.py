"""The scans operators (declarations: see ops/declare.py): inclusive scans along a dim,
run by dlprim/torch/ops_reduce.py's ``_scan`` on core/scan.py."""
from .declare import declare

FAMILY = "scans"
_LAUNCH = "dlprim.torch.ops_reduce._scan"

declare("cumsum", FAMILY, "launcher", "running sum along a dim (integers in int64)",
        dtypes=("float", "int", "bool"), aten=("cumsum", "cumsum_"), onnx="CumSum",
        launch=_LAUNCH)
declare("cumprod", FAMILY, "launcher", "running product along a dim",
        dtypes=("float", "int", "bool"), aten=("cumprod", "cumprod_"), launch=_LAUNCH)
declare("logcumsumexp", FAMILY, "launcher", "running log(sum(exp(x))) along a dim",
        dtypes=("float",), aten=("logcumsumexp", "_logcumsumexp"), launch=_LAUNCH)
declare("cummax", FAMILY, "launcher", "running maximum and its index (the last of equals)",
        dtypes=("float", "int", "bool"), aten=("cummax", "_cummax_helper"), launch=_LAUNCH)
declare("cummin", FAMILY, "launcher", "running minimum and its index (the last of equals)",
        dtypes=("float", "int", "bool"), aten=("cummin", "_cummin_helper"), launch=_LAUNCH)
