"""Local response normalisation across channels (Krizhevsky et al. 2012), as ONNX's LRN:

    s[n,c,p] = k + alpha/size * sum_{i = c - lo}^{c + hi} x[n,i,p]^2,  y = x * s^-beta

with lo = floor((size - 1) / 2), hi = ceil((size - 1) / 2) (for odd sizes PyTorch's
LocalResponseNorm and Caffe's LRN agree). Backward recomputes s from x (no saved state):
dx_i = dy_i s_i^-beta - 2 alpha/size beta x_i sum_{c: i in window(c)} dy_c x_c s_c^(-beta-1).
"""
import numpy as np

from ..kernels import program
from ..kernels.program import Launch
from ..utils import round_up

__all__ = ["LRNOps"]


class LRNOps:
    """LRN of (N, C, ...) float32 tensors; N may change between calls."""

    def __init__(self, ctx, channels, size, alpha=1e-4, beta=0.75, k=1.0):
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError("LRNOps: size must be a positive integer, got %r" % (size,))
        self.ctx, self.channels, self.size = ctx, int(channels), int(size)
        self.alpha, self.beta, self.k = float(alpha), float(beta), float(k)
        self.prg = program.get(ctx, "lrn", LO=(self.size - 1) // 2, HI=self.size // 2)

    def _geometry(self, shape):
        if len(shape) < 2 or shape[1] != self.channels:
            raise ValueError("LRNOps: expected (N, %d, ...), got %s" % (self.channels, tuple(shape)))
        n, c = int(shape[0]), int(shape[1])
        p = int(np.prod(shape[2:], dtype=np.int64))
        args = [np.int32(c), np.uint64(p), np.float32(self.alpha / self.size),
                np.float32(self.beta), np.float32(self.k)]
        local = min(64, round_up(p, 8))
        return ((round_up(p, local), c, n), (local, 1, 1)), args

    @staticmethod
    def _check(what, t, shape):
        if tuple(t.shape) != tuple(shape) or t.dtype != np.float32:
            raise ValueError("LRNOps: %s is %s %s, expected %s float32"
                             % (what, t.shape, t.dtype.name, tuple(shape)))

    def launches(self, x, y):
        """y = LRN(x)."""
        grid, args = self._geometry(x.shape)
        self._check("y", y, x.shape)
        if x.size == 0:
            return []
        return [Launch(self.prg, "lrn_forward", *grid, args=args + [x, y])]

    def backward_launches(self, x, dy, dx, beta=0.0):
        """dx = beta * dx + the gradient of LRN at x for output gradient dy."""
        grid, args = self._geometry(x.shape)
        self._check("dy", dy, x.shape)
        self._check("dx", dx, x.shape)
        if x.size == 0:
            return []
        return [Launch(self.prg, "lrn_backward", *grid, args=args + [x, dy, dx, np.float32(beta)])]

    def __call__(self, x, y, queue=None):
        for launch in self.launches(x, y):
            launch(queue or self.ctx.queue)
