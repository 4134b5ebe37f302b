"""Activations in ONNX, read from the spellings of the activation table
(``dlprim.core.activation``): the one-node forms the converters take, the node trees the
rewrite folds, the nodes the exporter writes.

A spelling's float constants match a model's to 1e-5 relative (models store float32:
1/6, sqrt 2); an attribute the model leaves out takes the ONNX schema's default, one
that gives an option's value and is left out takes the option's default.
"""
import functools

import numpy as np

from ..core.activation import ACTIVATIONS, X, OnnxNode, Option, canonical

__all__ = ["one_node", "trees", "for_export", "match_attrs", "match_value", "onnx_default",
           "import_options"]

IMPORTED = ("both", "import")


def _is_one_node(tree):
    return all(not isinstance(t, OnnxNode) for t in tree.inputs)


def _imported(one):
    return [(name, act, sp) for name, act in canonical() for sp in act.onnx
            if sp.way in IMPORTED and _is_one_node(sp.tree) == one]


@functools.lru_cache(maxsize=None)
def one_node(op_type=None):
    """[(name, Activation, Spelling)] of the one-node spellings the importer converts
    (of ``op_type``; all when None)."""
    return [s for s in _imported(True) if op_type is None or s[2].tree.op == op_type]


@functools.lru_cache(maxsize=None)
def trees(op_type=None):
    """[(name, Activation, Spelling)] of the node trees the rewrite folds, by root op."""
    return [s for s in _imported(False) if op_type is None or s[2].tree.op == op_type]


def for_export(name, opset, values):
    """The first spelling of activation ``name`` the exporter may write at ``opset`` for
    option ``values``; None when there is none."""
    act = ACTIVATIONS.get(name)
    for sp in act.onnx if act is not None else ():
        if sp.way in ("both", "export") and sp.since <= opset and \
                all(values.get(k) == v for k, v in sp.when.items()):
            return sp
    return None


@functools.lru_cache(maxsize=None)
def onnx_default(op_type, attr):
    """The default of attribute ``attr`` of ONNX ``op_type`` (None where it has none)."""
    from onnx import defs, helper
    a = defs.get_schema(op_type).attributes.get(attr)
    if a is None or a.default_value.type == 0:  # UNDEFINED: a required attribute
        return None
    value = helper.get_attribute_value(a.default_value)
    return value.decode("utf-8") if isinstance(value, bytes) else value


def match_value(want, value, bound):
    """``bound`` with Option ``want`` bound to ``value``, or ``bound`` if the constant
    ``want`` equals ``value``; None when they differ."""
    if isinstance(want, Option):
        if value is None:
            return None
        value = float(value)
        if bound.setdefault(want.name, value) != value:
            return None  # an option read twice must have one value
        return bound
    if isinstance(want, float):
        try:
            same = bool(np.isclose(float(value), want, rtol=1e-5, atol=0.0))  # inf == inf
        except (TypeError, ValueError):
            same = False
    else:
        same = value == want
    return bound if same else None


def match_attrs(act, tree, op_type, attrs, bound):
    """``bound`` with the Options of ``tree``'s attributes bound from node ``attrs``;
    None when a fixed attribute differs."""
    for key, want in tree.attrs.items():
        value = attrs.get(key)
        if value is None:
            value = act.params[want.name] if isinstance(want, Option) else onnx_default(op_type, key)
        bound = match_value(want, value, bound)
        if bound is None:
            return None
    return bound


def import_options(act, sp, bound):
    """The Activation options a matched spelling stands for: its bound Options, and the
    options it implies (``when``) where they are not the defaults."""
    opts = {k: v for k, v in bound.items() if k != X}
    opts.update((k, v) for k, v in sp.when.items() if act.params.get(k) != v)
    return opts
