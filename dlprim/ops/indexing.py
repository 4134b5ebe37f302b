"""The indexing operators (declarations: see ops/declare.py). Each runs on the ocl device
through its ``launch`` (dlprim/torch/ops_index.py for the reads, ops_index_put.py for the
writes, on core/indexing.py's kernels); the ``out=`` overloads of every packet follow its
functional ones."""
from .declare import declare

FAMILY = "indexing"
_READ = "dlprim.torch.ops_index."
_WRITE = "dlprim.torch.ops_index_put."
_ALL = ("float", "int", "bool")


def _op(name, doc, launch, aten=None, onnx=None, dtypes=_ALL):
    return declare(name, FAMILY, "launcher", doc, dtypes=dtypes, aten=aten or (name,),
                   onnx=onnx, launch=launch)


# ----- reads
_op("index_select", "slices of x along dim at the indices of a 1-d index",
    _READ + "_index_select", onnx="Gather")
_op("gather", "x[..., index[i, j, k], ...] along dim, one index per output element",
    _READ + "_gather", onnx="GatherElements")
_op("take", "elements of flattened x at the indices (negative ones from the end)",
    _READ + "_take")
_op("embedding", "rows of a weight matrix at the indices", _READ + "_embedding",
    onnx="Gather")
_op("embedding_renorm", "embedding's max_norm: the rows used scaled down to that norm",
    _WRITE + "_embedding_renorm_", aten=("embedding_renorm", "embedding_renorm_"),
    dtypes=("float",))
_op("index", "x[indices]: integer index tensors broadcast together, boolean masks",
    _READ + "_index", aten=("index", "_unsafe_index"), onnx="GatherND")
_op("nonzero", "the coordinates of the nonzero elements (count read back)", _READ + "nonzero",
    onnx="NonZero")
_op("nonzero_static", "nonzero padded or cut to a fixed count", _READ + "_nonzero_static")
_op("masked_select", "the elements where a mask is true, flattened", _READ + "_masked_select")
_op("isin", "whether each element is among the test elements (invert=)", _READ + "_isin")
_op("where", "cond ? a : b elementwise; where(cond) is nonzero's columns",
    "dlprim.torch.ops_math._where", onnx="Where")

# ----- writes
_op("scatter", "self[..., index, ...] = src (or a value) along dim; reduce='add'/'multiply'",
    _WRITE + "_scatter_src_", aten=("scatter", "scatter_"), onnx="ScatterElements")
_op("scatter_add", "self[..., index, ...] += src along dim (atomic)", _WRITE + "_scatter_add_",
    aten=("scatter_add", "scatter_add_"))
_op("scatter_reduce", "sum/prod/mean/amax/amin of src into self along dim (include_self=)",
    _WRITE + "_scatter_reduce_", aten=("scatter_reduce", "scatter_reduce_"))
_op("index_add", "self's slices at the indices += alpha * source (atomic)",
    _WRITE + "_index_add_", aten=("index_add", "index_add_"))
_op("index_reduce", "prod/mean/amax/amin of source's slices into self's at the indices",
    _WRITE + "_index_reduce_", aten=("index_reduce", "index_reduce_"))
_op("index_copy", "self's slices at the indices = source's", _WRITE + "_index_copy_",
    aten=("index_copy", "index_copy_"))
_op("index_fill", "self's slices at the indices = a value", _WRITE + "_index_fill_",
    aten=("index_fill", "index_fill_"))
_op("index_put", "self[indices] = values, or += with accumulate=True",
    _WRITE + "_index_put_", aten=("index_put", "index_put_", "_index_put_impl_",
                                  "_unsafe_index_put"), onnx="ScatterND")
_op("put", "elements of flattened self at the indices = source (or += with accumulate)",
    _WRITE + "_put_", aten=("put", "put_"))
_op("masked_scatter", "self where a mask is true = source's elements in order",
    _WRITE + "_masked_scatter_",
    aten=("masked_scatter", "masked_scatter_", "masked_scatter_backward"))
_op("embedding_dense_backward", "embedding's weight gradient (padding_idx, "
    "scale_grad_by_freq)", _WRITE + "_embedding_dense_backward", dtypes=("float",))
