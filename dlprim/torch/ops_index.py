"""Indexing operators on ocl devices, on dlprim's index kernels (``core/gather.py``):
``index_select``, ``embedding``, ``index.Tensor`` with one index tensor, ``gather``, and
their gradients ``index_add`` / ``embedding_dense_backward`` / ``scatter_add``. Indices
stay on the device (no host round trip); an out-of-range index reads as NaN."""
import math

import torch

from ..core.gather import index_ops
from .dispatch import register
from .tensor import OclTensor, as_dlprim, empty, enqueue, numpy_dtype, write_into

aten = torch.ops.aten

__all__ = []

_INDEX_DTYPES = (torch.int64, torch.int32)


def _unsupported(op, why):
    raise NotImplementedError("dlprim.torch: %s on ocl devices: %s" % (op, why))


def _check_index(op, index):
    if not isinstance(index, OclTensor):
        raise RuntimeError("%s: the index is a %s tensor; it must be on the ocl device like "
                           "the data" % (op, index.device))
    if index.dtype not in _INDEX_DTYPES:
        raise IndexError("%s: indices must be int64 or int32, got %s" % (op, index.dtype))


def _around(shape, dim):
    """(outer, n, inner): a shape seen around axis ``dim``."""
    return math.prod(shape[:dim]), (shape[dim] if shape else 1), math.prod(shape[dim + 1:])


def _run(kind, src, idx, dst, outer, n, m, inner, **kw):
    ctx = src._ocl_storage.ctx
    ops = index_ops(ctx, numpy_dtype(src.dtype), numpy_dtype(idx.dtype))
    enqueue(ctx, ops.launches(kind, as_dlprim(src), as_dlprim(idx), as_dlprim(dst),
                              outer, n, m, inner, **kw))


# ----- gathers
@register(aten.index_select.default)
def _index_select(x, dim, index):
    _check_index("index_select", index)
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector, got %d dims"
                         % index.dim())
    dim = dim % max(x.dim(), 1)
    shape = list(x.shape) or [1]
    m = index.numel()
    out_shape = shape[:dim] + [m] + shape[dim + 1:]
    # a 0-d x gives a 0-d result whatever the index's shape (PyTorch's rule)
    out = empty(out_shape if x.dim() else (), x.dtype, x._ocl_storage.index)
    outer, n, inner = _around(shape, dim)
    _run("index_select", x, index, out, outer, n, m, inner)
    return out


@register(aten.embedding.default)
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    _check_index("embedding", indices)
    if weight.dim() != 2:
        raise RuntimeError("embedding: 'weight' must be 2-D, got %d dims" % weight.dim())
    rows = _index_select(weight, 0, indices.reshape(-1))
    return rows.view(tuple(indices.shape) + (weight.shape[1],))


@register(aten.index.Tensor)
def _index(x, indices):
    given = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(given) != 1 or given[0][1].dtype not in _INDEX_DTYPES:
        _unsupported("index.Tensor", "one integer index tensor only (x[idx] or x[:, idx]); "
                     "boolean masks and several index tensors are not implemented")
    dim, idx = given[0]
    _check_index("index", idx)
    picked = _index_select(x, dim, idx.reshape(-1))
    shape = tuple(x.shape[:dim]) + tuple(idx.shape) + tuple(x.shape[dim + 1:])
    return picked.view(shape)


def _gather_shapes(op, x, dim, index):
    dim = dim % max(x.dim(), 1)
    if index.dim() != x.dim():
        raise RuntimeError("%s: index has %d dims, the tensor %d" % (op, index.dim(), x.dim()))
    if any(a != b for d, (a, b) in enumerate(zip(index.shape, x.shape)) if d != dim):
        _unsupported(op, "an index whose sizes equal the tensor's except along dim (index %s, "
                     "tensor %s, dim %d)" % (list(index.shape), list(x.shape), dim))
    return dim


@register(aten.gather.default)
def _gather(x, dim, index, sparse_grad=False):
    _check_index("gather", index)
    dim = _gather_shapes("gather", x, dim, index)
    out = empty(index.shape, x.dtype, x._ocl_storage.index)
    outer, n, inner = _around(list(x.shape) or [1], dim)
    _run("gather", x, index, out, outer, n, (list(index.shape) or [1])[dim], inner)
    return out


# ----- their gradients: adds into rows / elements (float32)
def _add_into(kind, op, out, dim, index, src, **kw):
    _check_index(op, index)
    if out.dtype != torch.float32 or src.dtype != torch.float32:
        _unsupported(op, "float32 values only, got %s and %s" % (out.dtype, src.dtype))
    shape = list(out.shape) or [1]
    outer, n, inner = _around(shape, dim)
    m = (list(src.shape) or [1])[dim]
    target = out if out.is_contiguous() else empty(out.shape, out.dtype, out._ocl_storage.index)
    if target is not out:
        write_into(target, as_dlprim(out))
    _run(kind, src, index, target, outer, n, m, inner, **kw)
    if target is not out:
        write_into(out, as_dlprim(target))
    return out


@register(aten.index_add_.default)
def _index_add_(x, dim, index, source, alpha=1):
    dim = dim % max(x.dim(), 1)
    return _add_into("index_add", "index_add_", x, dim, index.reshape(-1), source,
                     alpha=float(alpha))


@register(aten.index_add.default)
def _index_add(x, dim, index, source, alpha=1):
    out = empty(x.shape, x.dtype, x._ocl_storage.index)
    write_into(out, as_dlprim(x))
    return _index_add_(out, dim, index, source, alpha)


@register(aten.embedding_dense_backward.default)
def _embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        _unsupported("embedding_dense_backward", "scale_grad_by_freq=True is not implemented")
    dim = grad.shape[-1]
    out = empty((num_weights, dim), grad.dtype, grad._ocl_storage.index)
    as_dlprim(out).zero_()
    rows = grad.reshape(-1, dim)
    return _add_into("index_add", "embedding_dense_backward", out, 0, indices.reshape(-1), rows,
                     skip=int(padding_idx))


@register(aten.scatter_add_.default)
def _scatter_add_(x, dim, index, src):
    dim = _gather_shapes("scatter_add_", src, dim, index)
    if any(a != b for d, (a, b) in enumerate(zip(x.shape, src.shape)) if d != dim):
        _unsupported("scatter_add_", "a source whose sizes equal the tensor's except along dim")
    return _add_into("scatter_add", "scatter_add_", x, dim, index, src)


@register(aten.scatter_add.default)
def _scatter_add(x, dim, index, src):
    out = empty(x.shape, x.dtype, x._ocl_storage.index)
    write_into(out, as_dlprim(x))
    return _scatter_add_(out, dim, index, src)
