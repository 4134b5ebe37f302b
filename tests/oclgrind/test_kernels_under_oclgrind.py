"""Every kernel family on small cases under oclgrind: out-of-bounds accesses, data races and
API misuse fail the test (conftest.py reads oclgrind's log around each one).

Shapes are tiny (oclgrind interprets every work-item) but still cross tile and
work-group edges. The kernels' results are checked against numpy and the layers'
outputs and gradients for being finite (run_layer also checks what backward overwrites
and accumulates), so a kernel that did not run cannot pass. Tests taking ``facts`` run
once as a CPU and once as a GPU.
"""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models, solvers
from dlprim.core import copy as cp
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from dlprim.core.gather import index_ops
from dlprim.core.gemm import Gemm
from dlprim.core.pointwise import pointwise, pointwise_reduce
from dlprim.core.reduction import Reduce
from dlprim.layers import create
import layer_check
from layer_check import assert_close, run_layer
from test_conv import conv_backward_ref, conv_ref


@pytest.fixture(autouse=True)
def exact_tensors(monkeypatch):
    """run_layer's tensors without the poison around them: oclgrind sees a tensor's end
    only where its buffer ends."""
    monkeypatch.setattr(layer_check, "PAD", 0)


def t(ctx, a, dtype=np.float32):
    return dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, dtype))


def workspace(ctx, nbytes):
    return dp.Tensor(ctx, (nbytes,), "uint8") if nbytes else None


# ---------------------------------------------------------------- GEMM

@pytest.mark.parametrize("M, N, K", [(9, 7, 33), (65, 5, 17)])
@pytest.mark.parametrize("split_k", [None, 3])
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm(ctx, rng, facts, M, N, K, split_k, trans_a, trans_b):
    a, b, c = (rng.standard_normal(s) for s in ((M, K), (K, N), (M, N)))
    bias = rng.standard_normal(N)
    op = Gemm(ctx, M, N, K, trans_a, trans_b, bias="col", activation="relu", split_k=split_k)
    C = t(ctx, c)
    op(t(ctx, a.T if trans_a else a), t(ctx, b.T if trans_b else b), C, bias=t(ctx, bias),
       alpha=0.5, beta=0.25)
    assert_close(C.numpy(), np.maximum(0.5 * a @ b + 0.25 * c + bias, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision, dtypes", [("tf32", ("float32",) * 3),
                                               ("bf16", ("bfloat16", "float32", "bfloat16"))])
def test_gemm_emulated_tensor_cores(ctx, rng, monkeypatch, precision, dtypes):
    """gemm_mma.cl's tiles, fragments and epilogue with kernels/mma.h's products in
    OpenCL C (MMA_EMULATE), as on a CPU: all but the PTX."""
    from dlprim.core import gemm
    from dlprim.kernels import program
    from layer_check import host, stored
    monkeypatch.setattr(ctx.facts, "is_gpu", False)
    monkeypatch.setattr(gemm, "tensor_cores", lambda ctx, precision="tf32": True)
    # no probes of cp.async and warpgroup products: their PTX builds fail here, by design
    monkeypatch.setattr(gemm, "copies_async", lambda ctx, precision: False)
    monkeypatch.setattr(gemm, "warpgroup_products", lambda ctx, precision: False)
    build = program.get
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_mma" else p)))
    M, N, K = 20, 9, 24
    a, b = stored(rng.standard_normal((M, K)), dtypes[0]), stored(rng.standard_normal((K, N)),
                                                                  dtypes[1])
    op = Gemm(ctx, M, N, K, precision=precision, dtypes=dtypes)
    assert op.mma
    C = dp.Tensor.from_numpy(ctx, host(np.zeros((M, N)), dtypes[2]))
    op(dp.Tensor.from_numpy(ctx, host(a, dtypes[0])), dp.Tensor.from_numpy(ctx, host(b, dtypes[1])),
       C)
    got = C.numpy().astype(np.float64)
    assert_close(got, a @ b, rtol=3e-2, atol=3e-2)


# ---------------------------------------------------------------- convolutions

GEOMS = {  # algorithm -> geometries it serves in all three directions (direct: see below)
    "gemm": [ConvGeometry(3, 5, (7, 6), (3, 3), (2, 1), (1, 0, 2, 1)),
             ConvGeometry(4, 6, (5, 5), (3, 3), pad=(1, 1, 1, 1), groups=2),
             ConvGeometry(3, 4, (5, 4), (1, 1))],
    "winograd2": [ConvGeometry(3, 4, (6, 5), (3, 3), pad=(1, 1, 1, 1))],
    "winograd4": [ConvGeometry(2, 3, (6, 7), (3, 3), pad=(1, 1, 1, 1)),
                  ConvGeometry(2, 3, (6, 5), (5, 5), pad=(2, 2, 2, 2))],
    "depthwise": [ConvGeometry(3, 3, (7, 6), (3, 3), pad=(1, 1, 1, 1), groups=3),
                  ConvGeometry(2, 2, (7, 7), (3, 3), (2, 2), (1, 1, 1, 1), groups=2)],
    "direct": [ConvGeometry(3, 2, (6, 5), (3, 3), pad=(1, 1, 1, 1)),
               ConvGeometry(2, 3, (7, 6), (3, 3), (2, 1), (1, 0, 1, 1))],
    "im2col": [ConvGeometry(3, 5, (6, 5), (3, 3), pad=(1, 1, 1, 1)),
               ConvGeometry(4, 3, (7, 6), (3, 2), (2, 1), (1, 0, 0, 1), dilate=(1, 2))],
}
CONV_CASES = [(algo, i) for algo, geoms in GEOMS.items() for i in range(len(geoms))]


def _conv_data(rng, geom, batch):
    return (rng.standard_normal(geom.in_shape(batch)), rng.standard_normal(geom.weight_shape),
            rng.standard_normal(geom.out_shape(batch)))


def _check_algo(op, algo):
    assert op.algo == algo, "%s asked, %s ran" % (algo, op.algo)


@pytest.mark.parametrize("algo, i", CONV_CASES)
def test_conv_forward(ctx, rng, facts, algo, i):
    geom, batch = GEOMS[algo][i], 2
    x, w, y0 = _conv_data(rng, geom, batch)
    b = rng.standard_normal(geom.out_c)
    op = ConvForward(ctx, geom, bias=True, activation="relu", algo=algo, batch=batch)
    _check_algo(op, algo)
    y = t(ctx, y0)
    op(t(ctx, x), t(ctx, w), y, t(ctx, b), ws=workspace(ctx, op.workspace_bytes(batch)),
       beta=0.5)
    want = conv_ref(x, w, (geom.sh, geom.sw), geom.pad, (geom.dh, geom.dw), geom.groups)
    assert_close(y.numpy(), np.maximum(want + 0.5 * y0 + b[None, :, None, None], 0),
                 rtol=1e-4, atol=1e-4, what="%s forward" % algo)


@pytest.mark.parametrize("algo, i", CONV_CASES)
def test_conv_backward_data(ctx, rng, facts, algo, i):
    geom, batch = GEOMS[algo][i], 2
    if algo == "direct" and (geom.sh, geom.sw) != (1, 1):
        pytest.skip("direct backward-data is stride 1 only")
    x, w, dy = _conv_data(rng, geom, batch)
    dx0 = rng.standard_normal(x.shape)
    op = ConvBackwardData(ctx, geom, algo=algo, batch=batch)
    _check_algo(op, algo)
    dx = t(ctx, dx0)
    op(t(ctx, dy), t(ctx, w), dx, ws=workspace(ctx, op.workspace_bytes(batch)), beta=1.0)
    want, _ = conv_backward_ref(x, w, dy, (geom.sh, geom.sw), geom.pad, (geom.dh, geom.dw),
                                geom.groups)
    assert_close(dx.numpy(), dx0 + want, rtol=1e-4, atol=1e-4, what="%s dx" % algo)


@pytest.mark.parametrize("algo, i", CONV_CASES)
@pytest.mark.parametrize("splits", [None, 3])
def test_conv_backward_filter(ctx, rng, facts, algo, i, splits):
    geom, batch = GEOMS[algo][i], 3
    if algo == "im2col" and splits:
        pytest.skip("im2col sums the batch image by image, unsplit")
    x, w, dy = _conv_data(rng, geom, batch)
    dw0 = rng.standard_normal(w.shape)
    op = ConvBackwardFilter(ctx, geom, algo=algo, batch=batch, splits=splits)
    _check_algo(op, algo)
    dw = t(ctx, dw0)
    op(t(ctx, x), t(ctx, dy), dw, ws=workspace(ctx, op.workspace_bytes(batch)), beta=0.5)
    _, want = conv_backward_ref(x, w, dy, (geom.sh, geom.sw), geom.pad, (geom.dh, geom.dw),
                                geom.groups)
    assert_close(dw.numpy(), 0.5 * dw0 + want, rtol=1e-4, atol=1e-4, what="%s dw" % algo)


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
def test_conv_gemm_split_k(ctx, rng, facts, direction):
    """The implicit GEMM's split reduction in forward and strided backward-data."""
    geom, batch = ConvGeometry(5, 6, (7, 6), (3, 3), (2, 2), (1, 0, 2, 1)), 2
    x, w, dy = _conv_data(rng, geom, batch)
    cls = ConvForward if direction == "forward" else ConvBackwardData
    op = cls(ctx, geom, algo="gemm", batch=batch, splits=3)
    src, out0 = (x, dy) if direction == "forward" else (dy, x)
    out = t(ctx, out0)
    op(t(ctx, src), t(ctx, w), out, ws=workspace(ctx, op.workspace_bytes(batch)), beta=1.0)
    if direction == "forward":
        want = conv_ref(x, w, (2, 2), geom.pad, (1, 1), 1)
    else:
        want, _ = conv_backward_ref(x, w, dy, (2, 2), geom.pad, (1, 1), 1)
    assert_close(out.numpy(), out0 + want, rtol=1e-4, atol=1e-4, what=direction)


# ---------------------------------------------------------------- layers, forward and backward

def _finite(r):
    for a in list(r.y) + [d for d in (r.dx or []) if d is not None] + \
            [d for d in (r.dparams or []) if d is not None]:
        assert np.all(np.isfinite(a))


LAYERS = [  # (type, options, input shapes, how to make inputs)
    ("Pooling2D", {"mode": "max", "kernel": 3, "stride": 2, "pad": 1}, [(2, 3, 7, 6)]),
    ("Pooling2D", {"mode": "avg", "kernel": 2, "stride": 2, "ceil_mode": True},
     [(2, 3, 7, 5)]),
    ("GlobalPooling", {"mode": "avg"}, [(2, 3, 5, 7)]),
    ("GlobalPooling", {"mode": "max"}, [(2, 3, 5, 7)]),
    ("BatchNorm", {}, [(3, 4, 5, 3)]),
    ("LayerNorm", {"normalized_dims": 1}, [(3, 5, 7)]),
    ("GroupNorm", {"groups": 2}, [(2, 4, 3, 5)]),
    ("Softmax", {}, [(5, 37)]),
    ("Softmax", {"log": True}, [(3, 70)]),
    ("Transpose", {"dims": [0, 2, 1]}, [(2, 33, 5)]),
    ("Activation", {"activation": "tanh"}, [(3, 37)]),
    ("Elementwise", {"operation": "prod"}, [(2, 3, 5), (2, 3, 5)]),
    ("InnerProduct", {"outputs": 5, "activation": "relu"}, [(3, 13)]),
    ("LRN", {"size": 3}, [(2, 5, 3, 4)]),
    ("Interpolation", {"method": "bilinear", "scale_y": 1.5, "scale_x": 0.5}, [(1, 2, 5, 7)]),
    ("Interpolation", {"method": "nearest", "out_h": 7, "out_w": 3}, [(2, 1, 4, 5)]),
    ("Dropout", {"ratio": 0.3, "seed": 5}, [(3, 37)]),
]


@pytest.mark.parametrize("type_name, options, shapes", LAYERS,
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(LAYERS)])
def test_layer(ctx, rng, facts, type_name, options, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    layer = create(ctx, type_name, "l", options)
    out = layer.setup([layer_check.TensorSpec(x.shape) for x in xs]).outputs
    dy = [rng.standard_normal(s.shape).astype(np.float32) for s in out]
    for acc in (False, True):
        _finite(run_layer(ctx, layer, xs, dy=dy, accumulate=acc, rng=rng))
    _finite(run_layer(ctx, layer, xs, mode="predict", rng=rng))


@pytest.mark.parametrize("type_name, options", [
    ("SoftmaxWithLoss", {}), ("NLLLoss", {}), ("NLLLoss", {"reduce": "none"})])
def test_losses(ctx, rng, facts, type_name, options):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    if type_name == "NLLLoss":
        x = x - np.log(np.exp(x).sum(1, keepdims=True))
    k = rng.integers(0, 7, 5).astype(np.int32)
    layer = create(ctx, type_name, "loss", options)
    out = layer.setup([layer_check.TensorSpec(x.shape), layer_check.TensorSpec(k.shape, k.dtype)])
    dy = [np.ones(s.shape, np.float32) for s in out.outputs]
    r = run_layer(ctx, layer, [x, k], dy=dy, want_dx=[True, False])
    _finite(r)
    nll = -x[np.arange(5), k] if type_name == "NLLLoss" else \
        -(x - np.log(np.exp(x).sum(1, keepdims=True)))[np.arange(5), k]
    want = nll if options.get("reduce") == "none" else nll.mean()
    assert_close(r.y[0].ravel(), np.ravel(want), rtol=1e-4, atol=1e-5)


def test_mse_loss(ctx, rng, facts):
    x, target = (rng.standard_normal((4, 9)).astype(np.float32) for _ in range(2))
    layer = create(ctx, "MSELoss", "mse", {})
    r = run_layer(ctx, layer, [x, target], dy=[np.ones((), np.float32).reshape(
        layer.setup([layer_check.TensorSpec(x.shape)] * 2).outputs[0].shape)])
    assert_close(r.y[0].ravel(), [np.mean((x - target) ** 2)], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional, loop", [(False, None), (True, None), (True, "local"),
                                                 (False, "stream"), (False, "fused")])
def test_recurrent(ctx, rng, facts, monkeypatch, cell, bidirectional, loop):
    """A launch per step; the one-launch loop (kernels/recurrent_persistent.cl) in one
    work-group (work-groups run one at a time here) with W_hh in local memory or staged
    round by round; and the CPUs' fused step (a launch a step, the hidden product inside
    the gate kernel on 8-float vectors of units: 3 rows of a 4-row block, the forward's
    gates in two passes)."""
    from dlprim.core import recurrent as recurrent_core
    hidden = 3
    if loop == "fused":
        hidden = 8
        monkeypatch.setattr(recurrent_core, "persistent_plan", lambda *a: None)
        monkeypatch.setattr(recurrent_core, "fuses_steps", lambda c, h: True)
        monkeypatch.setattr(recurrent_core, "fused_vector", lambda c: 8)
    elif loop is not None:
        real = recurrent_core.persistent_plan

        def forced(c, cell_, n, h, g=None):
            p = real(c, cell_, n, h, 1)
            p.use_weights(loop)
            return p
        monkeypatch.setattr(recurrent_core, "persistent_plan", forced)
    opts = {"hidden_size": hidden, "num_layers": 2, "bidirectional": bidirectional}
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)  # (steps, batch, features)
    layer = create(ctx, cell, "rnn", opts)
    out = layer.setup([layer_check.TensorSpec(x.shape)]).outputs
    dy = [rng.standard_normal(s.shape).astype(np.float32) for s in out]
    _finite(run_layer(ctx, layer, [x], dy=dy, rng=rng))
    passes = [p for ps in layer.passes for p in ps]
    assert all((p.persistent is not None) == (loop not in (None, "fused")) for p in passes)
    assert all(p.fused == (loop == "fused") for p in passes)


@pytest.mark.parametrize("opts, shapes", [
    ({}, ((2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3))),
    ({"causal": True}, ((1, 2, 9, 4), (1, 2, 9, 4), (1, 2, 9, 4)))])
def test_attention(ctx, rng, facts, opts, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    layer = create(ctx, "ScaledDotProductAttention", "att", opts)
    n, h, lq, _ = shapes[0]
    dy = [rng.standard_normal((n, h, lq, shapes[2][3])).astype(np.float32)]
    _finite(run_layer(ctx, layer, xs, dy=dy, rng=rng))


@pytest.mark.cross_group_reads("attention_split_partial")
@pytest.mark.parametrize("merge", [False, True], ids=["merge-launch", "merge-in-launch"])
def test_attention_split_forward(ctx, rng, monkeypatch, merge):
    """attention_split.cl over four chunks of 16 keys (a block each), one chunk hidden
    whole by the mask (skipped), the chunks merged (by a second launch, or by the last
    work-group of each batch row: MERGE, whose reads of the other work-groups' partials
    oclgrind reports; its work items' ordering within the work-group is checked); then
    the backward on its statistics."""
    from dlprim.core import attention
    from dlprim.core.attention import AttentionOps
    monkeypatch.setattr(attention, "split_plan", lambda *a: dict(
        QR=2, LANES=8, BK=16, chunks=4, span=16))
    monkeypatch.setattr(attention, "merges_in_launch", lambda facts: merge)
    b, lq, lk, d = 2, 2, 60, 8
    op = AttentionOps(ctx, b, lq, lk, d, d, mask=True, kernels="split")
    f = lambda a: dp.Tensor.from_numpy(ctx, a.astype(np.float32))
    q, k, v = f(rng.standard_normal((b, lq, d))), f(rng.standard_normal((b, lk, d))), \
        f(rng.standard_normal((b, lk, d)))
    hidden = np.zeros((b, 1, 1, lk))
    hidden[..., 16:32] = -np.inf
    masks = dict(mask=f(hidden), mask_strides=(lk, 0, 0, 1))
    o, stats, delta = (dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, op.stats_shape),
                       dp.Tensor(ctx, (b, lq)))
    grads = [dp.Tensor(ctx, t.shape) for t in (q, k, v)]
    for launch in op.launches(q, k, v, o, stats, **masks) + \
            op.backward_launches(q, k, v, o, stats, q, *grads, delta, **masks):
        launch(ctx.queue)
    for t in [o] + grads:
        assert np.isfinite(t.to_host()).all()


def test_attention_emulated_tensor_cores(ctx, rng, monkeypatch):
    """attention_mma.cl's double-buffered blocks (three key blocks, two query blocks of one
    warp each), its lanes' exchanges and its 16-bit weights with mma.h's products in
    OpenCL C (MMA_EMULATE), causal and masked: the race checks see every stage's reuse."""
    from dlprim.core import attention
    from dlprim.core.attention import AttentionOps
    from dlprim.kernels import program
    from layer_check import host
    monkeypatch.setattr(attention, "tensor_cores", lambda ctx, precision="tf32": True)
    build = program.get
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "attention_mma" else p)))
    b, lq, lk, d = 1, 20, 40, 16
    one = dict(WARPS=1, MW=1, BQ=16, BK=16)
    half = np.dtype(np.float16)
    op = AttentionOps(ctx, b, lq, lk, d, d, causal=True, mask=True, dtype=half,
                      blocks={"forward": one, "dq": one, "dkdv": one})
    f = lambda s: dp.Tensor.from_numpy(ctx, host(rng.standard_normal(s), half))
    q, k, v, g = f((b, lq, d)), f((b, lk, d)), f((b, lk, d)), f((b, lq, d))
    mask = dp.Tensor.from_numpy(ctx, rng.standard_normal((1, 1, 1, lk)).astype(np.float32))
    masks = dict(mask=mask, mask_strides=(0, 0, 0, 1))
    o, stats, delta = (dp.Tensor(ctx, (b, lq, d), half), dp.Tensor(ctx, op.stats_shape),
                       dp.Tensor(ctx, (b, lq)))
    grads = [dp.Tensor(ctx, t.shape, half) for t in (q, k, v)]
    for launch in op.launches(q, k, v, o, stats, **masks) + \
            op.backward_launches(q, k, v, o, stats, g, *grads, delta, **masks):
        launch(ctx.queue)
    for t in [o] + grads:
        assert np.isfinite(t.numpy()).all() and np.abs(t.numpy()).sum() > 0


@pytest.mark.parametrize("kernels", ["split", "mma", "gemm"])
def test_attention_cache_positions(ctx, rng, monkeypatch, kernels):
    """A cache's positions instead of a mask: the split forward's chunks past the last
    position do nothing, the emulated tensor-core walks stop at a block's last position
    (two groups of query rows, as grouped-query heads), the CPUs' one-pass rows read only
    the cached keys; then each backward."""
    from dlprim.core import attention
    from dlprim.core.attention import AttentionOps
    from dlprim.kernels import program
    from layer_check import host
    monkeypatch.setattr(attention, "split_plan", lambda *a: dict(
        QR=2, LANES=8, BK=16, chunks=4, span=16))
    monkeypatch.setattr(attention, "tensor_cores", lambda ctx, precision="tf32": True)
    build = program.get
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "attention_mma" else p)))
    b, lk, d = 2, 60, 16
    lq, t = (32, 16) if kernels == "mma" else (2, 1)
    one = dict(WARPS=1, MW=1, BQ=16, BK=16)
    dtype = np.dtype(np.float16 if kernels == "mma" else np.float32)
    op = AttentionOps(ctx, b, lq, lk, d, d, kernels=None if kernels == "mma" else kernels,
                      dtype=dtype, positions=t,
                      blocks={p: one for p in ("forward", "dq", "dkdv")} if kernels == "mma"
                      else None)
    assert kernels != "gemm" or op.cached
    f = lambda s: dp.Tensor.from_numpy(ctx, host(rng.standard_normal(s), dtype))
    q, k, v, g = f((b, lq, d)), f((b, lk, d)), f((b, lk, d)), f((b, lq, d))
    pos = dp.Tensor.from_numpy(ctx, np.array([3, 30], np.int64))
    o, stats, delta = (dp.Tensor(ctx, (b, lq, d), dtype), dp.Tensor(ctx, op.stats_shape),
                       dp.Tensor(ctx, (b, lq)))
    grads = [dp.Tensor(ctx, x.shape, dtype) for x in (q, k, v)]
    for launch in op.launches(q, k, v, o, stats, positions=pos) + \
            op.backward_launches(q, k, v, o, stats, g, *grads, delta, positions=pos):
        launch(ctx.queue)
    for x in [o] + grads:
        assert np.isfinite(x.numpy()).all()


def test_embedding(ctx, rng, facts):
    table = rng.standard_normal((6, 5)).astype(np.float32)
    idx = np.array([[1, 5, 1], [0, 3, 2]], np.int64)
    layer = create(ctx, "Embedding", "emb", {"num_embeddings": 6, "embedding_dim": 5})
    dy = rng.standard_normal((2, 3, 5)).astype(np.float32)
    r = run_layer(ctx, layer, [idx], params=[table], dy=[dy], want_dx=[False])
    np.testing.assert_array_equal(r.y[0], table[idx])
    want = np.zeros_like(table, np.float64)
    np.add.at(want, idx.ravel(), dy.reshape(-1, 5))
    assert_close(r.dparams[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["index_select", "index_add", "gather", "scatter_add"])
def test_gather(ctx, rng, facts, kind):
    outer, n, m, inner = 2, 5, 7, 3
    ops = index_ops(ctx, np.float32, np.int64)
    if kind in ("index_select", "index_add"):
        idx = rng.integers(0, n, m)
    else:
        idx = rng.integers(0, n, (outer, m, inner))
    src_shape, dst_shape = ((outer, n, inner), (outer, m, inner)) if kind in (
        "index_select", "gather") else ((outer, m, inner), (outer, n, inner))
    src = rng.standard_normal(src_shape)
    dst0 = rng.standard_normal(dst_shape)
    dst = t(ctx, dst0)
    for launch in ops.launches(kind, t(ctx, src), t(ctx, idx, np.int64), dst, outer, n, m, inner):
        launch(ctx.queue)
    if kind == "index_select":
        want = src[:, idx, :]
    elif kind == "gather":
        want = np.take_along_axis(src, idx, 1)
    else:
        want = dst0.copy()
        if kind == "index_add":
            np.add.at(want, (slice(None), idx, slice(None)), src)
        else:
            o, _, k = np.meshgrid(np.arange(outer), np.arange(m), np.arange(inner), indexing="ij")
            np.add.at(want, (o, idx, k), src)
    assert_close(dst.numpy(), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- pointwise, reductions, copies

@pytest.mark.parametrize("a_shape, b_shape", [((2, 1, 5, 7), (2, 3, 5, 7)), ((33, 1), (1, 3))])
def test_pointwise_broadcast(ctx, rng, facts, a_shape, b_shape):
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    out = np.broadcast_shapes(a_shape, b_shape)
    y0, y1 = t(ctx, np.zeros(out)), t(ctx, np.ones(out))
    pointwise(ctx, [t(ctx, a), t(ctx, b)], [y0, y1], "y0 = x0 * w0 + x1; y1 = x0 - x1;", [1.5],
              beta=0.5)
    assert_close(y0.numpy(), a * 1.5 + b, rtol=1e-5, atol=1e-5)
    assert_close(y1.numpy(), a - b + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, y_shape", [((2, 3, 5, 7), (1, 3, 1, 1)), ((3, 70), (3, 1)),
                                            ((300,), (1,)), ((9, 65), (1, 65))])
def test_pointwise_reduce(ctx, rng, facts, shape, y_shape):
    a = rng.standard_normal(shape)
    y = t(ctx, np.ones(y_shape))
    pointwise_reduce(ctx, [t(ctx, a)], [y], "y0 = x0 * x0;", alpha=2.0, beta=0.5)
    axes = tuple(k for k, (n, m) in enumerate(zip(shape, y_shape)) if n != m)
    want = 2 * (a * a).sum(axis=axes, keepdims=True).reshape(y_shape) + 0.5
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("axes", [(0, 2), (1,)])
def test_reduce(ctx, rng, facts, op, axes):
    a = rng.standard_normal((3, 33, 5))
    r = Reduce(ctx, a.shape, axes, op)
    y = t(ctx, np.zeros(r.out_shape))
    r(t(ctx, a), y)
    assert_close(y.numpy(), getattr(np, op)(a, axis=axes), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, perm", [((31, 65), (1, 0)), ((2, 3, 33, 5), (0, 2, 3, 1)),
                                         ((2, 5, 7, 33), (0, 3, 1, 2)), ((3, 4, 5), (2, 0, 1))])
def test_transpose_copy(ctx, rng, facts, shape, perm):
    a = rng.standard_normal(shape)
    op = cp.TransposeCopy(ctx, shape, perm)
    y0 = rng.standard_normal(op.out_shape)
    y = t(ctx, y0)
    op(t(ctx, a), y, alpha=2.0, beta=-1.0)
    assert_close(y.numpy(), 2 * a.transpose(perm) - y0, rtol=1e-5, atol=1e-5)
    op(t(ctx, a), y)  # a plain copy: the register blocks where the device is a CPU
    assert_close(y.numpy(), a.astype(np.float32).transpose(perm), rtol=0, atol=0)


def test_strided_copy(ctx, rng, facts):
    dy, dx = rng.standard_normal((33, 3)), rng.standard_normal((40, 6))
    whole = t(ctx, dx)
    op = cp.StridedCopy(ctx, (33, 3), (3, 1), (6, 1))
    op(t(ctx, dy), whole.view((whole.size - 13,), offset=2 * 6 + 1), alpha=0.5, beta=1.0)
    want = dx.copy()
    want[2:35, 1:4] += 0.5 * dy
    assert_close(whole.numpy(), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- a training step

def test_lenet_training_step(ctx, rng, monkeypatch):
    """One forward, backward and SGD step of LeNet (4x4 images, batch 2), as a CPU: as a
    GPU its 32- and 64-channel convolutions take 128x128 tiles, minutes under oclgrind,
    and those kernels are checked on the small cases above."""
    monkeypatch.setattr(ctx.facts, "is_gpu", False)
    net = dp.Net(ctx, models.lenet(batch=2, image_size=4), seed=0)
    solver = solvers.SGD(net, lr=0.1, momentum=0.9)
    before = net.param_arena.numpy()
    out = net(data=rng.standard_normal((2, 1, 4, 4)).astype(np.float32),
              label=np.array([3, 7], np.int32))
    assert np.isfinite(out["loss"]).all()
    net.backward()
    solver.step(net)
    after = net.param_arena.numpy()
    assert np.isfinite(after).all() and not np.array_equal(before, after)


# ---------------------------------------------------------------- a decoder's step

@pytest.mark.parametrize("family,weights,blocks", [("llama", "float32", 2),
                                                   ("gpt2", "float32", 1), ("llama", "q4", 1)])
def test_decoder_blocks_in_one_launch(ctx, rng, family, weights, blocks):
    """kernels/decoder_layer.cl as one work-group (its grid barriers work-group barriers):
    each phase's local memory written and read across the barriers between them and
    between two blocks, against decoder_block_check's float64 blocks (Llama's family and
    GPT-2's; 4-bit weights' rows read 4 bytes a load)."""
    import decoder_block_check
    decoder_block_check.check_block(ctx, rng, family, weights, blocks)


@pytest.mark.parametrize("weights", ["float32", "int8", "float16"])
def test_few_rows_gemm(ctx, rng, facts, weights):
    """kernels/gemv.cl (GPU teams, or the CPU variant for int8): K past the float4 steps;
    float16 rows eight values a load, two turns of steps and a tail step."""
    from dlprim.core.quantize import quantize_rows
    M, N, K = 3, 7, 1032 if weights == "float16" else 37
    a, w = rng.standard_normal((M, K)), rng.standard_normal((N, K)).astype(np.float32)
    bias = rng.standard_normal(N)
    C = t(ctx, np.zeros((M, N)))
    if weights == "int8":
        q, scale = quantize_rows(w)
        op = Gemm(ctx, M, N, K, trans_b=True, bias="col", dtypes=(np.float32, np.int8,
                                                                np.float32), b_scale=True)
        op(t(ctx, a), dp.Tensor.from_numpy(ctx, q), C, bias=t(ctx, bias), b_scale=t(ctx, scale))
        w = q * scale[:, None]
    elif weights == "float16":
        h = np.float16
        a, w = a.astype(h).astype(np.float64), w.astype(h).astype(np.float64)
        op = Gemm(ctx, M, N, K, trans_b=True, bias="col", dtypes=(h, h, np.float32))
        op(dp.Tensor.from_numpy(ctx, a.astype(h)), dp.Tensor.from_numpy(ctx, w.astype(h)), C,
           bias=t(ctx, bias))
    else:
        Gemm(ctx, M, N, K, trans_b=True, bias="col")(t(ctx, a), t(ctx, w), C, bias=t(ctx, bias))
    assert_close(C.numpy(), a @ w.T + bias, rtol=1e-4, atol=1e-4)


def test_q4_weights(ctx, rng, facts):
    from dlprim.core.quantize import Dequantize, dequantize_q4, quantize_q4
    M, N, K = 2, 5, 45
    q, scale = quantize_q4(rng.standard_normal((N, K)).astype(np.float32))
    w = dequantize_q4(q, scale, K)
    x = rng.standard_normal((M, K))
    Q, S = dp.Tensor.from_numpy(ctx, q), t(ctx, scale)
    y = t(ctx, np.zeros((M, N)))
    Gemm(ctx, M, N, K, trans_b=True, dtypes=(np.float32, np.uint8, np.float32),
         b_scale=True)(t(ctx, x), Q, y, b_scale=S)
    assert_close(y.numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
    out = t(ctx, np.zeros((N, K)))
    for launch in Dequantize(ctx, N, K, "q4").launches(Q, S, out):
        launch(ctx.queue)
    assert_close(out.numpy(), w, rtol=0, atol=0)


def test_token_sampler(ctx, rng, facts):
    from dlprim.core.sampling import TokenSampler
    rows, vocab = 2, 37
    logits = t(ctx, rng.standard_normal((rows, vocab)))
    s = TokenSampler(ctx, rows, vocab)
    s.configure(temperature=[0.8, 0.0], top_k=5, top_p=0.9, penalty=1.2, seed=3)
    s.start(np.array([[1, 2], [3, 4]]), lengths=[2, 1])
    got = s.next(logits).to_host()
    assert 0 <= got[0] < vocab and 0 <= got[1] < vocab


def test_rotary(ctx, rng, facts):
    from dlprim.core.rotary import RotaryOps
    n, h, tokens, d = 2, 3, 5, 6
    x = rng.standard_normal((n, tokens, h, d))
    cos, sin = rng.standard_normal((2, 1, tokens, d))
    y = t(ctx, np.zeros((n, h, tokens, d)))
    for launch in RotaryOps(ctx, (n, h, tokens, d), np.float32, np.float32, 1,
                            seq_first=True).launches(t(ctx, x), t(ctx, cos), t(ctx, sin), y):
        launch(ctx.queue)
    xh = x.transpose(0, 2, 1, 3)
    swap = np.concatenate([xh[..., 3:], xh[..., :3]], -1)
    assert_close(y.numpy(), xh * cos + swap * sin, rtol=1e-5, atol=1e-5)


def test_kv_cache(ctx, rng, facts):
    """kernels/kv_cache.cl: a packed projection's rows written into nlhd caches, the caches
    read out, the queries split off and the mask, in one launch."""
    from dlprim.core.kv_cache import KVCacheOps
    n, h, tokens, length, d = 2, 3, 2, 5, 4
    ops = KVCacheOps(ctx, n, h, tokens, length, np.float32, np.int64, True, nlhd=True)
    qkv = rng.standard_normal((n, tokens, 3, h, d)).astype(np.float32)
    packed = t(ctx, qkv)
    k, v = (dp.Tensor(ctx, (n, tokens, h, d), np.float32, buffer=packed.buffer,
                      offset=packed.offset + part * h * d) for part in (1, 2))
    keys, values = t(ctx, np.zeros((n, length, h, d))), t(ctx, np.zeros((n, length, h, d)))
    outs = t(ctx, np.zeros((n, length, h, d))), t(ctx, np.zeros((n, length, h, d)))
    queries, mask = t(ctx, np.zeros((n, tokens, h, d))), t(ctx, np.zeros((n, 1, tokens, length)))
    pos = dp.Tensor.from_numpy(ctx, np.array([1, 4], np.int64))  # sample 1 overflows
    for launch in ops.update(k, v, pos, keys, values, outs[0], outs[1], "packed", "packed",
                             queries=queries, mask=mask):
        launch(ctx.queue)
    want_k, want_v = np.zeros((n, length, h, d)), np.zeros((n, length, h, d))
    want_k[0, 1:3], want_v[0, 1:3] = qkv[0, :, 1], qkv[0, :, 2]
    assert_close(outs[0].numpy(), want_k, rtol=0, atol=0)
    assert_close(outs[1].numpy(), want_v, rtol=0, atol=0)
    assert_close(keys.numpy(), want_k, rtol=0, atol=0)
    assert_close(queries.numpy(), qkv[:, :, 0], rtol=0, atol=0)
    assert np.isnan(mask.numpy()[1]).all() and np.isfinite(mask.numpy()[0, 0, 1, :3]).all()


def test_kv_cache_rotary(ctx, rng, facts):
    """kernels/kv_cache.cl with ROTARY: grouped-query projection (4 query heads, 2 key and
    value heads), the queries and the new keys rotated by per-sample tables."""
    from dlprim.core.kv_cache import KVCacheOps
    n, qh, h, tokens, length, d = 2, 4, 2, 3, 5, 4
    ops = KVCacheOps(ctx, n, h, tokens, length, np.float32, np.int64, False,
                     table_dtype=np.float32)
    proj = rng.standard_normal((n, tokens, qh + 2 * h, d)).astype(np.float32)
    cos, sin = (rng.standard_normal((n, tokens, d)).astype(np.float32) for _ in range(2))
    packed = t(ctx, proj)
    k, v = (dp.Tensor(ctx, (n, tokens, h, d), np.float32, buffer=packed.buffer,
                      offset=packed.offset + start * d) for start in (qh, qh + h))
    keys, values = t(ctx, np.zeros((n, h, length, d))), t(ctx, np.zeros((n, h, length, d)))
    outs = t(ctx, np.zeros((n, h, length, d))), t(ctx, np.zeros((n, h, length, d)))
    queries = t(ctx, np.zeros((n, qh, tokens, d)))
    pos = dp.Tensor.from_numpy(ctx, np.array([1], np.int64))
    for launch in ops.update(k, v, pos, keys, values, outs[0], outs[1], "packed", "packed",
                             queries=queries, tables=(t(ctx, cos), t(ctx, sin))):
        launch(ctx.queue)

    def rotated(x):  # x (n, tokens, heads, d) -> (n, heads, tokens, d)
        swap = np.concatenate([x[..., d // 2:], x[..., :d // 2]], -1)
        return (x * cos[:, :, None] + swap * sin[:, :, None]).transpose(0, 2, 1, 3)
    want_k, want_v = np.zeros((n, h, length, d)), np.zeros((n, h, length, d))
    want_k[:, :, 1:4] = rotated(proj[:, :, qh:qh + h])
    want_v[:, :, 1:4] = proj[:, :, qh + h:].transpose(0, 2, 1, 3)
    assert_close(queries.numpy(), rotated(proj[:, :, :qh]), rtol=1e-5, atol=1e-5)
    assert_close(outs[0].numpy(), want_k, rtol=1e-5, atol=1e-5)
    assert_close(keys.numpy(), want_k, rtol=1e-5, atol=1e-5)
    assert_close(outs[1].numpy(), want_v, rtol=0, atol=0)


def test_int8_table_rows(ctx, rng, facts):
    """kernels/gather.cl index_select_scaled: int8 rows times their scales, NaN for an
    index outside the table."""
    from dlprim.core.gather import index_ops
    from dlprim.core.quantize import quantize_rows
    rows, dim = 9, 7
    q, scale = quantize_rows(rng.standard_normal((rows, dim)).astype(np.float32))
    ids = np.array([3, 0, 8, 9], np.int64)
    out = t(ctx, np.zeros((4, dim)))
    for launch in index_ops(ctx, np.int8, np.int64).select_scaled(
            dp.Tensor.from_numpy(ctx, q), t(ctx, scale), dp.Tensor.from_numpy(ctx, ids), out,
            rows, 4, dim):
        launch(ctx.queue)
    got = out.numpy()
    assert_close(got[:3], q[ids[:3]] * scale[ids[:3], None], rtol=1e-6, atol=0)
    assert np.isnan(got[3]).all()


def test_ctc(ctx, rng):
    # the alpha and beta recursions (a barrier between steps of one work-group) and the
    # gradient rows, against test_ctc's float64 reference
    from test_ctc import reference, run
    T, C = 5, 4
    targets, lengths = [[1, 2], [3, 3], []], [5, 4, 2]
    x = rng.standard_normal((T, len(targets), C))
    lp = x - np.log(np.exp(x).sum(axis=2, keepdims=True))
    want_nll, want_grad = reference(lp, targets, lengths, blank=0)
    nll, grad = run(ctx, lp, targets, lengths, 0, np.float32, np.ones(len(targets)))
    assert_close(nll, want_nll, rtol=2e-5, atol=2e-5)
    assert_close(grad, want_grad, rtol=2e-5, atol=2e-5)
