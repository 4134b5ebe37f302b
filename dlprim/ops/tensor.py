"""Tensor plumbing (declarations: see ops/declare.py): views (sizes, strides and offset
over the same storage, from PyTorch's meta kernels), copies between devices and dtypes,
and the factories that make a tensor of a shape."""
from .declare import declare

FAMILY = "tensor"
_ALL = ("float", "int", "bool")
_VIEW = "dlprim.torch.ops_tensor._view_via_meta"

# views: no kernel, a new layout over the same storage
for _name, _doc, _aten in (
        ("view", "the same elements in another shape", ("view", "_reshape_alias", "_unsafe_view")),
        ("as_strided", "a view with given sizes, strides and offset", ("as_strided",)),
        ("transpose", "two dims swapped (t: of a matrix)", ("transpose", "t")),
        ("permute", "the dims reordered", ("permute",)),
        ("expand", "size-1 dims repeated without copying (stride 0)", ("expand",)),
        ("slice", "every step-th element of a range along a dim", ("slice", "narrow")),
        ("select", "one index along a dim (the dim removed)", ("select",)),
        ("unsqueeze", "a size-1 dim inserted", ("unsqueeze",)),
        ("squeeze", "size-1 dims removed", ("squeeze",)),
        ("split", "consecutive pieces along a dim", ("split", "split_with_sizes", "chunk",
                                                     "unbind")),
        ("diagonal", "a diagonal of two dims, as a view", ("diagonal",)),
        ("unfold", "sliding windows along a dim, as a view", ("unfold",)),
        ("alias", "the same tensor, another handle (detach: without autograd)",
         ("alias", "detach", "lift_fresh"))):
    declare(_name, FAMILY, "launcher", _doc, dtypes=_ALL, aten=_aten, launch=_VIEW)

declare("copy", FAMILY, "launcher",
        "values copied between layouts, dtypes and devices (PyTorch's conversion rules)",
        dtypes=_ALL, aten=("copy_", "_copy_from", "_copy_from_and_resize", "_to_copy", "clone"),
        onnx="Cast", launch="dlprim.torch.ops_tensor._copy_")
declare("set", FAMILY, "launcher",
        "the tensor made a view of another's storage (set_(other)), of a storage torch.load "
        "restored on the device, or empty", dtypes=_ALL, aten=("set_",),
        launch="dlprim.torch.serialization.set_storage")
declare("cat", FAMILY, "launcher", "tensors joined along a dim (stack: along a new one)",
        dtypes=_ALL, aten=("cat", "stack"), onnx="Concat", launch="dlprim.torch.ops_tensor._cat")
declare("empty", FAMILY, "launcher", "a tensor of a shape, its values unset",
        dtypes=_ALL, aten=("empty", "empty_strided", "empty_like", "new_empty",
                           "new_empty_strided"),
        launch="dlprim.torch.ops_tensor.empty_strided")
declare("fill", FAMILY, "launcher", "every element set to one value",
        dtypes=_ALL, aten=("fill", "fill_", "zero_", "zeros_like", "ones_like", "full_like",
                           "new_zeros", "new_ones", "new_full"),
        onnx="ConstantOfShape", launch="dlprim.torch.ops_tensor._fill_")
declare("item", FAMILY, "launcher", "a one-element tensor's value on the host",
        dtypes=_ALL, aten=("_local_scalar_dense",),
        launch="dlprim.torch.ops_tensor._item")
declare("is_pinned", FAMILY, "launcher", "whether host memory is page-locked (never, on ocl)",
        dtypes=_ALL, aten=("is_pinned",), launch="dlprim.torch.ops_tensor._is_pinned")
declare("masked_fill", FAMILY, "launcher", "value where mask is true, else x",
        dtypes=_ALL, aten=("masked_fill",), launch="dlprim.torch.ops_math._masked_fill_build")
declare("select_backward", FAMILY, "launcher", "select's gradient: zeros but the selected slice",
        dtypes=_ALL, aten=("select_backward",), launch="dlprim.torch.ops_tensor._select_backward")
