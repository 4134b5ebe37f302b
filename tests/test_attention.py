"""Fused attention (core/attention.py) against a float64 numpy reference, forward and
backward, at sizes that cross the row tiles: causal, an additive mask that broadcasts
over heads and queries, a query row masked whole, and different q/k and v widths."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.core.attention import AttentionOps
from dlprim.dtypes import bfloat16
from layer_check import assert_close, host, stored


def probabilities(q, k, scale, mask=None, causal=False):
    """softmax(scale q k^T + mask) in float64; a row with every key masked is zeros."""
    s = scale * q @ k.transpose(0, 2, 1)
    if mask is not None:
        s = s + mask
    if causal:
        s = np.where(np.triu(np.ones(s.shape[1:], bool), 1), -np.inf, s)
    m = s.max(-1, keepdims=True)
    live = np.isfinite(m)
    e = np.where(live, np.exp(s - np.where(live, m, 0)), 0)
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0)


def gradients(q, k, v, p, scale, g):
    """(dq, dk, dv) in float64 for the output gradient g, p the probabilities."""
    dp_ = g @ v.transpose(0, 2, 1)
    ds = p * (dp_ - (dp_ * p).sum(-1, keepdims=True))
    return scale * ds @ k, scale * ds.transpose(0, 2, 1) @ q, p.transpose(0, 2, 1) @ g


def reference(q, k, v, scale, mask=None, causal=False):
    """(o, g, dq, dk, dv) in float64 for the gradient g = the fixed pattern below."""
    p = probabilities(q, k, scale, mask, causal)
    o = p @ v
    g = np.cos(np.arange(o.size)).reshape(o.shape)
    return (o, g) + gradients(q, k, v, p, scale, g)


ROWS_CASES = [(2, 1, 70, 45, 8, 5, False, False),
              (6, 3, 37, 37, 16, 16, True, False),
              (4, 2, 19, 70, 4, 7, False, True),
              (4, 2, 33, 33, 8, 8, True, True)]
# the tiled kernels' blocks are 16 to 64 rows: lengths that end mid-block, a causal
# diagonal through the blocks, widths 4 (TX = 4) and 32
TILES_CASES = [(2, 1, 70, 45, 8, 8, False, False),
               (6, 3, 37, 37, 16, 16, True, False),
               (4, 2, 19, 70, 4, 8, False, True),
               (4, 2, 33, 33, 8, 8, True, True),
               (2, 2, 100, 65, 32, 32, True, False)]


@pytest.mark.parametrize("kernels,b,heads,lq,lk,d,dv,causal,masked",
                         [("rows",) + c for c in ROWS_CASES]
                         + [("tiles",) + c for c in TILES_CASES]
                         + [("gemm",) + c for c in ROWS_CASES])
def test_attention_matches_float64(ctx, rng, kernels, b, heads, lq, lk, d, dv, causal, masked):
    q = rng.standard_normal((b, lq, d))
    k = rng.standard_normal((b, lk, d))
    v = rng.standard_normal((b, lk, dv))
    scale = 1 / np.sqrt(d)
    mask4 = mask_t = strides = None
    if masked:
        # (batch, 1, 1, lk): broadcast over heads and queries; sample 0 masks every key,
        # so with 'causal' its rows are masked whole
        n = b // heads
        mask4 = np.where(rng.random((n, 1, 1, lk)) < 0.3, -np.inf, rng.standard_normal((n, 1, 1, lk)))
        mask4[0] = -np.inf
        mask_t = dp.Tensor.from_numpy(ctx, mask4.astype(np.float32))
        strides = (lk, 0, 0, 1)
    mask_full = None if mask4 is None else np.repeat(
        np.broadcast_to(mask4, (b // heads, heads, lq, lk)).reshape(b, lq, lk), 1, 0)
    op = AttentionOps(ctx, b, lq, lk, d, dv, heads=heads, causal=causal, mask=masked,
                      kernels=kernels)
    assert op.kernels == kernels
    _matches(ctx, op, q, k, v, mask_t, strides, reference(q, k, v, scale, mask_full, causal))


def _matches(ctx, op, q, k, v, mask, strides, refs):
    """``op``'s forward and backward over float32 copies of q, k, v (the mask a dlprim
    Tensor read with ``strides``) against ``reference``'s (o, g, dq, dk, dv)."""
    o_ref, g = refs[:2]
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))
    tq, tk, tv = f(q), f(k), f(v)
    b, lq = q.shape[:2]
    o, stats = dp.Tensor(ctx, o_ref.shape), dp.Tensor(ctx, op.stats_shape)
    for launch in op.launches(tq, tk, tv, o, stats, mask=mask, mask_strides=strides):
        launch(ctx.queue)
    np.testing.assert_allclose(o.to_host(), o_ref, rtol=1e-4, atol=1e-5)
    grads = [dp.Tensor(ctx, a.shape) for a in (q, k, v)]
    delta = dp.Tensor(ctx, (b, lq))
    for launch in op.backward_launches(tq, tk, tv, o, stats, f(g), *grads, delta, mask=mask,
                                       mask_strides=strides):
        launch(ctx.queue)
    for got, want, what in zip(grads, refs[2:], ("dq", "dk", "dv")):
        np.testing.assert_allclose(got.to_host(), want, rtol=1e-4, atol=1e-4, err_msg=what)


def _run_layout(ctx, op, q, k, v, g, mask, strides, seed):
    """o, dq, dk, dv of ``op`` on float32 copies of the arrays as its layout stores them
    (q, k, v, g in (N, H, L, D) order here), returned in (N, H, L, D) order; stored as
    the op stores them."""
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(host(a, op.dtype)))
    n, h, lq, lk, d, dv = q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    to = (lambda a: a.reshape(n * h, *a.shape[2:])) if op.layout == "nhld" else \
        (lambda a: a.transpose(0, 2, 1, 3))
    back = (lambda a: a.reshape(n, h, *a.shape[1:])) if op.layout == "nhld" else \
        (lambda a: a.transpose(0, 2, 1, 3))
    stat = (n * h, lq) if op.layout == "nhld" else (n, lq, h)
    assert op.stats_shape == stat + (2,)
    o, stats, delta = (dp.Tensor(ctx, to(g).shape, op.dtype), dp.Tensor(ctx, stat + (2,)),
                       dp.Tensor(ctx, stat))
    if op.layout == "packed":
        qkv = f(np.stack([to(q), to(k), to(v)], axis=2))
        ins, grads = (qkv, None, None), [dp.Tensor(ctx, qkv.shape, op.dtype), None, None]
    else:
        ins = (f(to(q)), f(to(k)), f(to(v)))
        grads = [dp.Tensor(ctx, to(a).shape, op.dtype) for a in (q, k, v)]
    for launch in op.launches(*ins, o, stats, mask=mask, mask_strides=strides, seed=seed):
        launch(ctx.queue)
    for launch in op.backward_launches(*ins, o, stats, f(to(g)), *grads, delta, mask=mask,
                                       mask_strides=strides, seed=seed):
        launch(ctx.queue)
    if op.layout == "packed":
        dqkv = grads[0].numpy()
        return [back(o.numpy())] + [back(dqkv[:, :, j]) for j in range(3)]
    return [back(t.numpy()) for t in [o] + grads]


@pytest.mark.parametrize("kernels", ["rows", "tiles", "gemm"])
@pytest.mark.parametrize("layout", ["nlhd", "packed"])
@pytest.mark.parametrize("n, h", [(2, 3), (3, 1)])
def test_layouts_match_nhld(ctx, rng, kernels, layout, n, h):
    # the heads side by side (nlhd) or q, k, v interleaved (packed) give what the (N, H,
    # L, D) layout gives, with a mask over (batch, key), causal and dropout
    lq, d = 37, 8
    lk, dv = (lq, d) if layout == "packed" else (45, 4)
    q, k, v = (rng.standard_normal(s) for s in ((n, h, lq, d), (n, h, lk, d), (n, h, lk, dv)))
    g = rng.standard_normal((n, h, lq, dv))
    mask = np.where(rng.random((n, 1, 1, lk)) < 0.3, -np.inf, 0.0)
    mask_t = dp.Tensor.from_numpy(ctx, mask.astype(np.float32))
    kinds = dict(heads=h, causal=True, mask=True, dropout=0.25, kernels=kernels)
    want = _run_layout(ctx, AttentionOps(ctx, n * h, lq, lk, d, dv, **kinds), q, k, v, g,
                       mask_t, (lk, 0, 0, 1), 7)
    op = AttentionOps(ctx, n * h, lq, lk, d, dv, layout=layout, **kinds)
    assert op.kernels == kernels
    got = _run_layout(ctx, op, q, k, v, g, mask_t, (lk, 0, 0, 1), 7)
    for a, b, what in zip(got, want, ("o", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=what)
    assert np.abs(want[0]).sum() > 0 and np.abs(want[3]).sum() > 0


def test_layout_errors(ctx):
    with pytest.raises(ValueError, match="layout must be one of nhld, nlhd, packed"):
        AttentionOps(ctx, 2, 4, 4, 8, 8, layout="nchw")
    with pytest.raises(ValueError, match="packed layout is self-attention"):
        AttentionOps(ctx, 2, 4, 5, 8, 8, heads=2, layout="packed")
    op = AttentionOps(ctx, 4, 5, 5, 8, 8, heads=2, layout="packed")
    qkv, o = dp.Tensor(ctx, (2, 5, 3, 2, 8)), dp.Tensor(ctx, (2, 5, 2, 8))
    with pytest.raises(ValueError, match="as one tensor"):
        op.launches(qkv, qkv, None, o, dp.Tensor(ctx, (2, 5, 2, 2)))
    with pytest.raises(ValueError, match="stats"):
        op.launches(qkv, None, None, o, dp.Tensor(ctx, (4, 5, 2)))
    with pytest.raises(ValueError, match="q is"):
        op.launches(dp.Tensor(ctx, (2, 5, 2, 8)), None, None, o, dp.Tensor(ctx, (2, 5, 2, 2)))


def test_finite_differences(ctx, rng):
    """The backward kernels' dq against central differences of the forward kernel."""
    b, lq, lk, d = 1, 5, 6, 3
    q, k, v = (rng.standard_normal(s) for s in ((b, lq, d), (b, lk, d), (b, lk, d)))
    g = rng.standard_normal((b, lq, d))
    op = AttentionOps(ctx, b, lq, lk, d, d)
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))

    def loss(qq):
        o, stats = dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, (b, lq, 2))
        for launch in op.launches(f(qq), f(k), f(v), o, stats):
            launch(ctx.queue)
        return float((o.to_host().astype(np.float64) * g).sum()), o, stats
    _, o, stats = loss(q)
    grads = [dp.Tensor(ctx, s) for s in ((b, lq, d), (b, lk, d), (b, lk, d))]
    for launch in op.backward_launches(f(q), f(k), f(v), o, stats, f(g), *grads,
                                       dp.Tensor(ctx, (b, lq))):
        launch(ctx.queue)
    dq = grads[0].to_host()
    eps = 1e-2
    for idx in [(0, 0, 0), (0, 3, 2), (0, 4, 1)]:
        up, down = q.copy(), q.copy()
        up[idx] += eps
        down[idx] -= eps
        numeric = (loss(up)[0] - loss(down)[0]) / (2 * eps)
        assert abs(numeric - dq[idx]) < 2e-3 * max(1, abs(numeric)), (idx, numeric, dq[idx])


def test_bad_shapes_are_errors(ctx):
    op = AttentionOps(ctx, 2, 4, 4, 8, 8)
    t = dp.Tensor(ctx, (2, 4, 8))
    with pytest.raises(ValueError, match="stats"):
        op.launches(t, t, t, t, dp.Tensor(ctx, (2, 4)))  # one float a row: (m, log l) is two
    with pytest.raises(ValueError, match="heads"):
        AttentionOps(ctx, 3, 4, 4, 8, 8, heads=2)
    with pytest.raises(ValueError, match="mask"):
        AttentionOps(ctx, 2, 4, 4, 8, 8, mask=True).launches(t, t, t, t, dp.Tensor(ctx, (2, 4, 2)))
    with pytest.raises(ValueError, match="multiples of 4"):
        AttentionOps(ctx, 2, 4, 4, 8, 5, kernels="tiles")
    with pytest.raises(ValueError, match="kernels must be"):
        AttentionOps(ctx, 2, 4, 4, 8, 8, kernels="blocks")


def test_given_blocks_match_float64_and_bad_ones_are_named(ctx, rng):
    """Blocks given per pass (what benchmarks/attention_blocks.py times) replace the
    table's for that pass only and compute the same; blocks the kernels cannot take are
    a ValueError naming the pass."""
    b, lq, d = 2, 150, 8
    q, k, v = (rng.standard_normal((b, lq, d)) for _ in range(3))
    # (8 x 8 items: Intel's CPU runtime refuses some smaller work-groups of these kernels;
    # the forward's and dK/dV's own blocks larger than the table's, so that kernels built
    # with the table's would leave rows of a launch sized by the given ones undone)
    given = {"dkdv": dict(BQ=16, BK=64, TX=8, TY=8), "dq": dict(BQ=32, BK=16, TX=8, TY=8),
             "forward": dict(BQ=128, BK=32, TX=8, TY=8)}
    op = AttentionOps(ctx, b, lq, lq, d, d, causal=True, kernels="tiles", blocks=given)
    table = AttentionOps(ctx, b, lq, lq, d, d, causal=True, kernels="tiles")
    assert op.blocks == dict(table.blocks, **given) and op.blocks != table.blocks
    _matches(ctx, op, q, k, v, None, None, reference(q, k, v, 1 / np.sqrt(d), None, True))
    for bad in ({"dq": dict(BQ=20, BK=32, TX=8, TY=4)}, {"dq": dict(BQ=32, BK=32, TX=16, TY=4)},
                {"backward": dict(BQ=32, BK=32, TX=8, TY=4)}, {"dq": dict(BQ=32)}):
        with pytest.raises(ValueError, match="blocks"):
            AttentionOps(ctx, b, lq, lq, d, d, kernels="tiles", blocks=bad)


def test_kernels_follow_the_device(ctx):
    """Tiles where the widths allow and the device is a GPU; on CPUs the gemm kernels in
    any storage (any layout, dropout too) while the scores stay within their bound, else rows;
    the blocks fit a GPU's 48 KiB of local memory up to width 128."""
    from dlprim.core import attention
    from dlprim.core.attention import tile_blocks
    cpu = ctx.facts.is_cpu
    assert AttentionOps(ctx, 2, 4, 4, 64, 64).kernels == ("gemm" if cpu else "tiles")
    assert AttentionOps(ctx, 2, 4, 4, 6, 6).kernels == ("gemm" if cpu else "rows")
    if cpu:
        assert AttentionOps(ctx, 2, 4, 4, 8, 8, dropout=0.1).kernels == "gemm"
        for layout in ("nlhd", "packed"):
            assert AttentionOps(ctx, 2, 4, 4, 8, 8, layout=layout, heads=2).kernels == "gemm"
        assert AttentionOps(ctx, 2, 4, 4, 8, 8, dtype=np.float16).kernels == "gemm"
        rows = attention.GEMM_SCORES_MAX_BYTES // (4 * 64 * 64) + 1  # one row too many
        assert AttentionOps(ctx, rows, 64, 64, 8, 8).kernels == "rows"
    else:
        with pytest.raises(ValueError, match="gemm kernels take"):
            AttentionOps(ctx, 2, 4, 4, 8, 8, dtype=np.float16, kernels="gemm")

    class Gpu:
        local_mem, max_work_group = 49152, 1024
    for d in (4, 8, 32, 64, 80, 128):
        blocks = tile_blocks(Gpu, d, d)
        assert set(blocks) == {"forward", "dq", "dkdv"}, d
        for b in blocks.values():
            assert d % b["TX"] == 0 and b["BQ"] % b["TY"] == 0 and b["BK"] % b["TX"] == 0
    assert tile_blocks(Gpu, 6, 6) is None and tile_blocks(Gpu, 512, 512) is None


# ----- the ScaledDotProductAttention layer
@pytest.mark.parametrize("shape,opts,mask_shape", [
    (((2, 3, 21, 8), (2, 3, 70, 8), (2, 3, 70, 5)), {}, None),
    (((1, 2, 33, 4), (1, 2, 33, 4), (1, 2, 33, 4)), {"causal": True, "scale": 0.7}, None),
    (((2, 2, 9, 4), (2, 2, 12, 4), (2, 2, 12, 6)), {}, (2, 1, 1, 12))])
def test_layer_matches_float64(ctx, rng, shape, opts, mask_shape):
    from dlprim.layers import create
    from layer_check import assert_close, run_layer
    (n, h, lq, d), (_, _, lk, _), (_, _, _, dv) = shape
    xs = [rng.standard_normal(s).astype(np.float32) for s in shape]
    mask = None
    if mask_shape:
        mask = np.where(rng.random(mask_shape) < 0.3, -np.inf, rng.standard_normal(mask_shape))
        xs.append(mask.astype(np.float32))
    layer = create(ctx, "ScaledDotProductAttention", "att", opts)
    dy = rng.standard_normal((n, h, lq, dv)).astype(np.float32)
    scale = opts.get("scale", 1 / np.sqrt(d))
    flat = [x.astype(np.float64).reshape((n * h,) + x.shape[2:]) for x in xs[:3]]
    full = None if mask is None else np.broadcast_to(mask, (n, h, lq, lk)).reshape(n * h, lq, lk)
    for acc in (False, True):
        r = run_layer(ctx, layer, xs, dy=[dy], accumulate=acc,
                      want_dx=[True, True, True] + [False] * (mask is not None))
        o, _, _, _, _ = reference(*flat, scale, full, opts.get("causal", False))
        assert_close(r.y[0], o.reshape(n, h, lq, dv), rtol=1e-4, atol=1e-5, what="y")
        # the reference's gradient pattern differs from dy: check against autograd-free math
        p_grads = _grads_for(flat, scale, full, opts.get("causal", False),
                             dy.astype(np.float64).reshape(n * h, lq, dv))
        for got, want, s in zip(r.dx[:3], p_grads, shape):
            assert_close(got, want.reshape(s), rtol=1e-3, atol=1e-4, what="dx")


@pytest.mark.parametrize("layout", ["nlhd", "packed"])
def test_layer_layouts(ctx, rng, layout):
    # the same attention read in place from the heads side by side or from packed q, k, v
    from dlprim.layers import TensorSpec, create
    from layer_check import assert_close, run_layer
    n, h, length, d = 2, 2, 21, 8
    qkv = [rng.standard_normal((n, h, length, d)).astype(np.float32) for _ in range(3)]
    mask = np.where(rng.random((n, 1, 1, length)) < 0.3, -np.inf, 0.0).astype(np.float32)
    dy = rng.standard_normal((n, h, length, d)).astype(np.float32)
    nlhd = lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))
    xs = [nlhd(a) for a in qkv] if layout == "nlhd" else [np.stack([nlhd(a) for a in qkv], 2)]
    layer = create(ctx, "ScaledDotProductAttention", "att", {"layout": layout, "causal": True})
    flat = [a.astype(np.float64).reshape(n * h, length, d) for a in qkv]
    full = np.broadcast_to(mask, (n, h, length, length)).reshape(n * h, length, length)
    o = reference(*flat, 1 / np.sqrt(d), full, True)[0].reshape(n, h, length, d)
    grads = [g.reshape(n, h, length, d) for g in _grads_for(
        flat, 1 / np.sqrt(d), full, True, dy.astype(np.float64).reshape(n * h, length, d))]
    for acc in (False, True):
        r = run_layer(ctx, layer, xs + [mask], dy=[nlhd(dy)], accumulate=acc,
                      want_dx=[True] * len(xs) + [False])
        assert layer.flags.no_grad_inputs == (len(xs),)
        assert r.y[0].shape == (n, length, h, d)
        assert_close(r.y[0], nlhd(o), rtol=1e-4, atol=1e-5, what="y")
        got = r.dx[:3] if layout == "nlhd" else [r.dx[0][:, :, j] for j in range(3)]
        for a, want in zip(got, grads):
            assert_close(a, nlhd(want), rtol=1e-3, atol=1e-4, what="dx")
    with pytest.raises(Exception, match="packed layout's qkv must be"):
        create(ctx, "ScaledDotProductAttention", "att", {"layout": "packed"}).setup(
            [TensorSpec((n, length, 2, h, d))])
    with pytest.raises(Exception, match="option 'layout' must be one of"):
        create(ctx, "ScaledDotProductAttention", "att", {"layout": "nchw"})


def _grads_for(flat, scale, mask, causal, g):
    q, k, v = flat
    return gradients(q, k, v, probabilities(q, k, scale, mask, causal), scale, g)


def test_layer_errors(ctx):
    from dlprim.layers import LayerError, TensorSpec, create
    with pytest.raises(LayerError, match="'dropout' must be a probability in"):
        create(ctx, "ScaledDotProductAttention", "att", {"dropout": 1.0})
    with pytest.raises(LayerError, match="'seed' must be an int"):
        create(ctx, "ScaledDotProductAttention", "att", {"dropout": 0.1, "seed": -1})
    layer = create(ctx, "ScaledDotProductAttention", "att", {})
    with pytest.raises(LayerError, match="shapes do not fit"):
        layer.setup([TensorSpec((1, 2, 3, 4)), TensorSpec((1, 2, 5, 3)), TensorSpec((1, 2, 5, 4))])
    with pytest.raises(LayerError, match="does not broadcast"):
        layer.setup([TensorSpec((1, 2, 3, 4)), TensorSpec((1, 2, 5, 4)), TensorSpec((1, 2, 5, 4)),
                     TensorSpec((2, 1, 1, 5))])


# ----- dropout of the attention weights
def dropout_reference(q, k, v, scale, keep, g, causal=False):
    """(o, dq, dk, dv) in float64 with weights p * keep (keep: 0 or 1 / (1 - p))."""
    p = probabilities(q, k, scale, None, causal)
    z = p * keep
    dp_ = (g @ v.transpose(0, 2, 1)) * keep
    ds = p * (dp_ - (dp_ * p).sum(-1, keepdims=True))
    return z @ v, scale * ds @ k, scale * ds.transpose(0, 2, 1) @ q, z.transpose(0, 2, 1) @ g


def _run(ctx, op, q, k, v, g, seed, offset):
    """o, dq, dk, dv of ``op`` on q, k, v and dO = g stored as the op stores them."""
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(host(a, op.dtype)))
    b, lq, lk = op.batch, op.lq, op.lk
    tq, tk, tv = f(q), f(k), f(v)
    o, stats = dp.Tensor(ctx, (b, lq, op.dv), op.dtype), dp.Tensor(ctx, (b, lq, 2))
    for launch in op.launches(tq, tk, tv, o, stats, seed=seed, offset=offset):
        launch(ctx.queue)
    grads = [dp.Tensor(ctx, s, op.dtype) for s in ((b, lq, op.d), (b, lk, op.d), (b, lk, op.dv))]
    for launch in op.backward_launches(tq, tk, tv, o, stats, f(g), *grads, dp.Tensor(ctx, (b, lq)),
                                       seed=seed, offset=offset):
        launch(ctx.queue)
    return [o.numpy()] + [t.numpy() for t in grads]


def keep_factors(ctx, b, lq, lk, p, seed, offset):
    """The dropout factors the kernels use at (seed, offset), read out through the
    forward pass itself: with q = k = 0 every weight is 1 / S, and v = I puts weight
    (i, j) times its factor at o[i, j]."""
    op = AttentionOps(ctx, b, lq, lk, 1, lk, dropout=p, kernels="rows")
    zero = np.zeros((b, lq, 1))
    v = np.broadcast_to(np.eye(lk), (b, lk, lk))
    o = _run(ctx, op, zero, np.zeros((b, lk, 1)), v, np.zeros((b, lq, lk)), seed, offset)[0]
    return o.astype(np.float64) * lk


@pytest.mark.parametrize("causal,kernels", [(False, "rows"), (True, "rows"),
                                            (False, "tiles"), (True, "tiles"),
                                            (False, "gemm"), (True, "gemm")])
def test_dropout_matches_float64_with_its_mask(ctx, rng, causal, kernels):
    """Both kernel families drop the weights that keep_factors reads out (through the
    row kernels), so their masks agree."""
    b, lq, lk, d, p = 3, 37, 70, 8, 0.3
    dv = 5 if kernels == "rows" else 8
    keep = keep_factors(ctx, b, lq, lk, p, seed=11, offset=5)
    kept = keep > 0
    np.testing.assert_allclose(keep[kept], 1 / (1 - p), rtol=1e-5)
    assert abs((~kept).mean() - p) < 0.03, (~kept).mean()   # 7770 draws: 4.5 sigma
    q, k, v = (rng.standard_normal(s) for s in ((b, lq, d), (b, lk, d), (b, lk, dv)))
    g = rng.standard_normal((b, lq, dv))
    op = AttentionOps(ctx, b, lq, lk, d, dv, causal=causal, dropout=p, kernels=kernels)
    got = _run(ctx, op, q, k, v, g, seed=11, offset=5)
    want = dropout_reference(q, k, v, 1 / np.sqrt(d), np.where(kept, 1 / (1 - p), 0), g, causal)
    for a, w, what in zip(got, want, ("o", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-4, err_msg=what)
    # another offset or seed is another mask; the same is the same
    again = keep_factors(ctx, b, lq, lk, p, seed=11, offset=5)
    np.testing.assert_array_equal(again, keep)
    assert (keep_factors(ctx, b, lq, lk, p, seed=11, offset=6) != keep).any()
    assert (keep_factors(ctx, b, lq, lk, p, seed=12, offset=5) != keep).any()


def test_dropout_layer_trains_and_predicts_without(ctx, rng):
    """Train mode drops (a new mask each step, backward with the forward's, also when
    adding to gradients); predict mode is plain attention."""
    from dlprim.layers import create
    from layer_check import run_layer
    n, h, lq, d = 2, 2, 9, 4
    xs = [rng.standard_normal((n, h, lq, d)).astype(np.float32) for _ in range(3)]
    dy = rng.standard_normal((n, h, lq, d)).astype(np.float32)
    flat = [x.astype(np.float64).reshape(n * h, lq, d) for x in xs]
    layer = create(ctx, "ScaledDotProductAttention", "att", {"dropout": 0.5, "seed": 3})
    outs = []
    for step, acc in enumerate((False, True)):
        r = run_layer(ctx, layer, xs, dy=[dy], accumulate=acc)
        assert layer.mask_offset == step * layer.train_ops.counters()
        keep = keep_factors(ctx, n * h, lq, lq, 0.5, layer.key, layer.mask_offset)
        want = dropout_reference(*flat, 1 / np.sqrt(d), keep, dy.reshape(n * h, lq, d))
        for got, w, what in zip([r.y[0]] + r.dx, want, ("o", "dq", "dk", "dv")):
            np.testing.assert_allclose(got.reshape(w.shape), w, rtol=1e-3, atol=1e-4,
                                       err_msg=what)
        outs.append(r.y[0])
    assert not np.allclose(outs[0], outs[1])
    r = run_layer(ctx, layer, xs, mode="predict")
    plain = probabilities(*flat[:2], 1 / np.sqrt(d)) @ flat[2]
    np.testing.assert_allclose(r.y[0].reshape(plain.shape), plain, rtol=1e-4, atol=1e-5)


# ----- 16-bit storage: q, k, v, o, dO and the gradients as float16 or bfloat16
# A store rounds to nearest even, off by up to u = 2^-11 (float16: 11 significant bits) or
# 2^-8 (bfloat16: 8) of the value; the kernels compute in float32 from what is stored. So
# against float64 on the stored inputs o is off by its one rounding (allowed: 2u of the
# largest output), and the gradients by theirs plus what the stored o and dO carry into
# delta = dO . O and on through the rows' sums (allowed: 4u of the largest gradient; seen
# on PoCL: 0.6u to 1.4u).
HALVES = {"float16": (np.dtype(np.float16), 1e-3, 2e-3), "bfloat16": (bfloat16, 8e-3, 1.6e-2)}


def near(actual, expected, tol, what):
    """Within ``tol`` of the largest expected value."""
    assert_close(actual, expected, rtol=0, atol=tol * np.abs(expected).max(), what=what)


@pytest.mark.parametrize("kernels", ["rows", "tiles"])
@pytest.mark.parametrize("half,mask_type", [("float16", "float16"), ("bfloat16", "float32")])
def test_16bit_storage_matches_float64(ctx, rng, kernels, half, mask_type):
    """Causal, a mask over (batch, key) that masks sample 0 whole, lengths that end
    mid-tile and mid-block; the mask in 16 bits or float32; stats and delta float32."""
    dtype, tol_y, tol_dx = HALVES[half]
    n, heads, lq, lk, d, dv = 2, 2, 37, 45, 16, 8
    b = n * heads
    q, k, v = (stored(rng.standard_normal(s), dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, dv)))
    mask4 = np.where(rng.random((n, 1, 1, lk)) < 0.3, -np.inf, rng.standard_normal((n, 1, 1, lk)))
    mask4[0] = -np.inf
    mask4 = stored(mask4, mask_type)
    full = np.repeat(np.broadcast_to(mask4, (n, heads, lq, lk)).reshape(b, lq, lk), 1, 0)
    scale = 1 / np.sqrt(d)
    p = probabilities(q, k, scale, full, causal=True)
    g = stored(rng.standard_normal((b, lq, dv)), dtype)
    want = [p @ v] + list(gradients(q, k, v, p, scale, g))
    op = AttentionOps(ctx, b, lq, lk, d, dv, heads=heads, causal=True, mask=True,
                      kernels=kernels, dtype=dtype, mask_dtype=mask_type)
    assert op.kernels == kernels
    f = lambda a, t=dtype: dp.Tensor.from_numpy(ctx, host(a, t))
    tq, tk, tv, mask = f(q), f(k), f(v), f(mask4, mask_type)
    o, stats, delta = (dp.Tensor(ctx, (b, lq, dv), dtype), dp.Tensor(ctx, (b, lq, 2)),
                       dp.Tensor(ctx, (b, lq)))
    grads = [dp.Tensor(ctx, s, dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, dv))]
    strides = (lk, 0, 0, 1)
    for launch in op.launches(tq, tk, tv, o, stats, mask=mask, mask_strides=strides) + \
            op.backward_launches(tq, tk, tv, o, stats, f(g), *grads, delta, mask=mask,
                                 mask_strides=strides):
        launch(ctx.queue)
    got = [t.numpy() for t in [o] + grads]
    for a, w, what, tol in zip(got, want, ("o", "dq", "dk", "dv"), (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)
    assert not np.abs(got[0][:heads]).any() and not np.abs(got[1][:heads]).any()  # sample 0


@pytest.mark.parametrize("kernels", ["rows", "tiles"])
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_16bit_dropout_is_the_float32_kernels(ctx, rng, kernels, half):
    """The weights dropped depend on (seed, offset) and the weight's place only, so the
    16-bit kernels drop those the float32 kernels drop: the same results on the same
    (stored) values, up to the storage's rounding."""
    dtype, tol_y, tol_dx = HALVES[half]
    b, lq, lk, d, p = 3, 37, 70, 8, 0.3
    dv = 5 if kernels == "rows" else 8  # the float32 kernels of the dropout test above
    q, k, v = (stored(rng.standard_normal(s), dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, dv)))
    g = stored(rng.standard_normal((b, lq, dv)), dtype)
    kinds = dict(causal=True, dropout=p, kernels=kernels)
    want = _run(ctx, AttentionOps(ctx, b, lq, lk, d, dv, **kinds), q, k, v, g, 11, 5)
    got = _run(ctx, AttentionOps(ctx, b, lq, lk, d, dv, dtype=dtype, **kinds), q, k, v, g, 11, 5)
    for a, w, what, tol in zip(got, want, ("o", "dq", "dk", "dv"), (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)


def test_storage_errors(ctx):
    from dlprim.layers import LayerError, TensorSpec, create
    with pytest.raises(ValueError, match="dtype must be float32, float16 or bfloat16, got int32"):
        AttentionOps(ctx, 2, 4, 4, 8, 8, dtype=np.int32)
    with pytest.raises(ValueError, match="mask_dtype must be float32, float16 or bfloat16"):
        AttentionOps(ctx, 2, 4, 4, 8, 8, mask_dtype=np.float64)
    op = AttentionOps(ctx, 2, 4, 4, 8, 8, dtype=np.float16, mask=True)
    t, t32 = dp.Tensor(ctx, (2, 4, 8), np.float16), dp.Tensor(ctx, (2, 4, 8))
    stats = dp.Tensor(ctx, (2, 4, 2))
    with pytest.raises(ValueError, match="k is .*expected float16"):
        op.launches(t, t32, t, t, stats)
    with pytest.raises(ValueError, match="stats is .*expected float32"):
        op.launches(t, t, t, t, dp.Tensor(ctx, (2, 4, 2), np.float16))
    with pytest.raises(ValueError, match="the mask is .*expected float32"):
        op.launches(t, t, t, t, stats, mask=dp.Tensor(ctx, (4,), np.float16),
                    mask_strides=(0, 0, 0, 1))
    layer = create(ctx, "ScaledDotProductAttention", "att", {})
    h, f = TensorSpec((1, 2, 3, 4), np.float16), TensorSpec((1, 2, 3, 4))
    with pytest.raises(LayerError, match="'att': q, k and v must share one float dtype .*"
                                         "got float16, float32, float16"):
        layer.setup([h, f, h])
    with pytest.raises(LayerError, match="q, k, v and the mask must share .*got "
                                         "bfloat16, bfloat16, bfloat16, float32"):
        b16 = TensorSpec((1, 2, 3, 4), bfloat16)
        layer.setup([b16, b16, b16, TensorSpec((1, 1, 1, 3))])
    with pytest.raises(LayerError, match="got int32, int32, int32"):
        layer.setup([TensorSpec((1, 2, 3, 4), np.int32)] * 3)
    packed = create(ctx, "ScaledDotProductAttention", "att", {"layout": "packed"})
    with pytest.raises(LayerError, match="qkv and the mask must share"):
        packed.setup([TensorSpec((1, 3, 3, 2, 4), np.float16), TensorSpec((1, 1, 1, 3))])


def _block(n=2, length=13, heads=2, width=8):
    """A self-attention block with a mask over (batch, key) and an MSE loss: a Linear to
    packed q, k, v, the attention read in place, a Linear back."""
    dim = heads * width
    return {"inputs": [{"name": "x", "shape": [n * length, dim]},
                       {"name": "mask", "shape": [n, 1, 1, length]},
                       {"name": "target", "shape": [n * length, dim]}],
            "outputs": ["loss"],
            "operators": [
                {"name": "qkv", "type": "InnerProduct", "inputs": ["x"], "outputs": ["qkv"],
                 "options": {"outputs": 3 * dim}},
                {"name": "heads", "type": "Reshape", "inputs": ["qkv"], "outputs": ["heads"],
                 "options": {"dims": [n, length, 3, heads, width]}},
                {"name": "att", "type": "ScaledDotProductAttention", "inputs": ["heads", "mask"],
                 "outputs": ["att"], "options": {"layout": "packed", "causal": True}},
                {"name": "merge", "type": "Reshape", "inputs": ["att"], "outputs": ["merge"],
                 "options": {"dims": [n * length, dim]}},
                {"name": "proj", "type": "InnerProduct", "inputs": ["merge"], "outputs": ["proj"],
                 "options": {"outputs": dim}},
                {"name": "loss", "type": "MSELoss", "inputs": ["proj", "target"],
                 "outputs": ["loss"]}]}


@pytest.mark.parametrize("precision,half", [("fp16", "float16"), ("bf16", "bfloat16")])
def test_16bit_nets_take_attention_without_casts(ctx, rng, precision, half):
    """In a net of precision "fp16" or "bf16" the attention reads the Linear's 16-bit
    output and writes 16 bits for the next Linear: the only Cast that touches it is the
    float32 mask's (a "follows" layer casts its other float inputs). Loss and parameter
    gradients (norm-wise) follow the fp32 net's within 4 units of the storage's rounding
    (seen: under 1)."""
    half, _, tol = HALVES[half]
    graph = _block()
    length = graph["inputs"][1]["shape"][-1]
    feeds = {"x": stored(rng.standard_normal(graph["inputs"][0]["shape"]), half),
             "mask": np.where(rng.random((2, 1, 1, length)) < 0.3, -np.inf, 0.0),
             "target": stored(rng.standard_normal(graph["inputs"][2]["shape"]), half)}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    losses, grads = {}, {}
    for prec in ("fp32", precision):
        net = dp.Net(ctx, graph, mode="train", precision=prec, seed=0)
        losses[prec] = net(**feeds)["loss"]
        net.backward()
        scale = net.loss_scale.scale if net.loss_scale else 1.0
        grads[prec] = {k: v.to_host() / scale for k, v in net.grads.items()}
    casts = {(op.inputs[0], op.options["dtype"]) for op in net.graph.ops if op.type == "Cast"}
    assert casts == {("x", dp.dtypes.dtype_name(half)), ("mask", dp.dtypes.dtype_name(half)),
                     ("proj", "float32")}
    layer = net.layers[[op.name for op in net.graph.ops].index("att")]
    assert layer.ops.dtype == half and net.tensor("att").dtype == half
    np.testing.assert_allclose(losses[precision], losses["fp32"], rtol=tol)
    for name, ref in grads["fp32"].items():
        err = np.linalg.norm(grads[precision][name] - ref) / max(np.linalg.norm(ref), 1e-12)
        assert err < tol, "%s: relative error %.3g" % (name, err)


# masks as exporters write them: per sample and query row (N, 1, Lq, Lk), or one for the
# batch (1, 1, Lq, Lk), holding float32's lowest value where a key is hidden (PyTorch's
# causal masks: finfo.min, not -inf), so that a row hidden whole weighs every key alike
# (a padded query); both kernels, lengths that end mid-tile
@pytest.mark.parametrize("kernels", ["rows", "tiles", "gemm"])
@pytest.mark.parametrize("per_sample", [True, False])
def test_attention_masks_of_rows_with_lowest_values(ctx, rng, kernels, per_sample):
    heads, n, lq, lk, d = 2, 2, 37, 37, 16
    b = n * heads
    q, k, v = (rng.standard_normal((b, l, d)) for l in (lq, lk, lk))
    lowest = np.finfo(np.float32).min
    hidden = np.triu(np.ones((lq, lk), bool), 1) | (rng.random((n if per_sample else 1, 1, lq, lk)) < 0.2)
    hidden[..., 0] = False
    hidden[..., 3, :] = True  # a row hidden whole: softmax of equal scores, uniform weights
    mask4 = np.where(hidden, lowest, rng.standard_normal(hidden.shape)).astype(np.float32)
    strides = (lq * lk if per_sample else 0, 0, lk, 1)
    mask_full = np.repeat(np.broadcast_to(mask4, (n, heads, lq, lk)).reshape(n * heads, lq, lk), 1, 0)
    scale = 1 / np.sqrt(d)
    op = AttentionOps(ctx, b, lq, lk, d, d, heads=heads, causal=False, mask=True, kernels=kernels)
    _matches(ctx, op, q, k, v, dp.Tensor.from_numpy(ctx, mask4), strides,
             reference(q, k, v, scale, np.maximum(mask_full, -1e30)))


@pytest.mark.parametrize("kernels", ["rows", "tiles", "gemm", "split"])
def test_a_nan_query_row_gives_a_nan_output_row(ctx, rng, kernels):
    """A NaN reaches the output row it is in (as eager softmax gives), and only that one."""
    b, lq, d = 2, 9, 8
    q, k, v = (rng.standard_normal((b, lq, d)).astype(np.float32) for _ in range(3))
    q[1, 3, 2] = np.nan
    op = AttentionOps(ctx, b, lq, lq, d, d, kernels=kernels)
    f = lambda a: dp.Tensor.from_numpy(ctx, a)
    o, stats = dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, op.stats_shape)
    for launch in op.launches(f(q), f(k), f(v), o, stats):
        launch(ctx.queue)
    got = o.to_host()
    assert np.isnan(got[1, 3]).all()
    got[1, 3] = 0
    assert np.isfinite(got).all()


# ----- the tensor-core kernels (attention_mma.cl), their products emulated in OpenCL C
# (MMA_EMULATE: all but the PTX) so that the fragments, the double-buffered blocks, the
# online softmax across a row's four lanes and the 16-bit weights run on any CPU device;
# on NVIDIA GPUs they run natively wherever 16-bit attention is asked for.
@pytest.fixture
def emulated_mma(ctx, monkeypatch):
    from dlprim.core import attention
    from dlprim.kernels import program
    import layer_check
    layer_check.skip_unless_cpu(ctx)
    build = program.get
    monkeypatch.setattr(attention, "tensor_cores", lambda ctx, precision="tf32": True)
    # D = DV = 64 and 128 forwards take the warpgroup form (wgmma.h's emulated products)
    monkeypatch.setattr(attention, "warpgroup_products", lambda ctx, precision: True)
    monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
        ctx, name, **(dict(p, MMA_EMULATE=True) if name == "attention_mma" else p)))
    if ctx.facts.vendor_id == "pocl":
        # PoCL 3.0's optimiser (LLVM 14, pip's build) miscompiles the emulated dK/dV pass
        # at width 16: wrong dK and dV, where the same source is right with
        # -cl-opt-disable, on Intel's CPU runtime, under oclgrind with its race and
        # uninitialised-value checks, and as PTX on NVIDIA GPUs. The emulation is a test
        # vehicle (CPUs never run these kernels), so PoCL builds it unoptimised.
        compile_ = program.build
        monkeypatch.setattr(program, "build", lambda cl_context, source, options: compile_(
            cl_context, source, options + ["-cl-opt-disable"] if "attention_mma_" in source
            else options))


# P and dS round to the storage's 16 bits between products (as FlashAttention's do), one
# more rounding of each weight: the errors stay within the 16-bit tolerances above (seen:
# 0.5u to 1.3u on the H200)
MMA_CASES = [(2, 2, 37, 45, 16, 16, True, True, 0),   # blocks cut mid-way; sample 0 masked whole
             (1, 2, 70, 33, 32, 16, False, False, 0),  # D != DV, more queries than keys
             (2, 1, 20, 90, 16, 32, True, False, 3),   # offsets off 16 bytes: 2-byte loads
             (1, 1, 33, 40, 128, 128, False, True, 0),  # 32-row blocks of the widest heads
             # the warpgroup form (widths of 64 and 128): several blocks of queries and
             # keys, cut mid-way, causal; 2-byte loads
             (1, 1, 200, 210, 64, 64, True, True, 1),
             (2, 1, 130, 260, 64, 128, False, True, 0)]


# bfloat16 differs from float16 only in its conversions: the heads of 128, whose emulated
# builds take longest, run in float16 alone
MMA_HALF_CASES = [("float16",) + c for c in MMA_CASES] + [
    ("bfloat16",) + c for c in MMA_CASES if max(c[4], c[5]) < 128]


@pytest.mark.parametrize("half,n,heads,lq,lk,d,dv,causal,masked,offset", MMA_HALF_CASES)
def test_mma_kernels_match_float64(ctx, rng, emulated_mma, half, n, heads, lq, lk, d, dv,
                                   causal, masked, offset):
    dtype, tol_y, tol_dx = HALVES[half]
    b = n * heads
    q, k, v = (stored(rng.standard_normal(s), dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, dv)))
    g = stored(rng.standard_normal((b, lq, dv)), dtype)
    full = mask = strides = None
    if masked:
        mask4 = np.where(rng.random((n, 1, 1, lk)) < 0.3, -np.inf,
                         rng.standard_normal((n, 1, 1, lk)))
        mask4[0, ..., : lk // 2] = -np.inf
        if n > 1:
            mask4[0] = -np.inf
        full = np.repeat(np.broadcast_to(mask4, (n, heads, lq, lk)).reshape(b, lq, lk), 1, 0)
        mask, strides = dp.Tensor.from_numpy(ctx, mask4.astype(np.float32)), (lk, 0, 0, 1)
    scale = 1 / np.sqrt(d)
    p = probabilities(q, k, scale, full, causal)
    want = [p @ v] + list(gradients(q, k, v, p, scale, g))
    op = AttentionOps(ctx, b, lq, lk, d, dv, heads=heads, causal=causal, mask=masked,
                      dtype=dtype)
    assert op.kernels == "mma"
    assert bool(op.warpgroup) == (d % 64 == 0 and dv % 64 == 0)

    def f(a):  # stored ``offset`` values into a buffer: rows that start off 16 bytes
        flat = np.concatenate([np.zeros(offset, dtype), host(a, dtype).reshape(-1)])
        return dp.Tensor.from_numpy(ctx, flat).view(a.shape, offset)
    tq, tk, tv = f(q), f(k), f(v)
    o, stats, delta = (dp.Tensor(ctx, (b, lq, dv), dtype), dp.Tensor(ctx, (b, lq, 2)),
                       dp.Tensor(ctx, (b, lq)))
    grads = [dp.Tensor(ctx, s, dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, dv))]
    launches = op.launches(tq, tk, tv, o, stats, mask=mask, mask_strides=strides) + \
        op.backward_launches(tq, tk, tv, o, stats, f(g), *grads, delta, mask=mask,
                             mask_strides=strides)
    assert {l.program for l in launches if op.is_own(l)} == \
        {p for (_, aligned), p in op.programs.items() if aligned == (offset == 0)}
    for launch in launches:
        launch(ctx.queue)
    got = [t.numpy() for t in [o] + grads]
    for a, w, what, tol in zip(got, want, ("o", "dq", "dk", "dv"), (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)


def test_mma_tiles_per_warp_match_float64(ctx, rng, emulated_mma):
    """Two tiles of 16 rows per warp (MW = 2) in every pass, one warp per work-group: each
    staged fragment feeds both tiles' products, and the lanes' rows span two tiles."""
    dtype, tol_y, tol_dx = HALVES["float16"]
    b, lq, lk, d = 2, 45, 50, 16
    two = dict(WARPS=1, MW=2, BQ=32, BK=16)
    blocks = {"forward": two, "dq": two, "dkdv": dict(two, BQ=16, BK=32)}
    q, k, v, g = (stored(rng.standard_normal((b, n, d)), dtype) for n in (lq, lk, lk, lq))
    p = probabilities(q, k, 0.25, None, causal=True)
    want = [p @ v] + list(gradients(q, k, v, p, 0.25, g))
    op = AttentionOps(ctx, b, lq, lk, d, d, causal=True, dtype=dtype, blocks=blocks)
    assert op.kernels == "mma" and op.blocks == blocks
    got = _run(ctx, op, q, k, v, g, 0, 0)
    for a, w, what, tol in zip(got, want, ("o", "dq", "dk", "dv"), (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)


@pytest.mark.parametrize("layout", ["nhld", "nlhd", "packed"])
def test_mma_dropout_and_layouts_are_the_float32_kernels(ctx, rng, emulated_mma, layout):
    """With dropout (the same weights dropped as the float32 kernels drop), causal, in the
    (N, H, L, D) layout, the heads side by side and the packed qkv layout: the float32
    tiled kernels' results, up to float16's roundings."""
    dtype, tol_y, tol_dx = HALVES["float16"]
    n, h, lq, d, p = 2, 2, 37, 16, 0.3
    q, k, v, g = (stored(rng.standard_normal((n, h, lq, d)), dtype) for _ in range(4))
    kinds = dict(heads=h, causal=True, dropout=p)
    want = _run_layout(ctx, AttentionOps(ctx, n * h, lq, lq, d, d, kernels="tiles", **kinds),
                       q, k, v, g, None, None, 7)
    op = AttentionOps(ctx, n * h, lq, lq, d, d, layout=layout, dtype=dtype, **kinds)
    assert op.kernels == "mma"
    got = _run_layout(ctx, op, q, k, v, g, None, None, 7)
    for a, w, what, tol in zip(got, want, ("o", "dq", "dk", "dv"), (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)


def test_mma_kernels_are_chosen_and_refused_by_name(ctx, monkeypatch):
    """16-bit storage and widths that are multiples of 16 up to 128 take the mma kernels
    where the device has tensor cores; float32, other widths and devices without them are
    refused by name when asked for."""
    from dlprim.core import attention
    from dlprim.core.attention import mma_blocks
    assert mma_blocks(64, 64)["forward"] == dict(WARPS=4, MW=2, BQ=128, BK=64)
    assert mma_blocks(128, 64)["dkdv"] == dict(WARPS=4, MW=1, BQ=32, BK=64)
    assert mma_blocks(8, 8) is None and mma_blocks(256, 256) is None
    half = np.dtype(np.float16)
    if not attention.tensor_cores(ctx, "fp16"):
        with pytest.raises(ValueError, match="mma kernels take float16 or bfloat16"):
            AttentionOps(ctx, 2, 4, 4, 16, 16, dtype=half, kernels="mma")
        assert AttentionOps(ctx, 2, 4, 4, 16, 16, dtype=half).kernels != "mma"
    monkeypatch.setattr(attention, "tensor_cores", lambda ctx, precision="tf32": True)
    assert AttentionOps(ctx, 2, 4, 4, 64, 64, dtype=half).kernels == "mma"
    assert AttentionOps(ctx, 2, 4, 4, 64, 64, dtype=bfloat16).kernels == "mma"
    assert AttentionOps(ctx, 2, 4, 4, 64, 64).kernels != "mma"  # float32
    assert AttentionOps(ctx, 2, 4, 4, 24, 24, dtype=half).kernels != "mma"
    for kinds in (dict(), dict(d=24), dict(d=256, dv=256)):
        shape = dict(dict(d=16, dv=16, dtype=half), **kinds)
        if "dtype" not in kinds and kinds:
            with pytest.raises(ValueError, match="multiples of 16 up to 128"):
                AttentionOps(ctx, 2, 4, 4, shape["d"], shape["dv"], dtype=half, kernels="mma")
    with pytest.raises(ValueError, match="mma kernels take float16 or bfloat16"):
        AttentionOps(ctx, 2, 4, 4, 16, 16, kernels="mma")
    with pytest.raises(ValueError, match="do not fit the mma kernels"):
        AttentionOps(ctx, 2, 4, 4, 16, 16, dtype=half,
                     blocks={"forward": dict(WARPS=4, MW=1, BQ=32, BK=64)})


def test_warpgroup_form_takes_widths_of_64_and_the_passes_not_given_blocks(ctx, monkeypatch):
    """Widths that are multiples of 64 (up to 128) take Hopper's warpgroup products where
    the device runs them; other widths, devices without them and the passes given warp
    blocks keep the warp form."""
    from dlprim.core import attention
    from dlprim.core.attention import wgmma_blocks
    assert set(wgmma_blocks(64, 64)) == {"forward", "dq", "dkdv"}
    assert wgmma_blocks(64, 128) == wgmma_blocks(128, 128)
    assert wgmma_blocks(32, 32) is None and wgmma_blocks(64, 96) is None
    assert wgmma_blocks(256, 256) is None
    half = np.dtype(np.float16)
    monkeypatch.setattr(attention, "tensor_cores", lambda ctx, precision="tf32": True)
    monkeypatch.setattr(attention, "warpgroup_products", lambda ctx, precision: False)
    assert AttentionOps(ctx, 2, 4, 4, 64, 64, dtype=half).warpgroup == {}
    monkeypatch.setattr(attention, "warpgroup_products", lambda ctx, precision: True)
    taken = AttentionOps(ctx, 2, 4, 4, 64, 64, dtype=half).warpgroup
    assert set(taken) == {"forward", "dq", "dkdv"}
    assert AttentionOps(ctx, 2, 4, 4, 32, 32, dtype=half).warpgroup == {}
    given = AttentionOps(ctx, 2, 4, 4, 64, 64, dtype=half,
                         blocks={"forward": dict(WARPS=4, MW=1, BQ=64, BK=32)})
    assert set(given.warpgroup) == {"dq", "dkdv"}


# ----- the split forward (attention_split.cl): a few query rows, the keys in chunks
# (lengths that end mid-block and mid-chunk; one chunk writes o itself, more are merged)
SPLIT_CASES = [(4, 2, 8, 200, 16, 16, False, True),
               (3, 1, 1, 150, 8, 4, False, True),
               (2, 2, 5, 77, 32, 48, True, False),
               (2, 1, 16, 70, 8, 8, True, True),
               (6, 3, 3, 33, 4, 12, False, False)]


@pytest.fixture(params=[2, 64], ids=["few-chunks", "many-chunks"])
def split_groups(request, monkeypatch):
    """Work-groups a compute unit the split forward aims at: the default, and enough to
    give every block of keys a chunk of its own on a CPU's few units."""
    from dlprim.core import attention
    monkeypatch.setattr(attention, "SPLIT_GROUPS_PER_UNIT", request.param)
    return request.param


@pytest.mark.parametrize("b,heads,lq,lk,d,dv,causal,masked", SPLIT_CASES)
def test_split_forward_matches_float64(ctx, rng, split_groups, b, heads, lq, lk, d, dv,
                                       causal, masked):
    """Its o and statistics, and the backward pass of the device's family on them."""
    q = rng.standard_normal((b, lq, d))
    k = rng.standard_normal((b, lk, d))
    v = rng.standard_normal((b, lk, dv))
    mask4 = mask_t = strides = mask_full = None
    if masked:  # (batch, 1, queries, keys): a cache's lengths per sequence, a row hidden whole
        n = b // heads
        mask4 = np.where(rng.random((n, 1, lq, lk)) < 0.2, -np.inf, rng.standard_normal((n, 1, lq, lk)))
        for i in range(n):
            mask4[i, ..., lk // (i + 2):] = -np.inf
        mask4[0, 0, 0] = -np.inf
        mask_t = dp.Tensor.from_numpy(ctx, mask4.astype(np.float32))
        strides = (lq * lk, 0, lk, 1)
        mask_full = np.broadcast_to(mask4, (n, heads, lq, lk)).reshape(b, lq, lk)
    op = AttentionOps(ctx, b, lq, lk, d, dv, heads=heads, causal=causal, mask=masked,
                      kernels="split")
    chunks = op.split["chunks"]
    assert chunks == 1 or op.workspace_bytes >= 4 * b * chunks * lq * (dv + 2)
    if split_groups == 64 and lk > op.split["BK"]:
        assert chunks > 1
    _matches(ctx, op, q, k, v, mask_t, strides,
             reference(q, k, v, 1 / np.sqrt(d), mask_full, causal))


@pytest.mark.parametrize("layout", ["nlhd", "packed"])
@pytest.mark.parametrize("half", ["float32", "float16", "bfloat16"])
def test_split_forward_layouts_and_storages(ctx, rng, split_groups, layout, half):
    """The heads side by side or packed, in 16-bit storage, give what the row kernels give
    (forward and backward, a mask over (batch, key), causal)."""
    n, h, lq, d = 2, 3, 12, 8
    lk, dv = (lq, d) if layout == "packed" else (90, 4)
    dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": bfloat16}[half]
    q, k, v = (rng.standard_normal(s) for s in ((n, h, lq, d), (n, h, lk, d), (n, h, lk, dv)))
    g = rng.standard_normal((n, h, lq, dv))
    mask = np.where(rng.random((n, 1, 1, lk)) < 0.3, -np.inf, 0.0)
    mask_t = dp.Tensor.from_numpy(ctx, mask.astype(np.float32))
    kinds = dict(heads=h, causal=True, mask=True, dtype=dtype)
    want = _run_layout(ctx, AttentionOps(ctx, n * h, lq, lk, d, dv, kernels="rows", **kinds),
                       q, k, v, g, mask_t, (lk, 0, 0, 1), 0)
    op = AttentionOps(ctx, n * h, lq, lk, d, dv, layout=layout, kernels="split", **kinds)
    assert op.split is not None
    got = _run_layout(ctx, op, q, k, v, g, mask_t, (lk, 0, 0, 1), 0)
    tol = 1e-5 if half == "float32" else 1e-2  # (16-bit outputs round where sums differ)
    for a, b, what in zip(got, want, ("o", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=what)


def test_split_forward_reads_no_key_the_mask_hides(ctx, rng, split_groups):
    """Keys and values the mask hides (a cache's positions past a sequence's end, whatever
    they hold, NaN too) weigh exactly nothing; rows with a large finite mask (float32's
    lowest) weigh every key alike, as eager PyTorch does."""
    b, lq, lk, d = 3, 4, 300, 16
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((b, lq, d), (b, lk, d), (b, lk, d)))
    lengths = [37, 64, 300]
    mask = np.zeros((b, 1, lq, lk), np.float32)
    for i, n in enumerate(lengths):
        mask[i, ..., n:] = -np.inf
        k[i, n:] = np.nan
        v[i, n:] = np.nan
    mask[2, 0, 1] = np.finfo(np.float32).min
    op = AttentionOps(ctx, b, lq, lk, d, d, mask=True, kernels="split")
    f = lambda a: dp.Tensor.from_numpy(ctx, a)
    o, stats = dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, op.stats_shape)
    for launch in op.launches(f(q), f(k), f(v), o, stats, mask=f(mask),
                              mask_strides=(lq * lk, 0, lk, 1)):
        launch(ctx.queue)
    got = o.to_host()
    for i, n in enumerate(lengths):
        want = reference(q[i:i + 1, :, :].astype(np.float64), k[i:i + 1, :n].astype(np.float64),
                         v[i:i + 1, :n].astype(np.float64), 1 / np.sqrt(d),
                         np.maximum(mask[i:i + 1, 0, :, :n], -1e30))[0]
        np.testing.assert_allclose(got[i:i + 1], want, rtol=1e-4, atol=1e-5, err_msg=str(i))


def test_split_forward_merges_its_chunks_in_one_launch(ctx, rng, monkeypatch):
    """MERGE (``merges_in_launch``: NVIDIA GPUs; here forced on whatever device runs the
    tests, whose work-groups run side by side): one launch, the last work-group of each
    batch row merging every chunk's partials; its counts back at zero after each launch,
    so launches after it (other inputs, the same op) merge too. o and the statistics
    against float64, several query rows, a mask hiding a row whole."""
    from dlprim.core import attention
    monkeypatch.setattr(attention, "merges_in_launch", lambda facts: True)
    monkeypatch.setattr(attention, "SPLIT_GROUPS_PER_UNIT", 64)
    b, lq, lk, d, dv = 5, 3, 300, 16, 8
    op = AttentionOps(ctx, b, lq, lk, d, dv, mask=True, kernels="split")
    assert op.split["merge"] and op.split["chunks"] > 2
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))
    for turn in range(3):
        q = rng.standard_normal((b, lq, d))
        k = rng.standard_normal((b, lk, d))
        v = rng.standard_normal((b, lk, dv))
        mask = np.where(rng.random((b, 1, lq, lk)) < 0.2, -np.inf, 0.0)
        mask[turn, 0, 1] = -np.inf  # (a row without a key: o 0, its statistics -inf)
        o, stats = dp.Tensor(ctx, (b, lq, dv)), dp.Tensor(ctx, op.stats_shape)
        launches = op.launches(f(q), f(k), f(v), o, stats, mask=f(mask),
                               mask_strides=(lq * lk, 0, lk, 1))
        assert [launch.name for launch in launches] == ["attention_split_partial"]
        for launch in launches:
            launch(ctx.queue)
        want = reference(q, k, v, 1 / np.sqrt(d), mask[:, 0], False)[0]
        got = o.to_host()
        assert np.all(got[turn, 1] == 0)
        np.testing.assert_allclose(got, np.nan_to_num(want), rtol=1e-4, atol=1e-5)
        assert np.all(op.split["done"].to_host() == 0)
        m = stats.to_host().reshape(b, lq, 2)
        scores = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(d) + mask[:, 0]
        live = np.isfinite(scores.max(axis=-1))
        np.testing.assert_allclose(m[..., 0][live], scores.max(axis=-1)[live], rtol=1e-5,
                                   atol=1e-5)
        assert np.all(m[turn, 1] == -np.inf)


def test_split_plan_fills_the_device_and_bad_requests_are_named(ctx):
    from dlprim.core.attention import split_plan

    class Gpu:
        local_mem, max_work_group, compute_units = 49152, 1024, 132
    for batch, lq, lk, d in [(4, 8, 600, 64), (12, 1, 2048, 64), (384, 1, 584, 64),
                             (2, 16, 1000, 128), (1, 3, 5, 80)]:
        p = split_plan(Gpu, batch, lq, lk, d, d)
        assert p["QR"] >= lq and p["span"] % p["BK"] == 0 and p["BK"] % p["LANES"] == 0
        assert (p["chunks"] - 1) * p["span"] < lk <= p["chunks"] * p["span"]
        # about two work-groups a compute unit (at least one: chunks are whole blocks), or
        # a block of keys each
        assert batch * p["chunks"] >= min(132, batch * -(-lk // p["BK"]))
        assert batch * (p["chunks"] - 1) < 2 * 132 or p["chunks"] == 1
    assert split_plan(Gpu, 4, 17, 100, 64, 64) is None  # more query rows: the block kernels
    assert split_plan(Gpu, 4, 8, 100, 6, 6) is None
    with pytest.raises(ValueError, match="split forward takes 1 to 16 query rows"):
        AttentionOps(ctx, 2, 17, 40, 8, 8, kernels="split")
    with pytest.raises(ValueError, match="no dropout"):
        AttentionOps(ctx, 2, 4, 40, 8, 8, kernels="split", dropout=0.1)
    # the device's choice: the split forward on GPUs for few query rows, never on CPUs
    few = AttentionOps(ctx, 2, 4, 40, 8, 8)
    assert (few.split is None) == ctx.facts.is_cpu
    assert AttentionOps(ctx, 2, 17, 40, 8, 8).split is None
    assert AttentionOps(ctx, 2, 4, 40, 8, 8, dropout=0.1).split is None


# ----- a key/value cache's positions instead of a mask (the decoders' KVCache)
def _position_mask(pos, n, heads, groups, t, lk, window=0):
    """The additive mask of cache positions: row i of sequence n (G groups of T rows) sees
    the keys j <= pos[n] + i % T (with a ``window``: the last ``window`` of them); (B, G T,
    S) float64."""
    i = np.arange(groups * t) % t
    at = (pos[:, None] + i[None, :])[..., None]
    j = np.arange(lk)[None, None, :]
    full = np.where((j <= at) & ((j > at - window) if window else True), 0.0, -np.inf)
    return np.repeat(full, heads, 0)


# (sequences, key/value heads, groups G, tokens T, cache length, positions): blocks that
# cross groups (T below the blocks) and blocks inside one group (T above them)
POSITION_CASES = [(2, 2, 3, 5, 40, [3, 21]), (2, 1, 2, 40, 90, [0, 50]),
                  (1, 2, 1, 7, 19, [12])]


@pytest.mark.parametrize("kernels", ["rows", "tiles", "gemm", "split"])
@pytest.mark.parametrize("n,heads,groups,t,lk,pos", POSITION_CASES)
@pytest.mark.parametrize("pos_dtype", [np.int64, np.int32])
def test_cache_positions_match_float64(ctx, rng, kernels, n, heads, groups, t, lk, pos,
                                       pos_dtype):
    """Each query row sees the cached keys up to its token's position, forward and
    backward, as the same additive mask would let it (the mask is never stored)."""
    lq, b, d = groups * t, n * heads, 8
    if kernels == "split" and lq > 16:
        pytest.skip("the split forward takes at most 16 query rows")
    q, k, v = (rng.standard_normal((b, length, d)) for length in (lq, lk, lk))
    pos = np.asarray(pos)
    full = _position_mask(pos, n, heads, groups, t, lk)
    refs = reference(q, k, v, 1 / np.sqrt(d), full)
    op = AttentionOps(ctx, b, lq, lk, d, d, heads=heads, kernels=kernels, positions=t,
                      pos_dtype=pos_dtype)
    positions = dp.Tensor.from_numpy(ctx, pos.astype(pos_dtype))
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))  # noqa: E731
    tq, tk, tv = f(q), f(k), f(v)
    o, stats = dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, op.stats_shape)
    grads = [dp.Tensor(ctx, a.shape) for a in (q, k, v)]
    for launch in op.launches(tq, tk, tv, o, stats, positions=positions) + \
            op.backward_launches(tq, tk, tv, o, stats, f(refs[1]), *grads,
                                 dp.Tensor(ctx, (b, lq)), positions=positions):
        launch(ctx.queue)
    np.testing.assert_allclose(o.to_host(), refs[0], rtol=1e-4, atol=1e-5)
    for got, want, what in zip(grads, refs[2:], ("dq", "dk", "dv")):
        np.testing.assert_allclose(got.to_host(), want, rtol=1e-4, atol=1e-4, err_msg=what)


@pytest.mark.parametrize("kernels", ["rows", "tiles", "gemm", "split"])
@pytest.mark.parametrize("n,heads,groups,t,lk,pos,window", [
    (2, 2, 3, 5, 40, [3, 21], 7), (1, 2, 1, 7, 30, [20], 1)])
def test_a_sliding_window_matches_float64(ctx, rng, kernels, n, heads, groups, t, lk, pos,
                                          window):
    """With a window W, a cache's query row sees the W keys that end at its position (W = 1:
    itself alone), forward and backward, as the same additive mask would let it."""
    lq, b, d = groups * t, n * heads, 8
    q, k, v = (rng.standard_normal((b, length, d)) for length in (lq, lk, lk))
    pos = np.asarray(pos)
    refs = reference(q, k, v, 1 / np.sqrt(d),
                     _position_mask(pos, n, heads, groups, t, lk, window))
    op = AttentionOps(ctx, b, lq, lk, d, d, heads=heads, kernels=kernels, positions=t,
                      window=window)
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))  # noqa: E731
    tq, tk, tv = f(q), f(k), f(v)
    o, stats = dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, op.stats_shape)
    grads = [dp.Tensor(ctx, a.shape) for a in (q, k, v)]
    positions = dp.Tensor.from_numpy(ctx, pos.astype(np.int64))
    launches = op.launches(tq, tk, tv, o, stats, positions=positions)
    if kernels != "split":  # (the split kernels are a forward)
        launches += op.backward_launches(tq, tk, tv, o, stats, f(refs[1]), *grads,
                                         dp.Tensor(ctx, (b, lq)), positions=positions)
    for launch in launches:
        launch(ctx.queue)
    np.testing.assert_allclose(o.to_host(), refs[0], rtol=1e-4, atol=1e-5)
    if kernels != "split":
        for got, want, what in zip(grads, refs[2:], ("dq", "dk", "dv")):
            np.testing.assert_allclose(got.to_host(), want, rtol=1e-4, atol=1e-4, err_msg=what)
    with pytest.raises(ValueError, match="window must be 0 .none. or a positive number"):
        AttentionOps(ctx, b, lq, lk, d, d, heads=heads, window=window)  # no positions


@pytest.mark.parametrize("half,d,window", [("float16", 16, 0), ("float16", 64, 0),
                                           ("bfloat16", 16, 0), ("float16", 16, 37)])
def test_mma_cache_positions_match_float64(ctx, rng, emulated_mma, half, d, window):
    """The tensor-core kernels' walks end at the last position a block of rows sees (and
    with a sliding window, mask what lies before it)."""
    dtype, tol_y, tol_dx = HALVES[half]
    n, heads, groups, t, lk = 2, 1, 2, 80, 150
    lq, b = groups * t, n * heads
    q, k, v, g = (stored(rng.standard_normal(s), dtype)
                  for s in ((b, lq, d), (b, lk, d), (b, lk, d), (b, lq, d)))
    pos = np.array([5, 61])
    p = probabilities(q, k, 1 / np.sqrt(d),
                      _position_mask(pos, n, heads, groups, t, lk, window))
    want = [p @ v] + list(gradients(q, k, v, p, 1 / np.sqrt(d), g))
    op = AttentionOps(ctx, b, lq, lk, d, d, heads=heads, dtype=dtype, positions=t,
                      window=window)
    assert op.kernels == "mma"
    f = lambda a: dp.Tensor.from_numpy(ctx, host(a, dtype))  # noqa: E731
    o, stats = dp.Tensor(ctx, (b, lq, d), dtype), dp.Tensor(ctx, (b, lq, 2))
    grads = [dp.Tensor(ctx, s, dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, d))]
    positions = dp.Tensor.from_numpy(ctx, pos.astype(np.int64))
    for launch in op.launches(f(q), f(k), f(v), o, stats, positions=positions) + \
            op.backward_launches(f(q), f(k), f(v), o, stats, f(g), *grads,
                                 dp.Tensor(ctx, (b, lq)), positions=positions):
        launch(ctx.queue)
    for a, w, what, tol in zip([t_.numpy() for t_ in [o] + grads], want, ("o", "dq", "dk", "dv"),
                               (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)


@pytest.mark.parametrize("kernels", ["rows", "tiles", "gemm", "split"])
@pytest.mark.parametrize("bad", [-1, 18])
def test_a_count_the_cache_cannot_take_gives_nan(ctx, rng, kernels, bad):
    """A sequence whose count is negative or leaves no room for the pass's T tokens (the
    cache writes nothing for it) attends to nothing plausible: its rows are NaN, as the
    cache's mask made them; the other sequence's rows are right."""
    n, heads, t, lk, d = 2, 2, 3, 20, 8
    lq, b = t, n * heads
    q, k, v = (rng.standard_normal((b, length, d)) for length in (lq, lk, lk))
    op = AttentionOps(ctx, b, lq, lk, d, d, heads=heads, kernels=kernels, positions=t)
    f = lambda a: dp.Tensor.from_numpy(ctx, np.ascontiguousarray(a, np.float32))  # noqa: E731
    o, stats = dp.Tensor(ctx, (b, lq, d)), dp.Tensor(ctx, op.stats_shape)
    pos = np.array([5, bad])
    for launch in op.launches(f(q), f(k), f(v), o, stats,
                              positions=dp.Tensor.from_numpy(ctx, pos)):
        launch(ctx.queue)
    got = o.to_host()
    assert np.isnan(got[heads:]).all()
    want = reference(q, k, v, 1 / np.sqrt(d), _position_mask(np.array([5, 0]), n, heads, 1, t,
                                                             lk))[0]
    np.testing.assert_allclose(got[:heads], want[:heads], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("half", ["float32", "float16", "bfloat16"])
def test_cpu_cached_rows_match_float64(ctx, rng, half):
    """The gemm family's one-pass forward over a cache's few query rows (a decode step on
    CPUs, attention_gemm_cached) in every storage, then the family's backward on its
    statistics; more rows than CACHED_MAX_ROWS keep the products."""
    from dlprim.core import attention
    if half != "float32" and ctx.facts.is_gpu:
        pytest.skip("GPUs take 16-bit attention through the mma kernels, not the gemm family")
    n, heads, groups, t, lk, d = 2, 2, 4, 1, 70, 16
    lq, b = groups * t, n * heads
    dtype = np.dtype(bfloat16) if half == "bfloat16" else np.dtype(half)
    tol_y, tol_dx = (1e-5, 1e-4) if half == "float32" else HALVES[half][1:]
    q, k, v, g = (stored(rng.standard_normal(s), dtype)
                  for s in ((b, lq, d), (b, lk, d), (b, lk, d), (b, lq, d)))
    pos = np.array([9, 63])
    p = probabilities(q, k, 1 / np.sqrt(d), _position_mask(pos, n, heads, groups, t, lk))
    want = [p @ v] + list(gradients(q, k, v, p, 1 / np.sqrt(d), g))
    op = AttentionOps(ctx, b, lq, lk, d, d, heads=heads, dtype=dtype, kernels="gemm",
                      positions=t)
    assert op.cached and lq <= attention.CACHED_MAX_ROWS
    f = lambda a: dp.Tensor.from_numpy(ctx, host(a, dtype))  # noqa: E731
    o, stats = dp.Tensor(ctx, (b, lq, d), dtype), dp.Tensor(ctx, op.stats_shape)
    grads = [dp.Tensor(ctx, s, dtype) for s in ((b, lq, d), (b, lk, d), (b, lk, d))]
    positions = dp.Tensor.from_numpy(ctx, pos.astype(np.int64))
    forward = op.launches(f(q), f(k), f(v), o, stats, positions=positions)
    assert [launch.name for launch in forward] == ["attention_gemm_cached"]
    for launch in forward + op.backward_launches(f(q), f(k), f(v), o, stats, f(g), *grads,
                                                 dp.Tensor(ctx, (b, lq)), positions=positions):
        launch(ctx.queue)
    for a, w, what, tol in zip([t_.numpy() for t_ in [o] + grads], want,
                               ("o", "dq", "dk", "dv"), (tol_y,) + (tol_dx,) * 3):
        near(a, w, tol, what)
    many = AttentionOps(ctx, b, 24, lk, d, d, heads=heads, kernels="gemm", positions=24)
    assert not many.cached


def test_cache_position_errors_are_named(ctx):
    with pytest.raises(ValueError, match="positions must be 0 .none. or the pass's tokens"):
        AttentionOps(ctx, 2, 15, 20, 8, 8, positions=4)
    with pytest.raises(ValueError, match="int32 or int64"):
        AttentionOps(ctx, 2, 15, 20, 8, 8, positions=5, pos_dtype=np.float32)
    op = AttentionOps(ctx, 2, 15, 20, 8, 8, positions=5)
    q, o = dp.Tensor(ctx, (2, 15, 8)), dp.Tensor(ctx, (2, 15, 8))
    k = dp.Tensor(ctx, (2, 20, 8))
    stats = dp.Tensor(ctx, op.stats_shape)
    with pytest.raises(ValueError, match="built with a cache's positions"):
        op.launches(q, k, k, o, stats)
    with pytest.raises(ValueError, match="built with a cache's positions"):
        op.launches(q, k, k, o, stats, positions=dp.Tensor(ctx, (3,), np.int64))
    plain = AttentionOps(ctx, 2, 15, 20, 8, 8)
    with pytest.raises(ValueError, match="positions given to an op built without them"):
        plain.launches(q, k, k, o, stats, positions=dp.Tensor(ctx, (2,), np.int64))


def test_layer_over_cache_positions(ctx, rng):
    """The layer's ``positions``: the fourth input is the cached counts (one per sequence),
    ``query_groups`` G query rows a token; forward and backward against float64, then the
    named errors."""
    from dlprim.layers import LayerError, TensorSpec, create
    from layer_check import assert_close, run_layer
    n, kv, groups, t, lk, d = 2, 2, 2, 3, 11, 8
    lq = groups * t
    xs = [rng.standard_normal(s).astype(np.float32)
          for s in ((n, kv, lq, d), (n, kv, lk, d), (n, kv, lk, d))]
    pos = np.array([2, 7], np.int64)
    layer = create(ctx, "ScaledDotProductAttention", "att",
                   {"positions": True, "query_groups": groups})
    dy = rng.standard_normal((n, kv, lq, d)).astype(np.float32)
    flat = [x.astype(np.float64).reshape((n * kv,) + x.shape[2:]) for x in xs]
    full = _position_mask(pos, n, kv, groups, t, lk)
    r = run_layer(ctx, layer, xs + [pos], dy=[dy], want_dx=[True, True, True, False])
    assert_close(r.y[0], reference(*flat, 1 / np.sqrt(d), full)[0].reshape(n, kv, lq, d),
                 rtol=1e-4, atol=1e-5, what="y")
    for got, want, x in zip(r.dx[:3], _grads_for(flat, 1 / np.sqrt(d), full, False,
                                                 dy.astype(np.float64).reshape(n * kv, lq, d)),
                            xs):
        assert_close(got, want.reshape(x.shape), rtol=1e-3, atol=1e-4, what="dx")
    specs = [TensorSpec(x.shape) for x in xs]
    for options, extra, message in (
            ({"positions": True}, [TensorSpec((3,), np.int64)], "int32 or int64 of shape"),
            ({"positions": True}, [TensorSpec((2,), np.float32)], "int32 or int64 of shape"),
            ({"positions": True}, [], "int32 or int64 of shape .* got none"),
            ({"positions": True, "query_groups": 4}, [TensorSpec((2,), np.int64)],
             "'query_groups' 4 must divide the queries' L = 6")):
        with pytest.raises(LayerError, match=message):
            create(ctx, "ScaledDotProductAttention", "att", options).setup(specs + extra)
    with pytest.raises(LayerError, match="'query_groups' must be a positive int"):
        create(ctx, "ScaledDotProductAttention", "att", {"positions": True, "query_groups": 0})
    with pytest.raises(LayerError, match="'positions' must be true/false"):
        create(ctx, "ScaledDotProductAttention", "att", {"positions": 3})
    for window in (-1, 2.5, True):
        with pytest.raises(LayerError, match="'window' must be 0 .none. or a positive int"):
            create(ctx, "ScaledDotProductAttention", "att", {"positions": True, "window": window})
    with pytest.raises(LayerError, match="with option 'positions'"):
        create(ctx, "ScaledDotProductAttention", "att", {"window": 4})
