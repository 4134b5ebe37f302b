"""The shape operators (declarations: see ops/declare.py). Each runs on the ocl device
through its ``launch`` in dlprim/torch/ops_shape.py: strided copies over views, or
core/shape_remap.py's axis gather (flip, roll, reflection / replication pads and their
gradients); the ``out=`` overloads of every packet follow its functional ones."""
from .declare import declare

FAMILY = "shape"
_AT = "dlprim.torch.ops_shape."
_ALL = ("float", "int", "bool")


def _op(name, doc, launch, aten=None, onnx=None, dtypes=_ALL):
    return declare(name, FAMILY, "launcher", doc, dtypes=dtypes, aten=aten or (name,),
                   onnx=onnx, launch=launch if "." in launch else _AT + launch)


# ----- in-place view operators (the tensor itself takes the view's sizes and strides)
_op("inplace_view", "unsqueeze_ / squeeze_ / transpose_ / t_ / as_strided_ in place",
    "_inplace_view", aten=("unsqueeze_", "squeeze_", "transpose_", "t_", "as_strided_"))
_op("resize_", "new sizes in place, the storage grown (values kept) when too small",
    "_resize_", aten=("resize_", "resize_as_"))

# ----- copies
_op("view_copy", "the *_copy operators: a view (by PyTorch's meta kernel) copied out",
    "_copy_of", aten=("as_strided_copy", "expand_copy", "diagonal_copy", "narrow_copy",
                      "squeeze_copy", "unsqueeze_copy", "t_copy", "transpose_copy",
                      "permute_copy", "unfold_copy", "select_copy", "slice_copy", "view_copy",
                      "alias_copy"))
_op("view_scatter", "a copy of x with one view of it (diagonal, select, slice, as_strided) "
    "set to src", "_scatter", aten=("diagonal_scatter", "select_scatter", "slice_scatter",
                                    "as_strided_scatter"))
_op("view_backward", "zeros with a slice or diagonal set to the gradient",
    "_into_zeros", aten=("slice_backward", "diagonal_backward"))
_op("diag_embed", "zeros with the last dim of x written along a diagonal", "_diag_embed")
_op("repeat", "x tiled repeats[i] times along each dim", "_repeat", onnx="Tile")
_op("repeat_interleave", "the index of each repeat count, repeated that often (the other "
    "forms of repeat_interleave build on it)", "_repeat_interleave_indices",
    dtypes=("int",))
_op("tril", "the lower triangle of the last two dims (others zero)",
    "dlprim.torch.ops_math._triangle", aten=("tril", "tril_"), onnx="Trilu")
_op("triu", "the upper triangle of the last two dims (others zero)",
    "dlprim.torch.ops_math._triangle", aten=("triu", "triu_"), onnx="Trilu")

# ----- axis gathers
_op("flip", "x reversed along dims", "_flip")
_op("roll", "x rotated by shifts along dims (flattened when dims is empty)", "_roll")
_op("rot90", "x rotated by 90 degrees k times in the plane of dims", "_rot90")
_op("reflection_pad", "pad by reflection (no edge repeat) over the last 1-3 dims, gradient "
    "included", "_remap", aten=tuple("reflection_pad%dd%s" % (n, s) for n in (1, 2, 3)
                                     for s in ("", "_backward")), onnx="Pad")
_op("replication_pad", "pad by repeating the edge over the last 1-3 dims, gradient included",
    "_remap", aten=tuple("replication_pad%dd%s" % (n, s) for n in (1, 2, 3)
                         for s in ("", "_backward")), onnx="Pad")
_op("constant_pad_nd", "pad with a value (negative pads crop)", "_constant_pad_nd",
    onnx="Pad")

# ----- rearrangements
_op("pixel_shuffle", "(*, C*r*r, H, W) -> (*, C, H*r, W*r)", "_pixel_shuffle",
    onnx="DepthToSpace")
_op("pixel_unshuffle", "(*, C, H*r, W*r) -> (*, C*r*r, H, W)", "_pixel_unshuffle",
    onnx="SpaceToDepth")
_op("channel_shuffle", "channels regrouped: (N, g, C/g, ...) transposed to (N, C/g, g, ...)",
    "_channel_shuffle", aten=("channel_shuffle", "native_channel_shuffle"))
_op("im2col", "every sliding window of an image as a column (F.unfold)", "_im2col",
    dtypes=("float", "int"))
_op("col2im", "columns summed back into an image (F.fold; im2col's adjoint)", "_col2im",
    dtypes=("float", "int"), onnx="Col2Im")
_op("unfold_backward", "Tensor.unfold's gradient: each window summed back into place",
    "_unfold_backward", dtypes=("float",))
