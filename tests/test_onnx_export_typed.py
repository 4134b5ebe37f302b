"""dlprim.onnx.save of nets with integer and bool values (LibraryOp layers): the export
runs in onnxruntime with the Net's results and dtypes, and imports back to the same net."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import dlprim as dp  # noqa: E402
import dlprim.onnx as dox  # noqa: E402


def _net(ctx):
    cfg = dp.NetConfig()
    cfg.add_input("a", (2, 70), dtype="int64")
    cfg.add_input("x", (2, 70))

    def op(name, ins, out, **options):
        cfg.add("LibraryOp", name=out, inputs=ins, outputs=[out], options=dict(op=name, **options))
    op("eq", ["a"], "m", scalars={"b": 3})
    op("add", ["a", "x"], "s", attrs={"alpha": 2})          # int64 + float32: float32
    op("where", ["m", "x", "s"], "w")
    op("copy", ["w"], "wi", dtype="int32")                  # floats truncate toward 0
    op("div", ["a"], "q", scalars={"b": 4}, attrs={"rounding_mode": "trunc"})
    op("remainder", ["a"], "r", scalars={"b": 5})           # Python's sign rule: Mod fmod=0
    op("fmod", ["a"], "f", scalars={"b": 5})                # C's: Mod fmod=1
    op("pow", ["x"], "p", scalars={"b": 2})
    op("logical_not", ["m"], "nm")
    op("gt", ["x", "s"], "g")
    cfg.set_outputs(["m", "w", "wi", "q", "r", "f", "p", "nm", "g"])
    return dp.Net(ctx, cfg)


def test_typed_net_exports_to_onnxruntime_and_back(ctx, tmp_path):
    net = _net(ctx)
    rng = np.random.default_rng(3)
    feeds = {"a": rng.integers(-9, 9, (2, 70)), "x": rng.standard_normal((2, 70)).astype(np.float32)}
    ours = net(**feeds)
    path = str(tmp_path / "typed.onnx")
    dox.save(net, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert set(ref) == set(ours)
    for k, r in ref.items():
        assert ours[k].dtype == r.dtype, k
        np.testing.assert_allclose(ours[k].astype(np.float64), r.astype(np.float64),
                                   rtol=1e-6, atol=1e-6, err_msg=k)
    back = dox.load(path, ctx)(**feeds)
    for k in ours:
        np.testing.assert_array_equal(back[k], ours[k], err_msg=k)


def test_operator_without_exact_onnx_export_is_refused(ctx, tmp_path):
    cfg = dp.NetConfig()
    cfg.add_input("x", (4,))
    cfg.add("LibraryOp", name="r", inputs=["x"], outputs=["r"],
            options={"op": "remainder", "scalars": {"b": 2.0}})
    net = dp.Net(ctx, cfg)
    with pytest.raises(ValueError, match="LibraryOp 'r' .*remainder"):
        dox.save(net, str(tmp_path / "r.onnx"))
    assert not (tmp_path / "r.onnx").exists()


@pytest.mark.parametrize("method", ["max", "min", "prod", "sum"])
def test_reductions_of_integers_export(ctx, tmp_path, method):
    cfg = dp.NetConfig()
    cfg.add_input("a", (3, 5), dtype="int32")
    cfg.add("Reduction", name="r", inputs=["a"], outputs=["r"],
            options={"method": method, "dims": [1], "keep_dim": False})
    cfg.set_outputs(["r"])
    net = dp.Net(ctx, cfg)
    a = np.random.default_rng(1).integers(-3, 4, (3, 5)).astype(np.int32)
    ours = net(a=a)["r"]
    path = str(tmp_path / "r.onnx")
    dox.save(net, path)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    assert ours.dtype == ref.dtype == np.int32
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(ours, getattr(np, method)(a, axis=1))
