"""The rotary position embedding in one launch (``kernels/rotary.cl``): y = x cos +
swap(x) sin over the last axis of (N, H, T, D) values, ``swap`` exchanging its halves and
the sine table's first half negated (how ``dlprim.llm.rope.rope_tables`` writes them:
the rotation of each pair (x_i, x_{i + D/2}) by the token's angle). With ``seq_first`` x
is (N, T, H, D), a projection split into heads, and y is written (N, H, T, D): the heads'
transpose costs no pass of its own."""
import numpy as np

from ..dtypes import cl_type
from ..kernels import program
from ..utils import round_up

__all__ = ["RotaryOps"]


class RotaryOps:
    """Rotations of (N, H, T, D) = ``shape`` values stored as ``dtype`` by tables (N or 1,
    T, D) stored as ``table_dtype`` (``table_rows``: N or 1)."""

    def __init__(self, ctx, shape, dtype, table_dtype, table_rows, seq_first=False):
        self.shape, self.table_rows = tuple(int(s) for s in shape), int(table_rows)
        if self.shape[3] % 2:
            raise ValueError("RotaryOps: the rotated axis must be even, got %d" % self.shape[3])
        self.program = program.get(ctx, "rotary", X=cl_type(dtype), C=cl_type(table_dtype),
                                   SEQ_FIRST=int(bool(seq_first)))
        self._wg = min(256, ctx.facts.max_work_group)

    def launches(self, x, cos, sin, y):
        """The launch writing y from x and the tables (Tensors of the shapes given)."""
        n, h, t, d = self.shape
        total = n * h * t * d
        if total == 0:
            return []
        u32, u64 = np.uint32, np.uint64
        return [program.Launch(self.program, "rotary", (round_up(total, self._wg),),
                               (self._wg,),
                               [u64(total), u32(h), u32(t), u32(d), u32(self.table_rows),
                                x.buffer, u64(x.offset), cos.buffer, u64(cos.offset),
                                sin.buffer, u64(sin.offset), y.buffer, u64(y.offset)])]
