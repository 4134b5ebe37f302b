"""The JSON net format where DLPrimitives' loader is lenient by design (an input without a
name is "data"; "auto", "" and missing params entries are default names), and where it
silently ignores a misspelling and dlprim refuses it with the nearest known spelling."""
import json
import os

import numpy as np
import pytest

import dlprim as dp
from dlprim.layers.base import LayerError
from dlprim.net.graph import GraphError, load_graph

HERE = os.path.dirname(os.path.abspath(__file__))

BN = {"name": "bn", "type": "BatchNorm", "inputs": ["data"], "outputs": ["y"]}


def net_json(op, inputs=None):
    return {"inputs": inputs if inputs is not None else [{"shape": [2, 3]}],
            "outputs": ["y"], "operators": [op]}


def test_an_input_without_a_name_is_data(ctx):
    g = load_graph({"inputs": [{"shape": [2, 3]}], "outputs": ["data"], "operators": []})
    assert list(g.inputs) == ["data"] and g.to_dict()["inputs"][0]["name"] == "data"
    net = dp.Net(ctx, net_json(dict(BN)), mode="predict")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.allclose(net(data=x)["y"], x / np.sqrt(1 + 1e-5), rtol=1e-6)


def test_two_inputs_without_names_are_one_name_twice():
    with pytest.raises(GraphError, match=r"net input 'data' listed twice \(inputs\[1\] has no "
                                         r"name, so it is 'data'\)"):
        load_graph({"inputs": [{"shape": [2]}, {"shape": [3]}], "outputs": [], "operators": []})
    with pytest.raises(GraphError, match=r"inputs\[0\].name is NoneType None"):
        load_graph({"inputs": [{"name": None, "shape": [2]}], "outputs": [], "operators": []})


@pytest.mark.parametrize("params, names", [
    (["auto", "auto", "auto", "auto"], ["bn.0", "bn.1", "bn.2", "bn.3"]),
    (["mean", "", "auto", "beta"], ["mean", "bn.1", "bn.2", "beta"]),
    (["mean"], ["mean", "bn.1", "bn.2", "bn.3"]),             # padded with default names
    (["", "var"], ["bn.0", "var", "bn.2", "bn.3"]),
    ([], ["bn.0", "bn.1", "bn.2", "bn.3"]),
])
def test_params_auto_empty_and_short_lists_take_default_names(ctx, params, names):
    net = dp.Net(ctx, net_json(dict(BN, params=params)))
    assert sorted(net.param_layout) == sorted(names)
    assert net.store.op_param_names[0] == names
    written = load_graph(net_json(dict(BN, params=params))).to_dict()
    assert written["operators"][0]["params"] == params   # saved as given


def test_default_named_params_share_by_name(ctx):
    """A short list in one operator and the full default name in another are one parameter."""
    ops = [dict(BN, params=["m"]),
           {"name": "bn2", "type": "BatchNorm", "inputs": ["y"], "outputs": ["z"],
            "params": ["m", "auto", "bn.2"]}]
    net = dp.Net(ctx, {"inputs": [{"shape": [2, 3]}], "outputs": ["z"], "operators": ops})
    assert sorted(net.param_layout) == ["bn.1", "bn.2", "bn.3", "bn2.1", "bn2.3", "m"]


def test_too_many_params_is_an_error(ctx):
    with pytest.raises(GraphError, match=r"operator 'bn' lists 5 params \('a', 'auto', '', 'd', "
                                         r"'e'\) but its BatchNorm layer has 4"):
        dp.Net(ctx, net_json(dict(BN, params=["a", "auto", "", "d", "e"])))


def test_params_entries_must_be_names():
    with pytest.raises(GraphError, match=r"operators\[0\]\.params\[1\]: 3 is not a parameter name"):
        load_graph(net_json(dict(BN, params=["a", 3])))
    with pytest.raises(GraphError, match=r"operators\[0\]\.inputs\[0\]: '' is not a tensor name"):
        load_graph(net_json(dict(BN, inputs=[""])))


def test_dlprimitives_test_net_with_a_misspelled_option_is_refused(ctx):
    """DLPrimitives' tests/test_net.json spells Elementwise's ``operation`` as
    ``operations``; DLPrimitives ignores it (the default, sum, happens to be what was
    meant). dlprim refuses it and names the right spelling; corrected, the net runs."""
    with open(os.path.join(HERE, "data", "nets", "test_net.json")) as f:
        d = json.load(f)
    with pytest.raises(LayerError, match=r"Elementwise 'elt': unknown option 'operations' "
                                         r"\(did you mean 'operation'\?\)"):
        dp.Net(ctx, d)
    elt = next(op for op in d["operators"] if op["name"] == "elt")
    elt["options"] = {"operation": elt["options"].pop("operations")}
    net = dp.Net(ctx, d)
    rng = np.random.default_rng(0)
    loss = net(data=rng.random((2, 1, 28, 28), np.float32), label=np.array([[1], [3]], np.float32))
    assert np.isfinite(loss["loss"]).all()


@pytest.mark.parametrize("d, match", [
    ({"inputs": [], "outputs": [], "operators": [], "operator": []},
     r"the net's top level: unknown key 'operator' \(did you mean 'operators'\?\)"),
    (net_json(dict(BN, option={})),
     r"operator 'bn': operators\[0\]: unknown key 'option' \(did you mean 'options'\?\)"),
    (net_json(dict(BN, parmas=[])), r"unknown key 'parmas' \(did you mean 'params'\?\)"),
    (net_json(dict(BN), inputs=[{"name": "data", "shape": [2, 3], "dtpye": "float"}]),
     r"net input 'data': inputs\[0\]: unknown key 'dtpye' \(did you mean 'dtype'\?\)"),
    ({"inputs": [], "outputs": [{"name": "y", "loss_weigth": 1}], "operators": []},
     r"outputs\[0\]: unknown key 'loss_weigth' \(did you mean 'loss_weight'\?\)"),
    (net_json(dict(BN, zzz=1)), r"unknown key 'zzz'; known"),   # nothing near: no guess
])
def test_unknown_keys_name_the_nearest_known_one(d, match):
    with pytest.raises(GraphError, match=match):
        load_graph(d)


def test_unknown_options_name_the_nearest_known_one(ctx):
    with pytest.raises(LayerError, match=r"BatchNorm 'bn': unknown option 'momentun' \(did "
                                         r"you mean 'momentum'\?\)"):
        dp.Net(ctx, net_json(dict(BN, options={"momentun": 0.2})))
