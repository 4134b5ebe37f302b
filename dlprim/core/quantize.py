"""Weight-only int8: rows of a weight matrix as int8 values times one float32 scale per
row (per output channel: symmetric, the largest magnitude of the row maps to 127).

    q, scale = quantize_rows(w)              # numpy: (N, K) int8 and (N,) float32
    w_approx = q * scale[:, None]
    ops = Dequantize(ctx, N, K, "int8")      # on the device, into float32 ("q4" too)
    launches = ops.launches(q_tensor, scale_tensor, out_tensor)

4-bit weights (``quantize_q4``): groups of ``Q4_GROUP`` values along each row share a
float32 scale (the group's largest magnitude maps to 7, symmetric as llama.cpp's Q4_0),
values q in [-8, 7] stored as q + 8, two to a byte, the low nibble first.

A GEMM of a few rows reads int8 and 4-bit values itself (``Gemm(b_scale=True)`` over an
int8 or a uint8 B, ``kernels/gemv.cl``, with the norm and the gated pair it takes for
any weight); a GEMM of many rows (a prefill) reads them widened by ``Dequantize``
(``kernels/quantize.cl``) into a float32 workspace.
"""
import numpy as np

from ..kernels import program
from ..utils import round_up

__all__ = ["quantize_rows", "quantize_q4", "dequantize_q4", "Dequantize", "Q4_GROUP"]

Q4_GROUP = 32  # values that share one scale in 4-bit weights (llama.cpp's Q4_0 block)


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


def quantize_q4(w, group=Q4_GROUP):
    """(packed uint8 (N, ceil(K / 2)), float32 scales (N, ceil(K / group))) of ``w``."""
    w = np.asarray(w, np.float32)
    if w.ndim != 2:
        raise ValueError("quantize_q4: a 2-D weight, got shape %s" % (w.shape,))
    if not np.isfinite(w).all():
        raise ValueError("quantize_q4: the weight holds a NaN or an infinity")
    n, k = w.shape
    groups = -(-k // group)
    padded = np.zeros((n, groups * group), np.float32)
    padded[:, :k] = w
    blocks = padded.reshape(n, groups, group)
    peak = np.abs(blocks).max(axis=2)
    scale = np.where(peak > 0, peak / 7.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(blocks / scale[:, :, None]), -8, 7).astype(np.int16) + 8
    q = q.reshape(n, -1)[:, :k]
    if k % 2:
        q = np.concatenate([q, np.full((n, 1), 8, np.int16)], axis=1)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale


def dequantize_q4(packed, scale, k, group=Q4_GROUP):
    """The float32 (N, k) values of ``quantize_q4``'s output (the reference)."""
    packed = np.asarray(packed, np.uint8)
    q = np.empty((packed.shape[0], packed.shape[1] * 2), np.int16)
    q[:, 0::2], q[:, 1::2] = packed & 15, packed >> 4
    q = q[:, :k] - 8
    return q * np.repeat(np.asarray(scale, np.float32), group, axis=1)[:, :k]


class Dequantize:
    """(rows, K) quantized weights -> float32, one launch: ``kind`` "int8" (a scale per
    row, ``quantize_rows``) or "q4" (``quantize_q4``)."""

    KERNELS = {"int8": "dequantize_rows", "q4": "dequantize_q4"}

    def __init__(self, ctx, rows, K, kind):
        if kind not in self.KERNELS:
            raise ValueError("Dequantize: kind must be 'int8' or 'q4', got %r" % (kind,))
        self.rows, self.K, self.kernel = int(rows), int(K), self.KERNELS[kind]
        self.program = program.get(ctx, "quantize", GROUP=Q4_GROUP)
        self._wg = min(256, ctx.facts.max_work_group)

    def launches(self, q, scale, out):
        """out (rows, K) float32 from the stored values and their scales."""
        total = self.rows * self.K
        if total == 0:
            return []
        u32, u64 = np.uint32, np.uint64
        return [program.Launch(self.program, self.kernel, (round_up(total, self._wg),),
                               (self._wg,), [u64(total), u32(self.K), q.buffer, u64(q.offset),
                                             scale.buffer, u64(scale.offset), out.buffer,
                                             u64(out.offset)])]
