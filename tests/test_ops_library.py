"""The operator library (dlprim.ops): its declarations are consistent, and the code every
front end generates from them is right.

- Each one-input float operator, run as the Net's ``Pointwise`` layer (forward from its
  expression, backward from its gradient expression), matches PyTorch's float64 value and
  gradient at a size past a work-group edge, with accumulation.
- Each declaration's ATen packets exist and are claimed once; its ONNX op type exists.
"""
import re

import numpy as np
import pytest

import dlprim.ops as library
from dlprim.layers import create
from dlprim.ops import layer_operators
from layer_check import assert_close, run_layer

torch = pytest.importorskip("torch")

# where each operator is defined and smooth enough for a float32 comparison
DOMAINS = {
    "log": (0.1, 3), "log2": (0.1, 3), "log10": (0.1, 3), "sqrt": (0.1, 3), "rsqrt": (0.2, 3),
    "log1p": (-0.5, 2), "acosh": (1.2, 3), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9),
    "atanh": (-0.9, 0.9), "erfinv": (-0.9, 0.9), "reciprocal": (0.3, 2), "tan": (-1.2, 1.2),
    "lgamma": (0.2, 4), "digamma": (0.3, 4), "exp": (-3, 3), "exp2": (-3, 3),
    "expm1": (-3, 3), "sinh": (-3, 3), "cosh": (-3, 3), "special_entr": (0.05, 3),
    "special_log_ndtr": (-3, 3),
}
# away from kinks (where a gradient jumps) by this much
KINKS = {"abs": 0.0, "relu": 0.0, "frac": None, "floor": None, "ceil": None, "trunc": None,
         "round": None, "sign": 0.0}


def _inputs(name, n=65, seed=0):
    lo, hi = DOMAINS.get(name, (-2.5, 2.5))
    x = np.random.default_rng(seed).uniform(lo, hi, n)
    if name in KINKS:   # keep 0.05 away from the kinks: integers and halves, and 0
        x = np.where(np.abs(x - np.round(x * 2) / 2) < 0.05, x + 0.1, x)
    return x


def _torch_fn(name):
    op = library.get(name)
    for packet in op.aten or (name,):  # no ATen operator (softsign): PyTorch's functional
        fn = getattr(torch, packet, None) or getattr(torch.special, packet.replace(
            "special_", ""), None) or getattr(torch.nn.functional, packet, None)
        if fn is not None:
            return fn
    raise AssertionError("no torch function for %s" % name)


@pytest.mark.parametrize("name", layer_operators())
def test_pointwise_layer_matches_pytorch_float64(ctx, name):
    x = _inputs(name)
    dy = np.random.default_rng(1).standard_normal(x.shape)
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = _torch_fn(name)(t)
    y.backward(torch.tensor(dy))
    layer = create(ctx, "Pointwise", options={"op": name})
    r = run_layer(ctx, layer, [x.astype(np.float32)], dy=[dy.astype(np.float32)],
                  accumulate=True)
    assert_close(r.y[0], y.detach().numpy(), rtol=2e-5, atol=2e-6, what=name + " forward")
    assert_close(r.dx[0], t.grad.numpy(), rtol=2e-4, atol=2e-5, what=name + " backward")


def test_pointwise_layer_refuses_what_it_cannot_run(ctx):
    with pytest.raises(Exception, match="'eq' is not a one-input float operator"):
        create(ctx, "Pointwise", options={"op": "eq"})
    with pytest.raises(Exception, match="'sinn' is not"):
        create(ctx, "Pointwise", options={"op": "sinn"})


def test_declarations_are_consistent():
    claimed = {}
    for op in library.OPS.values():
        assert op.doc and not op.doc.endswith("."), op.name
        for packet in op.aten:
            assert packet not in claimed, (packet, claimed.get(packet), op.name)
            claimed[packet] = op.name
            assert hasattr(torch.ops.aten, packet), "%s: no ATen packet %r" % (op.name, packet)
        if op.kind in ("unary", "binary", "ternary"):
            for cls in op.dtypes:
                expr = op.expr_for(cls, {"present": (True, True, True)})
                assert expr is not None, (op.name, cls)
                assert set(re.findall(r"\{(\w+)\}", expr)) <= {"a", "b", "c", "T", "R"} | set(
                    re.findall(r"\{(\w+)\}", expr)), op.name


def test_onnx_spellings_exist():
    defs = pytest.importorskip("onnx").defs
    for op in library.OPS.values():
        if op.onnx:
            assert defs.has(op.onnx), "%s: ONNX has no operator %r" % (op.name, op.onnx)


def test_a_declaration_error_names_the_operator():
    with pytest.raises(ValueError, match="'sin' is declared twice"):
        library.declare("sin", "elementwise", "unary", "again", expr="sin({a})")
    with pytest.raises(ValueError, match="'x_new': kind 'pointwise'"):
        library.declare("x_new", "elementwise", "pointwise", "a kind that is not one")
    with pytest.raises(KeyError, match="did you mean sin"):
        library.get("sinn")


def test_generated_onnx_converters_and_exporter_match_onnxruntime(ctx, tmp_path):
    """Every ONNX op type converted from a declaration, in one graph, against onnxruntime;
    then exported by dlprim and imported back."""
    pytest.importorskip("onnxruntime")
    from onnx import helper
    from test_onnx_ops import check, make
    from dlprim.onnx.ops_library import GENERATED
    import dlprim.onnx as dox
    assert {"Sin", "Cos", "Exp", "Log", "Sqrt", "Floor", "Atanh"} <= set(GENERATED)
    nodes, outputs = [], []
    for op_type, name in sorted(GENERATED.items()):
        source = "x_in_domain" if name in DOMAINS else "x"
        nodes.append(helper.make_node(op_type, [source], [name]))
        outputs.append(name)
    nodes.insert(0, helper.make_node("Sigmoid", ["x"], ["x_in_domain"]))  # (0, 1)
    nodes[[n.output[0] for n in nodes].index("acosh")].input[0] = "x_above_one"
    data = make(nodes, {"x": [2, 33], "x_above_one": [2, 33]}, outputs)
    rng = np.random.default_rng(3)
    x = rng.uniform(-2.4, 2.4, (2, 33)).astype(np.float32)
    x = np.where(np.abs(x - np.round(x * 2) / 2) < 0.02, x + 0.05, x)  # no rounding ties
    feeds = {"x": x, "x_above_one": rng.uniform(1.2, 3, (2, 33)).astype(np.float32)}
    net = check(ctx, data, feeds)
    path = str(tmp_path / "library.onnx")
    dox.save(net, path)
    check(ctx, open(path, "rb").read(), feeds)
    import onnx
    written = {n.op_type for n in onnx.load(path).graph.node}
    assert set(GENERATED) <= written, set(GENERATED) - written


def test_nn_functional_has_the_library_operators_and_trains_through_them(ctx):
    """F.sin / F.exp .. are generated from the declarations; a net using them matches
    PyTorch's values and gradients."""
    import dlprim as dp
    import dlprim.nn as nn
    import dlprim.nn.functional as F
    assert {"sin", "cos", "exp", "log1p", "erf", "atan"} <= set(F.__all__)

    def model(lib, functional):
        class SinExp(lib.Module):
            def __init__(self):
                super().__init__()
                self.fc = lib.Linear(5, 3)

            def forward(self, x):
                return functional.atan(functional.exp(functional.sin(self.fc(x))))
        return SinExp()

    net = dp.Net(ctx, model(nn, F), input_shape=[4, 5], loss="mse", seed=3)
    twin = model(torch.nn, torch)
    params = net.get_parameters()
    with torch.no_grad():
        twin.fc.weight.copy_(torch.tensor(params["fc.weight"]))
        twin.fc.bias.copy_(torch.tensor(params["fc.bias"]))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = rng.standard_normal((4, 3)).astype(np.float32)
    loss = torch.nn.functional.mse_loss(twin(torch.tensor(x)), torch.tensor(t))
    loss.backward()
    ours = net(data=x, target=t)["loss"]
    np.testing.assert_allclose(ours, [loss.item()], rtol=1e-5)
    net.backward()
    np.testing.assert_allclose(net.param_diff("fc.weight").numpy(), twin.fc.weight.grad.numpy(),
                               rtol=1e-4, atol=1e-6)


def _sample_args(overload, g, seed):
    """Arguments for a pointwise overload: tensors of one shape (values in (0.1, 0.9),
    valid for most domains), numbers for Scalars; None where another argument is needed."""
    args = []
    for a in overload._schema.arguments:
        kind = str(a.type)
        if a.kwarg_only and a.has_default_value():
            continue
        if kind == "Tensor":
            args.append(0.1 + 0.8 * torch.rand(5, 7, generator=g))
        elif kind == "Scalar":
            args.append(0.25 + 0.5 * seed)
        elif a.has_default_value():
            break
        else:
            return None
    return args


def test_every_pointwise_operator_repeated_takes_each_calls_own_values():
    """The second call of a signature runs the plan the first one made (ops_library's
    _PLANS): with other tensors and other numbers it must give its own results."""
    torch_ = pytest.importorskip("torch")
    import dlprim.torch.ops_library as ol
    g = torch_.Generator().manual_seed(0)
    checked = 0
    for _name, overload in ol.generated:
        if overload.overloadpacket.__name__.endswith("_") or "out" in overload._overloadname:
            continue
        results = []
        for seed in (0, 1):
            args = _sample_args(overload, g, seed)
            if args is None:
                break
            try:
                want = overload(*args)
            except Exception:  # noqa: BLE001 - the CPU refuses these arguments
                break
            if not isinstance(want, torch_.Tensor) or not want.is_floating_point():
                break
            got = overload(*[a.to("ocl") if isinstance(a, torch_.Tensor) else a
                             for a in args]).cpu()
            results.append((got, want))
        if len(results) == 2:
            for got, want in results:
                torch_.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True,
                                            msg=lambda m: "%s: %s" % (overload, m))
            checked += 1
    assert checked > 50
