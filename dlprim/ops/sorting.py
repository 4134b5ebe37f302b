"""The sorting operators (declarations: see ops/declare.py), run by
dlprim/torch/ops_reduce.py on core/sort.py (stable; NaN as the largest value)."""
from .declare import declare

FAMILY = "sorting"
_AT = "dlprim.torch.ops_reduce."
_ALL = ("float", "int", "bool")

declare("sort", FAMILY, "launcher", "values and indices sorted along a dim, stable",
        dtypes=_ALL, aten=("sort",), launch=_AT + "_sorted")
declare("argsort", FAMILY, "launcher", "the indices that sort a dim", dtypes=_ALL,
        aten=("argsort",), launch=_AT + "_sorted")
declare("msort", FAMILY, "launcher", "values sorted along dim 0", dtypes=_ALL,
        aten=("msort",), launch=_AT + "_sorted")
declare("topk", FAMILY, "launcher", "the k largest (or smallest) values and their indices",
        dtypes=_ALL, aten=("topk",), onnx="TopK", launch=_AT + "_topk")
declare("kthvalue", FAMILY, "launcher", "the k-th smallest value along a dim and its index",
        dtypes=_ALL, aten=("kthvalue",), launch=_AT + "_kthvalue")
declare("unique", FAMILY, "launcher", "the sorted distinct values, inverse and counts",
        dtypes=_ALL, aten=("_unique2", "_unique", "unique_dim"), onnx="Unique",
        launch=_AT + "_groups")
declare("unique_consecutive", FAMILY, "launcher", "runs of equal values collapsed",
        dtypes=_ALL, aten=("unique_consecutive",), launch=_AT + "_groups")
declare("searchsorted", FAMILY, "launcher", "insertion points of values in sorted rows",
        dtypes=("float", "int"), aten=("searchsorted",), launch=_AT + "_search")
declare("bucketize", FAMILY, "launcher", "the bucket of each value between boundaries",
        dtypes=("float", "int"), aten=("bucketize",), launch=_AT + "_search")
