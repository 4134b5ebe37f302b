"""``torch.segment_reduce`` on ocl devices (``segment_reduce`` and its gradient,
``_segment_reduce_backward``): each element's segment found by binary search in the running
sum of the lengths, then one scatter_reduce per reduction, all on the device.

Data of shape (B..., N, inner...) with lengths (or offsets) of shape (B..., S) (S + 1) gives
(B..., S, inner...). PyTorch's conventions: an empty segment holds ``initial``, else the
reduction's identity (0 for sum, 1 for prod, -inf / inf for max / min, NaN for mean); with
``initial`` given, it joins every segment's reduction (for mean: (initial + sum) / length).
Gradients (PyTorch's): sum passes grad to each element, mean grad / length, max and min
share grad equally among the elements equal to the result, prod gives
grad * (the product of the segment's other elements)."""
import torch

from .dispatch import register

aten = torch.ops.aten

__all__ = []

_SCATTER = {"sum": "sum", "mean": "sum", "max": "amax", "min": "amin", "prod": "prod"}


def _empty_value(reduce):
    return {"sum": 0.0, "mean": float("nan"), "prod": 1.0, "max": -float("inf"),
            "min": float("inf")}[reduce]


def _layout(data, lengths, offsets, axis, unsafe):
    """(data as (B, N, inner), lengths as (B, S), each element's segment as (B, N, inner);
    S for an element after the last segment)."""
    if (lengths is None) == (offsets is None):
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined")
    if not data.is_floating_point():
        raise NotImplementedError('"_segment_reduce_cpu" not implemented for %r' % data.dtype)
    segs = lengths if lengths is not None else offsets
    axis = axis % data.dim()
    if axis != segs.dim() - 1 or tuple(segs.shape[:-1]) != tuple(data.shape[:axis]):
        raise RuntimeError("segment_reduce(): Expected axis to be the last dimension of "
                           "lengths and the leading dims of lengths to match data's")
    if offsets is not None:
        lengths = offsets[..., 1:] - offsets[..., :-1]
    batch = 1
    for n in data.shape[:axis]:
        batch *= n
    n = data.shape[axis]
    flat = data.reshape(batch, n, -1)
    lengths = lengths.reshape(batch, -1).long()
    ends = torch.cumsum(lengths, dim=-1)
    if not unsafe and lengths.numel():
        if bool((lengths < 0).any().item()):
            raise RuntimeError("segment_reduce(): lengths contains negative value!")
        if bool((ends[:, -1] != n).any().item()):
            raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to "
                               "sum to data.size(lengths.dim()-1) when !unsafe.")
    position = torch.arange(n, device=data.device).expand(batch, n).contiguous()
    segment = torch.searchsorted(ends.contiguous(), position, right=True)
    return flat, lengths, segment.unsqueeze(-1).expand(flat.shape)


def _shape_out(data, axis, segments):
    axis = axis % data.dim()
    return tuple(data.shape[:axis]) + (segments,) + tuple(data.shape[axis + 1:])


@register(aten.segment_reduce.default)
def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                    unsafe=False, initial=None):
    if reduce not in _SCATTER:
        raise RuntimeError("segment_reduce(): reduce %r is not supported" % reduce)
    if indices is not None:
        raise NotImplementedError("dlprim.torch: segment_reduce with indices on ocl devices "
                                  "(PyTorch has it for neither device)")
    flat, lens, segment = _layout(data, lengths, offsets, axis, unsafe)
    s = lens.shape[-1]
    fill = _empty_value(reduce) if initial is None else float(initial)
    out = torch.full((flat.shape[0], s + 1, flat.shape[2]), fill, dtype=data.dtype,
                     device=data.device)
    out = out.scatter_reduce(1, segment, flat, _SCATTER[reduce],
                             include_self=initial is not None)[:, :s]
    if reduce == "mean":
        out = torch.where(lens.unsqueeze(-1) > 0, out / lens.unsqueeze(-1).to(out.dtype),
                          out if initial is not None else float("nan"))
    return out.reshape(_shape_out(data, axis, s))


@register(aten._segment_reduce_backward.default)
def _segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None,
                             axis=0, initial=None):
    flat, lens, segment = _layout(data, lengths, offsets, axis, True)
    s = lens.shape[-1]
    pad = (0, 0, 0, 1)  # the spare segment of elements after the last one: no gradient
    g = torch.nn.functional.pad(grad.reshape(flat.shape[0], s, -1), pad).gather(1, segment)
    y = torch.nn.functional.pad(output.reshape(flat.shape[0], s, -1), pad).gather(1, segment)
    if reduce == "sum":
        dx = g
    elif reduce == "mean":
        count = torch.nn.functional.pad(lens, (0, 1), value=1).unsqueeze(-1).expand(
            flat.shape[0], s + 1, flat.shape[2]).gather(1, segment)
        dx = g / count.clamp(min=1).to(g.dtype)
    elif reduce in ("max", "min"):
        hit = (flat == y) | (torch.isnan(flat) & torch.isnan(y))
        ties = torch.zeros(flat.shape[0], s + 1, flat.shape[2], dtype=g.dtype,
                           device=g.device).scatter_add(1, segment, hit.to(g.dtype))
        dx = torch.where(hit, g / ties.gather(1, segment), 0.0)
    elif reduce == "prod":
        zero = flat == 0
        nonzero_prod = torch.ones(flat.shape[0], s + 1, flat.shape[2], dtype=g.dtype,
                                  device=g.device).scatter_reduce(
            1, segment, torch.where(zero, 1.0, flat), "prod")
        zeros = torch.zeros_like(nonzero_prod).scatter_add(1, segment, zero.to(g.dtype))
        if initial is not None:
            nonzero_prod = nonzero_prod * float(initial)
        others = torch.where(zeros.gather(1, segment) == 1, nonzero_prod.gather(1, segment), 0.0)
        dx = g * torch.where(zero, others, y / torch.where(zero, 1.0, flat))
    else:
        raise RuntimeError("segment_reduce(): reduce %r is not supported" % reduce)
    return dx.reshape(data.shape)
