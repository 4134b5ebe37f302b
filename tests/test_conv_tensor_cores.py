"""The implicit-GEMM convolution on tensor cores (kernels/conv_gemm.cl with MMA): its
template for every direction (PoCL and GPUs), and its numbers against float64 where the
device has tensor cores (NVIDIA; skipped elsewhere)."""
import numpy as np
import pyopencl as cl
import pytest

import dlprim as dp
from dlprim import Tensor
from dlprim.core import conv_gemm, tuning
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from dlprim.core.conv_gemm import conv_tensor_cores
from dlprim.kernels import program
from dlprim.utils import round_up
from layer_check import host, skip_unless_cpu, stored
from test_conv import conv_backward_ref, conv_ref

# edges of the 64 and 128 tiles and of K's 32; strided (per-phase backward-data), 1x1
# strided, grouped and dilated, a stem-like 7x7 stride 2
GEOMS = {
    "3x3": ConvGeometry(20, 72, (9, 11), (3, 3), pad=(1, 1, 1, 1)),
    "3x3_stride2": ConvGeometry(16, 24, (10, 9), (3, 3), (2, 2), (1, 1, 1, 1)),
    "1x1_stride2": ConvGeometry(12, 40, (9, 9), (1, 1), (2, 2)),
    "grouped_dilated": ConvGeometry(8, 12, (11, 10), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2),
                                    groups=2),
    "stem": ConvGeometry(3, 130, (20, 20), (7, 7), (2, 2), (3, 3, 3, 3)),
    # tap-major in every direction (16-bit products: channels that pad little to 32 and 64)
    "3x3_taps": ConvGeometry(60, 56, (9, 11), (3, 3), pad=(1, 1, 1, 1)),
    "grouped_strided_taps": ConvGeometry(120, 62, (9, 10), (3, 3), (2, 2), (0, 1, 2, 0),
                                         groups=2),
    "1x1_taps": ConvGeometry(60, 62, (5, 7), (1, 1)),  # plain 1x1: one implicit GEMM
}


@pytest.mark.parametrize("mma", ["tf32", "f16", "bf16"])
@pytest.mark.parametrize("name", sorted(GEOMS))
def test_template_renders_every_direction(ctx, monkeypatch, mma, name):
    # the Python path (tile, warps) and the template's Mako logic; the PTX itself only
    # builds on NVIDIA drivers
    sources = []
    monkeypatch.setattr(conv_gemm, "conv_tensor_cores", lambda ctx, precision: True)
    monkeypatch.setattr(conv_gemm.program, "get", lambda ctx, name, **p: sources.append(
        program.render(name, ctx.facts, **p)) if name == "conv_gemm" else None)
    monkeypatch.setattr(ctx.facts, "is_gpu", True)  # geometry baked, phases merged
    precision = {"tf32": "tf32", "f16": "fp16", "bf16": "bf16"}[mma]
    dtype = {"tf32": "float32", "f16": "float16", "bf16": "bfloat16"}[mma]
    for mode in ("forward", "backward_data", "backward_filter"):
        op = conv_gemm.ConvGemm(ctx, GEOMS[name], mode, bias=mode != "backward_filter",
                                activation="relu", batch=3, dtype=dtype, precision=precision)
        tiles = list(tuning.CONV_MMA_TILES) + list(tuning.CONV_MMA_NARROW.values())
        # K 64 deep for 16-bit backward-filter and tap-major layers (op.tile_k)
        assert op.mma == mma and op.tile(3) in [dict(t, TILE_K=op.tile_k) for t in tiles]
        g = GEOMS[name]
        channels = (g.out_c if mode == "backward_data" else g.in_c) // g.groups
        deep = mode == "backward_filter" or op.taps and tuning.conv_taps_padding(
            channels, tuning.CONV_MMA_DEEP_K) <= tuning.CONV_TAPS_MAX_PADDING
        assert op.tile_k == (tuning.CONV_MMA_DEEP_K if mma != "tf32" and deep else 32)
    product = {"tf32": "MMA_TF32(acc", "f16": "MMA_F16(acc", "bf16": "MMA_BF16(acc"}[mma]
    assert len(sources) == 3 and all(product in s for s in sources)
    with pytest.raises(ValueError, match="own tile"):
        conv_gemm.ConvGemm(ctx, GEOMS[name], "forward", tile=dict(tuning.CONV_MMA_TILES[0]),
                           precision=precision)


def _no_builds(ctx, monkeypatch, tensor_cores=True):
    monkeypatch.setattr(conv_gemm, "conv_tensor_cores", lambda ctx, precision: tensor_cores)
    monkeypatch.setattr(conv_gemm.program, "get", lambda ctx, name, **p: None)


@pytest.mark.parametrize("name, taps", [
    ("3x3_taps", (True, True, True)), ("grouped_strided_taps", (True, True, True)),
    ("3x3", (False, False, False)), ("1x1_taps", (True, True, True)),
    ("stem", (False, True, False))])
def test_tap_major_where_channels_pad_little(ctx, monkeypatch, name, taps):
    # 16-bit products only; backward-data at stride 1; channels padded to 32 (the
    # filter gradient's to its tile's width, 64 or 128) adding at most a quarter
    _no_builds(ctx, monkeypatch)
    geom = GEOMS[name]
    for mode, want in zip(conv_gemm.MODES, taps):
        op = conv_gemm.ConvGemm(ctx, geom, mode, batch=3, dtype="float16", precision="fp16")
        assert op.taps == want, mode
        assert not conv_gemm.ConvGemm(ctx, geom, mode, batch=3, precision="tf32").taps
        if want and mode == "backward_filter":
            assert op.tile(3)["TILE_N"] == 64  # 60 channels pad to 64, not 128
            assert op.dims(3)[1] == geom.kh * geom.kw * 64
        elif want and op.phased:  # per stride phase: its taps, each of KP channels
            assert op.dims(3)[2] == max(p[-1] for p in op.phase_table) * round_up(
                geom.out_c // geom.groups, op.tile_k)
        elif want:
            assert op.dims(3)[2] == geom.kh * geom.kw * 64
        if want and mode != "backward_filter":
            # the weights' 16-bit copy follows the split partials in the workspace
            assert op.workspace_bytes(3) >= 2 * geom.out_c * geom.kh * geom.kw * round_up(
                geom.in_c // geom.groups, op.tile_k)


def test_fp16_on_tensor_cores_takes_the_tap_major_gemm(ctx, monkeypatch):
    from dlprim.core.conv import choose_algorithm
    _no_builds(ctx, monkeypatch)
    monkeypatch.setattr(ctx.facts, "is_gpu", True)
    monkeypatch.setattr(ctx.facts, "is_cpu", False)
    small, wide = ConvGeometry(64, 64, (56, 56), (3, 3), pad=(1, 1, 1, 1)), \
        ConvGeometry(512, 512, (28, 28), (3, 3), pad=(1, 1, 1, 1))
    for direction in conv_gemm.MODES:
        assert choose_algorithm(ctx, small, direction) == "winograd"  # fp32
        assert choose_algorithm(ctx, small, direction, "fp16") == "gemm"
    # the wide layer's filter gradient stays on Winograd (tuning.taps_beat_winograd)
    assert choose_algorithm(ctx, wide, "forward", "bf16") == "gemm"
    assert choose_algorithm(ctx, wide, "backward_filter", "fp16") == "winograd"
    # plain 1x1 layers: one tap-major implicit GEMM instead of the per-image Gemm
    one = GEOMS["1x1_taps"]
    assert isinstance(conv_gemm.Forward(ctx, one, precision="fp16", dtype="float16").op,
                      conv_gemm.ConvGemm)
    assert isinstance(conv_gemm.Forward(ctx, one, precision="tf32").op, conv_gemm._Plain1x1)
    _no_builds(ctx, monkeypatch, tensor_cores=False)  # no tensor cores: as before
    assert choose_algorithm(ctx, small, "forward", "fp16") == "winograd"


def test_mma_tiles_fill_the_device(ctx, monkeypatch):
    monkeypatch.setattr(ctx.facts, "compute_units", 132)
    big, mid, small = (dict(t) for t in tuning.CONV_MMA_TILES)
    assert tuning.conv_mma_tile(ctx.facts, 256, 64 * 56 * 56) == big
    assert tuning.conv_mma_tile(ctx.facts, 64, 64 * 56 * 56) == mid  # no 128 rows for 64
    assert tuning.conv_mma_tile(ctx.facts, 512, 64 * 7 * 7) == small
    for t in tuning.CONV_MMA_TILES:  # the loads' strides divide the work-group
        threads = 32 * np.prod(tuning.mma_warps(t))
        assert threads == (t["TILE_M"] // t["BLOCK_M"]) * (t["TILE_N"] // t["BLOCK_N"])
        assert all(threads % t[k] == 0 for k in ("TILE_M", "TILE_N", "TILE_K"))


def test_precision_reaches_every_gemm_direction(ctx):
    geom = GEOMS["3x3"]
    for precision in ("tf32", "fp16"):
        want = ("tf32" if precision == "tf32" else "f16") if conv_tensor_cores(ctx, precision) else ""
        for op in (ConvForward(ctx, geom, algo="gemm", precision=precision),
                   ConvBackwardData(ctx, geom, algo="gemm", precision=precision),
                   ConvBackwardFilter(ctx, geom, algo="gemm", precision=precision)):
            impl = op.impl.op
            assert getattr(impl, "op", impl).mma == want
    assert ConvForward(ctx, geom, algo="gemm").impl.op.mma == ""


def _error(got, want):
    return np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()


def _against_float64(ctx, rng, precision, dtype, name, splits=(None, 3)):
    """Forward (bias, relu, beta), backward-data and backward-filter (beta 1) of GEOMS[name]
    at ``precision`` with activations stored as ``dtype``, whole and split-K (``splits``),
    against float64; TF32 and FP16 round each operand to 11 significant bits, sums stay
    float32."""
    geom, batch = GEOMS[name], 3
    st, dil, pad = (geom.sh, geom.sw), (geom.dh, geom.dw), geom.pad
    # values as the device stores them: the activations rounded to dtype
    x, dy, y0 = (stored(rng.standard_normal(s), dtype) for s in
                 (geom.in_shape(batch), geom.out_shape(batch), geom.out_shape(batch)))
    w = rng.standard_normal(geom.weight_shape) * 0.3
    dw0, bias = rng.standard_normal(geom.weight_shape), rng.standard_normal(geom.out_c)
    dev = {k: Tensor.from_numpy(ctx, host(v, dtype) if k in ("x", "dy") else v.astype(np.float32))
           for k, v in dict(x=x, dy=dy, w=w, b=bias).items()}
    dx = Tensor(ctx, geom.in_shape(batch), dtype)
    want_y = np.maximum(conv_ref(x, w, st, pad, dil, geom.groups) + 0.5 * y0
                        + bias[None, :, None, None], 0)
    want_dx, want_dw = conv_backward_ref(x, w, dy, st, pad, dil, geom.groups)
    for split in splits:
        fwd = ConvForward(ctx, geom, bias=True, activation="relu", algo="gemm", batch=batch,
                          splits=split, precision=precision, dtype=dtype)
        data = ConvBackwardData(ctx, geom, algo="gemm", batch=batch, splits=split,
                                precision=precision, dtype=dtype)
        filt = ConvBackwardFilter(ctx, geom, algo="gemm", batch=batch, splits=split,
                                  precision=precision, dtype=dtype)
        for op in (fwd, data, filt):
            impl = getattr(op.impl.op, "op", op.impl.op)
            assert getattr(impl, "mma", "") or geom.is_plain_1x1 and op is not filt
        # each its own workspace, all bits set (NaN as float16 or float32): nothing may
        # read what another direction left there, e.g. the weights' tap-major copy
        ws = {op: Tensor.from_numpy(ctx, np.full(max(1, op.workspace_bytes(batch)), 255, np.uint8))
              for op in (fwd, data, filt)}
        y = Tensor.from_numpy(ctx, host(y0, dtype))
        dw = Tensor.from_numpy(ctx, dw0.astype(np.float32))
        fwd(dev["x"], dev["w"], y, dev["b"], ws=ws[fwd], beta=0.5)
        data(dev["dy"], dev["w"], dx, ws=ws[data])
        filt(dev["x"], dev["dy"], dw, ws=ws[filt], beta=1.0)
        # BF16 keeps 8 significant bits; a 16-bit output adds its own rounding
        tol = {"float16": 4e-3, "bfloat16": 3e-2}.get(dtype, 2e-3 if precision != "bf16" else 2e-2)
        for what, got, want in (("y", y, want_y), ("dx", dx, want_dx),
                                ("dw", dw, dw0 + want_dw)):
            err = _error(got.numpy(), want)
            assert err < tol, (name, precision, dtype, split, what, err)


CASES = [("tf32", "float32"), ("fp16", "float32"), ("fp16", "float16"), ("bf16", "bfloat16")]


@pytest.mark.parametrize("precision, dtype", CASES)
@pytest.mark.parametrize("name", sorted(GEOMS))
def test_tensor_cores_match_float64(ctx, rng, precision, dtype, name):
    if not conv_tensor_cores(ctx, precision):
        pytest.skip("no %s tensor cores this runtime drives on %s"
                    % (precision.upper(), ctx.facts.name))
    _against_float64(ctx, rng, precision, dtype, name)


def _emulate(ctx, monkeypatch, baked=False):
    """mma.h's products in OpenCL C (MMA_EMULATE) wherever the kernels ask for tensor
    cores; ``baked``: with the GPUs' baked geometry and merged phases, else with the
    geometry as arguments, so that one build serves every test's shapes (emulated
    kernels are slow to build on a CPU runtime). CPU devices only: NVIDIA's compiler
    refuses the emulated kernels, and its GPUs run the real products in
    test_tensor_cores_match_float64."""
    skip_unless_cpu(ctx)
    build = program.get
    monkeypatch.setattr(conv_gemm.program, "get",
                        lambda ctx, name, **p: build(ctx, name, **(dict(p, MMA_EMULATE=True)
                                                                   if p.get("MMA") else p)))
    monkeypatch.setattr(ctx.facts, "is_gpu", bool(baked))


@pytest.mark.parametrize("name, precision, dtype", [
    ("3x3", "tf32", "float32"), ("3x3_stride2", "fp16", "float16"),
    ("grouped_dilated", "fp16", "float32"), ("3x3_stride2", "bf16", "bfloat16"),
    ("3x3_taps", "fp16", "float16"), ("grouped_strided_taps", "bf16", "float32"),
    ("grouped_strided_taps", "fp16", "float16"), ("1x1_taps", "fp16", "float16")])
def test_emulated_tensor_cores_match_float64(ctx, rng, monkeypatch, precision, dtype, name):
    # on any device: the kernel's fragment layout, K order, tiles and epilogue, all but
    # the PTX instruction itself (the same mma.h serves gemm_mma.cl's GPU-tested products)
    _emulate(ctx, monkeypatch, baked=dtype == "float16")  # one case with merged phases
    monkeypatch.setattr(conv_gemm, "conv_tensor_cores", lambda ctx, precision: True)
    # split-K in one case: each emulated build takes PoCL seconds
    _against_float64(ctx, rng, precision, dtype, name,
                     splits=(None, 3) if precision == "tf32" else (None,))


# (emulated builds take PoCL seconds: forward and backward-data in the cases that share
# their programs; runs of 4 and bfloat16 on tensor cores only)
@pytest.mark.parametrize("geom, dtype, run, x_runs, shift, all_directions", [
    (ConvGeometry(60, 62, (4, 6), (1, 1)), "float16", 8, True, 0, True),  # 24 pixels
    (ConvGeometry(60, 56, (8, 8), (3, 3), pad=(1, 1, 1, 1)), "float16", 8, False, 0, False),
    (ConvGeometry(64, 60, (6, 6), (1, 1)), "bfloat16", 4, True, 0, True),
    # every tensor one value past an aligned start: runs load value by value
    (ConvGeometry(60, 62, (4, 6), (1, 1)), "float16", 8, True, 1, True)])
def test_emulated_pixel_runs_match_float64(ctx, rng, monkeypatch, geom, dtype, run, x_runs,
                                           shift, all_directions):
    """Tap-major layers loading runs of pixels (conv_gemm.cl K_RUN, N_RUN): backward-
    filter in runs of 8 and 4, x's rows as runs (plain 1x1) or gathered; a plain 1x1's
    forward and backward-data in runs of B's columns; batches whose images a tile spans,
    split-K, and tensors whose offsets leave the runs unaligned. The tensor cores' own
    products where the device has them, else emulated (CPU runtimes)."""
    batch, precision = 3, "fp16" if dtype == "float16" else "bf16"
    if not conv_tensor_cores(ctx, precision):
        if dtype == "bfloat16":
            pytest.skip("runs of 4 in bfloat16: on tensor cores only (fp16's emulated "
                        "runs of 8 take the same loads)")
        _emulate(ctx, monkeypatch)
        monkeypatch.setattr(conv_gemm, "conv_tensor_cores", lambda ctx, precision: True)
    st, dil, pad = (geom.sh, geom.sw), (geom.dh, geom.dw), geom.pad
    x = stored(rng.standard_normal(geom.in_shape(batch)), dtype)
    dy = stored(rng.standard_normal(geom.out_shape(batch)), dtype)
    w = rng.standard_normal(geom.weight_shape) * 0.3
    want_dx, want_dw = conv_backward_ref(x, w, dy, st, pad, dil, geom.groups)
    want_y = conv_ref(x, w, st, pad, dil, geom.groups)
    tol = {"float16": 4e-3, "bfloat16": 3e-2}[dtype]

    def shifted(values, dt=dtype):  # the tensor ``shift`` values into a buffer
        flat = np.concatenate([np.zeros(shift), values.ravel()])
        t = Tensor.from_numpy(ctx, host(flat, dt) if dt != "float32" else flat.astype(np.float32))
        return t.view(values.shape, offset=shift)

    def workspace(op):
        return Tensor.from_numpy(ctx, np.full(max(1, op.workspace_bytes(batch)), 255, np.uint8))

    splits = 2  # split-K: each split's runs start at a multiple of the tile's K
    op = ConvBackwardFilter(ctx, geom, algo="gemm", batch=batch, splits=splits,
                            precision=precision, dtype=dtype)
    impl = op.impl.op
    assert (impl.k_run, impl.params["X_RUNS"], impl.n_run) == (run, x_runs, 1)
    assert impl.split_plan(batch)[0] == splits
    dw = Tensor(ctx, geom.weight_shape)
    op(shifted(x), shifted(dy), dw, ws=workspace(op), beta=0.0)
    assert _error(dw.numpy(), want_dw) < tol, "dw"
    if not all_directions:
        return
    for op_type, src, want in ((ConvForward, x, want_y), (ConvBackwardData, dy, want_dx)):
        op = op_type(ctx, geom, algo="gemm", batch=batch, splits=splits, precision=precision,
                     dtype=dtype)
        impl = op.impl.op
        assert (impl.k_run, impl.n_run) == (1, run), op_type
        out = shifted(np.zeros(want.shape))
        op(shifted(src), shifted(w, "float32"), out, ws=workspace(op))
        assert _error(out.numpy(), want) < tol, op_type


def test_self_test_passes_good_kernels_and_refuses_failing_ones(ctx, monkeypatch, caplog):
    _emulate(ctx, monkeypatch)
    assert conv_gemm._self_test(ctx, "fp16")
    # numbers off by more than the tolerance (here: any rounding at all)
    monkeypatch.setattr(conv_gemm, "_SELF_TEST_TOLERANCE", {"tf32": 0.0})
    with caplog.at_level("WARNING"):
        assert not conv_gemm._self_test(ctx, "tf32")
    assert "self-test (forward)" in caplog.text and "run in float32" in caplog.text
    caplog.clear()
    build = conv_gemm.program.get

    def refused(ctx, name, **p):  # a driver whose compiler refuses the kernels
        if p["MMA"]:
            raise cl.RuntimeError("clBuildProgram failed: ptxas error")
        return build(ctx, name, **p)
    monkeypatch.setattr(conv_gemm.program, "get", refused)
    with caplog.at_level("WARNING"):
        assert not conv_gemm._self_test(ctx, "tf32")
    assert "do not run" in caplog.text and "ptxas" in caplog.text


def test_an_fp16_net_on_emulated_tensor_cores_follows_fp32(ctx, monkeypatch):
    # the precision reaches every direction of a net's convolutions (a strided one too)
    # and their gradients match the fp32 net's (tf32 takes the same path)
    precision = "fp16"
    from test_half_storage import small_cnn
    graph = small_cnn()
    graph["operators"][3]["options"].update(stride=2)  # c2 strided: per-phase backward-data
    graph["operators"][4:5] = []  # and so no residual add
    graph["operators"][4]["inputs"] = ["c2"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 10, 10)).astype(np.float16).astype(np.float32)
    y = rng.integers(0, 5, 4).astype(np.int32)
    _emulate(ctx, monkeypatch)
    monkeypatch.setattr(ctx.facts, "is_cpu", False)  # the GPUs' algorithm choice: gemm
    monkeypatch.setattr(conv_gemm, "conv_tensor_cores", lambda ctx, precision: True)
    built = []
    build = conv_gemm.program.get
    monkeypatch.setattr(conv_gemm.program, "get",
                        lambda ctx, name, **p: built.append(p.get("MMA")) or build(ctx, name, **p))
    grads, losses = {}, {}
    for p in ("fp32", precision):
        net = dp.Net(ctx, graph, mode="train", precision=p, seed=1)
        losses[p] = net(data=x, label=y)["loss"]
        net.backward()
        scale = net.loss_scale.scale if net.loss_scale else 1.0
        grads[p] = {k: v.to_host() / scale for k, v in net.grads.items()}
    assert built.count("f16") >= 6  # 2 layers x 3 directions
    np.testing.assert_allclose(losses[precision], losses["fp32"], rtol=2e-3)
    for name, ref in grads["fp32"].items():
        if name == "c1.1":  # the bias before a BatchNorm: its gradient is 0 up to rounding
            continue
        err = np.linalg.norm(grads[precision][name] - ref) / max(np.linalg.norm(ref), 1e-12)
        assert err < 5e-3, "%s: relative error %.3g" % (name, err)


@pytest.mark.parametrize("tile", [2, 4])
def test_winograd_gemms_multiply_tf32_on_tensor_cores(ctx, rng, monkeypatch, tile):
    """precision "fp16" reaches F(2x2)'s batched GEMMs as TF32 products (float32's range
    for the transformed tiles) in every direction; F(4x4)'s, whose transforms amplify the
    operands' rounding to 1% in TF32, stay float32. Real tensor cores where the device
    has them, else emulated (CPU runtimes)."""
    from dlprim.core import gemm
    if not gemm.tensor_cores(ctx, "tf32"):
        skip_unless_cpu(ctx)
        build = program.get
        monkeypatch.setattr(gemm, "tensor_cores", lambda ctx, precision="tf32": True)
        monkeypatch.setattr(program, "get", lambda ctx, name, **p: build(
            ctx, name, **(dict(p, MMA_EMULATE=True) if name == "gemm_mma" else p)))
    geom, batch, algo = ConvGeometry(20, 24, (9, 11), (3, 3), pad=(1, 1, 1, 1)), 3, "winograd%d" % tile
    x, dy, y0 = (stored(rng.standard_normal(s), "float16") for s in
                 (geom.in_shape(batch), geom.out_shape(batch), geom.out_shape(batch)))
    w, dw0 = rng.standard_normal(geom.weight_shape) * 0.3, rng.standard_normal(geom.weight_shape)
    bias = rng.standard_normal(geom.out_c)
    fwd = ConvForward(ctx, geom, bias=True, activation="relu", algo=algo, batch=batch,
                      precision="fp16", dtype="float16")
    data = ConvBackwardData(ctx, geom, algo=algo, batch=batch, precision="fp16", dtype="float16")
    filt = ConvBackwardFilter(ctx, geom, algo=algo, batch=batch, precision="fp16",
                              dtype="float16")
    gemms = [fwd.impl.plan.gemm(batch), data.impl.plan.gemm(batch), filt.impl.sum_op(batch)]
    want = "tf32" if tile == 2 else "fp32"
    assert all(bool(g.mma) == (tile == 2) and g.precision == want for g in gemms)
    assert fwd.impl.plan.t.m == tile
    ws = Tensor(ctx, (max(fwd.workspace_bytes(batch), data.workspace_bytes(batch),
                          filt.workspace_bytes(batch)),), "uint8")
    dev = {k: Tensor.from_numpy(ctx, host(v, "float16") if k in ("x", "dy") else
                                v.astype(np.float32)) for k, v in dict(x=x, dy=dy, w=w, b=bias).items()}
    y, dx = Tensor.from_numpy(ctx, host(y0, "float16")), Tensor(ctx, geom.in_shape(batch), "float16")
    dw = Tensor.from_numpy(ctx, dw0.astype(np.float32))
    fwd(dev["x"], dev["w"], y, dev["b"], ws=ws, beta=0.5)
    data(dev["dy"], dev["w"], dx, ws=ws)
    filt(dev["x"], dev["dy"], dw, ws=ws, beta=1.0)
    want_y = np.maximum(conv_ref(x, w, (1, 1), geom.pad, (1, 1), 1) + 0.5 * y0
                        + bias[None, :, None, None], 0)
    want_dx, want_dw = conv_backward_ref(x, w, dy, (1, 1), geom.pad, (1, 1), 1)
    errors = {what: _error(got.numpy(), want) for what, got, want in
              (("y", y, want_y), ("dx", dx, want_dx), ("dw", dw, dw0 + want_dw))}
    # measured on PoCL: TF32 at F(2x2) 5.9e-4 at most; float32 at F(4x4) 2.6e-4, the half
    # output's rounding (TF32 there would be 1e-2)
    assert max(errors.values()) < (2e-3 if tile == 2 else 1e-3), errors


def test_plain_1x1_gemm_workspace_is_planned(ctx, monkeypatch):
    # a plain 1x1 layer's Gemm (per-image products) takes its workspace (split-K partials,
    # TF32 operands packed for warpgroup products) from the layer's plan, not its own
    from dlprim.core import conv_gemm
    from dlprim.core.conv_geometry import ConvGeometry
    seen = {}

    class Op:  # the Gemm as _Plain1x1 drives it
        workspace_elements = 10

        def workspace_in(self, ws):
            seen["ws"] = ws
            return "view"

        def launches(self, *args, workspace=None, **kw):
            seen["workspace"] = workspace
            return []
    plain = conv_gemm._Plain1x1.__new__(conv_gemm._Plain1x1)
    plain.shape, plain.op = (4, 9, 3), lambda batch: Op()
    assert plain.workspace_bytes(2) == 40
    plain.launches("w", dp.Tensor(ctx, (2, 3, 3, 3)), "y", None, 0.0, ws="bytes")
    assert seen == {"ws": "bytes", "workspace": "view"}
    geom = ConvGeometry(3, 4, (3, 3), (1, 1))
    direction = conv_gemm.Forward(ctx, geom)
    assert isinstance(direction.op, conv_gemm._Plain1x1)
    assert direction.workspace_bytes(2) == 4 * direction.op.op(2).workspace_elements
