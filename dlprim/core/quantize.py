"""Weight-only int8: rows of a weight matrix as int8 values times one float32 scale per
row (per output channel: symmetric, the largest magnitude of the row maps to 127).

    q, scale = quantize_rows(w)              # numpy: (N, K) int8 and (N,) float32
    w_approx = q * scale[:, None]
    ops = DequantizeRows(ctx, N, K)          # on the device, into float32
    launches = ops.launches(q_tensor, scale_tensor, out_tensor)

A GEMM of a few rows reads the int8 values itself (``Gemm(b_scale=True)``,
``kernels/gemv.cl``); a GEMM of many rows (a prefill) reads them widened by
``DequantizeRows`` (``kernels/quantize.cl``) into a float32 workspace.
"""
import numpy as np

from ..kernels import program
from ..utils import round_up

__all__ = ["quantize_rows", "DequantizeRows"]


def quantize_rows(w):
    """(int8 values, float32 scales) of the rows of ``w`` (2-D): scale = max |row| / 127
    (1 for a row of zeros), values = round(row / scale) to nearest even."""
    w = np.asarray(w, np.float32)
    if w.ndim != 2:
        raise ValueError("quantize_rows: a 2-D weight, got shape %s" % (w.shape,))
    peak = np.abs(w).max(axis=1) if w.shape[1] else np.zeros(w.shape[0], np.float32)
    if not np.isfinite(peak).all():
        raise ValueError("quantize_rows: row %d holds a NaN or an infinity"
                         % int(np.argmin(np.isfinite(peak))))
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


class DequantizeRows:
    """(rows, K) int8 times a scale per row -> float32, one launch."""

    def __init__(self, ctx, rows, K):
        self.rows, self.K = int(rows), int(K)
        self.program = program.get(ctx, "quantize")
        self._wg = min(256, ctx.facts.max_work_group)

    def launches(self, q, scale, out):
        """out (rows, K) float32 = q (rows, K) int8 times scale (rows,), one launch."""
        total = self.rows * self.K
        if total == 0:
            return []
        u32, u64 = np.uint32, np.uint64
        return [program.Launch(self.program, "dequantize_rows", (round_up(total, self._wg),),
                               (self._wg,), [u64(total), u32(self.K), q.buffer, u64(q.offset),
                                             scale.buffer, u64(scale.offset), out.buffer,
                                             u64(out.offset)])]
