"""Transpose: permute the axes, ``y = x.transpose(dims)`` (numpy's meaning).

``dims`` is any permutation of the input's axes (negative counts from the end). Channel
shuffle is Reshape (N, g, C/g, H, W) -> Transpose [0, 2, 1, 3, 4] -> Reshape (N, C, H, W).
Backward applies the inverse permutation to dy. A permutation that keeps the order of
the axes longer than 1 moves no element (a decode step's heads merged back, (N, H, 1, D)
-> (N, 1, H, D)): the output is then a view of the input, as Reshape's, with no launch.
"""
from ..core.copy import TransposeCopy
from ..utils import is_int
from ..tensor import same_memory
from .base import Layer, Setup, TensorSpec, register


@register("Transpose")
class Transpose(Layer):
    """Permutes the axes of the input as ``dims`` lists them."""
    CARRIES_NARROW = True  # moves codes unchanged
    HALF_STORAGE = "follows"
    OPTIONS = {"dims": None}
    BACKWARD_READS_INPUTS = False

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        dims = self.options["dims"]
        if dims is None:
            self.fail("option 'dims' is required (a permutation of the axes)")
        if not (isinstance(dims, (list, tuple)) and all(map(is_int, dims))):
            self.fail("option 'dims' must be a list of axes, got %r" % (dims,))

    def build(self, in_specs):
        spec = self.single_input(in_specs, float32=False)
        n = len(spec.shape)
        dims = self.options["dims"]
        perm = [d + n if d < 0 else d for d in dims]
        if sorted(perm) != list(range(n)):
            self.fail("option 'dims' %r is not a permutation of the %d axes of input %s"
                      % (list(dims), n, spec.shape))
        inverse = [perm.index(k) for k in range(n)]
        self.fwd = TransposeCopy(self.ctx, spec.shape, perm, spec.dtype)
        self.bwd = TransposeCopy(self.ctx, self.fwd.out_shape, inverse, spec.dtype)
        long_axes = [a for a in perm if spec.shape[a] != 1]
        self.moves = long_axes != sorted(long_axes)  # (else the same bytes, another shape)
        return Setup([TensorSpec(self.fwd.out_shape, spec.dtype)],
                     flags=self.default_flags(view=not self.moves))

    def forward(self, x, y, params, ws, saved):
        if not self.moves and same_memory(x[0], y[0]):
            return []
        return self.fwd.launches(x[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None or (not self.moves and same_memory(dx[0], dy[0]) and
                             not accumulate[0]):
            return []
        return self.bwd.launches(dy[0], dx[0], beta=float(accumulate[0]))
