"""Convolution2D / TransposedConvolution2D against float64 numpy references, every algorithm."""
import re
import zlib

import numpy as np
import pytest

from dlprim import Tensor
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, host, run_layer, stored

# ---------------------------------------------------------------- numpy references (float64)


def _windows(shape_hw, out_hw, k, stride, dil):
    """Slices of the padded input that tap (r, s) of every output position reads."""
    for r in range(k[0]):
        for s in range(k[1]):
            yield r, s, (slice(r * dil[0], r * dil[0] + stride[0] * (out_hw[0] - 1) + 1, stride[0]),
                         slice(s * dil[1], s * dil[1] + stride[1] * (out_hw[1] - 1) + 1, stride[1]))


def conv_ref(x, w, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    kg = k // groups
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, k, oh, ow))
    for g in range(groups):
        for r, s, (sh, sw) in _windows((h, wd), (oh, ow), (kh, kw), stride, dil):
            y[:, g * kg:(g + 1) * kg] += np.einsum(
                "nchw,kc->nkhw", xp[:, g * cg:(g + 1) * cg, sh, sw], w[g * kg:(g + 1) * kg, :, r, s])
    return y


def conv_backward_ref(x, w, dy, stride, pad, dil, groups):
    """(dx, dw) of y = conv(x, w): scatter dy back through every tap."""
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    kg = k // groups
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for g in range(groups):
        cs, ks = slice(g * cg, (g + 1) * cg), slice(g * kg, (g + 1) * kg)
        for r, s, (sh, sw) in _windows((h, wd), dy.shape[2:], (kh, kw), stride, dil):
            dxp[:, cs, sh, sw] += np.einsum("nkhw,kc->nchw", dy[:, ks], w[ks, :, r, s])
            dw[ks, :, r, s] += np.einsum("nkhw,nchw->kc", dy[:, ks], xp[:, cs, sh, sw])
    return dxp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd], dw


ACT = {"identity": (lambda v: v, lambda y: np.ones_like(y)),
       "relu": (lambda v: np.maximum(v, 0), lambda y: (y > 0) * 1.0),
       "relu6": (lambda v: np.clip(v, 0, 6), lambda y: ((y > 0) & (y < 6)) * 1.0),
       "sigmoid": (lambda v: 1 / (1 + np.exp(-v)), lambda y: y * (1 - y)),
       "tanh": (np.tanh, lambda y: 1 - y * y)}


def transposed_ref(x, w, stride, pad, dil, groups, out_hw):
    """y = conv_transpose(x, w): the adjoint of conv over an input of size out_hw."""
    n = x.shape[0]
    cout = w.shape[1] * groups
    dx, _ = conv_backward_ref(np.zeros((n, cout) + tuple(out_hw)), w, x, stride, pad, dil, groups)
    return dx


def layer_reference(case, x, w, b, dy):
    """(y, dx, dw, db) of the whole layer: act(conv + b) and its gradients."""
    stride, pad, dil, groups = case["stride"], case["pad"], case["dilate"], case["groups"]
    act, dact = ACT[case["activation"]]
    if case["transposed"]:
        out_hw = case["out_hw"]
        z = transposed_ref(x, w, stride, pad, dil, groups, out_hw)
    else:
        z = conv_ref(x, w, stride, pad, dil, groups)
    if b is not None:
        z = z + b[None, :, None, None]
    y = act(z)
    g = dy * dact(y)
    if case["transposed"]:
        # dx = conv(g, w); dw from the convolution whose input is g and output gradient x
        dx = conv_ref(g, w, stride, pad, dil, groups)
        _, dw = conv_backward_ref(g, w, x, stride, pad, dil, groups)
    else:
        dx, dw = conv_backward_ref(x, w, g, stride, pad, dil, groups)
    db = g.sum(axis=(0, 2, 3)) if b is not None else None
    return y, dx, dw, db


def test_reference_gradients_by_finite_differences():
    for stride, pad, dil, groups in (((2, 1), (1, 0, 2, 1), (1, 2), 2), ((1, 1), (0, 0, 0, 0), (1, 1), 1)):
        w0 = np.random.default_rng(1).standard_normal((4, 6 // groups, 3, 2))
        check_reference_grads(
            lambda xs, ps: [conv_ref(xs[0], ps[0], stride, pad, dil, groups)],
            lambda xs, ps, ys, dys: (lambda r: ([r[0]], [r[1]]))(
                conv_backward_ref(xs[0], ps[0], dys[0], stride, pad, dil, groups)),
            [np.random.default_rng(2).standard_normal((2, 6, 7, 6))], [w0])
    # the transposed layer's reference: forward and backward of the adjoint
    w1 = np.random.default_rng(3).standard_normal((4, 3, 3, 3))
    st, pd, dl = (2, 2), (1, 1, 1, 0), (1, 1)

    def t_fwd(xs, ps):
        return [transposed_ref(xs[0], ps[0], st, pd, dl, 2, (10, 9))]

    def t_bwd(xs, ps, ys, dys):
        _, dw = conv_backward_ref(dys[0], ps[0], xs[0], st, pd, dl, 2)
        return [conv_ref(dys[0], ps[0], st, pd, dl, 2)], [dw]
    check_reference_grads(t_fwd, t_bwd, [np.random.default_rng(4).standard_normal((2, 4, 5, 4))], [w1])


# ---------------------------------------------------------------- the layers on the device

def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _case(n, c, k, hw, kernel, stride=1, pad=0, dilate=1, groups=1, bias=True,
          activation="identity", algo="gemm", transposed=False, output_pad=0, tol=1.0):
    """``tol`` scales the absolute tolerances: outputs of 5x5 layers reach ~30, and
    Winograd rounds at 1-3e-6 of the largest (F(4x4, 5x5) up to 9e-6), where the
    other cases' outputs stay near 10."""
    pad4 = tuple(pad) if isinstance(pad, list) and len(pad) == 4 else _pair(pad) * 2
    return dict(n=n, c=c, k=k, hw=hw, kernel=_pair(kernel), stride=_pair(stride), pad=pad4,
                pad_option=pad, dilate=_pair(dilate), groups=groups, bias=bias,
                activation=activation, algo=algo, transposed=transposed, output_pad=output_pad,
                tol=tol)


CONV_CASES = {
    "k1_plain_gemm": _case(3, 5, 7, (6, 5), 1),
    "k1_s2_g2": _case(1, 6, 4, (7, 7), 1, stride=2, groups=2, bias=False, activation="relu"),
    "k3_p1": _case(3, 3, 17, (9, 11), 3, pad=1, activation="relu"),
    "k3_s2_d2_asym_g2": _case(1, 4, 6, (9, 8), 3, stride=2, pad=[0, 1, 2, 1], dilate=2, groups=2,
                              activation="sigmoid"),
    "k5_s2": _case(3, 8, 5, (11, 9), 5, stride=2, pad=2, bias=False, activation="tanh"),
    "k7_s2_p3": _case(1, 3, 16, (11, 11), 7, stride=2, pad=3, activation="relu6"),
    "k3_d2_g2": _case(3, 4, 4, (11, 10), 3, pad=2, dilate=2, groups=2),
    "edges_33x65": _case(3, 33, 65, (5, 7), 3, pad=1),
    "rect_kernel": _case(3, 5, 3, (7, 9), [3, 1], stride=[1, 2], pad=[1, 0], activation="relu"),
    "winograd_p1": _case(3, 5, 9, (9, 7), 3, pad=1, activation="relu", algo="winograd"),
    "winograd4_p1": _case(3, 5, 9, (9, 7), 3, pad=1, activation="relu", algo="winograd4"),
    "winograd_asym": _case(1, 17, 8, (6, 10), 3, pad=[0, 2, 1, 0], bias=False, algo="winograd2"),
    "winograd_p0": _case(3, 6, 13, (8, 9), 3, activation="tanh", algo="winograd4"),
    "winograd_tiny_out": _case(3, 4, 5, (3, 6), 3, pad=1, activation="relu", algo="winograd"),
    # "winograd" on 5x5 runs only where its automatic tile is F(4x4): 3 x 27x27 outputs, 64
    # channels on one side (conv_winograd.automatic_tile_serves). F(4x4, 5x5)'s float32
    # transform-domain sums err up to 1.0e-4 on outputs up to 24 with the CPU GEMM and
    # 1.3e-4 with the GPU tiles' (--device-facts: the same transforms, K = 4 summed in
    # another order)
    "winograd_k5_p2": _case(3, 4, 64, (27, 27), 5, pad=2, activation="relu", algo="winograd",
                            tol=6),
    "winograd4_k5_p2": _case(2, 6, 7, (11, 9), 5, pad=2, activation="tanh", algo="winograd4",
                             tol=4),
    "winograd2_k5_asym": _case(1, 9, 8, (8, 10), 5, pad=[1, 3, 2, 0], bias=False,
                               algo="winograd2", tol=4),
    "winograd4_k5_p0": _case(1, 4, 6, (9, 13), 5, activation="relu", algo="winograd4", tol=4),
    "depthwise_k3": _case(3, 8, 8, (9, 7), 3, pad=1, groups=8, activation="relu6", algo="depthwise"),
    "depthwise_k5_s2": _case(1, 6, 6, (11, 9), 5, stride=2, pad=2, groups=6, bias=False,
                             algo="depthwise"),
    "depthwise_mult2": _case(3, 4, 8, (7, 7), 3, stride=2, pad=[1, 0, 0, 1], dilate=2, groups=4,
                             activation="sigmoid", algo="depthwise"),
    "depthwise_on_gemm": _case(1, 8, 8, (7, 9), 3, pad=1, groups=8),
    "auto": _case(3, 6, 6, (5, 5), 3, pad=1, groups=6, algo="auto"),
}

TRANSPOSED_CASES = {
    "t_k3_s2_outpad": _case(3, 4, 6, (5, 6), 3, stride=2, pad=1, transposed=True, output_pad=1),
    "t_k5_d2_g2_asym": _case(1, 6, 4, (5, 5), 5, stride=2, pad=[1, 2, 0, 1], dilate=2, groups=2,
                             activation="relu", transposed=True),
    "t_k1_plain_gemm": _case(3, 5, 3, (7, 7), 1, bias=True, activation="tanh", transposed=True),
    "t_winograd": _case(1, 7, 5, (6, 7), 3, pad=1, transposed=True, algo="winograd4"),
    "t_winograd_auto_tile": _case(1, 7, 5, (6, 7), 3, pad=1, transposed=True, algo="winograd"),
    "t_winograd2": _case(3, 5, 6, (5, 5), 3, pad=2, transposed=True, algo="winograd2"),
    "t_winograd4_k5": _case(1, 7, 5, (6, 7), 5, pad=2, transposed=True, algo="winograd4", tol=4),
    "t_winograd2_k5_p1": _case(2, 5, 6, (5, 6), 5, pad=1, transposed=True, algo="winograd2",
                               tol=4),
    "t_depthwise": _case(3, 6, 6, (5, 7), 3, stride=2, pad=1, groups=6, activation="relu6",
                         transposed=True, algo="depthwise", output_pad=1),
}


def _make_layer(ctx, case, name):
    opts = dict(channels_out=case["k"], kernel=list(case["kernel"]), stride=list(case["stride"]),
                pad=case["pad_option"], dilate=list(case["dilate"]), groups=case["groups"],
                bias=case["bias"], activation=case["activation"])
    if case["transposed"]:
        opts["output_pad"] = case["output_pad"]
        layer = create(ctx, "TransposedConvolution2D", name, opts)
    else:
        layer = create(ctx, "Convolution2D", name, opts)
    layer.algo = case["algo"]
    return layer


def _run_case(ctx, case, name, accumulate):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    layer = _make_layer(ctx, case, name)
    x = rng.standard_normal((case["n"], case["c"]) + case["hw"]).astype(np.float32)
    setup = layer.setup([TensorSpec(x.shape)])
    out_specs, param_specs = setup.outputs, setup.params
    if case["transposed"]:
        case = dict(case, out_hw=out_specs[0].shape[2:])
    w = (rng.standard_normal(param_specs[0].shape) * 0.5).astype(np.float32)
    b = rng.standard_normal(case["k"]).astype(np.float32) if case["bias"] else None
    dy = rng.standard_normal(out_specs[0].shape).astype(np.float32)
    res = run_layer(ctx, layer, [x], params=[w] + ([b] if b is not None else []), dy=[dy],
                    accumulate=accumulate)
    y, dx, dw, db = layer_reference(case, x.astype(np.float64), w.astype(np.float64),
                                    None if b is None else b.astype(np.float64), dy.astype(np.float64))
    tol = case["tol"]
    assert_close(res.y[0], y, atol=1e-5 * tol, what="%s y" % name)
    assert_close(res.dx[0], dx, rtol=2e-4, atol=2e-4 * tol, what="%s dx" % name)
    assert_close(res.dparams[0], dw, rtol=2e-4, atol=3e-4 * tol, what="%s dw" % name)
    if b is not None:
        assert_close(res.dparams[1], db, rtol=2e-4, atol=3e-4 * tol, what="%s db" % name)
    return layer


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_convolution2d(ctx, name):
    case = CONV_CASES[name]
    layer = _run_case(ctx, case, name, accumulate=len(name) % 2 == 0)
    data_op, filter_op = layer._backward_ops()
    want = case["algo"] if case["algo"] != "auto" else "depthwise"
    assert layer._forward_op().algo == want and data_op.algo == want
    assert filter_op.algo == want


@pytest.mark.parametrize("name", sorted(TRANSPOSED_CASES))
def test_transposed_convolution2d(ctx, name):
    case = TRANSPOSED_CASES[name]
    layer = _run_case(ctx, case, name, accumulate=len(name) % 2 == 1)
    assert layer._forward_op().algo == case["algo"]


def test_transposed_output_shape(ctx):
    layer = create(ctx, "TransposedConvolution2D", "up",
                   dict(channels_out=3, kernel=4, stride=2, pad=1, output_pad=1))
    out, params = layer.setup([TensorSpec((2, 5, 7, 6))])[:2]
    assert out[0].shape == (2, 3, 15, 13) and params[0].shape == (5, 3, 4, 4)


@pytest.mark.parametrize("algo, groups", [("gemm", 1), ("winograd4", 1), ("depthwise", 3)])
def test_backward_filter_split_reduction(ctx, rng, algo, groups):
    """The split reduction (partials in the workspace, then summed) on a long reduction."""
    geom = ConvGeometry(3, 6, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1), groups=groups)
    op = ConvBackwardFilter(ctx, geom, algo=algo, splits=4)
    assert op.algo == algo and op.workspace_bytes(3) > 0
    if algo == "gemm":
        assert op.impl.split_plan(3)[0] == 4
    if algo == "depthwise":
        assert op.impl.chunk_plan(3)[0] == 4
    x = rng.standard_normal((3, 3, 9, 9))
    dy = rng.standard_normal((3, 6, 9, 9))
    dw0 = rng.standard_normal(geom.weight_shape)
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (x, dy, dw0)]
    ws = Tensor(ctx, (op.workspace_bytes(3),), "uint8")
    op(t[0], t[1], t[2], ws=ws, beta=1.0)
    _, dw = conv_backward_ref(x, np.zeros(geom.weight_shape), dy, (1, 1), (1, 1, 1, 1), (1, 1),
                              groups)
    assert_close(t[2].numpy(), dw0 + dw, rtol=1e-4, atol=1e-4, what="%s split dw" % algo)


@pytest.mark.parametrize("direction, stride, gpu", [
    ("forward", (1, 1), False), ("forward", (2, 1), True), ("backward_data", (1, 1), False),
    ("backward_data", (2, 2), False), ("backward_data", (2, 2), True),
    ("backward_data", (3, 2), True)])
def test_split_reduction_forward_and_backward_data(ctx, rng, monkeypatch, direction, stride,
                                                   gpu):
    """Forward and backward-data with split-K: partials, then beta, bias and activation
    applied once by the reduction; strided backward-data per phase (PoCL) and with every
    phase in one launch (the GPU variant)."""
    if gpu:
        monkeypatch.setattr(ctx.facts, "is_gpu", True)
    geom = ConvGeometry(7, 9, (9, 8), (3, 3), stride, (1, 0, 2, 1))
    cls = ConvForward if direction == "forward" else ConvBackwardData
    op = cls(ctx, geom, bias=True, activation="relu", algo="gemm", splits=3)
    impl = op.impl.op
    assert impl.split_plan(2)[0] > 1 and op.workspace_bytes(2) > 0
    assert impl.merged == (ctx.facts.is_gpu and direction == "backward_data" and max(stride) > 1)
    x, dy = rng.standard_normal(geom.in_shape(2)), rng.standard_normal(geom.out_shape(2))
    w = rng.standard_normal(geom.weight_shape) * 0.3
    if direction == "forward":
        src, bias, out0 = x, rng.standard_normal(9), rng.standard_normal(geom.out_shape(2))
        ref = conv_ref(x, w, stride, geom.pad, (1, 1), 1)
    else:
        src, bias, out0 = dy, rng.standard_normal(7), rng.standard_normal(geom.in_shape(2))
        ref, _ = conv_backward_ref(x, w, dy, stride, geom.pad, (1, 1), 1)
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (src, w, out0, bias)]
    op(t[0], t[1], t[2], t[3], ws=Tensor(ctx, (op.workspace_bytes(2),), "uint8"), beta=0.5)
    want = np.maximum(ref + 0.5 * out0 + bias[None, :, None, None], 0)
    assert_close(t[2].numpy(), want, rtol=1e-4, atol=1e-4, what="%s split" % direction)


@pytest.mark.parametrize("switch_max", [4, 64])
def test_patch_embedding_backward_data_builds_one_gemm_body(ctx, rng, monkeypatch, switch_max):
    """A patch embedding (kernel = stride, here 4x4: 16 stride phases) on a GPU runs every
    phase in one launch; past tuning.CONV_MERGED_SWITCH_MAX phases the kernel reads their
    sizes from a table, so its source holds one GEMM body (ViT-B's 16x16 stride-16 layer
    has 256 phases: a body per phase built for over a minute). Both forms match the
    reference."""
    from dlprim.core import tuning
    from dlprim.kernels import program
    monkeypatch.setattr(ctx.facts, "is_gpu", True)
    monkeypatch.setattr(tuning, "CONV_MERGED_SWITCH_MAX", switch_max)
    geom = ConvGeometry(3, 5, (8, 12), (4, 4), (4, 4))
    op = ConvBackwardData(ctx, geom, algo="gemm")
    impl = op.impl.op
    assert impl.merged and len(impl.phase_table) == 16
    t = impl.tile(2)  # the source as ConvGemm.program renders it for batch 2
    source = program.render("conv_gemm", ctx.facts, TM=t["TILE_M"], TN=t["TILE_N"],
                            TK=t["TILE_K"], WM=t["BLOCK_M"], WN=t["BLOCK_N"], WARPS_M=0,
                            WARPS_N=0, VEC=tuning.conv_vec(t, "backward_data",
                                                           impl.dims(2)[2]),
                            SPLIT=False, **impl.params)
    assert len(re.findall(r"case \d+: \{", source)) == (0 if switch_max < 16 else 16)
    x, dy = rng.standard_normal(geom.in_shape(2)), rng.standard_normal(geom.out_shape(2))
    w = rng.standard_normal(geom.weight_shape)
    ref, _ = conv_backward_ref(x, w, dy, (4, 4), geom.pad, (1, 1), 1)
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (dy, w)]
    dx = Tensor(ctx, geom.in_shape(2))
    op(t[0], t[1], dx, ws=Tensor(ctx, (max(op.workspace_bytes(2), 1),), "uint8"))
    assert_close(dx.numpy(), ref, rtol=1e-4, atol=1e-4, what="patch embedding dx")


def test_splits_only_for_gemm(ctx):
    geom = ConvGeometry(4, 4, (6, 6), (3, 3), pad=(1, 1, 1, 1))
    with pytest.raises(ValueError, match="splits"):
        ConvForward(ctx, geom, algo="winograd", splits=2)


def test_predict_mode_forward_and_params(ctx):
    layer = create(ctx, "Convolution2D", "p", dict(channels_out=4, kernel=3, pad=1))
    x = np.random.default_rng(5).standard_normal((1, 3, 5, 5)).astype(np.float32)
    res = run_layer(ctx, layer, [x], mode="predict")
    w, b = res.params
    bound = 1 / np.sqrt(3 * 9)
    assert w.shape == (4, 3, 3, 3) and np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert w.std() > bound / 3  # filled, not left at zero
    assert_close(res.y[0], conv_ref(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1) + b[None, :, None, None])
    assert layer.config() == dict(channels_out=4, channels_in=-1, kernel=3, stride=1, pad=1,
                                  dilate=1, groups=1, bias=True, activation="identity")


@pytest.mark.parametrize("options, shape, message", [
    (dict(channels_out=4, channels_in=5, kernel=3), (1, 3, 8, 8), "channels_in"),
    (dict(channels_out=4, kernel=3, groups=2), (1, 3, 8, 8), "groups"),
    (dict(channels_out=3, kernel=3, groups=2), (1, 4, 8, 8), "groups"),
    (dict(channels_out=4, kernel=7), (1, 3, 5, 5), "kernel"),
    (dict(channels_out=4, kernel=3, dilate=3), (1, 3, 6, 6), "kernel"),
    (dict(channels_out=4, kernel=3, stride=-1), None, "stride"),
    (dict(channels_out=4, kernel=3, stride=0), None, "stride"),
    (dict(channels_out=4, kernel=3, activation="gelu"), None, "activation"),
    (dict(kernel=3), None, "channels_out"),
    (dict(channels_out=4, kernel=3, pad=[1, 2, 3]), None, "pad"),
])
def test_option_errors(ctx, options, shape, message):
    with pytest.raises(LayerError, match=r"Convolution2D 'bad': .*%s" % message):
        layer = create(ctx, "Convolution2D", "bad", options)
        layer.setup([TensorSpec(shape)])


def test_transposed_option_errors(ctx):
    with pytest.raises(LayerError, match=r"TransposedConvolution2D 'up': .*output_pad"):
        create(ctx, "TransposedConvolution2D", "up", dict(channels_out=2, kernel=3, stride=2,
                                                          output_pad=2))
    with pytest.raises(LayerError, match=r"TransposedConvolution2D 'up': .*channels_in"):
        create(ctx, "TransposedConvolution2D", "up", dict(
            channels_out=2, channels_in=3, kernel=3)).setup([TensorSpec((1, 4, 5, 5))])


@pytest.mark.parametrize("name", ["edges_33x65", "winograd_p1", "depthwise_mult2",
                                  "t_k3_s2_outpad", "k5_s2", "k1_s2_g2"])
def test_gpu_configuration(ctx, monkeypatch, name):
    """The GPU variant (geometry baked in as constants, large tiles, fixed work-groups) on
    this device, so that it is checked where the tests run."""
    monkeypatch.setattr(ctx.facts, "is_gpu", True)
    case = dict(CONV_CASES, **TRANSPOSED_CASES)[name]
    layer = _run_case(ctx, case, name, accumulate=True)
    assert layer._forward_op().impl.__class__.__module__.endswith(case["algo"])


def test_strided_backward_data_runs_per_phase(ctx):
    """Stride 2 backward-data gathers per stride phase (the k5_s2 and k1_s2 cases check
    its values): four launches, and none reads taps that cannot reach its rows."""
    layer = _make_layer(ctx, CONV_CASES["k5_s2"], "phases")
    layer.setup([TensorSpec((3, 8, 11, 9))])
    data_op = layer._backward_ops()[0]
    phases = data_op.impl.op.phases(3)
    assert len(phases) == 4 and sum(d[2] for _, d in phases) == 5 * 5 * 5


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_layers_take_float32s_algorithms_on_cpus(ctx, dtype):
    """On CPUs 16-bit activations take the algorithm float32 would: im2col (float32
    GEMMs through copies), the direct kernels for few channels (reading and writing
    16-bit values), the implicit GEMM for grouped layers (im2col does not apply)."""
    import layer_check
    layer_check.skip_unless_cpu(ctx)
    wide = ConvGeometry(256, 256, (9, 9), (3, 3), (2, 2), (1, 1, 1, 1))
    few = ConvGeometry(3, 8, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1))
    grouped = ConvGeometry(8, 8, (9, 9), (3, 3), (1, 1), (1, 1, 1, 1), groups=2)
    for op in (ConvForward, ConvBackwardData, ConvBackwardFilter):
        for geom in (wide, few, grouped):
            assert op(ctx, geom, batch=2, dtype=dtype).algo == op(ctx, geom, batch=2).algo
        assert op(ctx, grouped, batch=2, dtype=dtype).algo == "gemm"
    assert ConvForward(ctx, wide, batch=2, dtype=dtype).algo == "im2col"
    assert ConvForward(ctx, few, batch=2, dtype=dtype).algo == "direct"


def test_winograd_tile_choice(ctx):
    """'winograd' means F(4x4,3x3) except for outputs under 4x4, under 64 channels on both
    sides, or small problems (forward and backward-data under 2 x 32 x 32 + 1 output
    pixels, backward-filter under 784), where F(2x2) rounds less at no cost."""
    from dlprim.core.tuning import winograd_tile
    assert winograd_tile(64, 64, (28, 28), 1) == 2
    assert winograd_tile(64, 64, (28, 28), 1, filter_pass=True) == 4
    assert winograd_tile(128, 64, (32, 32), 2) == 2  # DLPrimitives' largest test layer
    assert winograd_tile(128, 64, (32, 32), 3) == 4
    assert winograd_tile(512, 512, (7, 7), 16) == 2  # the smallest benchmarked layer
    assert winograd_tile(512, 512, (7, 7), 16, filter_pass=True) == 4
    assert winograd_tile(512, 512, (7, 7), 15, filter_pass=True) == 2
    assert winograd_tile(512, 512, (7, 7), 64) == 4
    assert winograd_tile(3, 64, (224, 224), 16) == 4  # a first layer's backward-data
    assert winograd_tile(3, 8, (32, 32), 64) == 2
    assert winograd_tile(128, 128, (3, 6), 64) == 2
    # where F(2x2) would multiply on tensor cores, it takes the wide layers at any size
    assert winograd_tile(512, 512, (28, 28), 64, tensor_cores=True) == 2
    assert winograd_tile(256, 512, (28, 28), 64, tensor_cores=True) == 2
    assert winograd_tile(128, 256, (56, 56), 64, tensor_cores=True) == 4
    assert winograd_tile(128, 256, (56, 56), 64, filter_pass=True, tensor_cores=True) == 2
    assert winograd_tile(64, 128, (112, 112), 64, filter_pass=True, tensor_cores=True) == 4
    assert winograd_tile(512, 512, (28, 28), 64) == 4
    assert winograd_tile(64, 192, (27, 27), 16) == 4  # AlexNet's 5x5 layer
    assert winograd_tile(64, 192, (3, 27), 16) == 2
    from dlprim.core.conv_winograd import choose_tile
    from dlprim.core.gemm import Gemm
    # the context decides: F(2x2)'s TF32 GEMMs only where the device has tensor cores
    assert choose_tile(ctx, 512, 512, (28, 28), 64, precision="fp16") == \
        (2 if Gemm.on_tensor_cores(ctx, "tf32") else 4)
    assert choose_tile(ctx, 512, 512, (28, 28), 64, precision="fp32") == 4
    for name, tile in (("winograd_p1", 2), ("winograd4_p1", 4), ("winograd_tiny_out", 2),
                       ("winograd_asym", 2), ("t_winograd_auto_tile", 2)):
        case = dict(CONV_CASES, **TRANSPOSED_CASES)[name]
        layer = _make_layer(ctx, case, name)
        layer.setup([TensorSpec((case["n"], case["c"]) + case["hw"])])
        assert layer._forward_op().impl.plan.t.m == tile
        assert layer._backward_ops()[1].impl.t.m == tile
    # the tile follows the batch a layer is set up for
    layer = create(ctx, "Convolution2D", "b", dict(channels_out=64, kernel=3, pad=1))
    layer.algo = "winograd"
    layer.setup([TensorSpec((1, 64, 7, 7))])
    assert layer._forward_op().impl.plan.t.m == 2
    layer.reshape([(64, 64, 7, 7)])
    assert layer._forward_op().impl.plan.t.m == 4


def test_mode_switch_resizes_workspace(ctx):
    """Set up for predict, then train: reshape (what a Net calls) asks for backward room."""
    layer = create(ctx, "Convolution2D", "m", dict(channels_out=6, kernel=3, pad=1,
                                                    activation="relu"))
    layer.algo = "winograd"
    layer.mode = "predict"
    ws_predict = layer.setup([TensorSpec((2, 5, 8, 8))]).workspace
    layer.mode = "train"
    _, ws_train = layer.reshape([(2, 5, 8, 8)])
    # backward keeps dy * relu'(y) (2*6*8*8 floats) beside the backward-data workspace
    assert ws_train >= ws_predict + 4 * 2 * 6 * 8 * 8


def test_winograd_filter_sum_on_batched_gemm(ctx, rng, monkeypatch):
    """Backward-filter's transform-domain sum on the batched Gemm instead of split-K."""
    from dlprim.core import tuning
    from dlprim.core.gemm import Gemm
    monkeypatch.setattr(tuning, "WINOGRAD_FILTER_SUM", "gemm")
    geom = ConvGeometry(5, 7, (9, 8), (3, 3), (1, 1), (1, 0, 1, 2))
    op = ConvBackwardFilter(ctx, geom, algo="winograd4")
    assert isinstance(op.impl.sum_op(2), Gemm)
    x, dy = rng.standard_normal((2, 5, 9, 8)), rng.standard_normal((2, 7, 9, 8))
    dw0 = rng.standard_normal(geom.weight_shape)
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (x, dy, dw0)]
    op(t[0], t[1], t[2], ws=Tensor(ctx, (op.workspace_bytes(2),), "uint8"), beta=1.0)
    _, dw = conv_backward_ref(x, np.zeros(geom.weight_shape), dy, (1, 1), (1, 0, 1, 2), (1, 1), 1)
    assert_close(t[2].numpy(), dw0 + dw, rtol=1e-4, atol=1e-4, what="winograd gemm-sum dw")


def test_winograd_5x5_only_on_its_larger_tile(ctx):
    """A 5x5 layer asked for "winograd" takes the implicit GEMM where the automatic tile
    would be F(2x2, 5x5), which rounds as coarsely as F(4x4, 3x3) (DLPrimitives'
    conv2d_win case: 98->128 at 4x4, batch 1); forcing the tile still runs it, and the
    larger problem runs F(4x4, 5x5)."""
    small = ConvGeometry(98, 128, (4, 4), (5, 5), pad=(2, 2, 2, 2))
    for op in (ConvForward, ConvBackwardData, ConvBackwardFilter):
        assert op(ctx, small, algo="winograd", batch=1).algo == "gemm"
        assert op(ctx, small, algo="winograd2", batch=1).algo == "winograd2"
    big = ConvGeometry(64, 192, (27, 27), (5, 5), pad=(2, 2, 2, 2))
    for op in (ConvForward, ConvBackwardData, ConvBackwardFilter):
        chosen = op(ctx, big, algo="winograd", batch=4)
        tiles = chosen.impl.t if op is ConvBackwardFilter else chosen.impl.plan.t
        assert chosen.algo == "winograd" and tiles.m == 4


def test_algorithm_table():
    """The choice per direction on GPUs (docs/benchmarks.md) and on CPUs."""
    from types import SimpleNamespace
    from dlprim.core.conv import choose_algorithm
    gpu = SimpleNamespace(facts=SimpleNamespace(is_gpu=True, is_cpu=False))
    cpu = SimpleNamespace(facts=SimpleNamespace(is_gpu=False, is_cpu=True))
    dirs = ("forward", "backward_data", "backward_filter")

    def pick(ctx, *args, **kw):
        g = ConvGeometry(*args, **kw)
        return tuple(choose_algorithm(ctx, g, d) for d in dirs)
    assert pick(gpu, 64, 64, (56, 56), (3, 3), pad=(1, 1, 1, 1)) == ("winograd",) * 3
    assert pick(cpu, 64, 64, (56, 56), (3, 3), pad=(1, 1, 1, 1)) == ("winograd",) * 3
    assert pick(cpu, 64, 64, (14, 14), (3, 3), pad=(1, 1, 1, 1)) == ("im2col",) * 3
    assert pick(cpu, 32, 64, (56, 56), (3, 3), pad=(1, 1, 1, 1)) == ("im2col", "direct", "im2col")
    assert pick(cpu, 16, 32, (14, 14), (5, 5), pad=(2, 2, 2, 2)) == ("direct",) * 3
    assert pick(cpu, 16, 32, (14, 14), (5, 5), (2, 2), (2, 2, 2, 2)) == \
        ("direct", "im2col", "direct")
    assert pick(cpu, 64, 256, (56, 56), (1, 1)) == ("gemm", "gemm", "im2col")  # a plain GEMM
    assert pick(cpu, 96, 96, (112, 112), (3, 3), groups=96) == ("depthwise",) * 3
    assert pick(cpu, 64, 64, (56, 56), (3, 3), groups=2) == ("gemm",) * 3
    assert pick(gpu, 3, 64, (224, 224), (3, 3), pad=(1, 1, 1, 1)) == ("gemm", "winograd", "gemm")
    # 5x5 (AlexNet's second layer): Winograd F(4x4, 5x5) on GPUs and, from 27x27, on CPUs
    assert pick(gpu, 64, 192, (27, 27), (5, 5), pad=(2, 2, 2, 2)) == ("winograd",) * 3
    assert pick(cpu, 64, 192, (27, 27), (5, 5), pad=(2, 2, 2, 2)) == ("winograd",) * 3
    assert pick(cpu, 64, 192, (26, 26), (5, 5), pad=(2, 2, 2, 2)) == ("im2col",) * 3
    assert pick(cpu, 64, 64, (27, 27), (3, 3), pad=(1, 1, 1, 1)) == ("im2col",) * 3
    assert pick(gpu, 64, 192, (27, 27), (7, 7), pad=(3, 3, 3, 3)) == ("gemm",) * 3
    assert pick(gpu, 128, 128, (56, 56), (3, 3), (2, 2), (1, 1, 1, 1)) == ("gemm",) * 3
    assert pick(gpu, 96, 96, (112, 112), (3, 3), (2, 2), (1, 1, 1, 1), groups=96) == \
        ("depthwise",) * 3
    assert pick(gpu, 256, 64, (56, 56), (1, 1)) == ("gemm",) * 3
    # CPUs of 16-float vectors (AVX-512): the direct forward and backward-data up to 128
    # written channels, Winograd's from 14x14; the direct filter gradient for every
    # layer of more than one tap
    wide = SimpleNamespace(facts=SimpleNamespace(is_gpu=False, is_cpu=True, float_lanes=16,
                                                 max_float_vector=16))
    assert pick(wide, 64, 64, (56, 56), (3, 3), pad=(1, 1, 1, 1)) == ("direct",) * 3
    assert pick(wide, 128, 128, (28, 28), (3, 3), pad=(1, 1, 1, 1)) == ("direct",) * 3
    assert pick(wide, 256, 256, (14, 14), (3, 3), pad=(1, 1, 1, 1)) == \
        ("winograd", "winograd", "direct")
    assert pick(wide, 512, 512, (7, 7), (3, 3), pad=(1, 1, 1, 1)) == \
        ("im2col", "im2col", "direct")
    assert pick(wide, 64, 128, (56, 56), (3, 3), (2, 2), (1, 1, 1, 1)) == \
        ("direct", "im2col", "direct")
    assert pick(wide, 128, 256, (28, 28), (3, 3), (2, 2), (1, 1, 1, 1)) == \
        ("im2col", "im2col", "direct")
    assert pick(wide, 64, 256, (56, 56), (1, 1)) == ("gemm", "gemm", "im2col")
    assert pick(wide, 64, 128, (56, 56), (1, 1), (2, 2)) == ("direct", "im2col", "im2col")
    assert pick(wide, 16, 32, (14, 14), (5, 5), pad=(2, 2, 2, 2)) == ("direct",) * 3


def test_the_vector_width_can_be_set_from_the_environment(monkeypatch):
    """DLPRIM_CPU_VECTOR_WIDTH: 8-wide code on a CPU that reports 16 (Intel's runtime told
    to write AVX2 code), and back; a width the compiler lacks or another number is an
    error naming the variable."""
    from types import SimpleNamespace
    from dlprim.core import tuning
    wide = SimpleNamespace(float_lanes=16, max_float_vector=16)
    old_pocl = SimpleNamespace(float_lanes=16, max_float_vector=8)
    monkeypatch.setenv("DLPRIM_CPU_VECTOR_WIDTH", "8")
    assert tuning.cpu_vector_width(wide) == 8
    monkeypatch.setenv("DLPRIM_CPU_VECTOR_WIDTH", "16")
    assert tuning.cpu_vector_width(wide) == 16
    with pytest.raises(ValueError, match="DLPRIM_CPU_VECTOR_WIDTH=16: .* up to 8"):
        tuning.cpu_vector_width(old_pocl)
    monkeypatch.setenv("DLPRIM_CPU_VECTOR_WIDTH", "4")
    with pytest.raises(ValueError, match="must be 8 or 16"):
        tuning.cpu_vector_width(wide)


def test_direct_register_blocks_follow_the_vector_width():
    """The direct forward's blocks: float8 vectors, at most 32 channels, on CPUs of 8-float
    vectors (and compilers without float16 vectors); float16 vectors, up to 64 channels by
    4 pixels, where the CPU's native vectors hold 16 floats."""
    from types import SimpleNamespace
    from dlprim.core import conv_direct, tuning
    narrow = SimpleNamespace(float_lanes=8, max_float_vector=16)
    wide = SimpleNamespace(float_lanes=16, max_float_vector=16)
    old_pocl = SimpleNamespace(float_lanes=16, max_float_vector=8)
    assert [tuning.cpu_vector_width(f) for f in (narrow, wide, old_pocl)] == [8, 16, 8]
    assert conv_direct.register_block(64, 56, 8) == (32, 2)
    assert conv_direct.register_block(48, 28, 8) == (24, 3)
    assert conv_direct.register_block(64, 56, 16) == (64, 4)
    assert conv_direct.register_block(72, 11, 16) == (48, 4)  # two blocks of 48: 96 lanes
    assert conv_direct.register_block(20, 9, 16) == (32, 3)   # 9 pixels in three runs of 3
    assert conv_direct.register_block(5, 9, 16) == (16, 5)
    # the filter gradient: KW taps by up to 2 float8 or 4 float16 vectors, 12 at most
    assert [conv_direct.filter_block(c, 3, 8) for c in (8, 9, 64)] == [8, 16, 16]
    assert [conv_direct.filter_block(c, 3, 16) for c in (16, 20, 33, 64, 512)] == \
        [16, 32, 64, 64, 64]
    assert [conv_direct.filter_block(64, kw, 16) for kw in (5, 7)] == [32, 16]


def test_conv_tuner_round_trip(ctx, rng, tmp_path, monkeypatch, capsys):
    """dlprim-tune conv times candidate tiles per direction and shape class and stores the
    fastest; the launcher then builds with the stored tile and still computes the conv."""
    import json
    from dlprim.cli import tune
    from dlprim.core import tuning
    monkeypatch.setenv("DLPRIM_CACHE_DIR", str(tmp_path))
    tune.main(["conv", "--shapes", "8x6x6:64x3", "--batch", "2", "--candidates", "2",
               "--repeat", "1"], ctx=ctx)
    out = capsys.readouterr().out
    entry = json.loads((tmp_path / "conv_tuning.json").read_text())[tuning.device_key(ctx.facts)]
    # one stored class per direction; which class a shape falls in depends on the device
    by_mode = {key.split(".")[0]: key for key in entry}
    assert sorted(by_mode) == ["backward_data", "backward_filter", "forward"] and len(entry) == 3
    assert "best for %s" % by_mode["forward"] in out
    first, second = tuning.candidates(ctx.facts, "conv")[:2]
    assert all(tile in (first, second) for tile in entry.values())
    geom = ConvGeometry(8, 64, (6, 6), (3, 3), pad=(1, 1, 1, 1))
    assert ConvBackwardFilter(ctx, geom, algo="gemm", batch=2).impl.op.tile(2) == \
        entry[by_mode["backward_filter"]]
    # a stored tile other than the table's is the one built
    forward = by_mode["forward"]
    stored = next(t for t in (first, second)
                  if t != tuning.default_tile(ctx.facts, forward.split(".")[1], "conv"))
    tuning.store_tuned(ctx.facts, {forward: stored}, "conv")
    op = ConvForward(ctx, geom, bias=True, activation="relu", algo="gemm", batch=2)
    assert op.impl.op.tile(2) == stored
    x, w, b = (rng.standard_normal(s) for s in (geom.in_shape(2), geom.weight_shape, (64,)))
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (x, w, b)]
    y = Tensor(ctx, geom.out_shape(2))
    op(t[0], t[1], y, t[2])
    want = np.maximum(conv_ref(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1) + b[None, :, None, None], 0)
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4, what="forward with a tuned tile")


@pytest.mark.parametrize("geom", [
    ConvGeometry(3, 5, (9, 7), (3, 3), pad=(1, 1, 1, 1)),
    ConvGeometry(4, 65, (11, 9), (5, 3), stride=(2, 3), pad=(2, 0, 1, 1), dilate=(1, 2)),
    ConvGeometry(33, 31, (6, 5), (1, 1), stride=(2, 2)),
    ConvGeometry(2, 3, (1, 1), (1, 1), pad=(1, 1, 1, 1)),
    ConvGeometry(8, 64, (20, 19), (3, 3), pad=(1, 1, 1, 1))])  # 72 rows, 24 strips
def test_im2col_forward(ctx, rng, monkeypatch, geom):
    """im2col + GEMM forward (the CPUs' choice) with bias, activation and beta, the batch
    cut into chunks of two images by a small workspace bound (the last one ragged). Where
    the GEMM packs B (out_c 65 on a CPU) im2col writes its strips and nothing is packed."""
    from dlprim.core import tuning
    from dlprim.utils import round_up
    packs = ctx.facts.is_cpu and geom.out_c >= tuning.CPU_PACK_MIN_M
    pixels = round_up(geom.out_h * geom.out_w, 16) if packs else geom.out_h * geom.out_w
    per_image = geom.in_c * geom.kh * geom.kw * pixels * 4
    monkeypatch.setattr(tuning, "IM2COL_WORKSPACE_BYTES", 2 * per_image)
    batch = 3
    x, w, b, y0 = (rng.standard_normal(s) for s in (geom.in_shape(batch), geom.weight_shape,
                                                    (geom.out_c,), geom.out_shape(batch)))
    op = ConvForward(ctx, geom, bias=True, activation="tanh", algo="im2col", batch=batch)
    assert op.algo == "im2col" and op.workspace_bytes(batch) == 2 * per_image
    launches = op.impl.launches(*(Tensor(ctx, s) for s in (
        geom.in_shape(batch), geom.weight_shape, geom.out_shape(batch), (geom.out_c,))),
        Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), 0.0)
    names = [launch.name for launch in launches]
    assert ("conv_im2col_strips" in names and "gemm_pack_b" not in names) == packs, names
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (x, w, b, y0)]
    op(t[0], t[1], t[3], t[2], ws=Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), beta=0.5)
    want = np.tanh(conv_ref(x, w, (geom.sh, geom.sw), geom.pad, (geom.dh, geom.dw), 1)
                   + b[None, :, None, None] + 0.5 * y0)
    assert_close(t[3].numpy(), want, rtol=1e-4, atol=1e-4, what="im2col forward")


@pytest.mark.parametrize("geom", [
    ConvGeometry(3, 5, (9, 7), (3, 3), pad=(1, 1, 1, 1)),
    ConvGeometry(4, 65, (11, 9), (5, 3), stride=(2, 3), pad=(2, 0, 1, 1), dilate=(1, 2)),
    ConvGeometry(70, 3, (6, 5), (1, 1))])
def test_im2col_backward_filter(ctx, rng, monkeypatch, geom):
    """dw = beta * dw + the batch sum of dy · colᵀ, over chunks of two images (the last
    one ragged); beta applies once."""
    from dlprim.core import tuning
    per_image = geom.in_c * geom.kh * geom.kw * geom.out_h * geom.out_w * 4
    monkeypatch.setattr(tuning, "IM2COL_WORKSPACE_BYTES", 2 * per_image)
    batch = 3
    x, dy, dw0 = (rng.standard_normal(s) for s in (geom.in_shape(batch), geom.out_shape(batch),
                                                    geom.weight_shape))
    op = ConvBackwardFilter(ctx, geom, algo="im2col", batch=batch)
    assert op.algo == "im2col" and op.workspace_bytes(batch) == 2 * per_image
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (x, dy, dw0)]
    op(t[0], t[1], t[2], ws=Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), beta=0.5)
    _, dw = conv_backward_ref(x, np.zeros(geom.weight_shape), dy, (geom.sh, geom.sw), geom.pad,
                              (geom.dh, geom.dw), 1)
    assert_close(t[2].numpy(), 0.5 * dw0 + dw, rtol=1e-4, atol=1e-4, what="im2col dw")


@pytest.mark.parametrize("geom", [
    ConvGeometry(3, 5, (9, 7), (3, 3), pad=(1, 1, 1, 1)),
    ConvGeometry(4, 65, (11, 9), (5, 3), stride=(2, 3), pad=(2, 0, 1, 1), dilate=(1, 2)),
    ConvGeometry(70, 3, (7, 5), (1, 1), stride=(2, 2)),
    ConvGeometry(4, 70, (10, 9), (3, 5), pad=(2, 1, 0, 3), dilate=(2, 1))])
def test_im2col_backward_data(ctx, rng, monkeypatch, geom):
    """dx = act(beta * dx + col2im(wᵀ · dy) + bias) over chunks of two images (the last one
    ragged); pixels no tap reaches (stride 2, 1x1) get beta * dx + bias only."""
    from dlprim.core import tuning
    per_image = geom.in_c * geom.kh * geom.kw * geom.out_h * geom.out_w * 4
    monkeypatch.setattr(tuning, "IM2COL_WORKSPACE_BYTES", 2 * per_image)
    batch = 3
    w, dy, dx0, b = (rng.standard_normal(s) for s in (geom.weight_shape, geom.out_shape(batch),
                                                       geom.in_shape(batch), (geom.in_c,)))
    op = ConvBackwardData(ctx, geom, bias=True, activation="relu", algo="im2col", batch=batch)
    assert op.algo == "im2col" and op.workspace_bytes(batch) == 2 * per_image
    t = [Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (dy, w, dx0, b)]
    op(t[0], t[1], t[2], t[3], ws=Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), beta=0.5)
    dx, _ = conv_backward_ref(np.zeros(geom.in_shape(batch)), w, dy, (geom.sh, geom.sw), geom.pad,
                              (geom.dh, geom.dw), 1)
    want = np.maximum(dx + 0.5 * dx0 + b[None, :, None, None], 0)
    assert_close(t[2].numpy(), want, rtol=1e-4, atol=1e-4, what="im2col dx")


# direct convolution: register blocks of 8 channels (out_c <= 8) or 16, rows cut into
# runs (widths 14 -> 5+5+4, 17 -> 6+6+5, 9 -> 8+1), blocks at the padded edges, strides,
# dilation, a channel count past the last whole block
DIRECT_GEOMS = [
    ConvGeometry(16, 32, (14, 14), (5, 5), pad=(2, 2, 2, 2)),     # the MNIST net's second layer
    ConvGeometry(1, 5, (9, 9), (3, 3), pad=(1, 1, 1, 1)),
    ConvGeometry(3, 19, (7, 17), (3, 2), pad=(1, 0, 2, 1)),
    ConvGeometry(5, 10, (11, 13), (5, 3), stride=(2, 3), pad=(2, 0, 1, 1), dilate=(1, 2)),
    ConvGeometry(2, 9, (6, 19), (3, 5), pad=(2, 1, 0, 3), dilate=(2, 1)),
    # channel blocks of 48 and 64 (wide CPUs: 16-float vectors) or 24 and 32, partial runs
    ConvGeometry(6, 72, (5, 11), (3, 3), pad=(1, 1, 1, 1)),
    ConvGeometry(7, 64, (6, 9), (3, 3), stride=(2, 2), pad=(1, 1, 1, 1)),
]


# the activations' storages of the direct kernels: tolerance (relative to the largest
# value) of a result rounded to it; the sums stay float32
DIRECT_STORAGE = {"float32": 1e-4, "float16": 2 ** -10, "bfloat16": 2 ** -7}


def _activations(ctx, values, dtype):
    """``values`` as the device stores ``dtype`` (their float64 values, the Tensor)."""
    values = stored(values, dtype)
    return values, Tensor.from_numpy(ctx, host(values, dtype))


def _near(got, want, dtype, what):
    tol = DIRECT_STORAGE[dtype]
    assert_close(got, want, rtol=tol, atol=tol * np.abs(want).max(), what=what)




@pytest.mark.parametrize("dtype", sorted(DIRECT_STORAGE))
@pytest.mark.parametrize("geom", DIRECT_GEOMS)
def test_direct_forward(ctx, rng, geom, dtype):
    """y = act(conv(x, w) + b + beta * y) against the float64 reference; 16-bit x and y
    read and written as stored."""
    batch = 2
    w, b = rng.standard_normal(geom.weight_shape), rng.standard_normal(geom.out_c)
    x, tx = _activations(ctx, rng.standard_normal(geom.in_shape(batch)), dtype)
    y0, ty = _activations(ctx, rng.standard_normal(geom.out_shape(batch)), dtype)
    op = ConvForward(ctx, geom, bias=True, activation="tanh", algo="direct", batch=batch,
                     dtype=dtype)
    assert op.algo == "direct"
    tw, tb = (Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (w, b))
    op(tx, tw, ty, tb, ws=Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), beta=0.5)
    want = np.tanh(conv_ref(x, w.astype(np.float32), (geom.sh, geom.sw), geom.pad,
                            (geom.dh, geom.dw), 1) + b.astype(np.float32)[None, :, None, None]
                   + 0.5 * y0)
    _near(ty.numpy().astype(np.float64), want, dtype, "direct forward")


@pytest.mark.parametrize("dtype", sorted(DIRECT_STORAGE))
@pytest.mark.parametrize("geom", [g for g in DIRECT_GEOMS if g.sh == g.sw == 1])
def test_direct_backward_data(ctx, rng, geom, dtype):
    """dx = act(conv_transpose(dy, w) + b + beta * dx): the flipped forward convolution."""
    batch = 2
    w, b = rng.standard_normal(geom.weight_shape), rng.standard_normal(geom.in_c)
    dy, tdy = _activations(ctx, rng.standard_normal(geom.out_shape(batch)), dtype)
    dx0, tdx = _activations(ctx, rng.standard_normal(geom.in_shape(batch)), dtype)
    op = ConvBackwardData(ctx, geom, bias=True, activation="relu", algo="direct", batch=batch,
                          dtype=dtype)
    assert op.algo == "direct"
    tw, tb = (Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (w, b))
    op(tdy, tw, tdx, tb, ws=Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), beta=0.5)
    dx, _ = conv_backward_ref(np.zeros(geom.in_shape(batch)), w.astype(np.float32), dy,
                              (1, 1), geom.pad, (geom.dh, geom.dw), 1)
    want = np.maximum(dx + 0.5 * dx0 + b.astype(np.float32)[None, :, None, None], 0)
    _near(tdx.numpy().astype(np.float64), want, dtype, "direct dx")


@pytest.mark.parametrize("dtype", sorted(DIRECT_STORAGE))
@pytest.mark.parametrize("geom", DIRECT_GEOMS)
@pytest.mark.parametrize("parts", [None, 2])
def test_direct_backward_filter(ctx, rng, geom, parts, dtype):
    """dw = beta * dw + the batch sum of dy x per tap; ``parts`` cuts the batch of three
    (the last part ragged), its partial sums added by a second launch; dw float32 for
    16-bit x and dy too."""
    batch = 3
    x, tx = _activations(ctx, rng.standard_normal(geom.in_shape(batch)), dtype)
    dy, tdy = _activations(ctx, rng.standard_normal(geom.out_shape(batch)), dtype)
    dw0 = rng.standard_normal(geom.weight_shape).astype(np.float32)
    op = ConvBackwardFilter(ctx, geom, algo="direct", splits=parts, batch=batch, dtype=dtype)
    assert op.algo == "direct"
    if parts:
        assert op.impl.parts(batch) == 2
    tdw = Tensor.from_numpy(ctx, dw0)
    op(tx, tdy, tdw, ws=Tensor(ctx, (op.workspace_bytes(batch),), "uint8"), beta=0.5)
    _, dw = conv_backward_ref(x, np.zeros(geom.weight_shape), dy, (geom.sh, geom.sw), geom.pad,
                              (geom.dh, geom.dw), 1)
    assert_close(tdw.numpy(), 0.5 * dw0 + dw, rtol=1e-4, atol=1e-4, what="direct dw")


@pytest.mark.parametrize("block", [(16, 3), (32, 2), (16, 4)])
def test_direct_backward_filter_channel_blocks(ctx, rng, block):
    """Several input channels a work-item (their last block short of the layer's: its
    channels past C read the last one and store nothing), on any vector width."""
    from dlprim.core import tuning
    from dlprim.core.conv_direct import BackwardFilter, filter_channels
    assert filter_channels(3, 64, 16, 64) == 2 and filter_channels(1, 64, 16, 64) == 4
    assert filter_channels(3, 64, 16, 1) == 1 and filter_channels(7, 16, 16, 3) == 1
    assert filter_channels(3, 16, 8, 64) == 1
    vw = tuning.cpu_vector_width(ctx.facts)
    if block[0] % vw:
        pytest.skip("channel blocks of %d-float vectors" % vw)
    geom, batch = ConvGeometry(5, 19, (9, 11), (3, 3), pad=(1, 1, 1, 1)), 2
    x, dy = (rng.standard_normal(s) for s in (geom.in_shape(batch), geom.out_shape(batch)))
    op = BackwardFilter(ctx, geom, batch=batch, block=block)
    assert (op.ocb, op.cb) == block
    tdw = Tensor(ctx, geom.weight_shape)
    tx, tdy = (Tensor.from_numpy(ctx, a.astype(np.float32)) for a in (x, dy))
    for launch in op.launches(tx, tdy, tdw, Tensor(ctx, (op.workspace_bytes(batch),), "uint8"),
                              0.0):
        launch(ctx.queue)
    _, dw = conv_backward_ref(x, np.zeros(geom.weight_shape), dy, (1, 1), geom.pad, (1, 1), 1)
    assert_close(tdw.numpy(), dw, rtol=1e-4, atol=1e-4, what="dw in channel blocks")


def test_direct_filter_parts_fill_the_cores():
    """One part where the layer's work-items already give each core 8, else more parts,
    never more than the images."""
    from types import SimpleNamespace
    from dlprim.core.tuning_launch import direct_filter_parts
    two = SimpleNamespace(compute_units=2)
    assert direct_filter_parts(two, 160, 64) == 1      # 32 -> 16 channels, 5x5: 2 x 16 x 5 items
    assert direct_filter_parts(two, 5, 64) == 4        # 1 -> 16 channels, 5x5: 5 items
    assert direct_filter_parts(two, 5, 2) == 2


def test_direct_serves_what_it_can():
    """Every direction of ungrouped layers, backward-data at stride 1 only: a forced
    "direct" leaves the others to the implicit GEMM."""
    from dlprim.core.conv import algorithm_applies
    g = ConvGeometry(4, 8, (9, 9), (3, 3), pad=(1, 1, 1, 1))
    strided = ConvGeometry(4, 8, (9, 9), (3, 3), stride=(2, 2), pad=(1, 1, 1, 1))
    assert algorithm_applies(g, "direct", "forward") and algorithm_applies(g, "direct", "backward_data")
    assert algorithm_applies(g, "direct", "backward_filter")
    assert algorithm_applies(strided, "direct", "forward")
    assert not algorithm_applies(strided, "direct", "backward_data")
    assert not algorithm_applies(ConvGeometry(4, 8, (9, 9), (3, 3), groups=2), "direct", "forward")
    assert g.flipped().values() == ConvGeometry(8, 4, (9, 9), (3, 3), pad=(1, 1, 1, 1)).values()
    assert strided.flipped() is None


def test_precision_reaches_plain_1x1_gemms(ctx):
    # "tf32" goes to the batched Gemm of plain 1x1 layers (tensor cores where present);
    # the implicit GEMM's own are in test_conv_tensor_cores.py
    one = ConvGeometry(8, 16, (5, 5), (1, 1))
    for op in (ConvForward(ctx, one, algo="gemm", precision="tf32"),
               ConvBackwardData(ctx, one, algo="gemm", precision="tf32")):
        assert op.impl.op.op(2).precision == "tf32"
    assert ConvForward(ctx, one, algo="gemm").impl.op.op(2).precision == "fp32"
    three = ConvGeometry(8, 16, (5, 5), (3, 3), pad=(1, 1, 1, 1))
    ConvForward(ctx, three, precision="tf32")  # accepted: tensor cores where present
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32"):
        ConvForward(ctx, one, precision="half")
