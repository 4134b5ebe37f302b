"""Rotary: the rotary position embedding of a decoder's queries or keys, in one launch.

    inputs   x (N, H, T, D), or (N, T, H, D) with option ``seq_first`` (a projection split
             into heads), float32, float16 or bfloat16; cos and sin (N or 1, 1, T, D) or
             (N or 1, T, D), one row per token (its position's table row), float32 or x's
             type, the sine's first half negated
    outputs  y (N, H, T, D): x cos + swap(x) sin over the last axis, ``swap`` exchanging
             its halves (HF's rotate_half with the sign in the table)

``seq_first`` fuses the transpose to heads-major that attention and the KV cache take.
Inference only (no backward).
"""
import numpy as np

from ..core.rotary import RotaryOps
from .base import Layer, Setup, TensorSpec, register

__all__ = ["Rotary"]


@register("Rotary")
class Rotary(Layer):
    """y = x cos + swap(x) sin, heads-major (module docstring)."""
    OPTIONS = {"seq_first": False}
    HAS_BACKWARD = False
    BACKWARD_READS_INPUTS = False
    HALF_STORAGE = "follows"

    def build(self, in_specs):
        if len(in_specs) != 3:
            self.fail("expects inputs x, cos and sin, got %d" % len(in_specs))
        x, cos, sin = in_specs
        if len(x.shape) != 4:
            self.fail("input x must have 4 dimensions, got shape %s" % (x.shape,))
        seq_first = bool(self.options["seq_first"])
        if seq_first:
            n, t, h, d = x.shape
        else:
            n, h, t, d = x.shape
        if d % 2:
            self.fail("the rotated axis (the last, %d) must be even" % d)
        tables = []
        for what, spec in (("cos", cos), ("sin", sin)):
            rows = tuple(spec.shape)
            table = rows[:1] + rows[2:] if len(rows) == 4 and rows[1] == 1 else rows
            if len(table) != 3 or table[0] not in (1, n) or table[1:] != (t, d):
                self.fail("input %s must be (N or 1, 1, T, D) or (N or 1, T, D) = (%d, 1, %d, "
                          "%d), got %s" % (what, n, t, d, rows))
            tables.append(table)
        if tables[0] != tables[1] or cos.dtype != sin.dtype:
            self.fail("cos %s and sin %s differ in rows or dtype" % (cos, sin))
        if cos.dtype != x.dtype and cos.dtype != np.dtype(np.float32):
            self.fail("the tables must be float32 or x's dtype")
        self.ops = RotaryOps(self.ctx, (n, h, t, d), x.dtype, cos.dtype, cos.shape[0],
                             seq_first)
        return Setup([TensorSpec((n, h, t, d), x.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.ops.launches(x[0], x[1], x[2], y[0])
