"""The narrow storage types (float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz/e8m0, float4 e2m1, int4,
uint4, int2, uint2): every code decoded, edge values encoded with and without
saturation, against onnx's reference (onnx.numpy_helper, ml_dtypes, ReferenceEvaluator);
the Net's inputs and outputs of them, ONNX Cast/CastLike and the layout operators over
them, and the refusals of everything else."""
import numpy as np
import pytest

ml = pytest.importorskip("ml_dtypes")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dlprim as dp  # noqa: E402
from dlprim import dtypes  # noqa: E402
from dlprim.errors import InputError  # noqa: E402
from dlprim.core.pointwise import PointwiseBroadcast  # noqa: E402
from dlprim.tensor import Tensor  # noqa: E402

F8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
FLOATS = F8 + ["float4_e2m1fn", "float8_e8m0fnu"]
INTS = ["int4", "uint4", "int2", "uint2"]
ONNX_OF = {"float8_e4m3fn": TensorProto.FLOAT8E4M3FN, "float8_e5m2": TensorProto.FLOAT8E5M2,
           "int4": TensorProto.INT4, "uint2": TensorProto.UINT2}


@pytest.fixture(scope="module")
def ctx():
    return dp.Context(None)


def dt(name):
    return np.dtype(getattr(ml, name))


def convert(ctx, x, outs):
    """[(dtype, cl_cast keywords)] -> the arrays one kernel writes from ``x``."""
    code = " ".join("y%d = %s;" % (i, dtypes.cl_cast(x.dtype, d, "x0", **kw))
                    for i, (d, kw) in enumerate(outs))
    op = PointwiseBroadcast(ctx, [(x.shape, x.dtype)], [(x.shape, d) for d, _ in outs], code)
    ys = [Tensor(ctx, x.shape, d) for d, _ in outs]
    op([Tensor.from_numpy(ctx, x)], ys)
    return [y.to_host() for y in ys]


def same_codes(got, ref, what):
    """Equal codes, except that NaNs need only both be NaN (their payloads are free)."""
    g, r = got.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    nan = np.isnan(r)
    assert np.array_equal(np.isnan(g), nan), what
    if ref.dtype.itemsize == 1:
        gc, rc = (np.ascontiguousarray(a).view(np.uint8).ravel() for a in (got, ref))
    else:
        gc, rc = (np.where(nan, 0, np.copysign(1, v) * 1e300 + v) for v in (g, r))
    bad = np.flatnonzero((gc != rc) & ~nan)
    assert bad.size == 0, "%s: %d codes differ, first at %d: %r, expected %r" % (
        what, bad.size, bad[0], gc[bad[0]], rc[bad[0]])


def edge_floats():
    """Every float16 value, both neighbours of each midpoint of every narrow float type,
    specials, huge and tiny values, random ones (float32)."""
    rng = np.random.default_rng(0)
    parts = [np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
             rng.standard_normal(4000).astype(np.float32) * np.float32(300),
             np.array([np.inf, -np.inf, np.nan, -np.nan, 0, -0.0, 1e-40, -1e-40, 3e38, -3e38,
                       1e9, 2.0 ** -127, 2.0 ** -126 * 1.5], np.float32)]
    for name in FLOATS[:5]:
        codes = np.arange(16 if name.startswith("float4") else 256, dtype=np.uint8)
        v = np.unique(codes.view(dt(name)).astype(np.float32))
        v = v[np.isfinite(v)]
        mid = ((v[1:].astype(np.float64) + v[:-1]) / 2).astype(np.float32)
        for d in (mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))):
            parts += [d, -d]
    return np.concatenate(parts)


def test_the_dtype_table():
    for name in FLOATS + INTS:
        d = dtypes.as_dtype(name)
        assert d == dt(name) and dtypes.is_narrow(d) and not dtypes.is_float(d)
        assert (dtypes.cl_type(d), dtypes.compute_type(d), dtypes.dlp_name(d)) == ("uchar", "uchar", name)
    assert not dtypes.is_narrow("float16") and not dtypes.is_narrow("uint8")
    assert dtypes.cl_cast("int4", "int4", "v") == "v"  # a copy moves the code


def test_every_code_decodes(ctx):
    """Every code of every narrow type to float32 (one kernel, an input per type)."""
    names = FLOATS + INTS
    count = {"float4_e2m1fn": 16, "int4": 16, "uint4": 16, "int2": 4, "uint2": 4}
    xs = [(np.arange(256) % count.get(n, 256)).astype(np.uint8).view(dt(n)) for n in names]
    code = " ".join("y%d = %s;" % (i, dtypes.cl_cast(x.dtype, np.float32, "x%d" % i))
                    for i, x in enumerate(xs))
    op = PointwiseBroadcast(ctx, [(x.shape, x.dtype) for x in xs],
                            [((256,), np.float32)] * len(xs), code)
    ys = [Tensor(ctx, (256,), np.float32) for _ in xs]
    op([Tensor.from_numpy(ctx, x) for x in xs], ys)
    for n, x, y in zip(names, xs, ys):
        got, ref = y.to_host(), x.astype(np.float32)
        assert np.array_equal(got, ref, equal_nan=True), n
        assert np.array_equal(np.signbit(got), np.signbit(ref)) or n.endswith("fnuz"), n


@pytest.mark.parametrize("saturate", [True, False])
def test_floats_encode_as_onnx_reference(ctx, saturate):
    """float32 -> every narrow float: onnx's saturate_cast with saturate, ml_dtypes'
    conversion without; float4 saturates always; e8m0 in its three round modes."""
    x = edge_floats()
    outs = [(dt(n), {"saturate": saturate}) for n in F8 + ["float4_e2m1fn"]]
    outs += [(dt("float8_e8m0fnu"), {"saturate": saturate, "round_mode": m})
             for m in ("up", "down", "nearest")]
    got = convert(ctx, x, outs)
    with np.errstate(all="ignore"):
        for (d, kw), g in zip(outs, got):
            if d.name == "float8_e8m0fnu":
                ref = numpy_helper.to_float8e8m0(x, saturate, kw["round_mode"])
            elif saturate and d.name in F8:
                ref = numpy_helper.saturate_cast(x, d)
            else:
                ref = x.astype(d)
            same_codes(g, ref, "%s %s" % (d.name, kw))


def test_other_sources_and_narrow_to_narrow(ctx):
    """float16 (every value), float64 (rounded once, not through float32, as ml_dtypes from
    0.7) and int64 into float8; one float8 into another; a narrow float into integers and
    bools."""
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    got = convert(ctx, h, [(dt(n), {}) for n in F8])
    with np.errstate(all="ignore"):
        for n, g in zip(F8, got):
            same_codes(g, numpy_helper.saturate_cast(h, dt(n)), "float16 -> " + n)
        d = np.array([1.0625 + 2.0 ** -40, -300.5, 1e300, -1e-300, 448.0001, 2.0 ** -9 * 0.75],
                     np.float64)
        g, = convert(ctx, d, [(dt("float8_e4m3fn"), {})])
        # 1.125 (past the tie of 1 and 1.125), -288 (nearer than -320), 448 (saturated), -0,
        # 448, 2^-9 (the smallest subnormal): by hand, as ml_dtypes before 0.7 differs
        same_codes(g, np.array([0x39, 0xf9, 0x7e, 0x80, 0x7e, 0x01], np.uint8)
                   .view(dt("float8_e4m3fn")), "float64")
        if tuple(int(v) for v in ml.__version__.split(".")[:2]) >= (0, 7):
            same_codes(g, numpy_helper.saturate_cast(d, dt("float8_e4m3fn")), "float64")
        i = np.array([0, 1, -1, 17, 448, 449, 465, -100000, 2 ** 40 + 1], np.int64)
        g, = convert(ctx, i, [(dt("float8_e5m2"), {"saturate": False})])
        same_codes(g, i.astype(dt("float8_e5m2")), "int64")
    e5 = np.arange(256, dtype=np.uint8).view(dt("float8_e5m2"))
    g, b, i8 = convert(ctx, e5, [(dt("float8_e4m3fn"), {}), (np.bool_, {}), (np.int8, {})])
    with np.errstate(all="ignore"):
        same_codes(g, numpy_helper.saturate_cast(e5.astype(np.float32), dt("float8_e4m3fn")),
                   "e5m2 -> e4m3fn")
    v = e5.astype(np.float32)
    assert np.array_equal(b, v != 0)
    small = np.abs(v) < 128  # beyond int8, float -> integer is undefined in ONNX
    assert np.array_equal(i8[small], np.trunc(v[small]).astype(np.int8))


def test_small_integers(ctx):
    """int4/uint4/int2/uint2 from integers keep the low bits (ONNX: "discard higher bits"),
    from floats truncate, as ml_dtypes (the reference), where the result is in range (ONNX
    leaves the rest undefined, and ml_dtypes' versions differ there); back to int8 exactly."""
    i8 = np.arange(-128, 128, dtype=np.int8)
    got = convert(ctx, i8, [(dt(n), {}) for n in INTS])
    for n, g in zip(INTS, got):
        assert np.array_equal(g.view(np.uint8), i8.astype(dt(n)).view(np.uint8)), n
        assert np.array_equal(g.astype(np.int8), i8.astype(dt(n)).astype(np.int8)), n
    f = np.concatenate([np.arange(-40, 40, dtype=np.float32) * np.float32(0.75),
                        np.array([-0.0, 7.9, -8.9, 15.5, 1000.25], np.float32)])
    got = convert(ctx, f, [(dt(n), {}) for n in INTS] + [(dt("float8_e4m3fn"), {})])
    for n, g in zip(INTS, got):
        info = ml.iinfo(dt(n))
        fits = (np.trunc(f) >= info.min) & (np.trunc(f) <= info.max)
        assert fits.sum() > 4 and (~fits).sum() > 4, n  # both kinds were sent
        assert np.array_equal(g.view(np.uint8)[fits], f[fits].astype(dt(n)).view(np.uint8)), n
    back = convert(ctx, got[0], [(np.int8, {}), (np.float16, {}), (dt("uint4"), {}),
                                 (dt("float8_e4m3fn"), {})])
    ref = got[0].astype(np.int8)
    assert np.array_equal(back[0], ref) and np.array_equal(back[1], ref.astype(np.float16))
    assert np.array_equal(back[2].view(np.uint8), ref.astype(dt("uint4")).view(np.uint8))
    assert np.array_equal(back[3].astype(np.float32), ref.astype(np.float32))


# ----- ONNX models through the Net, onnx's ReferenceEvaluator as the reference
def _model(nodes, inputs, outputs, opset=23):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(ctx, model, feeds):
    import dlprim.onnx as dox
    ours = dox.load(model.SerializeToString(), ctx)(**feeds)
    ref = ReferenceEvaluator(model).run(None, feeds)
    for o, r in zip(model.graph.output, ref):
        got = ours[o.name]
        assert got.dtype == r.dtype and got.shape == r.shape, o.name
        same_codes(got, r, o.name)


def test_onnx_cast_chain_and_layout(ctx):
    """float32 -> e4m3fn (saturate=0) -> Reshape -> Transpose -> float16, a float8 net
    input through Flatten and CastLike, an int4 output (of values in its range: ONNX leaves a
    float outside the integer's range undefined)."""
    F, H = TensorProto.FLOAT, TensorProto.FLOAT16
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=TensorProto.FLOAT8E4M3FN, saturate=0),
             helper.make_node("Reshape", ["q", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
             helper.make_node("Cast", ["t"], ["y"], to=H),
             helper.make_node("Flatten", ["e"], ["ef"], axis=1),
             helper.make_node("CastLike", ["ef", "like"], ["z"], saturate=1),
             helper.make_node("Cast", ["xi"], ["i"], to=TensorProto.INT4)]
    model = _model(nodes, [("x", F, [4, 6]), ("xi", F, [4, 6]),
                           ("e", TensorProto.FLOAT8E5M2, [2, 3, 2]),
                           ("like", TensorProto.FLOAT8E4M3FNUZ, [1])],
                   [("y", H, [8, 3]), ("z", TensorProto.FLOAT8E4M3FNUZ, [2, 6]),
                    ("i", TensorProto.INT4, [4, 6])])
    model.graph.initializer.append(numpy_helper.from_array(np.array([3, 8], np.int64), "shape"))
    x = np.array([0.3, -1e6, 500, np.inf, -np.nan, 1e-7, 17, -9, 2.5, 7.5, 448, 464] * 2,
                 np.float32).reshape(4, 6)
    e = (np.arange(12, dtype=np.float32) * np.float32(-37.5)).astype(dt("float8_e5m2"))
    _check(ctx, model, {"x": x, "xi": np.where((x > -9) & (x < 8), x, np.float32(-3.7)),
                        "e": e.reshape(2, 3, 2),
                        "like": np.zeros(1, dt("float8_e4m3fnuz"))})


def test_onnx_refusals_name_the_dtype(ctx):
    import dlprim.onnx as dox
    from dlprim.onnx import UnsupportedModelError
    e4 = TensorProto.FLOAT8E4M3FN
    model = _model([helper.make_node("Add", ["a", "a"], ["y"])], [("a", e4, [3])], [("y", e4, [3])])
    with pytest.raises(UnsupportedModelError, match="float8_e4m3fn"):
        dox.to_netconfig(model)


def test_net_inputs_and_library_op(ctx):
    """A narrow input takes its own dtype (or integers that fit, for int4 ...); LibraryOp
    converts with 'copy' alone."""
    cfg = dp.NetConfig()
    cfg.add_input("a", [5], "int4")
    cfg.add_input("b", [5], "float8_e5m2")
    cfg.add("LibraryOp", name="ca", inputs=["a"], outputs=["fa"], options={"op": "copy", "dtype": "float32"})
    cfg.add("LibraryOp", name="cb", inputs=["b"], outputs=["fb"],
            options={"op": "copy", "dtype": "float8_e4m3fn", "attrs": {"saturate": 0}})
    cfg.set_outputs(["fa", "fb"])
    net = dp.Net(ctx)
    net.load(cfg)
    net.setup()
    b = np.array([1, -2.5, 1000, -57344, np.inf], np.float32).astype(dt("float8_e5m2"))
    out = net(a=np.array([-8, -1, 0, 3, 7]), b=b)
    assert np.array_equal(out["fa"], [-8, -1, 0, 3, 7]) and out["fb"].dtype == dt("float8_e4m3fn")
    same_codes(out["fb"], b.astype(np.float32).astype(dt("float8_e4m3fn")), "fb")
    with pytest.raises(InputError, match="does not fit"):
        net(a=np.array([8, 0, 0, 0, 0]), b=b)
    with pytest.raises(InputError, match="float8_e5m2"):
        net(a=np.zeros(5, np.int8), b=np.zeros(5, np.float32))
    bad = dp.NetConfig()
    bad.add_input("b", [5], "float8_e5m2")
    bad.add("LibraryOp", name="neg", inputs=["b"], outputs=["y"], options={"op": "neg"})
    bad.set_outputs(["y"])
    net = dp.Net(ctx)
    net.load(bad)
    with pytest.raises(dp.Error, match="float8_e5m2"):
        net.setup()


# ----- QuantizeLinear / DequantizeLinear against onnx's ReferenceEvaluator
def _quant_model(op, x, scale, zp, attrs, consts=(), opset=23):
    """One Q/DQ node; the inputs named in ``consts`` are initializers."""
    names = ["x", "scale", "zp"][:3 if zp is not None else 2]
    arrays = dict(zip(names, (x, scale, zp)))
    onnx_type = helper.np_dtype_to_tensor_dtype
    ins = [(n, onnx_type(a.dtype), list(a.shape)) for n, a in arrays.items() if n not in consts]
    out_type = attrs.get("output_dtype") or (
        onnx_type(zp.dtype) if op == "QuantizeLinear" and zp is not None else
        TensorProto.UINT8 if op == "QuantizeLinear" else onnx_type(scale.dtype))
    model = _model([helper.make_node(op, names, ["y"], **attrs)], ins,
                   [("y", out_type, list(x.shape))], opset)
    model.graph.initializer.extend(numpy_helper.from_array(arrays[n], n) for n in consts)
    return model, {n: a for n, a in arrays.items() if n not in consts}


def test_quantize_linear(ctx):
    """Ties of x / scale round to even, saturation at both ends, per tensor, per axis and
    blocked (scales constant or read at run time); NaN and infinities into float8."""
    rng = np.random.default_rng(1)
    x = np.concatenate([np.arange(-40, 40, dtype=np.float32) * np.float32(0.25),
                        rng.standard_normal(88).astype(np.float32) * np.float32(50),
                        np.array([2e8, -2e8, 1e8, 0.0, -0.0, 2.5, -2.5, 3.5], np.float32)])
    x = x.reshape(8, 22)
    special = x.copy()
    special[0, :3] = [np.nan, np.inf, -np.inf]
    s = np.float32(0.5)
    for zp, attrs in ((np.uint8(128), {}), (np.int8(-3), {}), (np.int16(7), {}),
                      (np.array([5, -3], ml.int4)[:1], {"axis": 0}),
                      (np.array([2], ml.uint2), {"axis": 0}),
                      (np.array([0], ml.float8_e4m3fn), {"saturate": 0}),
                      (None, {"output_dtype": TensorProto.FLOAT8E5M2})):
        data = special if zp is None or zp.dtype.name.startswith("float8") else x
        model, feeds = _quant_model("QuantizeLinear", data, np.asarray(s), zp, attrs,
                                    consts=("scale",) + (("zp",) if zp is not None and
                                                         zp.dtype.kind == "V" else ()))
        with np.errstate(all="ignore"):
            _check(ctx, model, feeds)
    axis_scale = (np.arange(1, 9, dtype=np.float32) * np.float32(0.125))
    zp = np.arange(8, dtype=np.uint8) * np.uint8(20)
    for consts in ((), ("scale", "zp")):
        model, feeds = _quant_model("QuantizeLinear", x, axis_scale, zp, {"axis": 0}, consts)
        _check(ctx, model, feeds)
    blocked = rng.uniform(0.1, 2, (8, 3)).astype(np.float32)  # 22 = 7 + 7 + 7 + 1: constant
    model, feeds = _quant_model("QuantizeLinear", x, blocked, np.full((8, 3), 3, np.int8),
                                {"axis": 1, "block_size": 8}, ("scale", "zp"))
    _check(ctx, model, feeds)
    # the reference's NaN and infinities go through an undefined float -> int32 conversion:
    # dlprim saturates infinities as the operator's formula says, and gives NaN the lowest
    import dlprim.onnx as dox
    model, feeds = _quant_model("QuantizeLinear", special, np.asarray(s), np.int8(-3), {},
                                ("scale",))
    assert dox.load(model.SerializeToString(), ctx)(**feeds)["y"][0, :3].tolist() == \
        [-128, 127, -128]
    whole = rng.uniform(0.1, 2, (8, 11)).astype(np.float32)  # blocks of 2 read at run time
    model, feeds = _quant_model("QuantizeLinear", x, whole, None,
                                {"axis": 1, "block_size": 2, "output_dtype": TensorProto.INT16})
    _check(ctx, model, feeds)


def test_dequantize_linear(ctx):
    rng = np.random.default_rng(2)
    x8 = np.arange(256, dtype=np.uint8).reshape(4, 64)
    for x, zp in ((x8, np.uint8(131)), (x8.view(np.int8), np.int8(-5)),
                  (rng.integers(-32768, 32767, (4, 64), np.int16), np.int16(-300)),
                  ((x8 % 16).astype(ml.int4), np.array([3], ml.int4)),
                  ((x8 % 4).astype(ml.uint2), np.array([1], ml.uint2))):
        _check(ctx, *_quant_model("DequantizeLinear", x, np.asarray(np.float32(0.37)), zp,
                                  {"axis": 0}))
    e4 = x8.view(ml.float8_e4m3fn)
    _check(ctx, *_quant_model("DequantizeLinear", e4, np.asarray(np.float16(0.1)), None, {}))
    _check(ctx, *_quant_model("DequantizeLinear", e4, np.arange(1, 5, dtype=np.float32),
                              np.zeros(1, ml.float8_e4m3fn), {"axis": 0}, ("zp",)))
    scales = rng.uniform(0.01, 1, (4, 8)).astype(np.float32)
    _check(ctx, *_quant_model("DequantizeLinear", x8, scales, (x8[:, ::8] // 2).copy(),
                              {"axis": 1, "block_size": 8}))
    _check(ctx, *_quant_model("DequantizeLinear", x8, scales[:, :7].copy(),
                              (x8[:, :7] // 3).copy(), {"axis": 1, "block_size": 10},
                              ("scale", "zp")))
    import dlprim.onnx as dox
    from dlprim.onnx import UnsupportedModelError
    bad, _ = _quant_model("DequantizeLinear", e4, np.asarray(np.float32(1)),
                          np.ones(1, ml.float8_e4m3fn), {}, ("zp",))
    with pytest.raises(UnsupportedModelError, match="not zero"):
        dox.to_netconfig(bad)


@pytest.mark.parametrize("layer, options", [
    ("CumSum", {"axis": 1}), ("Reduction", {"method": "max", "dims": [1]}),
    ("ArgMax", {"axis": 1})])
def test_layers_that_would_compute_on_codes_refuse_narrow_inputs(ctx, layer, options):
    """A float8 value reaching a layer that is not a conversion or a layout copy is refused
    naming the dtype: it would add, compare or sort the codes as if they were numbers."""
    from dlprim.layers.base import LayerError
    cfg = dp.NetConfig()
    cfg.add_input("x", (2, 8), dtype="float8_e4m3fn")
    cfg.add(layer, name="op", inputs=["x"], outputs=["y"], options=options)
    cfg.set_outputs(["y"])
    with pytest.raises(LayerError, match="takes no float8_e4m3fn input"):
        dp.Net(ctx, cfg)


def test_layout_layers_carry_narrow_codes(ctx):
    cfg = dp.NetConfig()
    cfg.add_input("x", (2, 3, 4), dtype="float8_e5m2")
    cfg.add("Transpose", name="t", inputs=["x"], outputs=["t"], options={"dims": [0, 2, 1]})
    cfg.add("Reshape", name="r", inputs=["t"], outputs=["r"], options={"dims": [2, 12]})
    cfg.set_outputs(["r"])
    x = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12).astype(ml.float8_e5m2)
    y = dp.Net(ctx, cfg)(x=x)["r"]
    np.testing.assert_array_equal(y.view(np.uint8), x.transpose(0, 2, 1).reshape(2, 12).view(np.uint8))
