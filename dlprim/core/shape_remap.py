"""Gathers along one axis by an index map (``kernels/shape_remap.cl``): reflection,
replication and circular padding (negative pads crop), flip and roll, and the adjoint
that sums the gradient back (each input position gathers every output position that read
it: deterministic, no atomics).

Every tensor is contiguous and seen as (outer, n, inner) around the axis. The forward
moves elements as bits (one build per element size serves every dtype); the backward
adds in float (the storage type for wider ones).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up

__all__ = ["REFLECT", "REPLICATE", "CIRCULAR", "FLIP", "remap_axis", "remap_axis_backward"]

REFLECT, REPLICATE, CIRCULAR, FLIP = 0, 1, 2, 3
_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


def _launch(ctx, prog, name, total, args, queue):
    if total == 0:
        return
    wg = min(256, ctx.facts.max_work_group)
    program.Launch(prog, name, (round_up(total, wg),), (wg,), args)(queue or ctx.queue)


def remap_axis(ctx, x, y, outer, n_in, inner, n_out, lo, mode, queue=None):
    """y[o, j, k] = x[o, map(j), k]: x of (outer, n_in, inner), y of (outer, n_out, inner);
    ``lo`` the pad before the axis (the shift of a roll), ``mode`` one of REFLECT,
    REPLICATE, CIRCULAR, FLIP. The caller checks that every map(j) is inside x."""
    if x.dtype != y.dtype:
        raise ValueError("remap_axis: x is %s, y is %s" % (x.dtype, y.dtype))
    prog = program.get(ctx, "shape_remap", BITS=_BITS[x.dtype.itemsize], STORE=None)
    u = np.uint64
    _launch(ctx, prog, "remap_axis", outer * n_out * inner,
            [u(outer * n_out * inner), u(n_out), u(inner), u(n_in), np.int64(lo),
             np.int32(mode), x, y], queue)


def remap_axis_backward(ctx, dy, dx, outer, n_out, inner, n_in, lo, mode, queue=None):
    """dx[o, i, k] = sum of dy[o, j, k] over the j with map(j) == i (``remap_axis``'s
    adjoint, same arguments)."""
    store = cl_type(as_dtype(dy.dtype))
    prog = program.get(ctx, "shape_remap", BITS=None, STORE=store)
    u = np.uint64
    _launch(ctx, prog, "remap_axis_backward", outer * n_in * inner,
            [u(outer * n_in * inner), u(n_in), u(inner), u(n_out), np.int64(lo),
             np.int32(mode), dy, dx], queue)
