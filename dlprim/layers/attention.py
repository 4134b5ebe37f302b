"""ScaledDotProductAttention: softmax(scale Q K^T + mask) V over (N, H, L, D) inputs, on
dlprim's fused attention kernels (``core/attention.py``): the L x S scores are never
stored, so memory grows linearly with the sequence (docs/operators.md).

Inputs q (N, H, L, D), k (N, H, S, D), v (N, H, S, DV) and optionally an additive float32
mask that broadcasts to (N, H, L, S) (it gets no gradient). The row log-sum-exp (N*H*L
floats) is saved from forward to backward; the backward takes another such vector of
workspace, and room for gradients it must add to rather than write.

``dropout`` p drops attention weights in train mode (inside the fused kernels; the mask is
recomputed in backward from a Philox counter rather than stored). As the Dropout layer,
the stream's key is ``seed`` and a CRC of the layer's name, and each training step moves
the counter on, so a seed reproduces every mask.
"""
import math
import zlib

import numpy as np

from ..core.attention import AttentionOps
from ..core.pointwise import pointwise_launches
from ..tensor import ws_view
from .base import TRAIN, Layer, Setup, TensorSpec, register


@register("ScaledDotProductAttention")
class ScaledDotProductAttention(Layer):
    """Fused attention (Vaswani et al. 2017; online softmax as FlashAttention, Dao 2022)."""
    OPTIONS = {"causal": False, "scale": None, "dropout": 0.0, "seed": 0}
    BACKWARD_READS_INPUTS = True
    BACKWARD_READS_OUTPUTS = True
    NO_GRAD_INPUTS = (3,)

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        o = self.options
        if o["causal"] not in (True, False, 0, 1):
            self.fail("option 'causal' must be true/false, got %r" % (o["causal"],))
        scale = o["scale"]
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                                  or not scale > 0):
            self.fail("option 'scale' must be null (1 / sqrt(D)) or a positive number, got %r"
                      % (scale,))
        p = o["dropout"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
            self.fail("option 'dropout' must be a probability in [0, 1), got %r" % (p,))
        seed = o["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
            self.fail("option 'seed' must be an int in [0, 2**32), got %r" % (seed,))
        self.key = (zlib.crc32(self.name.encode()) << 32) | seed
        self.step_offset = 0  # Philox counter of the next training step's mask
        self.mask_offset = 0  # that of the current step, which backward recomputes

    def build(self, in_specs):
        if len(in_specs) not in (3, 4):
            self.fail("expects inputs q, k, v and optionally an additive mask, got %d"
                      % len(in_specs))
        q, k, v = (s.shape for s in in_specs[:3])
        if any(len(s) != 4 for s in (q, k, v)):
            self.fail("q, k and v must be (N, H, L, D), got %s, %s, %s" % (q, k, v))
        if k[:2] != q[:2] or v[:2] != q[:2] or k[3] != q[3] or v[2] != k[2]:
            self.fail("shapes do not fit: q %s, k %s, v %s (k must be (N, H, S, D) and v "
                      "(N, H, S, DV) for q (N, H, L, D))" % (q, k, v))
        if any(s.dtype != np.float32 for s in in_specs):
            self.fail("inputs must be float32")
        n, h, lq, d = q
        lk, dv = k[2], v[3]
        self.mask_strides = None
        if len(in_specs) == 4:
            m = in_specs[3].shape
            target = (n, h, lq, lk)
            full = (1,) * (4 - len(m)) + tuple(m)
            if len(m) > 4 or any(a not in (1, b) for a, b in zip(full, target)):
                self.fail("the mask of shape %s does not broadcast to (N, H, L, S) = %s"
                          % (m, target))
            strides, step = [], 1
            for size in reversed(full):
                strides.append(0 if size == 1 else step)
                step *= size
            self.mask_strides = tuple(reversed(strides))
        self.shapes = ((n * h, lq, d), (n * h, lk, d), (n * h, lk, dv), (n * h, lq, dv))
        self.rows = n * h * lq
        shape = (self.ctx, n * h, lq, lk, d, dv)
        kinds = dict(heads=h, causal=bool(self.options["causal"]),
                     mask=self.mask_strides is not None)
        self.ops = AttentionOps(*shape, **kinds)
        # built in either mode, as a Net switches modes without a new setup
        p = float(self.options["dropout"])
        self.train_ops = AttentionOps(*shape, dropout=p, **kinds) if p else self.ops
        grads = sum(math.prod(s) for s in self.shapes[:3])
        saved = [TensorSpec((self.rows,))] if self.mode == TRAIN else []
        # lse (predict mode), delta, and the gradients to add rather than write
        ws = 4 * (2 * self.rows + grads)
        return Setup([TensorSpec((n, h, lq, dv))], [], ws, saved)

    def _views(self, ts):
        return [t.view(s) for t, s in zip(ts, self.shapes)]

    def _mask(self, x):
        if self.mask_strides is None:
            return {}
        return {"mask": x[3], "mask_strides": self.mask_strides}

    @property
    def dropping(self):
        """Whether attention weights are dropped now (train mode and dropout > 0)."""
        return self.mode == TRAIN and self.train_ops is not self.ops

    def forward(self, x, y, params, ws, saved):
        q, k, v, o = self._views(list(x[:3]) + [y[0]])
        lse = saved[0] if saved else ws_view(ws, 0, self.rows)
        ops = self.train_ops if self.dropping else self.ops
        out = ops.launches(q, k, v, o, lse.view((self.shapes[0][0], self.shapes[0][1])),
                           scale=self.options["scale"], **self._mask(x))
        return [_DropoutCounter(self, launch, True) for launch in out] if self.dropping else out

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if not saved:
            self.fail("the backward pass needs the statistics that a setup in train mode saves")
        q, k, v, o = self._views(list(x[:3]) + [y[0]])
        b, lq = self.shapes[0][:2]
        delta = ws_view(ws, 4 * self.rows, self.rows).view((b, lq))
        offset, targets, adds = 8 * self.rows, [], []
        for i in range(3):
            size = math.prod(self.shapes[i])
            if dx[i] is None or accumulate[i]:  # the kernels write: go through the workspace
                scratch = ws_view(ws, offset, size)
                offset += 4 * size
                targets.append(scratch.view(self.shapes[i]))
                if dx[i] is not None:
                    adds.append((scratch, dx[i].view((size,))))
            else:
                targets.append(dx[i].view(self.shapes[i]))
        ops = self.train_ops if self.dropping else self.ops
        out = ops.backward_launches(q, k, v, o, saved[0].view((b, lq)),
                                    dy[0].view(self.shapes[3]), *targets, delta,
                                    scale=self.options["scale"], **self._mask(x))
        if self.dropping:
            out = [_DropoutCounter(self, launch, False)
                   if ops.is_own(launch) else launch
                   for launch in out]
        for scratch, target in adds:  # dx += the gradient written to the workspace
            out += pointwise_launches(self.ctx, [scratch], [target], "y0 = x0;", beta=1.0)
        return out


class _DropoutCounter:
    """A launch of the dropout kernels, pointed at the step's mask when called: the
    forward takes the layer's next counter and moves it on (a re-run iteration gets a new
    mask), the backward launches reuse the forward's."""

    def __init__(self, layer, launch, forward):
        self.layer, self.launch, self.forward = layer, launch, forward
        self.name, self.flops = launch.name, launch.flops

    def __call__(self, queue):
        layer = self.layer
        if self.forward:
            layer.mask_offset = layer.step_offset
            layer.step_offset += layer.train_ops.counters()
        AttentionOps.set_dropout_counter(self.launch, layer.key, layer.mask_offset)
        return self.launch(queue)
