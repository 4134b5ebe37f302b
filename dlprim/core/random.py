"""Counter-based random numbers: Philox-4x32-10, the same stream on every device.

The stream is fixed by a 64-bit ``seed`` (the Philox key) and a 64-bit counter. Element
``i`` of a fill with counter ``offset`` is word ``i % 4`` of Philox(counter =
``offset + i // 4``): a fill of ``n`` values uses ``counters(n) = ceil(n / 4)`` counters,
so the next call that starts at ``offset + counters(n)`` gets fresh numbers.

Values (the numpy functions below compute the same ones):
- bits:    the raw uint32 words (stored in an int32 tensor)
- uniform: ``low + (high - low) * (w >> 8) / 2**24`` in float32, in [low, high)
- normal:  Box-Muller on word pairs: ``r = sqrt(-2 ln u1)``, ``u1 = ((w0 >> 8) + 1) / 2**24``,
           ``u2 = (w1 >> 8) / 2**24``, values ``mean + std * r cos(2 pi u2)`` then ``... sin``.

Bits and uniform values are bit-exact across devices; normal values depend on the
device's log/sin/cos (a few ulp).
"""
import numpy as np

from ..kernels import program
from ..dtypes import as_dtype, cl_type
from ..tensor import Tensor
from ..utils import round_up

__all__ = ["RandomFill", "uniform", "normal", "counters", "philox4x32", "philox_bits",
           "philox_uniform", "philox_normal"]

_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF
_SEED_ARG, _OFFSET_ARG, _P0_ARG = 3, 4, 5  # positions in random_fill's argument list


def counters(n):
    """How many Philox counters a fill of ``n`` values uses."""
    return (int(n) + 3) // 4


# ----- the numpy reference stream
def philox4x32(counter, key, rounds=10):
    """Philox-4x32 of ``counter`` (array (..., 4) of uint32) under ``key`` (2 uint32) -> (..., 4)."""
    c = [np.asarray(counter, np.uint64)[..., j] for j in range(4)]
    k0, k1 = np.uint64(int(key[0]) & _MASK), np.uint64(int(key[1]) & _MASK)
    mask = np.uint64(_MASK)
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + np.uint64(_W0)) & mask, (k1 + np.uint64(_W1)) & mask
        p0, p1 = np.uint64(_M0) * c[0], np.uint64(_M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
    return np.stack(c, axis=-1).astype(np.uint32)


def philox_bits(n, seed=0, offset=0):
    """The first ``n`` uint32 words of the stream (seed, offset)."""
    blocks = np.arange(counters(n), dtype=np.uint64) + np.uint64(offset)
    ctr = np.zeros((len(blocks), 4), np.uint64)
    ctr[:, 0], ctr[:, 1] = blocks & np.uint64(_MASK), blocks >> np.uint64(32)
    seed = int(seed)
    return philox4x32(ctr, (seed & _MASK, (seed >> 32) & _MASK)).reshape(-1)[:n]


def _unit(words):
    return (words >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def philox_uniform(n, low=0.0, high=1.0, seed=0, offset=0):
    """numpy reference: the first ``n`` uniform float32 values in [low, high) of the stream."""
    low32 = np.float32(low)
    span = np.float32(high) - low32
    return low32 + span * _unit(philox_bits(n, seed, offset))


def philox_normal(n, mean=0.0, std=1.0, seed=0, offset=0):
    """numpy reference: the first ``n`` normal values (Box-Muller) of the stream."""
    w = philox_bits(counters(n) * 4, seed, offset).reshape(-1, 2)
    u1 = ((w[:, 0] >> np.uint32(8)).astype(np.float64) + 1) / 16777216.0
    u2 = _unit(w[:, 1]).astype(np.float64)
    radius, theta = np.sqrt(-2.0 * np.log(u1)), 2 * np.pi * u2
    z = np.stack([radius * np.cos(theta), radius * np.sin(theta)], axis=1).reshape(-1)[:n]
    return (np.float32(mean) + np.float32(std) * z.astype(np.float32)).astype(np.float32)


# ----- the device side
class RandomFill:
    """Fill tensors of ``shape`` from the Philox stream.

    ``dist``: "uniform" (``low``, ``high``), "normal" (``mean``, ``std``) or "bits" (int32).
    ``launches(t, seed, offset)`` binds the counter once; ``set_counter(launch, seed,
    offset)`` moves it later, and ``launches(..., advance=True)`` returns a launch that
    moves on by ``counters(size)`` after every call (a new mask every iteration).
    """

    def __init__(self, ctx, shape, dist="uniform", low=0.0, high=1.0, mean=0.0, std=1.0,
                 dtype="float"):
        self.ctx, self.dist = ctx, dist
        self.shape = tuple(int(n) for n in shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.dtype = as_dtype(dtype)
        if dist not in ("uniform", "normal", "bits"):
            raise ValueError("RandomFill: unknown dist %r; known: uniform, normal, bits" % dist)
        want = ("int",) if dist == "bits" else ("float", "half", "bfloat16")
        if cl_type(self.dtype) not in want:
            raise ValueError("RandomFill: dist %r needs dtype %s, got %s"
                             % (dist, " or ".join(want), self.dtype.name))
        if dist == "uniform":
            self.p0 = np.float32(low)
            self.p1 = np.float32(high) - self.p0
        else:
            self.p0, self.p1 = np.float32(mean), np.float32(std)
        self.counters = counters(self.size)
        self.program = program.get(ctx, "random", DIST=dist, STORE=cl_type(self.dtype))

    def launches(self, t, seed=0, offset=0, advance=False):
        """Fill ``t`` from the Philox stream (seed, offset); with ``advance`` every call of the
        launch moves the offset on, so each run draws new numbers.
        """
        if not isinstance(t, Tensor) or t.shape != self.shape or t.dtype != self.dtype:
            raise ValueError("RandomFill: tensor %r, expected shape %s dtype %s"
                             % (t, self.shape, self.dtype.name))
        if self.size == 0:
            return []
        wg = min(256, self.ctx.facts.max_work_group)
        launch = program.Launch(self.program, "random_fill", (round_up(self.counters, wg),),
                                (wg,), [np.uint64(self.size), t, np.uint64(seed), np.uint64(offset),
                                        self.p0, self.p1])
        return [_Advancing(launch, seed, offset, self.counters) if advance else launch]

    @staticmethod
    def set_counter(launch, seed, offset):
        """Point a prepared launch at another (seed, offset) of the stream."""
        bound = launch.launch if isinstance(launch, _Advancing) else launch
        bound.set_arg(_SEED_ARG, np.uint64(seed))
        bound.set_arg(_OFFSET_ARG, np.uint64(offset))
        if isinstance(launch, _Advancing):
            launch.seed, launch.offset = int(seed), int(offset)

    def __call__(self, t, seed=0, offset=0, queue=None):
        for launch in self.launches(t, seed, offset):
            launch(queue if queue is not None else self.ctx.queue)
        return t


class _Advancing:
    """A launch that uses counter ``offset`` and then moves it on by ``step``."""

    def __init__(self, launch, seed, offset, step):
        self.launch, self.seed, self.offset, self.step = launch, int(seed), int(offset), step
        self.name = launch.name

    def __call__(self, queue):
        self.launch.set_arg(_OFFSET_ARG, np.uint64(self.offset))
        event = self.launch(queue)
        self.offset += self.step
        return event


def _fill(ctx, t, dist, seed, offset, queue, **kw):
    from .pointwise import memo
    op = memo(ctx, ("random", t.shape, t.dtype.name, dist, tuple(sorted(kw.items()))),
               lambda: RandomFill(ctx, t.shape, dist, dtype=t.dtype, **kw))
    return op(t, seed, offset, queue)


def uniform(ctx, t, low=0.0, high=1.0, seed=0, offset=0, queue=None):
    """Fill ``t`` with uniform values in [low, high) from the stream (seed, offset)."""
    return _fill(ctx, t, "uniform", seed, offset, queue, low=float(low), high=float(high))


def normal(ctx, t, mean=0.0, std=1.0, seed=0, offset=0, queue=None):
    """Fill ``t`` with normal values (Box-Muller) from the stream (seed, offset)."""
    return _fill(ctx, t, "normal", seed, offset, queue, mean=float(mean), std=float(std))
