"""The DLPrimitives JSON net format, read and checked; tensors as single-assignment values.

A graph is ``inputs`` ([{name, shape, dtype}]), ``outputs`` (names, or {name,
loss_weight}; names starting with "loss" are losses of weight 1) and ``operators``
([{name, type, inputs, outputs, options, params, frozen}]) run in the listed order.

Where DLPrimitives' loader (Net::load_from_json, Net::add_operator) is lenient by design,
so is this one: an input without ``name`` is ``data``, and in ``params`` an entry ``"auto"``
or ``""`` is the default name ``<op>.<i>`` and a list shorter than the layer's parameters
is padded with default names. A key it would ignore (a misspelling) is an error here,
with the nearest known spelling.

An operator may write a name it reads (in place). Each write makes a new *value*, so a
name can stand for several values over time: an operator reads the latest value of each
input name. Whether the new value shares the old one's memory is the planner's decision
(see ``dlprim.net.autograd``); gradients are computed per value and never mix versions.

Pure Python, no OpenCL.
"""
import json
import numbers
import os
from typing import List, Optional, Sequence

from ..dtypes import DTYPES
from ..errors import Error
from ..utils import check_regular_file, shape_problem, unknown_names

__all__ = ["Graph", "OpDef", "Value", "load_graph", "load_graph_file", "parse_json",
           "GraphError", "DEFAULT_INPUT_NAME", "AUTO_PARAM_NAMES"]

DEFAULT_INPUT_NAME = "data"      # an input without a name, as DLPrimitives
AUTO_PARAM_NAMES = ("auto", "")  # a params entry that asks for the default <op>.<i>


class GraphError(Error, ValueError):
    """A malformed graph; the message names the operator or tensor at fault."""


class Value:
    """One assignment of a tensor name: produced by op ``producer`` (-1: a net input)."""
    __slots__ = ("id", "name", "producer", "consumers", "shape", "dtype", "requires_grad")

    def __init__(self, vid, name, producer):
        self.id, self.name, self.producer = vid, name, producer
        self.consumers = []  # (op index, input position)
        self.shape, self.dtype, self.requires_grad = None, None, False

    def __repr__(self):
        return "Value(%d, %r, producer=%d)" % (self.id, self.name, self.producer)


class OpDef:
    """An operator as the JSON gives it, plus the value ids it reads and writes."""
    __slots__ = ("index", "name", "type", "inputs", "outputs", "options", "params", "frozen",
                 "in_values", "out_values")
    KEYS = ("name", "type", "inputs", "outputs", "options", "params", "frozen")

    def __init__(self, index, d):
        self.index = index
        at = "operators[%d]" % index
        if not isinstance(d, dict):
            raise GraphError("%s must be an object {name, type, inputs, outputs, ...}, got %s"
                             % (at, _shown(d)))
        self.name = d.get("name")
        if not isinstance(self.name, str) or not self.name:
            raise GraphError("operator #%d has no name: %s.name is %s"
                             % (index, at, _shown(self.name)))
        who = "operator '%s': %s" % (self.name, at)  # the name, then the place in the JSON
        _check_keys(d, self.KEYS, who)
        self.type = d.get("type")
        if not isinstance(self.type, str) or not self.type:
            raise GraphError("%s.type: no type, got %s" % (who, _shown(self.type)))
        self.inputs = _names(d.get("inputs", []), who + ".inputs")
        self.outputs = _names(d.get("outputs", []), who + ".outputs")
        options = d.get("options")
        if options is not None and not isinstance(options, dict):
            raise GraphError("%s.options must be an object {option: value}, got %s"
                             % (who, _shown(options)))
        self.options = dict(options or {})
        params = d.get("params")
        self.params = None if params is None else _names(params, who + ".params",
                                                        allowed=AUTO_PARAM_NAMES)
        self.frozen = _flag(d.get("frozen", False), who + ".frozen")
        if len(set(self.outputs)) != len(self.outputs):
            raise GraphError("operator '%s' lists an output twice: %s" % (self.name, self.outputs))

    def param_names(self, count: int, suffixes: Sequence[Optional[str]] = ()) -> List[str]:
        """The names of this operator's ``count`` parameters: ``params`` with ``"auto"``
        and ``""`` entries, and the entries a short list lacks, named ``<op>.<i>``
        (DLPrimitives' rule), or ``<op>.<suffix>`` where the layer names parameter i
        (``suffixes[i]``, as PyTorch's state dict does); more names than parameters is
        an error."""
        given = list(self.params or [])
        if len(given) > count:
            raise GraphError("operator '%s' lists %d params (%s) but its %s layer has %d"
                             % (self.name, len(given), ", ".join(map(repr, given)), self.type,
                                count))
        given += [""] * (count - len(given))
        suffixes = list(suffixes) + [None] * (count - len(suffixes))
        return ["%s.%s" % (self.name, i if suffixes[i] is None else suffixes[i])
                if n in AUTO_PARAM_NAMES else n for i, n in enumerate(given)]

    def to_dict(self):
        d = {"name": self.name, "type": self.type, "inputs": list(self.inputs),
             "outputs": list(self.outputs)}
        if self.options:
            d["options"] = dict(self.options)
        if self.params is not None:
            d["params"] = list(self.params)
        if self.frozen:
            d["frozen"] = True
        return d


def _shown(value):
    """A value as an error message shows it: its JSON type and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return "%s %s" % (type(value).__name__, text)


def _names(items, what, allowed=()):
    """``items`` checked as a list of non-empty names (or members of ``allowed``)."""
    if isinstance(items, str) or not isinstance(items, (list, tuple)):
        raise GraphError("%s must be a list of names, got %s" % (what, _shown(items)))
    for i, n in enumerate(items):
        if not isinstance(n, str) or not (n or n in allowed):
            raise GraphError("%s[%d]: %r is not a %s name"
                             % (what, i, n, "parameter" if allowed else "tensor"))
    return list(items)


def _check_keys(d, known, who):
    """A GraphError naming every key of ``d`` not in ``known``, each with the nearest known
    one (DLPrimitives ignores such keys, so a misspelling would silently change the net)."""
    unknown = sorted(str(k) for k in d if k not in known)
    if unknown:
        raise GraphError("%s: unknown key%s %s; known: %s" % (
            who, "s" if len(unknown) > 1 else "", unknown_names(unknown, known),
            ", ".join(known)))


def _flag(value, where):
    if value not in (True, False) or isinstance(value, float):
        raise GraphError("%s must be true or false, got %s" % (where, _shown(value)))
    return bool(value)


def _list(d, key):
    """The list under top-level ``key`` (absent or null: empty)."""
    items = d.get(key)
    if items is None:
        return []
    if not isinstance(items, (list, tuple)):
        raise GraphError("%s must be a list, got %s" % (key, _shown(items)))
    return items


class Graph:
    """Checked graph: ``inputs`` {name: (shape, dtype, requires_grad)}, ``outputs`` [names],
    ``loss_weights`` {name: weight}, ``ops`` [OpDef], ``values`` [Value], ``latest`` {name: id},
    ``meta`` (the optional top-level object of facts for programs that use the net, such
    as the preprocessing dlprim-predict reads from a deploy file; the Net ignores it).

    Errors about the structure name their place in the JSON, as ``inputs[0].shape[1]`` or
    ``operators[3].options``, and the input or operator when it has a name.
    """
    INPUT_KEYS = ("name", "shape", "dtype", "requires_grad")

    def __init__(self, d):
        if not isinstance(d, dict):
            raise GraphError("a net must be a JSON object, got %s" % type(d).__name__)
        _check_keys(d, ("inputs", "outputs", "operators", "meta"), "the net's top level")
        meta = d.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise GraphError("meta must be an object, got %s" % _shown(meta))
        self.meta = dict(meta or {})
        self.values, self.latest, self.inputs, self.input_values = [], {}, {}, {}
        for i, spec in enumerate(_list(d, "inputs")):
            name, shape, dtype, requires_grad = self._input(i, spec)
            self.inputs[name] = (shape, dtype, requires_grad)
            v = self._new_value(name, -1)
            self.input_values[name] = v.id
            v.requires_grad = requires_grad
        self.ops = [OpDef(i, od) for i, od in enumerate(_list(d, "operators"))]
        self._link()
        self.outputs, self.loss_weights = [], {}
        for i, out in enumerate(_list(d, "outputs")):
            name, weight = self._output(i, out)
            if name not in self.latest:
                raise GraphError("net output '%s' is produced by no operator and is not an input"
                                 % name)
            if name in self.outputs:
                raise GraphError("net output '%s' listed twice" % name)
            self.outputs.append(name)
            if weight is None and name.startswith("loss"):
                weight = 1.0
            if weight is not None:
                self.loss_weights[name] = float(weight)

    def _input(self, i, spec):
        """(name, shape, dtype, requires_grad) of ``inputs[i]``, checked."""
        at = "inputs[%d]" % i
        if not isinstance(spec, dict):
            raise GraphError("%s must be an object {name, shape, dtype}, got %s"
                             % (at, _shown(spec)))
        name = spec.get("name", DEFAULT_INPUT_NAME)
        if not isinstance(name, str) or not name:
            raise GraphError("net input %s has no name: %s.name is %s"
                             % (at, at, _shown(name)))
        if name in self.inputs:
            raise GraphError("net input '%s' listed twice%s" % (
                name, "" if "name" in spec else
                " (%s has no name, so it is '%s')" % (at, DEFAULT_INPUT_NAME)))
        who = "net input '%s': %s" % (name, at)  # the name, then the place in the JSON
        _check_keys(spec, self.INPUT_KEYS, who)
        if "shape" not in spec:
            raise GraphError("%s.shape: no shape" % who)
        problem = shape_problem(spec["shape"], at + ".shape")
        if problem:
            raise GraphError("net input '%s': %s" % (name, problem))
        dtype = spec.get("dtype", "float")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise GraphError("%s.dtype is %s; known: %s"
                             % (who, _shown(dtype), ", ".join(sorted(DTYPES))))
        requires_grad = _flag(spec.get("requires_grad", False), who + ".requires_grad")
        return name, tuple(int(n) for n in spec["shape"]), dtype, requires_grad

    @staticmethod
    def _output(i, out):
        """(name, loss_weight or None) of ``outputs[i]``: a name or {name, loss_weight}."""
        at = "outputs[%d]" % i
        if isinstance(out, dict):
            _check_keys(out, ("name", "loss_weight"), at)
            name, weight = out.get("name"), out.get("loss_weight")
        else:
            name, weight = out, None
        if not isinstance(name, str) or not name:
            raise GraphError("net output %s has no name: got %s" % (at, _shown(name)))
        if weight is not None and (isinstance(weight, bool) or
                                   not isinstance(weight, numbers.Real)):
            raise GraphError("net output '%s': %s.loss_weight must be a number, got %s"
                             % (name, at, _shown(weight)))
        return name, weight

    def _new_value(self, name, producer):
        v = Value(len(self.values), name, producer)
        self.values.append(v)
        self.latest[name] = v.id
        return v

    def _link(self):
        seen = {}
        for op in self.ops:
            if op.name in seen:
                raise GraphError("duplicate operator name '%s' (operators #%d and #%d)"
                                 % (op.name, seen[op.name], op.index))
            seen[op.name] = op.index
        later = {}
        for op in self.ops:
            for n in op.outputs:
                later.setdefault(n, op.name)
        for op in self.ops:
            op.in_values = []
            for pos, n in enumerate(op.inputs):
                vid = self.latest.get(n)
                if vid is None:
                    if n in later and later[n] != op.name:
                        raise GraphError(
                            "operator '%s': input '%s' is produced only later, by operator '%s' "
                            "(a cycle or operators out of order)" % (op.name, n, later[n]))
                    raise GraphError("operator '%s': input '%s' is produced by no earlier "
                                     "operator and is not a net input" % (op.name, n))
                op.in_values.append(vid)
                self.values[vid].consumers.append((op.index, pos))
            op.out_values = []
            for n in op.outputs:
                if n in self.latest and n not in op.inputs:
                    prev = self.values[self.latest[n]]
                    who = "net input" if prev.producer < 0 else \
                        "operator '%s'" % self.ops[prev.producer].name
                    raise GraphError("operator '%s': output '%s' is already produced by %s "
                                     "(only an in-place operator may reuse a name it reads)"
                                     % (op.name, n, who))
                op.out_values.append(self._new_value(n, op.index).id)

    def to_dict(self):
        ins = [{"name": n, "shape": list(s), "dtype": dt} for n, (s, dt, _) in self.inputs.items()]
        for d, (_, _, rg) in zip(ins, self.inputs.values()):
            if rg:
                d["requires_grad"] = True
        outs = [n if (n not in self.loss_weights or
                      (n.startswith("loss") and self.loss_weights[n] == 1.0))
                else {"name": n, "loss_weight": self.loss_weights[n]} for n in self.outputs]
        d = {"inputs": ins, "outputs": outs, "operators": [op.to_dict() for op in self.ops]}
        if self.meta:
            d["meta"] = dict(self.meta)
        return d


def load_graph(source):
    """A Graph from a dict, JSON text, a path to a .json/.js file, or a NetConfig.

    A string is JSON text when it starts with ``{`` or ``[`` (after blanks), else a path."""
    if hasattr(source, "to_dict") and not isinstance(source, dict):
        source = source.to_dict()
    if isinstance(source, os.PathLike) or (isinstance(source, str)
                                           and not source.lstrip().startswith(("{", "["))):
        return load_graph_file(source)
    if isinstance(source, (str, bytes)):
        source = parse_json(source, "the net text")
    return Graph(source)


def load_graph_file(path):
    """A Graph from the JSON file at ``path``; content that is not JSON is an error that
    says so (it is never taken for a path)."""
    check_regular_file(path, "net file", GraphError)
    with open(path, "rb") as f:
        data = f.read()
    return Graph(parse_json(data, "file '%s'" % os.fspath(path)))


def parse_json(text, what):
    """json.loads, with an error naming ``what`` and showing how a foreign file starts."""
    try:
        return json.loads(text)
    except ValueError as err:  # JSONDecodeError, or bytes that are no Unicode text
        head = text[:16] if isinstance(text, bytes) else text[:16].encode("utf-8", "replace")
        raise GraphError("%s is not a JSON net (%s); it starts with %r" % (what, err, head)) \
            from None
