"""Saving and loading ocl tensors: ``torch.save``, ``torch.load``, ``pickle``, ``copy``.

Copying. ``copy.deepcopy`` of an ocl tensor (or a module holding them) clones it on the
device.

Saving. An ocl tensor pickles as PyTorch pickles any tensor of a device without host
storage (``torch._utils._rebuild_device_tensor_from_cpu_tensor``: its values as a CPU
tensor, its dtype, device and ``requires_grad``), so a file written from ocl loads with
plain PyTorch and ``weights_only=True``, and ``map_location`` applies to it. A Parameter
stays a Parameter. Tensors saved together that share an ocl storage (a tied weight under
two names of a ``state_dict``, views of one tensor) share one host copy of it, as CUDA
tensors share their storage in the file.

Loading. ``torch.load(f, map_location="ocl")`` (a device, or a dict mapping to one)
restores every storage of the file on the device: a placeholder storage stands for the
host bytes until PyTorch sets a tensor over it (``set_``), which creates one ocl storage
per host storage and dtype, so tensors sharing a storage in the file share it on ocl.
"""
import collections
import copy
import itertools
import weakref

import torch

from ..core.copy import contiguous_strides
from .tensor import OclTensor, empty, from_numpy, numpy_dtype, to_cpu
from . import device
from .dispatch import register as register_operator

aten = torch.ops.aten

__all__ = ["reduce_tensor", "deepcopy_tensor", "register", "set_storage", "set_tensor", "set_empty"]


# ----- saving
_host_copies = weakref.WeakKeyDictionary()  # ocl Storage -> {dtype: (weakref(host), version)}


def _host_view(t):
    """t's values as a view of a CPU copy of its whole ocl storage. Tensors over one storage
    pickled in the same dump get views of the same copy: the first view is kept (weakly)
    while the pickler holds it, that is until the dump ends, and is used again only while
    t's version counter says nothing wrote to the storage since."""
    storage = t._ocl_storage
    if numpy_dtype(t.dtype) != storage.flat.dtype:  # a dtype view (t.view(dtype)): its own
        return to_cpu(t)
    copies = _host_copies.setdefault(storage, {})
    held = copies.get(t.dtype)
    first = held[0]() if held is not None and held[1] == t._version else None
    if first is None:
        whole = to_cpu(OclTensor(storage, (storage.flat.size,), (1,), 0, t.dtype))
        view = whole.as_strided(t.shape, t.stride(), t.storage_offset())
        copies[t.dtype] = (weakref.ref(view), t._version)
        return view
    return torch.empty(0, dtype=t.dtype).set_(first.untyped_storage(), t.storage_offset(),
                                               t.shape, t.stride())


def reduce_tensor(t, proto):
    """``OclTensor.__reduce_ex__``: what pickling an ocl tensor writes."""
    if getattr(t, "_is_param", False):
        return (torch._utils._rebuild_parameter,
                (t.detach(), t.requires_grad, collections.OrderedDict()))
    return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (_host_view(t), t.dtype, str(t.device), t.requires_grad))


def deepcopy_tensor(t, memo):
    """``OclTensor.__deepcopy__``: PyTorch's, except that the copy keeps the storage its
    clone made (PyTorch's would deep-copy the original's ``__dict__`` over it)."""
    if not t.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                           "support the deepcopy protocol at the moment")
    if id(t) in memo:
        return memo[id(t)]
    with torch.no_grad():
        new = t.clone()
        new.requires_grad_(t.requires_grad)
        if t.grad is not None:
            new.grad = copy.deepcopy(t.grad, memo)
    own = new._ocl_storage
    new.__dict__.update(copy.deepcopy(
        {k: v for k, v in t.__dict__.items() if k != "_ocl_storage"}, memo))
    new._ocl_storage = own
    memo[id(t)] = new
    return new


# ----- loading
_pending = {}  # placeholder address -> (host UntypedStorage, device index, {dtype: Storage})
_addresses = itertools.count(1 << 40, 1 << 12)  # below every Storage.address


def _location_index(location):
    if location == "ocl":
        return device.current_device()
    if location.startswith("ocl:"):
        index = int(location[4:])
        if not 0 <= index < device.device_count():
            raise RuntimeError("torch.load: the file's storage goes to %s, but there are %d "
                               "ocl devices; use map_location to choose one"
                               % (location, device.device_count()))
        return index
    return None


def _deserialize(host, location):
    """torch.load's restore step for a storage bound for ``ocl[:N]``: a placeholder storage
    of that device whose address names the host bytes (see ``set_storage``)."""
    index = _location_index(location)
    if index is None:
        return None
    address = next(_addresses)
    placeholder = torch._C._construct_storage_from_data_pointer(
        address, torch.device("ocl", index), host.nbytes())
    _pending[address] = (host, index, {})
    weakref.finalize(placeholder, _pending.pop, address, None)
    return placeholder


def _tag(storage):
    return None  # ocl tensors never pickle their storage (see reduce_tensor)


@register_operator(aten.set_.source_Storage)
@register_operator(aten.set_.source_Storage_storage_offset)
def set_storage(t, source, storage_offset=0, size=None, stride=None):
    """``aten.set_.source_Storage(_storage_offset)`` on ocl: t over a storage torch.load
    restored on the device."""
    entry = _pending.get(source.data_ptr())
    if entry is None:
        raise NotImplementedError(
            "dlprim.torch: set_ over an ocl storage that torch.load did not make (an ocl "
            "tensor's untyped_storage() holds no data); set it over another tensor's "
            "storage with t.set_(other) instead")
    host, index, by_dtype = entry
    storage = by_dtype.get(t.dtype)
    if storage is None:
        values = torch.empty(0, dtype=t.dtype).set_(host)
        storage = by_dtype[t.dtype] = from_numpy(values, index, t.dtype)._ocl_storage
    if size is None:
        size, stride = (storage.flat.size,), (1,)
    if stride is None:
        stride = contiguous_strides(size)
    view = OclTensor(storage, tuple(size), tuple(stride), int(storage_offset), t.dtype)
    type(t).data.fset(t, view)
    return t


@register_operator(aten.set_.source_Tensor)
def set_tensor(t, source):
    """``t.set_(source)``: t becomes a view of source's storage with source's layout."""
    view = OclTensor(source._ocl_storage, tuple(source.shape), tuple(source.stride()),
                     source.storage_offset(), t.dtype)
    type(t).data.fset(t, view)
    return t


@register_operator(aten.set_.default)
def set_empty(t):
    """``t.set_()``: t becomes an empty tensor over a storage of its own."""
    type(t).data.fset(t, empty((0,), t.dtype, t._ocl_storage.index))
    return t


def register():
    """Pickling of ocl tensors (``OclTensor.__reduce_ex__``), and torch.load's restore
    step for ocl locations (before PyTorch's own for PrivateUse1, which needs storages a
    Python device cannot allocate)."""
    OclTensor.__reduce_ex__ = reduce_tensor
    OclTensor.__deepcopy__ = deepcopy_tensor
    torch.serialization.register_package(19, _tag, _deserialize)

