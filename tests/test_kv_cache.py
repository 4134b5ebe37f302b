"""KVCache: keys and values kept in the Net between passes, a prefill of several tokens
then decode steps of one, each pass's attention over the cache (a ScaledDotProductAttention
with the layer's mask) against float64 causal attention over the whole sequence so far;
positions per sample; a position past the cache gives NaN, not a plausible value."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.layers.base import LayerError

N, H, D, L = 2, 3, 8, 12


def cached_attention_net(ctx, t, length=L, per_row=False, pos_dtype="int64", positions=False):
    """q, k, v and pos in, the cache's attention out: over the cache's mask, or with
    ``positions`` over the counts themselves (the decoders' way)."""
    cfg = dp.NetConfig()
    for name in "qkv":
        cfg.add_input(name, [N, H, t, D])
    cfg.add_input("pos", [N if per_row else 1], pos_dtype)
    cfg.add("KVCache", name="cache", inputs=["k", "v", "pos"],
            outputs=["keys", "values"] + ([] if positions else ["mask"]),
            options={"length": length, "mask": not positions})
    cfg.add("ScaledDotProductAttention", name="att",
            inputs=["q", "keys", "values", "pos" if positions else "mask"], outputs=["y"],
            options={"positions": positions})
    cfg.set_outputs(["y"])
    return dp.Net(ctx, cfg, mode="predict")


def reference(q, ks, vs, pos):
    """Attention of q (H, T, D) at positions pos.. over keys/values (H, S, D) 0..pos+t."""
    out = np.zeros(q.shape)
    for t in range(q.shape[1]):
        live = pos + t + 1
        s = q[:, t:t + 1] @ ks[:, :live].transpose(0, 2, 1) / np.sqrt(D)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, t] = (p @ vs[:, :live])[:, 0]
    return out


def test_prefill_then_decode_attends_over_the_cache(ctx):
    rng = np.random.default_rng(0)
    total = 9  # a prefill of 5, then 4 decode steps
    q, k, v = (rng.standard_normal((N, H, total, D)).astype(np.float32) for _ in range(3))
    net = cached_attention_net(ctx, 5)
    steps = [(0, 5)] + [(p, 1) for p in range(5, total)]
    for pos, t in steps:
        feeds = {n: a[:, :, pos:pos + t] for n, a in zip("qkv", (q, k, v))}
        y = net(pos=np.array([pos]), **feeds)["y"]
        if pos == 0:
            prefill = net.plan
        for b in range(N):
            want = reference(q[b, :, pos:pos + t].astype(np.float64), k[b].astype(np.float64),
                             v[b].astype(np.float64), pos)
            np.testing.assert_allclose(y[b], want, rtol=1e-5, atol=1e-5)
    # both plans kept: a prefill of 5 again (a new sequence from 0) takes its plan back
    decode = net.plan
    net(pos=np.array([0]), **{n: a[:, :, :5] for n, a in zip("qkv", (q, k, v))})
    assert net.plan is prefill and prefill is not decode


def test_the_caches_handed_on_are_the_parameters(ctx):
    """The layer's cache outputs are its parameters' memory in a Net (no copy a pass:
    one launch on every device); an in-place op on them gets memory of its own and
    leaves the cache as it was."""
    rng = np.random.default_rng(3)
    cfg = dp.NetConfig()
    for name in "qkv":
        cfg.add_input(name, [N, H, 2, D])
    cfg.add_input("pos", [1], "int64")
    cfg.add("KVCache", name="cache", inputs=["k", "v", "pos"], outputs=["keys", "values"],
            options={"length": L, "mask": False})
    cfg.add("Activation", name="relu", inputs=["keys"], outputs=["keys"],
            options={"activation": "relu"})
    cfg.add("ScaledDotProductAttention", name="att", inputs=["q", "keys", "values", "pos"],
            outputs=["y"], options={"positions": True})
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode="predict")
    q, k, v = (rng.standard_normal((N, H, 2, D)).astype(np.float32) for _ in range(3))
    net(pos=np.array([3]), q=q, k=k, v=v)
    plan, graph = net.plan, net.graph
    cache_op = next(op for op in graph.ops if op.name == "cache")
    keys, values = (plan.acts[vid] for vid in cache_op.out_values)
    assert keys.buffer is net.param("cache.keys").buffer
    assert values.buffer is net.param("cache.values").buffer
    assert plan.op_forward[cache_op.index] == 1
    relu_out = plan.acts[next(op for op in graph.ops if op.name == "relu").out_values[0]]
    assert relu_out.buffer is not keys.buffer
    cached = net.param("cache.keys").to_host()
    np.testing.assert_array_equal(cached[:, :, 3:5], k)  # negatives kept
    np.testing.assert_array_equal(net.param("cache.values").to_host()[:, :, 3:5], v)


def test_positions_per_sample_and_int32(ctx):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((N, H, 6, D)).astype(np.float32) for _ in range(3))
    net = cached_attention_net(ctx, 3, per_row=True, pos_dtype="int32")
    net(pos=np.array([0, 0], np.int32), **{n: a[:, :, :3] for n, a in zip("qkv", (q, k, v))})
    # sample 0 goes on at 3, sample 1 writes its next 3 at 2 (overwriting its third)
    kk, vv = k.copy(), v.copy()
    kk[1, :, 2:5], vv[1, :, 2:5] = k[1, :, 3:6], v[1, :, 3:6]
    feeds = {"q": q[:, :, 3:6], "k": np.stack([k[0, :, 3:6], k[1, :, 3:6]]),
             "v": np.stack([v[0, :, 3:6], v[1, :, 3:6]])}
    y = net(pos=np.array([3, 2], np.int32), **feeds)["y"]
    for b, pos in ((0, 3), (1, 2)):
        want = reference(q[b, :, 3:6].astype(np.float64), kk[b].astype(np.float64),
                         vv[b].astype(np.float64), pos)
        np.testing.assert_allclose(y[b], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positions", [False, True])
def test_a_position_past_the_cache_gives_nan_and_bad_inputs_are_named(ctx, positions):
    rng = np.random.default_rng(2)
    net = cached_attention_net(ctx, 4, length=6, positions=positions)
    feeds = {n: rng.standard_normal((N, H, 4, D)).astype(np.float32) for n in "qkv"}
    assert np.isfinite(net(pos=np.array([2]), **feeds)["y"]).all()
    assert np.isnan(net(pos=np.array([3]), **feeds)["y"]).all()  # 3 + 4 > 6
    assert np.isnan(net(pos=np.array([-1]), **feeds)["y"]).all()
    with pytest.raises(LayerError, match="length"):
        cached_attention_net(ctx, 4, length=0)
    with pytest.raises(LayerError, match="do not fit"):
        cached_attention_net(ctx, 7, length=6)


def layout_net(ctx, t, layout, cache_layout, per_row=True):
    """A cache fed in ``layout`` ("nhld", "nlhd", a pair, or "packed"), its caches in
    ``cache_layout``, attention reading them in that layout; output y (N, H, T, D)."""
    cfg = dp.NetConfig()
    nlhd = cache_layout == "nlhd"
    shape = {"nhld": [N, H, t, D], "nlhd": [N, t, H, D]}
    pair = [layout, layout] if isinstance(layout, str) else layout
    if layout == "packed":
        cfg.add_input("qkv", [N, t, 3, H, D])
    else:
        cfg.add_input("q", shape[cache_layout])
        cfg.add_input("k", shape[pair[0]])
        cfg.add_input("v", shape[pair[1]])
    cfg.add_input("pos", [N if per_row else 1], "int64")
    outputs = ["keys", "values", "mask"]
    if layout == "packed":
        made = cfg.add("KVCache", name="cache", inputs=["qkv", "pos"], outputs=["q"] + outputs,
                       options={"length": L, "layout": "packed", "cache_layout": cache_layout})
    else:
        made = cfg.add("KVCache", name="cache", inputs=["k", "v", "pos"], outputs=outputs,
                       options={"length": L, "layout": layout, "cache_layout": cache_layout})
    cfg.add("ScaledDotProductAttention", name="att", inputs=["q", "keys", "values", "mask"],
            outputs=["y"], options={"layout": cache_layout})
    cfg.set_outputs(["y", "keys"] + (["q"] if layout == "packed" else []))
    assert len(made) == 4 if layout == "packed" else 3
    return dp.Net(ctx, cfg, mode="predict"), nlhd


@pytest.mark.parametrize("layout,cache_layout", [
    ("nlhd", "nhld"), (["nhld", "nlhd"], "nhld"), (["nlhd", "nhld"], "nlhd"),
    ("nhld", "nlhd"), ("packed", "nlhd"), ("packed", "nhld")])
def test_layouts_read_in_place_match_the_transposed_reference(ctx, layout, cache_layout):
    # the same rows fed in every arrangement, 3 tokens at positions (0, 2): the caches,
    # the split-off queries and attention agree with the float64 reference over
    # (N, H, T, D) rows
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((N, H, 5, D)).astype(np.float32) for _ in range(3))
    pair = [layout, layout] if isinstance(layout, str) else layout
    to = {"nhld": lambda a: a, "nlhd": lambda a: a.transpose(0, 2, 1, 3)}
    net, nlhd = layout_net(ctx, 3, layout, cache_layout)
    start = np.array([0, 2])
    kk, vv = np.zeros((N, H, L, D), np.float32), np.zeros((N, H, L, D), np.float32)
    for b in range(N):
        kk[b, :, start[b]:start[b] + 3], vv[b, :, start[b]:start[b] + 3] = k[b, :, :3], v[b, :, :3]
    if layout == "packed":
        feeds = {"qkv": np.stack([to["nlhd"](a[:, :, :3]) for a in (q, k, v)], 2)}
    else:
        feeds = {"q": to[cache_layout](q[:, :, :3]), "k": to[pair[0]](k[:, :, :3]),
                 "v": to[pair[1]](v[:, :, :3])}
    out = net(pos=start, **feeds)
    y = to[cache_layout](out["y"])
    np.testing.assert_array_equal(to[cache_layout](out["keys"]), kk)
    if layout == "packed":
        np.testing.assert_array_equal(to[cache_layout](out["q"]), q[:, :, :3])
    for b in range(N):
        want = reference(q[b, :, :3].astype(np.float64), kk[b].astype(np.float64),
                         vv[b].astype(np.float64), start[b])
        np.testing.assert_allclose(y[b], want, rtol=1e-5, atol=1e-5)


def test_bad_layouts_are_named(ctx):
    for layout, match in (("nchw", "option 'layout'"), (["packed", "nhld"], "option 'layout'"),
                          ("nlhd", None)):
        cfg = dp.NetConfig()
        cfg.add_input("k", [N, H, 3, D])
        cfg.add_input("v", [N, H, 3, D])
        cfg.add_input("pos", [1], "int64")
        cfg.add("KVCache", name="cache", inputs=["k", "v", "pos"], outputs=["a", "b", "m"],
                options={"length": L, "layout": layout,
                         "cache_layout": "nhld" if match else "hlnd"})
        cfg.set_outputs(["a"])
        with pytest.raises(LayerError, match=match or "option 'cache_layout'"):
            dp.Net(ctx, cfg, mode="predict")
    cfg = dp.NetConfig()
    cfg.add_input("qkv", [N, 3, 2, H, D])
    cfg.add_input("pos", [1], "int64")
    cfg.add("KVCache", name="cache", inputs=["qkv", "pos"], outputs=["q", "a", "b", "m"],
            options={"length": L, "layout": "packed"})
    cfg.set_outputs(["a"])
    with pytest.raises(LayerError, match=r"\(N, T, 3, H, D\)"):
        dp.Net(ctx, cfg, mode="predict")


def test_grouped_packed_layout_refusals_are_named(ctx):
    for shape, options, tables, match in (
            ([N, 3, 7, D], {"query_heads": 4}, None, r"\(N, T, 4 \+ 2 H, D\)"),
            ([N, 3, 8, D], {"query_heads": 0}, None, "option 'query_heads'"),
            ([N, 3, 8, D], {"query_heads": 4}, [1, 3, D + 2], "rotary tables"),
            ([N, 3, 8, D], {"query_heads": 4}, [N, 3, D], None)):
        cfg = dp.NetConfig()
        cfg.add_input("qkv", shape)
        cfg.add_input("pos", [1], "int64")
        inputs = ["qkv", "pos"]
        if tables:
            cfg.add_input("cos", tables)
            cfg.add_input("sin", tables)
            inputs += ["cos", "sin"]
        cfg.add("KVCache", name="cache", inputs=inputs, outputs=["q", "a", "b", "m"],
                options=dict({"length": L, "layout": "packed"}, **options))
        cfg.set_outputs(["q", "a"])
        if match is None:  # accepted: 4 query heads, 2 key/value heads
            net = dp.Net(ctx, cfg, mode="predict")
            assert net.tensor("q").shape == (N, 4, 3, D) and net.tensor("a").shape == (N, 2, L, D)
            continue
        with pytest.raises(LayerError, match=match):
            dp.Net(ctx, cfg, mode="predict")
