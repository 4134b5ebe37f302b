"""The CPU fallback of the ocl device (``dlprim.torch.allow_cpu_fallback()``): an operator
without an ocl route runs on CPU copies of its ocl tensors, and what it did to them comes
back (see ``run``)."""
import logging

import numpy as np
import torch

from .tensor import OclTensor, Storage, empty, numpy_dtype, to_cpu

__all__ = ["run"]

log = logging.getLogger("dlprim.torch")


def _tree(obj, fn):
    """fn applied to every tensor of a nest of lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tree(x, fn) for x in obj)
    if isinstance(obj, dict):
        return {k: _tree(v, fn) for k, v in obj.items()}
    return obj


def _leaves(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _leaves(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _leaves(x)]
    return []


def _device_of(args, kwargs):
    for a in _leaves([args, kwargs]):
        if isinstance(a, OclTensor):
            return a._ocl_storage.index
    return 0


def _aliased(func):
    """Per argument name: 'w' where the operator writes it (in place, out=), 'v' where a
    result may be a view of it, None otherwise."""
    kinds = {}
    for a in func._schema.arguments:
        kinds[a.name] = None if a.alias_info is None else ("w" if a.alias_info.is_write else "v")
    return kinds


def run(func, args, kwargs, warned):
    """func on CPU copies of its ocl tensors. An argument the operator writes or may return
    a view of is copied with its whole storage, as a view of the same layout, so that what
    the operator does to it shows: new values (copied back), new sizes or strides (an
    in-place view such as unsqueeze_, an out= resized: set on the ocl tensor), a new storage
    (resize_ growing it), results that are views of it (made views of the ocl storage)."""
    if str(func) not in warned:
        warned.add(str(func))
        log.warning("dlprim.torch: %s runs on the CPU (no ocl implementation; tensors are "
                    "copied to the host and back)", func)
    index = _device_of(args, kwargs)
    kinds = _aliased(func)
    mirrors = []  # (ocl tensor, its cpu mirror, whether written, (ptr, nbytes, layout) before)

    def down(a, kind):
        if isinstance(a, OclTensor):
            if kind is None:
                return to_cpu(a)
            flat = _host_storage(a)
            cpu = flat.as_strided(a.shape, a.stride(), a.storage_offset())
            mirrors.append((a, cpu, kind == "w", _layout(cpu)))
            return cpu
        if isinstance(a, (list, tuple)):
            return type(a)(down(x, kind) for x in a)
        if isinstance(a, torch.device) and a.type == "ocl":
            return torch.device("cpu")
        return a
    names = [a.name for a in func._schema.arguments]
    cpu_args = [down(a, kinds.get(names[i]) if i < len(names) else None)
                for i, a in enumerate(args)]
    cpu_kwargs = {k: down(v, kinds.get(k)) for k, v in kwargs.items()}
    out = func(*cpu_args, **cpu_kwargs)
    for ocl, cpu, written, before in mirrors:
        if written:
            _write_back(ocl, cpu, before)

    def up(o):
        if not isinstance(o, torch.Tensor) or o.device.type != "cpu":
            return o
        for ocl, cpu, _, before in mirrors:
            if o is cpu:
                return ocl
            if o.untyped_storage().data_ptr() == cpu.untyped_storage().data_ptr() \
                    and _layout(cpu)[:2] == before[:2]:
                return OclTensor(ocl._ocl_storage, tuple(o.shape), tuple(o.stride()),
                                 o.storage_offset(), o.dtype)
        return _upload(o, index)
    return _tree(out, up)


def _layout(cpu):
    return (cpu.untyped_storage().data_ptr(), cpu.untyped_storage().nbytes(),
            tuple(cpu.shape), tuple(cpu.stride()), cpu.storage_offset())


def _host_storage(t):
    """t's whole storage on the host, as a flat CPU tensor of t's dtype (in memory of
    PyTorch's own, which resize_ can grow: a numpy array's cannot)."""
    array = t._ocl_storage.flat.to_host()
    return torch.from_numpy(np.ascontiguousarray(array).view(np.uint8)).view(t.dtype).clone()


def _upload(cpu, index):
    """A new ocl tensor with a CPU tensor's values (contiguous)."""
    t = empty(cpu.shape, cpu.dtype, index)
    if cpu.numel():
        _store(t._ocl_storage, cpu.detach().contiguous().reshape(-1), 0)
    return t


def _store(storage, flat, offset):
    """storage[offset:] = flat (a 1-D CPU tensor of the storage's dtype)."""
    array = flat.view(torch.uint8).numpy().view(numpy_dtype(flat.dtype))
    storage.at(offset, array.shape).to_device(array)


def _write_back(ocl, cpu, before):
    """What the operator did to a mirrored argument, done to the ocl tensor."""
    after = _layout(cpu)
    whole = torch.empty(0, dtype=cpu.dtype).set_(cpu.untyped_storage())
    if after[:2] == before[:2]:  # the same storage: its values back
        if whole.numel():
            _store(ocl._ocl_storage, whole, 0)
        storage = ocl._ocl_storage
    else:  # a storage of its own now (resize_ grew it, set_)
        storage = Storage(ocl._ocl_storage.index, whole.numel(), ocl.dtype)
        if whole.numel():
            _store(storage, whole, 0)
    if after[2:] != before[2:] or storage is not ocl._ocl_storage:
        ocl.data = OclTensor(storage, after[2], after[3], after[4], cpu.dtype)
