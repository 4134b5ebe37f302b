"""ScaledDotProductAttention: softmax(scale Q K^T + mask) V over (N, H, L, D) inputs, on
dlprim's fused attention kernels (``core/attention.py``): the L x S scores are never
stored, so memory grows linearly with the sequence (docs/operators.md).

Inputs q (N, H, L, D), k (N, H, S, D), v (N, H, S, DV) and optionally an additive mask that
broadcasts to (N, H, L, S) (it gets no gradient), all of one float type: float32, or
float16 / bfloat16, which the output and the gradients keep (HALF_STORAGE "follows": in
a net of precision "fp16" or "bf16" it takes the 16-bit activations with no Casts on q,
k, v or the output; the arithmetic stays float32, core/attention.py). Option ``layout`` reads other
arrangements in place: "nlhd" takes q (N, L, H, D), k (N, S, H, D), v (N, S, H, DV) and
gives (N, L, H, DV) -- the heads of a Linear's output split by a Reshape alone, no
transposes; "packed" takes one input qkv (N, L, 3, H, D) (one Linear's output for
self-attention, split by a Reshape alone) and gives (N, L, H, D). The row statistics (the
largest score and the log of the sum of the exponentials, 2*N*H*L floats, float32
whatever the storage) are saved from forward to backward; the backward takes
another such vector of workspace, and room (in the inputs' type) for gradients it must
add to rather than write.

Option ``positions`` (a key/value cache's, the decoders' ``KVCache``): the fourth input is
then not a mask but each sequence's cached count before this pass, int32 or int64 of (N,)
or (1,), read on the device. The L query rows are ``query_groups`` G groups of the pass's
T = L / G tokens (grouped-query heads: the G query heads of one key/value head), so row i
is token i % T, at that count plus i % T, and sees the keys at or before it; a count the
cache cannot take (below 0, or no room for T more) makes the sequence's output NaN, as
KVCache's mask does. The kernels stop at the last key a block of rows sees and read no
mask; a new T (``Net.reshape``) needs no new options. With it, option ``window`` W > 0 (a
sliding window, Mistral's) lets each query see only the W keys that end at its position.

``dropout`` p drops attention weights in train mode (inside the fused kernels; the mask is
recomputed in backward from a Philox counter rather than stored). As the Dropout layer,
the stream's key is ``seed`` and a CRC of the layer's name, and each training step moves
the counter on, so a seed reproduces every mask.
"""
import math
import zlib

import numpy as np

from ..core.attention import LAYOUTS, STORAGES, AttentionOps
from ..core.pointwise import pointwise_launches
from ..dtypes import dtype_name
from ..tensor import ws_view
from .base import TRAIN, Layer, Setup, TensorSpec, register


@register("ScaledDotProductAttention")
class ScaledDotProductAttention(Layer):
    """Fused attention (Vaswani et al. 2017; online softmax as FlashAttention, Dao 2022)."""
    OPTIONS = {"causal": False, "scale": None, "dropout": 0.0, "seed": 0, "layout": "nhld",
               "positions": False, "query_groups": 1, "window": 0}
    BACKWARD_READS_INPUTS = True
    BACKWARD_READS_OUTPUTS = True
    NO_GRAD_INPUTS = (3,)  # the mask (packed layout: input 1, set by build)
    HALF_STORAGE = "follows"

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
        if o["positions"] not in (True, False, 0, 1):
            self.fail("option 'positions' must be true/false, got %r" % (o["positions"],))
        g = o["query_groups"]
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            self.fail("option 'query_groups' must be a positive int, got %r" % (g,))
        w = o["window"]
        if isinstance(w, bool) or not isinstance(w, int) or w < 0 or (w and not o["positions"]):
            self.fail("option 'window' must be 0 (none) or a positive int of keys, with option "
                      "'positions', got %r" % (w,))
        if o["layout"] not in LAYOUTS:
            self.fail("option 'layout' must be one of %s, got %r" % (", ".join(LAYOUTS), o["layout"]))
        self.layout = o["layout"]
        self.key = (zlib.crc32(self.name.encode()) << 32) | seed
        self.step_offset = 0  # Philox counter of the next training step's mask
        self.mask_offset = 0  # that of the current step, which backward recomputes

    def _qkv_shapes(self, in_specs):
        """(q, k, v, the mask's specs) as (N, H, L, D) shapes, whatever the layout."""
        if self.layout == "packed":
            if len(in_specs) not in (1, 2):
                self.fail("the packed layout expects input qkv and optionally an additive "
                          "mask, got %d inputs" % len(in_specs))
            qkv = in_specs[0].shape
            if len(qkv) != 5 or qkv[2] != 3:
                self.fail("the packed layout's qkv must be (N, L, 3, H, D), got %s" % (qkv,))
            n, length, _, h, d = qkv
            return [(n, h, length, d)] * 3, in_specs[1:]
        if len(in_specs) not in (3, 4):
            self.fail("expects inputs q, k, v and optionally an additive mask, got %d"
                      % len(in_specs))
        shapes = [s.shape for s in in_specs[:3]]
        if any(len(s) != 4 for s in shapes):
            self.fail("q, k and v must be (%s), got %s, %s, %s"
                      % ("N, L, H, D" if self.layout == "nlhd" else "N, H, L, D", *shapes))
        if self.layout == "nlhd":
            shapes = [(s[0], s[2], s[1], s[3]) for s in shapes]
        return shapes, in_specs[3:]

    def build(self, in_specs):
        (q, k, v), mask_spec = self._qkv_shapes(in_specs)
        if k[:2] != q[:2] or v[:2] != q[:2] or k[3] != q[3] or v[2] != k[2]:
            self.fail("shapes do not fit: q %s, k %s, v %s (k must be (N, H, S, D) and v "
                      "(N, H, S, DV) for q (N, H, L, D), as (N, H, L, D))" % (q, k, v))
        positions = self._positions(mask_spec, q)
        if positions:
            mask_spec, in_specs = [], in_specs[:len(in_specs) - 1]
        dtypes = list(dict.fromkeys(s.dtype for s in in_specs))
        if len(dtypes) > 1 or dtypes[0] not in STORAGES:
            self.fail("%s must share one float dtype (float32, float16 or bfloat16), got %s"
                      % ("qkv and the mask" if self.layout == "packed" else
                         "q, k, v and the mask" if mask_spec else "q, k and v",
                         ", ".join(dtype_name(s.dtype) for s in in_specs)))
        dtype = dtypes[0]
        n, h, lq, d = q
        lk, dv = k[2], v[3]
        self.mask_strides = None
        if mask_spec:
            m = mask_spec[0].shape
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
        if self.layout == "nhld":
            self.shapes = ((n * h, lq, d), (n * h, lk, d), (n * h, lk, dv), (n * h, lq, dv))
            self.stat_shape, out_shape = (n * h, lq), (n, h, lq, dv)
        else:
            self.shapes = ((n, lq, h, d), (n, lk, h, d), (n, lk, h, dv), (n, lq, h, dv))
            if self.layout == "packed":
                self.shapes = ((n, lq, 3, h, d),) + self.shapes[3:]
            self.stat_shape, out_shape = (n, lq, h), (n, lq, h, dv)
        self.rows = n * h * lq
        shape = (self.ctx, n * h, lq, lk, d, dv)
        kinds = dict(heads=h, causal=bool(self.options["causal"]),
                     mask=self.mask_strides is not None, layout=self.layout, dtype=dtype,
                     mask_dtype=dtype, **positions)
        self.ops = AttentionOps(*shape, **kinds)
        # built in either mode, as a Net switches modes without a new setup
        p = float(self.options["dropout"])
        self.train_ops = AttentionOps(*shape, dropout=p, **kinds) if p else self.ops
        grads = sum(math.prod(s) for s in self.shapes[:-1])
        saved = [TensorSpec((2 * self.rows,))] if self.mode == TRAIN else []
        # lse (predict mode) and delta in float32, then the gradients to add rather than
        # write, stored as the inputs (the 4-byte start suits each 16-bit or float32 view)
        ws = 4 * 2 * self.rows + dtype.itemsize * grads
        # then the scores of the gemm kernels (CPUs), float32, in both passes
        self.scores_at = (ws + 3) // 4 * 4
        scores = max(self.ops.workspace_bytes, self.train_ops.workspace_bytes)
        ws = self.scores_at + scores if scores else ws
        flags = self.default_flags(no_grad_inputs=(len(self.shapes) - 1,))  # the mask
        return Setup([TensorSpec(out_shape, dtype)], [], ws, saved, flags)

    def _views(self, x, y):
        """The inputs q, k, v (packed: qkv, None, None) and the output o as the kernels
        take them."""
        if self.layout == "packed":
            return x[0].view(self.shapes[0]), None, None, y.view(self.shapes[1])
        return [t.view(s) for t, s in zip(list(x[:3]) + [y], self.shapes)]

    def _positions(self, extra, q):
        """AttentionOps' positions arguments ({} without option ``positions``), the
        fourth input checked: (N,) or (1,) integers, T dividing L."""
        if not self.options["positions"]:
            return {}
        n, _, lq, _ = q
        groups = self.options["query_groups"]
        if len(extra) != 1 or extra[0].dtype not in (np.dtype(np.int32), np.dtype(np.int64)) \
                or tuple(extra[0].shape) not in ((1,), (n,)):
            self.fail("option 'positions' takes a fourth input of the cached counts, int32 or "
                      "int64 of shape (1,) or (N,) = (%d,), got %s" % (n, ", ".join(
                          "%s %s" % (dtype_name(s.dtype), tuple(s.shape)) for s in extra)
                          or "none"))
        if self.layout == "packed" or lq % groups:
            self.fail("option 'query_groups' %d must divide the queries' L = %d (G groups of "
                      "T rows), in the nhld or nlhd layout" % (groups, lq))
        return dict(positions=lq // groups, pos_dtype=extra[0].dtype,
                    window=self.options["window"])

    def _mask(self, x):
        if self.options["positions"]:
            return {"positions": x[3]}
        if self.mask_strides is None:
            return {}
        return {"mask": x[len(self.shapes) - 1], "mask_strides": self.mask_strides}

    def _scores(self, ops, ws):
        """The gemm kernels' part of the workspace (None for the fused kernels)."""
        if not ops.workspace_bytes:
            return None
        return ws_view(ws, self.scores_at, ops.workspace_bytes // 4)

    @property
    def dropping(self):
        """Whether attention weights are dropped now (train mode and dropout > 0)."""
        return self.mode == TRAIN and self.train_ops is not self.ops

    def forward(self, x, y, params, ws, saved):
        q, k, v, o = self._views(x, y[0])
        lse = saved[0] if saved else ws_view(ws, 0, 2 * self.rows)  # over delta: no backward
        ops = self.train_ops if self.dropping else self.ops
        out = ops.launches(q, k, v, o, lse.view(ops.stats_shape),
                           scale=self.options["scale"], workspace=self._scores(ops, ws),
                           **self._mask(x))
        if not self.dropping:
            return out
        # (the kernels that draw the mask: not the gemm family's products)
        return [_DropoutCounter(self, launch, True) if ops.is_own(launch) else launch
                for launch in out]

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if not saved:
            self.fail("the backward pass needs the statistics that a setup in train mode saves")
        q, k, v, o = self._views(x, y[0])
        delta = ws_view(ws, 4 * self.rows, self.rows).view(self.stat_shape)
        offset, targets, adds = 8 * self.rows, [], []
        for i, shape in enumerate(self.shapes[:-1]):  # q, k, v (packed: qkv)
            size = math.prod(shape)
            if dx[i] is None or accumulate[i]:  # the kernels write: go through the workspace
                scratch = ws_view(ws, offset, size, self.ops.dtype)
                offset += self.ops.dtype.itemsize * size
                targets.append(scratch.view(shape))
                if dx[i] is not None:
                    adds.append((scratch, dx[i].view((size,))))
            else:
                targets.append(dx[i].view(shape))
        targets += [None] * (3 - len(targets))
        ops = self.train_ops if self.dropping else self.ops
        out = ops.backward_launches(q, k, v, o, saved[0].view(ops.stats_shape),
                                    dy[0].view(self.shapes[-1]), *targets, delta,
                                    scale=self.options["scale"],
                                    workspace=self._scores(ops, ws), **self._mask(x))
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
