"""EmbeddingBag on ocl devices: PyTorch's ``_embedding_bag`` (and its forward-only twin)
on core.embedding_bag's kernel, and its gradients composed of ocl operators.

The weight's gradient adds each index's bag gradient into the index's row
(``index_add``, float32): scaled by the per-sample weight (sum), by 1 / the bag's size
(mean) and by 1 / how often the index occurs (``scale_grad_by_freq``), nothing for
padding_idx; mode max adds each bag's gradient into the rows that gave its maxima, except
for empty bags. The per-sample weights' gradient is dot(bag gradient, weight row).

Like PyTorch's CPU, ``offset2bag`` is returned empty in mode sum without padding_idx, and
``max_indices`` is per bag (mode max), the bag sizes (mean) or zeros (sum).
"""
import torch

from ..core.embedding_bag import MODES, embedding_bag
from .dispatch import register
from .ops_tensor import convert
from .tensor import accumulate_dtype, as_dlprim, empty, enqueue

aten = torch.ops.aten

__all__ = []

_SUM, _MEAN, _MAX = 0, 1, 2


def _kernels(weight, indices, mode, per_sample_weights):
    return embedding_bag(weight._ocl_storage.ctx, as_dlprim(weight).dtype,
                         as_dlprim(indices).dtype, MODES[mode], per_sample_weights is not None)


def _same_index_dtype(indices, offsets):
    return offsets if offsets.dtype == indices.dtype else convert(offsets, indices.dtype)


def _check(weight, indices, offsets, mode, per_sample_weights):
    if indices.dim() != 1 or offsets.dim() != 1:
        raise ValueError("embedding_bag: indices and offsets must be 1-D, got %s and %s"
                         % (list(indices.shape), list(offsets.shape)))
    if weight.dim() != 2:
        raise RuntimeError("embedding_bag: weight must be 2-D, got %s" % (list(weight.shape),))
    if mode not in (_SUM, _MEAN, _MAX):
        raise RuntimeError("embedding_bag: unknown mode %r" % (mode,))
    if per_sample_weights is not None:
        if mode != _SUM:
            raise RuntimeError("embedding_bag: per_sample_weights was not None. "
                               "per_sample_weights is only supported for mode='sum'")
        if tuple(per_sample_weights.shape) != tuple(indices.shape):
            raise RuntimeError("embedding_bag: per_sample_weights must have the indices' shape "
                               "%s, got %s" % (list(indices.shape),
                                               list(per_sample_weights.shape)))


def _offset2bag(indices, offsets, bags):
    out = empty(indices.shape, indices.dtype, indices._ocl_storage.index)
    # (the kernel does not read weights: one build serves every weight dtype)
    kernels = embedding_bag(indices._ocl_storage.ctx, "float32", as_dlprim(indices).dtype,
                            "sum", False)
    enqueue(indices._ocl_storage.ctx,
            kernels.offset2bag_launches(as_dlprim(offsets), bags, as_dlprim(out)))
    return out


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=_SUM, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    _check(weight, indices, offsets, mode, per_sample_weights)
    ctx, index = weight._ocl_storage.ctx, weight._ocl_storage.index
    offsets = _same_index_dtype(indices, offsets)
    bags = max(offsets.shape[0] - (1 if include_last_offset else 0), 0)
    dim = weight.shape[1]
    if per_sample_weights is not None and per_sample_weights.dtype != weight.dtype:
        raise RuntimeError("embedding_bag: expected per_sample_weights of dtype %s, got %s"
                           % (weight.dtype, per_sample_weights.dtype))
    y = empty((bags, dim), weight.dtype, index)
    bag_size = empty((bags,), indices.dtype, index)
    argmax = empty((bags, dim), indices.dtype, index) if mode == _MAX else None
    kernels = _kernels(weight, indices, mode, per_sample_weights)
    enqueue(ctx, kernels.forward_launches(
        as_dlprim(weight), as_dlprim(indices), as_dlprim(offsets), bags, as_dlprim(y),
        as_dlprim(bag_size), as_dlprim(argmax) if argmax is not None else None,
        as_dlprim(per_sample_weights) if per_sample_weights is not None else None,
        padding_idx if padding_idx is not None else -1))
    if mode == _SUM and (padding_idx is None or padding_idx < 0):
        offset2bag = empty((0,), indices.dtype, index)
    else:
        offset2bag = _offset2bag(indices, offsets, bags)
    if mode == _SUM:
        bag_size.zero_()  # (the CPU's: sum does not count)
        max_indices = torch.zeros_like(bag_size)
    else:
        max_indices = argmax if mode == _MAX else bag_size.clone()
    return y, offset2bag, bag_size, max_indices


@register(aten._embedding_bag_backward.default)
def _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices,
                            num_weights, scale_grad_by_freq, mode, sparse,
                            per_sample_weights, padding_idx=-1):
    if sparse:
        raise NotImplementedError("dlprim.torch: embedding_bag(sparse=True) on ocl devices: "
                                  "sparse gradients are not supported")
    if mode != _MAX and offset2bag.numel() != indices.numel():
        offset2bag = _offset2bag(indices, _same_index_dtype(indices, offsets),
                                 bag_size.shape[0])
    return _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices,
                                         num_weights, scale_grad_by_freq, mode,
                                         per_sample_weights, padding_idx)


@register(aten._embedding_bag_dense_backward.default)
def _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices,
                                  num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                  padding_idx=-1):
    acc = accumulate_dtype(grad.dtype)
    g = grad if grad.dtype == acc else convert(grad, acc)
    dim = grad.shape[1]
    dw = torch.zeros((num_weights, dim), dtype=acc, device=grad.device)
    if mode == _MAX:
        # an empty bag's max_indices (0) is no row of it
        live = (bag_size > 0).unsqueeze(1).to(acc)
        dw.scatter_add_(0, max_indices.to(torch.int64), g * live)
    elif indices.numel():
        if offset2bag.numel() != indices.numel():
            raise RuntimeError("_embedding_bag_dense_backward: offset2bag has %d entries for "
                               "%d indices" % (offset2bag.numel(), indices.numel()))
        scale = torch.ones(indices.shape, dtype=acc, device=grad.device)
        if per_sample_weights is not None:
            scale = scale * per_sample_weights.to(acc)
        if mode == _MEAN:
            scale = scale / bag_size.index_select(0, offset2bag).to(acc)
        if scale_grad_by_freq:
            counts = torch.zeros((num_weights,), dtype=acc, device=grad.device)
            counts.index_add_(0, indices, torch.ones_like(scale))
            scale = scale / counts.index_select(0, indices)
        if padding_idx is not None and padding_idx >= 0:
            scale = torch.where(indices == padding_idx, torch.zeros_like(scale), scale)
        dw.index_add_(0, indices, g.index_select(0, offset2bag) * scale.unsqueeze(1))
    return dw if grad.dtype == acc else convert(dw, grad.dtype)


@register(aten._embedding_bag_per_sample_weights_backward.default)
def _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
                                               padding_idx=-1):
    if mode != _SUM:
        raise RuntimeError("embedding_bag: per_sample_weights are only supported for "
                           "mode='sum'")
    if offset2bag.numel() != indices.numel():
        offsets = _same_index_dtype(indices, offsets)
        offset2bag = _offset2bag(indices, offsets, grad.shape[0])
    dot = (grad.index_select(0, offset2bag) * weight.index_select(0, indices)).sum(1)
    if padding_idx is not None and padding_idx >= 0:
        dot = torch.where(indices == padding_idx, torch.zeros_like(dot), dot)
    return dot
