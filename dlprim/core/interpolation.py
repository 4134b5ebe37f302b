"""2-D interpolation (nearest, nearest-exact, bilinear) of (N, C, H, W), forward and backward.

Source coordinates follow PyTorch's ``F.interpolate`` (float32 arithmetic):
- nearest:        src = min(floor(o * s), in - 1)
- nearest-exact:  src = min(floor((o + 0.5) * s), in - 1)
- bilinear:       src = o * (in - 1) / (out - 1) with ``align_corners``, else
                  max((o + 0.5) * s - 0.5, 0); weights 1 - frac and frac on floor(src)
                  and the next index (the same index at the last row/column)
with ``s = 1 / scale`` when a scale factor is given, else ``in / out``. The tables are
built here once per shape; the kernels only gather, backward included.
"""
import numpy as np

from ..kernels import program
from ..kernels.program import Launch
from ..tensor import Tensor
from ..utils import round_up

__all__ = ["Interpolate2D", "axis_table", "METHODS"]

METHODS = ("nearest", "nearest-exact", "bilinear")


def axis_table(n_in, n_out, method, scale=-1.0, align_corners=False):
    """-> (index int32[2*n_out + 2*n_in], weight float32[2*n_out]) for one axis."""
    f = np.float32
    o = np.arange(n_out, dtype=f)
    s = f(1.0 / scale) if scale > 0 else f(n_in) / f(n_out)
    if method == "bilinear":
        if align_corners:
            s = f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
            src = o * s
        else:
            src = np.maximum((o + f(0.5)) * s - f(0.5), f(0))
        i0 = np.minimum(src.astype(np.int64), n_in - 1)
        i1 = np.where(i0 < n_in - 1, i0 + 1, i0)
        w1 = (src - i0.astype(f)).astype(f)
        w0 = (f(1) - w1).astype(f)
    else:
        offset = f(0.5) if method == "nearest-exact" else f(0)
        i0 = np.minimum(np.floor((o + offset) * s).astype(np.int64), n_in - 1)
        i1, w0, w1 = i0, np.ones(n_out, f), np.zeros(n_out, f)
    begin = np.zeros(n_in, np.int64)
    end = np.zeros(n_in, np.int64)
    for i in range(n_in):  # outputs reading source i form one run since i0, i1 are monotone
        hits = np.nonzero((i0 == i) | (i1 == i))[0]
        if hits.size:
            begin[i], end[i] = hits[0], hits[-1] + 1
    index = np.concatenate([i0, i1, begin, end]).astype(np.int32)
    return index, np.concatenate([w0, w1]).astype(f)


class Interpolate2D:
    """Resample ``in_shape`` (N, C, H, W) to ``out_hw`` = (OH, OW)."""

    def __init__(self, ctx, in_shape, out_hw, method="nearest", scale=(-1.0, -1.0),
                 align_corners=False):
        if len(in_shape) != 4:
            raise ValueError("Interpolate2D: input must be (N, C, H, W), got %s" % (tuple(in_shape),))
        if method not in METHODS:
            raise ValueError("Interpolate2D: method must be one of %s, got %r"
                             % (", ".join(METHODS), method))
        self.ctx = ctx
        self.in_shape = tuple(int(s) for s in in_shape)
        n, c, h, w = self.in_shape
        oh, ow = (int(v) for v in out_hw)
        if oh < 1 or ow < 1:
            raise ValueError("Interpolate2D: output size must be positive, got %s" % ((oh, ow),))
        self.out_shape = (n, c, oh, ow)
        tables = [axis_table(h, oh, method, scale[0], align_corners),
                  axis_table(w, ow, method, scale[1], align_corners)]
        self.tables = [Tensor.from_numpy(ctx, a) for pair in tables for a in pair]
        big = max(n * c * h * w, n * c * oh * ow) >= 2 ** 31
        self.prg = program.get(ctx, "interpolation", IT="ulong" if big else "uint",
                               NEAREST=method != "bilinear")

    def _dims(self):
        n, c, h, w = self.in_shape
        return [np.int32(h), np.int32(w), np.int32(self.out_shape[2]), np.int32(self.out_shape[3])]

    @staticmethod
    def _grid(h, w, planes):
        """(column, row, plane) work items in 32 x 8 work-groups (rows of 32 coalesce)."""
        return (round_up(w, 32), round_up(h, 8), planes), (32, 8, 1)

    @staticmethod
    def _check(what, t, shape):
        if tuple(t.shape) != shape or t.dtype != np.float32:
            raise ValueError("Interpolate2D: %s is %s %s, expected %s float32"
                             % (what, t.shape, t.dtype.name, shape))

    def launches(self, x, y):
        """y = the resampled x."""
        self._check("x", x, self.in_shape)
        self._check("y", y, self.out_shape)
        if y.size == 0:
            return []
        n, c, oh, ow = self.out_shape
        return [Launch(self.prg, "interp_forward", *self._grid(oh, ow, n * c),
                       args=self._dims() + self.tables + [x, y])]

    def backward_launches(self, dy, dx, beta=0.0):
        """dx = beta * dx + the adjoint of the resampling applied to dy."""
        self._check("dy", dy, self.out_shape)
        self._check("dx", dx, self.in_shape)
        if dx.size == 0:
            return []
        n, c, h, w = self.in_shape
        return [Launch(self.prg, "interp_backward", *self._grid(h, w, n * c),
                       args=self._dims() + self.tables + [dy, dx, np.float32(beta)])]

    def __call__(self, x, y, queue=None):
        for launch in self.launches(x, y):
            launch(queue or self.ctx.queue)
