"""Random operators on ocl devices, drawn on the device (``core/random_draw.py``, dlprim's
Philox-4x32-10 stream). Each call takes a fresh 64-bit Philox key from PyTorch's
generator (the ``generator=`` argument, else the default CPU generator), so
``torch.manual_seed(s)`` makes ocl draws reproducible and consecutive calls differ. The
values differ from the CPU's draws; their distributions are PyTorch's."""

import numpy as np
import torch

from ..core import random_draw
from ..core.pointwise import pointwise, pointwise_reduce
from ..tensor import Tensor
from .dispatch import register
from .ops_tensor import convert, device_index, meta_of
from .tensor import OclTensor, as_dlprim, assign, empty, numpy_dtype, write_into

aten = torch.ops.aten

__all__ = ["seed_from", "get_rng_state", "set_rng_state"]

_FLOAT_DIGITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}


def seed_from(generator=None):
    """A 63-bit Philox key taken from ``generator`` (PyTorch's default CPU generator when
    None), consuming its state."""
    gen = generator if generator is not None else torch.default_generator
    return int(torch.randint(0, 2 ** 63 - 1, (), generator=gen, dtype=torch.int64))


def get_rng_state(device=None):
    """``torch.ocl.get_rng_state``: ocl draws are keyed by PyTorch's CPU generator, so the
    device has no state of its own (an empty state, which set_rng_state accepts)."""
    return torch.empty(0, dtype=torch.uint8)


def set_rng_state(new_state, device=None):
    """``torch.ocl.set_rng_state``: nothing to restore (see get_rng_state)."""


def _ctx(t):
    return t._ocl_storage.ctx


def _draw_into(t, dist, generator, **kw):
    """t[...] = draws of ``dist``, whatever t's strides."""
    if t.numel() == 0:
        return t
    seed = seed_from(generator)
    if t.is_contiguous():
        random_draw.draw(_ctx(t), as_dlprim(t), dist, seed, **kw)
        return t
    tmp = Tensor(_ctx(t), tuple(t.shape), numpy_dtype(t.dtype))
    random_draw.draw(_ctx(t), tmp, dist, seed, **kw)
    return write_into(t, tmp)


def _check_float(op, t):
    if not t.is_floating_point():
        raise RuntimeError("%s not implemented for '%s'" % (op, str(t.dtype).replace("torch.", "")))


def _check(ok, message):
    if not ok:
        raise RuntimeError(message)


def _uniform_(t, from_=0.0, to=1.0, generator=None):
    _check_float("check_uniform_bounds", t)
    _check(from_ <= to, "uniform_ expects to return a [from, to) range, but found from=%s > "
                        "to=%s" % (from_, to))
    return _draw_into(t, "uniform", generator, p0=from_, p1=to - from_)


def _normal_(t, mean=0.0, std=1.0, generator=None):
    _check_float("normal_kernel_cpu", t)
    _check(std >= 0.0, "normal expects std >= 0.0, but found std %s" % std)
    return _draw_into(t, "normal", generator, p0=mean, p1=std)


def _log_normal_(t, mean=1.0, std=2.0, generator=None):
    _check_float("log_normal_cpu", t)
    _check(std > 0.0, "log_normal_ expects std > 0.0, but found std=%s" % std)
    return _draw_into(t, "log_normal", generator, p0=mean, p1=std)


def _exponential_(t, lambd=1.0, generator=None):
    _check_float("exponential_cpu", t)
    _check(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=%s" % lambd)
    return _draw_into(t, "exponential", generator, p0=lambd)


def _cauchy_(t, median=0.0, sigma=1.0, generator=None):
    _check_float("cauchy_cpu", t)
    return _draw_into(t, "cauchy", generator, p0=median, p1=sigma)


def _geometric_(t, p, generator=None):
    _check(0 < p < 1, "geometric_ expects p to be in (0, 1), but got p=%s" % p)
    return _draw_into(t, "geometric", generator, p0=p)


def _bernoulli_float_(t, p=0.5, generator=None):
    _check(0 <= p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=%s" % p)
    return _draw_into(t, "bernoulli", generator, p0=p)


def _random_limit(dtype):
    """PyTorch's exclusive upper end of random_() without bounds: 2**digits + 1 for floats
    (every integer there is exact), the type's maximum + 1 for integers."""
    if dtype.is_floating_point:
        return 2 ** _FLOAT_DIGITS[dtype] + 1
    if dtype == torch.bool:
        return 2
    return torch.iinfo(dtype).max + 1


def _random_from_(t, from_, to=None, generator=None):
    to = _random_limit(t.dtype) if to is None else to
    _check(from_ < to, "random_ expects 'from' to be less than 'to', but got from=%s >= to=%s"
           % (from_, to))
    return _draw_into(t, "integer", generator, lo=from_, span=to - from_)


def _new_like(t, dtype=None):
    return empty(t.shape, dtype or t.dtype, t._ocl_storage.index)


def _register_fill(name, fill):
    """name_ (in place) and name (a new tensor like self); the out= overloads go through
    the functional one (dispatch.py)."""
    packet = getattr(aten, name)
    register(getattr(aten, name + "_").default)(fill)
    if "default" in packet.overloads():
        register(packet.default)(lambda t, *a, **k: fill(_new_like(t), *a, **k))


for _name, _fill in (("uniform", _uniform_), ("normal", _normal_), ("log_normal", _log_normal_),
                     ("exponential", _exponential_), ("cauchy", _cauchy_),
                     ("geometric", _geometric_)):
    _register_fill(_name, _fill)

register(aten.random_.default)(lambda t, generator=None: _random_from_(t, 0, None, generator))
register(aten.random_.to)(lambda t, to, generator=None: _random_from_(t, 0, to, generator))
register(getattr(aten.random_, "from"))(_random_from_)
register(aten.random.default)(lambda t, generator=None: _random_from_(_new_like(t), 0, None,
                                                                      generator))
register(aten.random.to)(lambda t, to, generator=None: _random_from_(_new_like(t), 0, to,
                                                                     generator))
register(getattr(aten.random, "from"))(
    lambda t, from_, to=None, generator=None: _random_from_(_new_like(t), from_, to, generator))


# ----- normal with tensor mean / std: a standard normal draw, then mean + std * z
def _scalar_or_tensor(v):
    return (as_dlprim(v), None) if isinstance(v, OclTensor) else (None, float(v))


def _normal_tensors(meta, mean, std, generator):
    first = mean if isinstance(mean, OclTensor) else std
    out = empty(meta.shape, meta.dtype, first._ocl_storage.index)
    if out.numel() == 0:
        return out
    if isinstance(std, OclTensor):
        _check_float("normal", std)
        bad = Tensor(_ctx(out), (1,), np.float32)  # std < 0 or NaN anywhere: one number back
        pointwise_reduce(_ctx(out), [as_dlprim(std).view((std.numel(),))], [bad],
                         "y0 = !(x0 >= 0);")
        _check(float(bad.to_host()[0]) == 0, "normal expects all elements of std >= 0.0")
    z = Tensor(_ctx(out), tuple(out.shape), np.float32)
    random_draw.draw(_ctx(out), z, "normal", seed_from(generator))
    xs, params, terms = [z], [], []
    for v in (mean, std):
        tensor, value = _scalar_or_tensor(v)
        if tensor is not None:
            terms.append("x%d" % len(xs))
            xs.append(tensor)
        else:
            terms.append("w%d" % len(params))
            params.append(np.float32(value))
    pointwise(_ctx(out), xs, [as_dlprim(out)], "y0 = %s + %s * x0;" % tuple(terms), params)
    return out


def _meta(v):
    return meta_of(v) if isinstance(v, OclTensor) else v


@register(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor)
def _normal(mean, std=1.0, generator=None):
    if not isinstance(std, OclTensor):
        _check(std >= 0.0, "normal expects std >= 0.0, but found std %s" % std)
    meta = aten.normal.Tensor_Tensor(_meta(mean), _meta(std)) if all(
        isinstance(v, OclTensor) for v in (mean, std)) else (
        aten.normal.Tensor_float(_meta(mean), std) if isinstance(mean, OclTensor)
        else aten.normal.float_Tensor(mean, _meta(std)))
    return _normal_tensors(meta, mean, std, generator)


# ----- bernoulli: u < p, p a number or a tensor (self's values for bernoulli(self))
def _bernoulli_tensor_(t, p, generator=None):
    if t.numel() == 0:
        return t
    u = Tensor(_ctx(t), tuple(t.shape), np.float32)
    random_draw.draw(_ctx(t), u, "uniform", seed_from(generator))
    p = p if p.dtype == torch.float32 else convert(p, torch.float32)
    y = Tensor(_ctx(t), tuple(t.shape), numpy_dtype(t.dtype))
    pointwise(_ctx(t), [u, as_dlprim(p)], [y], "y0 = x0 < x1;")
    return write_into(t, y)


register(aten.bernoulli_.float)(_bernoulli_float_)
register(aten.bernoulli_.Tensor)(_bernoulli_tensor_)
register(aten.bernoulli.p)(lambda t, p, generator=None: _bernoulli_float_(_new_like(t), p,
                                                                          generator))
register(aten.bernoulli.Tensor)(lambda t, p, generator=None: _bernoulli_tensor_(_new_like(t), p,
                                                                                generator))
register(aten.bernoulli.default)(lambda t, generator=None: _bernoulli_tensor_(_new_like(t), t,
                                                                              generator))
# ----- factories. rand / randn / randint / normal(mean, std, size) with device="ocl" reach
# here as empty (a PrivateUse1 kernel) and an in-place draw, randperm as randperm.out
# into a new tensor of n elements:
# only the *_like ones, whose self is an ocl tensor, need registering
def _like(t, dtype=None, device=None):
    index = t._ocl_storage.index if device is None else device_index(device)
    return empty(t.shape, dtype or t.dtype, index)


def _rand_like(t, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return _uniform_(_like(t, dtype, device), 0.0, 1.0, generator)


def _randn_like(t, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
                memory_format=None):
    return _normal_(_like(t, dtype, device), 0.0, 1.0, generator)


def _randint_like(t, low, high=None, generator=None, dtype=None, layout=None, device=None,
                  pin_memory=None, memory_format=None):
    low, high = (0, low) if high is None else (low, high)
    low, high = (int(v.item()) if isinstance(v, torch.Tensor) else int(v) for v in (low, high))
    return _random_from_(_like(t, dtype, device), low, high, generator)


register(aten.rand_like.default)(lambda t, **k: _rand_like(t, **k))
register(aten.rand_like.generator)(_rand_like)
register(aten.randn_like.default)(lambda t, **k: _randn_like(t, **k))
register(aten.randn_like.generator)(_randn_like)
register(aten.randint_like.default, aten.randint_like.Tensor)(
    lambda t, high, **k: _randint_like(t, high, **k))
register(aten.randint_like.low_dtype)(lambda t, low, high, **k: _randint_like(t, low, high, **k))
for _overload in ("generator", "Tensor_generator"):
    if _overload in aten.randint_like.overloads():
        register(getattr(aten.randint_like, _overload))(
            lambda t, high, generator=None, **k: _randint_like(t, high, None, generator, **k))
if "low_generator_dtype" in aten.randint_like.overloads():
    register(aten.randint_like.low_generator_dtype)(_randint_like)


def _randperm_into(n, out, generator=None):
    _check(n >= 0, "randperm: n must be non-negative, got %s" % n)
    if not out.is_floating_point() and out.dtype != torch.bool:
        _check(n <= torch.iinfo(out.dtype).max + 1,
               "randperm: n is too large for result tensor type: '%s'" % out.dtype)
    if tuple(out.shape) != (n,):
        raise NotImplementedError("dlprim.torch: randperm(%d, out=...) on ocl devices: out has "
                                  "shape %s (resizing out is not implemented)"
                                  % (n, list(out.shape)))
    result = out if out.is_contiguous() else empty((n,), out.dtype, out._ocl_storage.index)
    random_draw.randperm(_ctx(result), as_dlprim(result), seed_from(generator))
    return out if result is out else assign(out, result)


register(aten.randperm.generator_out)(lambda n, generator=None, out=None:
                                      _randperm_into(n, out, generator))
register(aten.randperm.out)(lambda n, out=None: _randperm_into(n, out))


def _check_weights(ctx, weights, num_samples, replacement):
    """PyTorch's checks of the weights (as CUDA makes them: three numbers read back):
    any weight negative or not finite, the smallest row sum, the fewest positive weights
    of a row."""
    rows = weights.shape[0]
    per_row = [Tensor(ctx, (rows, 1), np.float32) for _ in range(3)]
    pointwise_reduce(ctx, [weights], per_row,
                     "y0 = (x0 < 0 || isnan(x0) || isinf(x0)); y1 = x0; y2 = x0 > 0;",
                     "reduce_y0 = 0; reduce_y1 = 0; reduce_y2 = 0;",
                     "reduce_y0 += y0; reduce_y1 += y1; reduce_y2 += y2;")
    worst = [Tensor(ctx, (1, 1), np.float32) for _ in range(3)]
    pointwise_reduce(ctx, per_row, worst, "y0 = x0; y1 = x1; y2 = x2;",
                     "reduce_y0 = 0; reduce_y1 = INFINITY; reduce_y2 = INFINITY;",
                     "reduce_y0 = fmax(reduce_y0, y0); reduce_y1 = fmin(reduce_y1, y1); "
                     "reduce_y2 = fmin(reduce_y2, y2);")
    bad, smallest_sum, fewest = (float(t.to_host().reshape(())) for t in worst)
    _check(bad == 0, "probability tensor contains either `inf`, `nan` or element < 0")
    _check(smallest_sum > 0, "invalid multinomial distribution (sum of probabilities <= 0)")
    _check(replacement or fewest >= num_samples,
           "invalid multinomial distribution (with replacement=False, not enough non-negative "
           "category to sample)")


@register(aten.multinomial.default)
def _multinomial(p, num_samples, replacement=False, generator=None):
    _check(p.dim() in (1, 2), "prob_dist must be 1 or 2 dim")
    _check(p.is_floating_point(), "multinomial only supports floating-point dtypes for input, "
                                  "got: %s" % str(p.dtype).replace("torch.", ""))
    _check(num_samples > 0, "cannot sample n_sample <= 0 samples")
    cats = p.shape[-1]
    _check(replacement or num_samples <= cats,
           "cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    rows = p.shape[0] if p.dim() == 2 else 1
    out = empty(tuple(p.shape[:-1]) + (num_samples,), torch.int64, p._ocl_storage.index)
    weights = as_dlprim(p).view((rows, cats))
    _check_weights(_ctx(p), weights, num_samples, replacement)
    random_draw.multinomial(_ctx(p), weights, as_dlprim(out).view((rows, num_samples)),
                            num_samples, replacement, seed_from(generator))
    return out
