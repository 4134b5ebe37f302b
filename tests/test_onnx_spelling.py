"""The ONNX spellings of the activation table (dlprim.core.activation): each one the
importer takes becomes its activation, and the exporter writes it back node for node;
the exporter writes the export-only ones as spelled; options left out are ONNX's defaults."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

import dlprim as dp  # noqa: E402
import dlprim.onnx as dox  # noqa: E402
from dlprim.core.activation import ACTIVATIONS, X, OnnxNode, Option, canonical  # noqa: E402
from dlprim.onnx.export import MIN_OPSET, to_model  # noqa: E402
from dlprim.onnx.spelling import for_export, onnx_default  # noqa: E402

NEWEST = 20  # the newest opset a spelling needs (Gelu)
TEST_VALUES = {"negative_slope": 0.2, "alpha": 0.7, "beta": 2.0}  # options a spelling reads


def walk(tree):
    yield tree
    for t in tree.inputs:
        if isinstance(t, OnnxNode):
            yield from walk(t)


def spellings(ways):
    return [(name, k) for name, act in canonical() for k, sp in enumerate(act.onnx) if sp.way in ways]


def values_for(act, sp):
    """Option values the spelling stands for: test values where it reads them."""
    read = {v.name for t in walk(sp.tree) for v in list(t.inputs) + list(t.attrs.values())
            if isinstance(v, Option)}
    return dict(act.params, **{k: TEST_VALUES[k] for k in read}, **sp.when)


def model_of(sp, values, opset):
    """An ONNX model computing y = the spelling over input x of shape (2, 5)."""
    nodes, inits = [], []

    def put(t):
        if t == X:
            return "x"
        if not isinstance(t, OnnxNode):
            name = "c%d" % len(inits)
            v = values[t.name] if isinstance(t, Option) else t
            inits.append(numpy_helper.from_array(np.asarray(v, np.float32), name))
            return name
        ins = [put(i) for i in t.inputs]
        out = "y" if t is sp.tree else "t%d" % len(nodes)
        attrs = {k: float(values[v.name]) if isinstance(v, Option) else v for k, v in t.attrs.items()}
        nodes.append(helper.make_node(t.op, ins, [out], name="n%d" % len(nodes), **attrs))
        return out

    put(sp.tree)
    io = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 5]) for n in "xy"]
    graph = helper.make_graph(nodes, "spelling", io[:1], io[1:], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 18 else 9
    return m


def signature(model):
    """The node tree computing the model's output, names left out."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    consts = {i.name: float(numpy_helper.to_array(i).reshape(())) for i in g.initializer}

    def tree(name):
        if name in consts:
            return consts[name]
        if name not in producer:
            return "x"
        n = producer[name]
        attrs = tuple(sorted((a.name, helper.get_attribute_value(a)) for a in n.attribute))
        return (n.op_type, attrs) + tuple(tree(i) for i in n.input)

    return tree(g.output[0].name)


def exported(ctx, name, options, opset):
    cfg = dp.NetConfig()
    cfg.add_input("x", (2, 5))
    cfg.set_outputs([cfg.add("Activation", name="act", inputs="x",
                             options=dict(options, activation=name))])
    return to_model(dp.Net(ctx, cfg, mode="predict"), opset)


def export_opset(name, values, sp):
    """The first opset at which the exporter writes ``sp``."""
    return next((o for o in range(MIN_OPSET, NEWEST + 1) if for_export(name, o, values) is sp), None)


@pytest.mark.parametrize("name, k", spellings(("both", "import")))
def test_spelling_imports_to_its_activation_and_exports_back(ctx, name, k):
    act = ACTIVATIONS[name]
    sp = act.onnx[k]
    values = values_for(act, sp)
    model = model_of(sp, values, NEWEST)
    cfg, _ = dox.to_netconfig(model)
    assert [op["type"] for op in cfg.operators] == ["Activation"]
    options = dict(cfg.operators[0]["options"])
    assert options.pop("activation") == name
    for key, v in options.items():
        assert np.isclose(v, values[key], rtol=1e-6), key
    implied = {p for p, v in sp.when.items() if act.params[p] != v}
    assert set(options) == {v.name for t in walk(sp.tree) for v in t.attrs.values()
                            if isinstance(v, Option)} | implied
    if sp.way == "both":
        opset = export_opset(name, values, sp)
        assert opset is not None, "the exporter never writes this spelling"
        assert signature(exported(ctx, name, options, opset)) == signature(model_of(sp, values, opset))


@pytest.mark.parametrize("name, k", spellings(("export",)))
def test_export_only_spelling_is_what_the_exporter_writes(ctx, name, k):
    act = ACTIVATIONS[name]
    sp = act.onnx[k]
    values = values_for(act, sp)
    opset = export_opset(name, values, sp)
    assert opset is not None, "the exporter never writes this spelling"
    options = {p: v for p, v in values.items() if p in act.params}
    assert signature(exported(ctx, name, options, opset)) == signature(model_of(sp, values, opset))


def test_option_defaults_are_the_onnx_defaults():
    """An attribute the model leaves out takes the option's default on import."""
    for name, act in canonical():
        for sp in act.onnx:
            for t in walk(sp.tree):
                for attr, v in t.attrs.items():
                    if isinstance(v, Option):
                        assert np.isclose(act.params[v.name], onnx_default(t.op, attr), rtol=1e-6), \
                            (name, t.op, attr)


def test_every_activation_exports_at_every_opset():
    for name, act in canonical():
        for opset in range(MIN_OPSET, NEWEST + 1):
            assert for_export(name, opset, dict(act.params)) is not None, (name, opset)
