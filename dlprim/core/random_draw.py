"""Random draws on the device from the Philox-4x32-10 stream of ``core/random.py``
(``kernels/random_draw.cl``, ``kernels/random_sample.cl``): the distributions PyTorch's
random operators name, random permutations and multinomial samples.

Every launcher takes a 64-bit ``seed`` (the Philox key) and starts at counter 0: the
caller draws a new seed per call (from PyTorch's generator), so consecutive calls differ
and a fixed seed repeats a draw exactly.

Distributions (``u`` uniform, ``z`` standard normal by Box-Muller):
- uniform     ``p0 + p1 * u``, u in [0, 1) on the stored type's mantissa bits, so that a
              draw never rounds up to ``p0 + p1`` (PyTorch's rule);
- normal      ``p0 + p1 * z``;  log_normal ``exp(p0 + p1 * z)``;
- exponential ``-log(1 - u) / p0``;  cauchy ``p0 + p1 * tan(pi (u - 1/2))``;
- geometric   ``ceil(log u / log(1 - p0))`` (at least 1);  bernoulli ``u < p0``;
- integer     ``lo + bits % span`` (64 random bits per value when span > 2**32; a span of
              2**64 takes every value).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type, is_float
from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up

__all__ = ["DISTRIBUTIONS", "draw", "randperm", "multinomial"]

DISTRIBUTIONS = ("uniform", "normal", "log_normal", "exponential", "cauchy", "geometric",
                 "bernoulli", "integer")
_FLOAT_DIGITS = {"float": 24, "half": 11, "bfloat16": 8, "double": 24}  # <= 24: float math
_WG = 256


def _wg(ctx):
    return min(_WG, ctx.facts.max_work_group)


def draw(ctx, t, dist, seed, p0=0.0, p1=1.0, lo=0, span=1, queue=None):
    """Fill the contiguous dlprim Tensor ``t`` with draws of ``dist`` (see the module's
    docstring for p0, p1, lo and span) from the stream of ``seed``."""
    if dist not in DISTRIBUTIONS:
        raise ValueError("random draw: unknown distribution %r; known: %s"
                         % (dist, ", ".join(DISTRIBUTIONS)))
    store = cl_type(t.dtype)
    span = int(span)
    wide = dist == "integer" and span > 2 ** 32
    span = 0 if span >= 2 ** 64 else span  # the kernel's name for every 64-bit value
    digits = _FLOAT_DIGITS.get(store, 24)
    prog = program.get(ctx, "random_draw", DIST=dist, STORE=store, DIGITS=digits, WIDE=wide)
    if t.size == 0:
        return t
    per = 2 if wide else 4
    blocks = (t.size + per - 1) // per
    program.enqueue_now(queue or ctx.queue, prog, "random_draw", (round_up(blocks, _wg(ctx)),),
                        (_wg(ctx),), [np.uint64(t.size), t.buffer, np.uint64(t.offset),
                                      np.uint64(seed), np.uint64(0), np.float32(p0),
                                      np.float32(p1), np.int64(lo), np.uint64(span)])
    return t


def randperm(ctx, t, seed, queue=None):
    """Fill the 1-D contiguous dlprim Tensor ``t`` with a random permutation of 0 .. n-1:
    the indices sorted by random 64-bit keys (a bitonic sort, log2(n)**2 / 2 passes)."""
    n = t.size
    if n == 0:
        return t
    prog = program.get(ctx, "random_sample", MODE="perm", STORE=cl_type(t.dtype), T="float")
    queue = queue or ctx.queue
    padded = program.pow2_at_least(n)
    keys = Tensor(ctx, (padded,), np.int64)  # read as ulong by the kernel
    idx = Tensor(ctx, (padded,), np.int64)
    wg = min(_wg(ctx), padded)
    grid = (round_up(padded, wg),)
    u64 = np.uint64
    program.enqueue_now(queue, prog, "perm_keys", grid, (wg,),
                        [u64(n), u64(padded), keys.buffer, u64(keys.offset), idx.buffer,
                         u64(idx.offset), u64(seed)])
    k = 2
    while k <= padded:
        j = k // 2
        while j:
            program.enqueue_now(queue, prog, "perm_bitonic_step", grid, (wg,),
                                [u64(padded), keys.buffer, u64(keys.offset), idx.buffer,
                                 u64(idx.offset), u64(j), u64(k)])
            j //= 2
        k *= 2
    program.enqueue_now(queue, prog, "perm_store", (round_up(n, _wg(ctx)),), (_wg(ctx),),
                        [u64(n), idx.buffer, u64(idx.offset), t.buffer, u64(t.offset)])
    return t


def multinomial(ctx, p, y, samples, replacement, seed, queue=None):
    """y (int64, (rows, samples)) = category indices drawn from the rows of the
    contiguous (rows, cats) weights ``p`` (float types; non-negative, each row with a
    positive weight: the caller checks). Without replacement ``samples <= cats``."""
    rows, cats = p.shape
    if rows * samples == 0:
        return y
    if not is_float(p.dtype) or as_dtype(y.dtype) != np.dtype(np.int64):
        raise TypeError("multinomial: float weights and int64 samples, got %s and %s"
                        % (as_dtype(p.dtype).name, as_dtype(y.dtype).name))
    prog = program.get(ctx, "random_sample", MODE="multinomial", T=cl_type(p.dtype),
                       STORE="long")
    queue = queue or ctx.queue
    u64 = np.uint64
    work = Tensor(ctx, (rows * cats,), np.float32)
    wg = _wg(ctx)
    if replacement:
        program.enqueue_now(queue, prog, "multinomial_cdf", (round_up(rows, wg),), (wg,),
                            [u64(rows), u64(cats), p.buffer, u64(p.offset), work.buffer,
                             u64(work.offset)])
        program.enqueue_now(queue, prog, "multinomial_replace",
                            (round_up(rows * samples, wg),), (wg,),
                            [u64(rows), u64(cats), u64(samples), work.buffer, u64(work.offset),
                             y.buffer, u64(y.offset), u64(seed)])
    else:
        program.enqueue_now(queue, prog, "multinomial_no_replace", (round_up(rows, wg),), (wg,),
                            [u64(rows), u64(cats), u64(samples), p.buffer, u64(p.offset),
                             work.buffer, u64(work.offset), y.buffer, u64(y.offset), u64(seed)])
    return y
