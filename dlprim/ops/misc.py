"""Counting, mode, frexp, bilinear forms, distances and unbind copies (declarations: see
ops/declare.py), run on ocl devices by dlprim/torch/ops_misc.py and ops_distance.py,
composed from the device's sort, scan, scatter, search and norm operators."""
from .declare import declare

FAMILY = "misc"
_MISC = "dlprim.torch.ops_misc."
_DIST = "dlprim.torch.ops_distance."


def _op(name, doc, launch, dtypes=("float",), aten=None, onnx=None):
    return declare(name, FAMILY, "launcher", doc, dtypes=dtypes, aten=aten or (name,),
                   onnx=onnx, launch=launch)


_op("mode", "the most frequent value along a dim (ties: the smallest) and its last index",
    _MISC + "_mode", dtypes=("float", "int", "bool"))
_op("histc", "counts of values in equal bins between min and max (the data's by default)",
    _MISC + "_histc")
_op("histogram", "(weighted, density) counts in bins given by a count or by edges, and the "
    "edges", _MISC + "_histogram_count")
_op("bincount", "counts (or summed weights) of each non-negative integer",
    _MISC + "_bincount", dtypes=("int",))
_op("frexp", "mantissa in [0.5, 1) and integer exponent of each value", _MISC + "_frexp")
_op("trilinear", "sum over dims of three unsqueezed factors' product (F.bilinear)",
    _MISC + "_trilinear", aten=("_trilinear",))
_op("unbind_copy", "copies of the slices along a dim", _MISC + "_unbind_copy",
    dtypes=("float", "int", "bool"))
_op("cdist", "p-norm distances between the rows of two batches of matrices, and its "
    "gradient", _DIST + "_cdist_forward", aten=("_cdist_forward", "_cdist_backward"))
_op("pdist", "p-norm distances between the row pairs i < j of a matrix, and its gradient",
    _DIST + "_pdist_forward", aten=("_pdist_forward", "_pdist_backward"))
_op("dist", "the p-norm of a - b", _DIST + "_dist")
_op("segment_reduce", "sum/mean/max/min/prod over segments given by lengths or offsets, "
    "and its gradient", "dlprim.torch.ops_segment._segment_reduce",
    aten=("segment_reduce", "_segment_reduce_backward"))
