"""The reductions operators (declarations: see ops/declare.py). Each runs on the ocl
device through its ``launch`` (dlprim/torch/ops_reduce.py); the ``out=`` overloads of
every packet follow its functional ones."""
from .declare import declare

FAMILY = "reductions"
_AT = "dlprim.torch.ops_reduce."
_ALL = ("float", "int", "bool")


def _reduction(name, doc, dtypes=_ALL, aten=None, onnx=None, launch=None):
    return declare(name, FAMILY, "launcher", doc, dtypes=dtypes, aten=aten or (name,),
                   onnx=onnx, launch=_AT + (launch or "_simple"))


_reduction("sum", "sum over dims (integers and bools in int64, 16-bit floats in float)",
           onnx="ReduceSum")
_reduction("nansum", "sum over dims, NaN counted as 0", dtypes=("float", "int", "bool"))
_reduction("prod", "product over dims", onnx="ReduceProd")
_reduction("mean", "mean over dims (NaN over none)", dtypes=("float",), onnx="ReduceMean",
           launch="_mean")
_reduction("nanmean", "mean of the values that are not NaN", dtypes=("float",),
           launch="_nanmean")
_reduction("var", "variance over dims with Bessel's correction (correction=)",
           dtypes=("float",), launch="_moments")
_reduction("std", "standard deviation over dims (correction=)", dtypes=("float",),
           launch="_moments")
_reduction("var_mean", "variance and mean in one call", dtypes=("float",),
           launch="_moments")
_reduction("std_mean", "standard deviation and mean in one call", dtypes=("float",),
           launch="_moments")
_reduction("linalg_vector_norm", "vector p-norm over dims (0, 1, 2, inf, -inf, any p)",
           dtypes=("float",), onnx="ReduceL2", launch="_vector_norm")
_reduction("norm", "torch.norm's p-norm over dims (the vector norm)", dtypes=("float",),
           launch="_norm")
_reduction("logsumexp", "log(sum(exp(x))) over dims, stable", onnx="ReduceLogSumExp",
           launch="_logsumexp")
_reduction("any", "whether any element is nonzero", aten=("any",))
_reduction("all", "whether every element is nonzero", aten=("all",))
_reduction("count_nonzero", "how many elements are nonzero (int64)")
_reduction("amax", "largest value over dims (NaN wins)", onnx="ReduceMax")
_reduction("amin", "smallest value over dims (NaN wins)", onnx="ReduceMin")
_reduction("max", "largest value, or along a dim with its index (the first)",
           launch="_arg_fold_into")
_reduction("min", "smallest value, or along a dim with its index (the first)",
           launch="_arg_fold_into")
_reduction("argmax", "index of the largest value (the first; a NaN wins)", onnx="ArgMax",
           launch="_arg_fold_into")
_reduction("argmin", "index of the smallest value (the first; a NaN wins)", onnx="ArgMin",
           launch="_arg_fold_into")
_reduction("aminmax", "smallest and largest value in one pass", launch="_aminmax")
_reduction("median", "lower median (a NaN if any), along a dim with its index",
           launch="_median")
_reduction("nanmedian", "lower median of the values that are not NaN", launch="_median")
