"""Counting, mode, frexp, bilinear forms and the rest of PyTorch's odd operators on ocl
devices, composed from the device's own operators (sort, cummax, scatter_add, searchsorted,
vector norms, pointwise): the data stays on the device; a scalar comes back only where the
output's size or the histogram's range depends on the data (bincount, histc, histogram).

Argument checks and output shapes come from running the operator on meta tensors, or, where
PyTorch has no meta kernel, on a tiny CPU stand-in that carries the same range, so the
errors are PyTorch's own. Distances (cdist, pdist, dist) are in ``ops_distance.py``,
segment_reduce in ``ops_segment.py``."""
import torch

from . import ops_distance, ops_segment  # noqa: F401  (register their operators)
from .dispatch import register
from .ops_reduce import _register_out
from .ops_tensor import meta_of
from .tensor import as_dlprim
from ..core.pointwise import pointwise

aten = torch.ops.aten

__all__ = []


def _refuse(op, why):
    raise NotImplementedError("dlprim.torch: %s on ocl devices: %s" % (op, why))


# ----- mode: the most frequent value, ties to the smallest, index of its last occurrence
@register(aten.mode.default)
def _mode(x, dim=-1, keepdim=False):
    """Sorted stably, each element's count so far in its run of equal values is its position
    minus the run's start (a running max of the run starts); the first largest count is the
    smallest of the most frequent values, and its sorted position holds the largest index
    among its occurrences. PyTorch's CPU kernel answers that index for dims of up to 16
    elements; longer, its unstable sort names some other occurrence (any is PyTorch's
    contract)."""
    values_meta, _ = aten.mode.default(meta_of(x), dim, keepdim)
    shape = values_meta.shape
    if x.dim() == 0 or x.numel() == 0:
        zero = torch.zeros(shape, dtype=torch.int64, device=x.device)
        return x.reshape(shape).clone(), zero
    if x.is_floating_point() and bool(torch.isnan(x).any().item()):
        _refuse("mode", "an input holding NaN (PyTorch's CPU answer for it is unordered)")
    d = dim % x.dim()
    rows = x.movedim(d, -1)
    n = rows.shape[-1]
    s, order = torch.sort(rows, dim=-1, stable=True)
    pos = torch.arange(n, device=x.device).expand(s.shape)
    starts = torch.ones(s.shape, dtype=torch.bool, device=x.device)
    starts[..., 1:] = s[..., 1:] != s[..., :-1]
    run_start = torch.cummax(torch.where(starts, pos, 0), dim=-1).values
    best = torch.argmax(pos - run_start, dim=-1, keepdim=True)
    values = s.gather(-1, best).squeeze(-1)
    indices = order.gather(-1, best).squeeze(-1)
    if keepdim:
        values, indices = values.unsqueeze(d), indices.unsqueeze(d)
    return values.reshape(shape), indices.reshape(shape)


_register_out("mode.values", "mode.default")


# ----- histograms: a bin per element by binary search in the edges, then scatter_add
def _bin_counts(x, edges, weight, dtype):
    """Per-bin sums of weight (1 where None) over x's elements between the first and last
    edge; a value on an inner edge counts in the bin to its right, the last edge in the
    last bin (PyTorch's histogramdd). Out-of-range and NaN elements go to a spare bin."""
    bins = edges.numel() - 1
    flat = x.reshape(-1)
    slot = torch.searchsorted(edges, flat, right=True) - 1
    slot = torch.clamp(slot, max=bins - 1)
    inside = (flat >= edges[0]) & (flat <= edges[-1])
    acc = torch.float32 if dtype == torch.float16 else dtype
    w = torch.ones_like(flat, dtype=acc) if weight is None else weight.reshape(-1).to(acc)
    return _tally(slot, inside, bins, w, dtype)


def _tally(slot, inside, bins, weights, dtype):
    """The per-bin sums of ``weights`` (their dtype) by ``slot``, over the elements
    ``inside`` (the others go to a spare bin), as ``dtype``."""
    slot = torch.where(inside, slot, bins)
    hist = torch.zeros(bins + 1, dtype=weights.dtype, device=slot.device)
    return hist.scatter_add_(0, slot, weights)[:bins].to(dtype)


def _extrema(x):
    lo, hi = torch.aminmax(x)
    return lo.item(), hi.item()


@register(aten.histc.default)
def _histc(x, bins=100, min=0, max=0):
    """PyTorch's histc bins by the linear estimate alone, (x - lo) * bins / (hi - lo)
    truncated, each step rounded to x's dtype (a 16-bit one too), not by the edges: so here.
    Every step is its own operator on float32 tensors, whose results are correctly rounded
    whatever the precision a kernel computes in; a 16-bit step is rounded back to 16 bits.
    The CPU counts in x's dtype, so a count stops growing where that dtype's integers stop
    being exact (256 for bfloat16): such inputs are refused."""
    if not x.is_floating_point():
        return _histc_integers(x, bins, min, max)
    if x.dtype == torch.bfloat16 or x.numel() > 2 ** 24:
        _refuse("histc", "bfloat16 input, or more than 2**24 elements")
    lo, hi = float(min), float(max)
    if lo == hi and x.numel():
        lo, hi = _extrema(x)
    # the CPU raises PyTorch's errors (dtype, bins, range) on a stand-in with this range
    torch.histc(torch.tensor([lo, hi], dtype=x.dtype), bins, min, max)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    edges = torch.linspace(lo, hi, bins + 1, dtype=x.dtype)
    left, right, width = edges[0].item(), edges[-1].item(), (edges[-1] - edges[0]).item()
    narrow = x.dtype == torch.float16
    if narrow and (width * bins > 65504 or bins > 2048 or x.numel() > 2048):
        # PyTorch's own float16 arithmetic: (x - lo) * bins overflows (the bin is then
        # undefined), bins is not exact, or a count past 2048 stops growing
        _refuse("histc", "float16 input whose range times bins passes 65504, or with more "
                "than 2048 bins or elements")
    flat = x.reshape(-1)
    rounded = (lambda t: t.to(x.dtype).float()) if narrow else (lambda t: t)
    q = rounded(rounded(rounded(flat.float() - left) * float(bins)) / width)
    slot = torch.clamp(q, 0, bins - 1).long()
    ones = torch.ones(flat.shape, dtype=torch.float32, device=x.device)
    return _tally(slot, (flat >= left) & (flat <= right), bins, ones, x.dtype)


def _histc_integers(x, bins, min, max):
    """histc of integers, as PyTorch's CUDA kernel has it (its CPU one refuses them; a
    mixture-of-experts router counts its experts so): the bin (x - lo) * bins / (hi - lo)
    in int64 arithmetic, the last bin taking hi, counts in x's dtype."""
    if bins <= 0:
        raise RuntimeError("torch.histc: bins must be > 0, but got %d for dimension 0" % bins)
    lo, hi = int(min), int(max)
    if lo == hi and x.numel():
        lo, hi = _extrema(x)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    flat = x.reshape(-1).long()
    slot = torch.clamp(torch.div((flat - lo) * bins, hi - lo, rounding_mode="floor"),
                       max=bins - 1)
    ones = torch.ones(flat.shape, dtype=torch.int64, device=x.device)
    return _tally(slot, (flat >= lo) & (flat <= hi), bins, ones, x.dtype)


_register_out("histc.out", "histc.default")


def _check_weight(x, weight, probe):
    if weight is not None and (weight.shape != x.shape or weight.dtype != x.dtype):
        probe(torch.zeros(x.shape, dtype=x.dtype), torch.zeros(weight.shape, dtype=weight.dtype))


def _normalized(hist, edges, density):
    if not density:
        return hist
    return hist / hist.sum() / (edges[1:] - edges[:-1])


@register(aten.histogram.bin_ct)
def _histogram_count(x, bins=100, *, range=None, weight=None, density=False):
    _check_weight(x, weight, lambda a, w: torch.histogram(a, bins, range=range, weight=w))
    if range is None and x.numel():
        stand_in = torch.tensor(_extrema(x), dtype=x.dtype)
    else:
        stand_in = torch.empty(0, dtype=x.dtype)
    # PyTorch's edges depend only on the range, which the stand-in shares with x
    _, edges = torch.histogram(stand_in, bins, range=range)
    edges = edges.to(x.device)
    return _normalized(_bin_counts(x, edges, weight, x.dtype), edges, density), edges


@register(aten.histogram.bins_tensor)
def _histogram_edges(x, bins, *, weight=None, density=False):
    _check_weight(x, weight, lambda a, w: torch.histogram(a, bins.cpu(), weight=w))
    torch.histogram(torch.empty(0, dtype=x.dtype), bins.cpu())  # PyTorch's checks of bins
    edges = bins.contiguous()
    return _normalized(_bin_counts(x, edges, weight, x.dtype), edges, density), edges.clone()


_register_out("histogram.bin_ct_out", "histogram.bin_ct")
_register_out("histogram.bins_tensor_out", "histogram.bins_tensor")


@register(aten.bincount.default)
def _bincount(x, weights=None, minlength=0):
    integral = not x.is_floating_point() and x.dtype != torch.bool
    if x.dim() != 1 or not integral or minlength < 0 or \
            (weights is not None and weights.shape != x.shape):
        w = None if weights is None else torch.zeros(weights.shape, dtype=weights.dtype)
        torch.bincount(torch.zeros(x.shape, dtype=x.dtype), w, minlength)  # PyTorch's error
    size = minlength
    if x.numel():
        lo, hi = _extrema(x)
        if lo < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        size = max(size, hi + 1)
    if weights is None:
        dtype, w = torch.int64, torch.ones_like(x, dtype=torch.int64)
    else:
        dtype = weights.dtype if weights.dtype == torch.float32 else torch.float64
        w = weights.to(dtype)
    return torch.zeros(size, dtype=dtype, device=x.device).scatter_add_(0, x.long(), w)


_register_out("bincount.out", "bincount.default")


# ----- frexp: x = mantissa * 2**exponent, |mantissa| in [0.5, 1)
# From float's bit fields, in integers only (a device that flushes subnormals to zero would
# lose them in float arithmetic): a subnormal's fraction is shifted up to a leading 1 and its
# exponent field lowered to match; zero, infinities and NaN keep their value with exponent
# 0, as the C library's frexp answers.
_FREXP = """
int b = as_int((float)x0);
int field = (b >> 23) & 0xff;
int frac = b & 0x7fffff;
if (field == 0 && frac != 0) {
    int shift = clz(frac) - 8;
    frac = (frac << shift) & 0x7fffff;
    field = 1 - shift;
}
if ((b & 0x7fffffff) == 0 || field == 0xff) {
    y0 = x0;
    y1 = 0;
} else {
    y0 = as_float((b & (int)0x80000000) | (126 << 23) | frac);
    y1 = field - 126;
}
"""

_FREXP_DOUBLE = """
long b = as_long((double)x0);
int field = (int)((b >> 52) & 0x7ff);
long frac = b & 0xfffffffffffffL;
if (field == 0 && frac != 0) {
    int shift = (int)clz(frac) - 11;
    frac = (frac << shift) & 0xfffffffffffffL;
    field = 1 - shift;
}
if ((b & 0x7fffffffffffffffL) == 0 || field == 0x7ff) {
    y0 = x0;
    y1 = 0;
} else {
    y0 = as_double((b & (long)0x8000000000000000UL) | (1022L << 52) | frac);
    y1 = field - 1022;
}
"""


@register(aten.frexp.Tensor)
def _frexp(x):
    if not x.is_floating_point():
        torch.frexp(torch.zeros(0, dtype=x.dtype))  # PyTorch's error
    mantissa = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    exponent = torch.empty(x.shape, dtype=torch.int32, device=x.device)
    if x.numel():
        pointwise(x._ocl_storage.ctx, [as_dlprim(x)],
                  [as_dlprim(mantissa), as_dlprim(exponent)],
                  _FREXP_DOUBLE if x.dtype == torch.float64 else _FREXP)
    return mantissa, exponent


_register_out("frexp.Tensor_out", "frexp.Tensor")


# ----- bilinear forms and unbind copies
@register(aten._trilinear.default)
def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """sum over sumdim of i1 * i2 * i3, each first unsqueezed at its expand dims."""
    result = aten._trilinear.default(meta_of(i1), meta_of(i2), meta_of(i3), expand1, expand2,
                                     expand3, sumdim, unroll_dim)
    factors = []
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for d in sorted(expand):
            t = t.unsqueeze(d)
        factors.append(t)
    product = factors[0] * factors[1] * factors[2]
    if sumdim:
        product = product.sum(dim=list(sumdim), dtype=result.dtype)  # integers stay narrow
    return product.reshape(result.shape)


_register_out("_trilinear.out", "_trilinear.default")


@register(aten.unbind_copy.int)
def _unbind_copy(x, dim=0):
    return [t.clone() for t in torch.unbind(x, dim)]


@register(aten.unbind_copy.int_out)
def _unbind_copy_out(x, dim=0, *, out):
    parts = torch.unbind(x, dim)
    if len(out) != len(parts):
        raise RuntimeError("unbind_copy_int_out expected an out= argument of size %d, got "
                           "size %d" % (len(parts), len(out)))
    for o, part in zip(out, parts):
        if tuple(o.shape) != tuple(part.shape):
            o.resize_(part.shape)
        o.copy_(part)
