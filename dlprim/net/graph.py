"""The DLPrimitives JSON net format, read and checked; tensors as single-assignment values.

A graph is ``inputs`` ([{name, shape, dtype}]), ``outputs`` (names, or {name,
loss_weight}; names starting with "loss" are losses of weight 1) and ``operators``
([{name, type, inputs, outputs, options, params, frozen}]) run in the listed order.

An operator may write a name it reads (in place). Each write makes a new *value*, so a
name can stand for several values over time: an operator reads the latest value of each
input name. Whether the new value shares the old one's memory is the planner's decision
(see ``dlprim.net.autograd``); gradients are computed per value and never mix versions.

Pure Python, no OpenCL.
"""
import json
import os

from ..errors import Error

__all__ = ["Graph", "OpDef", "Value", "load_graph", "GraphError"]


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

    def __init__(self, index, d):
        self.index = index
        self.name = d.get("name")
        if not isinstance(self.name, str) or not self.name:
            raise GraphError("operator #%d has no name" % index)
        self.type = d.get("type")
        if not isinstance(self.type, str):
            raise GraphError("operator '%s' has no type" % self.name)
        self.inputs = list(_names(d.get("inputs", []), "operator '%s' inputs" % self.name))
        self.outputs = list(_names(d.get("outputs", []), "operator '%s' outputs" % self.name))
        self.options = dict(d.get("options") or {})
        params = d.get("params")
        self.params = None if params is None else list(_names(params, "operator '%s' params"
                                                               % self.name))
        self.frozen = bool(d.get("frozen", False))
        unknown = set(d) - {"name", "type", "inputs", "outputs", "options", "params", "frozen"}
        if unknown:
            raise GraphError("operator '%s': unknown key%s %s" % (
                self.name, "s" if len(unknown) > 1 else "", ", ".join(sorted(map(repr, unknown)))))
        if len(set(self.outputs)) != len(self.outputs):
            raise GraphError("operator '%s' lists an output twice: %s" % (self.name, self.outputs))

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


def _names(items, what):
    if isinstance(items, str) or not isinstance(items, (list, tuple)):
        raise GraphError("%s must be a list of names, got %r" % (what, items))
    for n in items:
        if not isinstance(n, str) or not n:
            raise GraphError("%s: %r is not a tensor name" % (what, n))
        yield n


class Graph:
    """Checked graph: ``inputs`` {name: (shape, dtype, requires_grad)}, ``outputs`` [names],
    ``loss_weights`` {name: weight}, ``ops`` [OpDef], ``values`` [Value], ``latest`` {name: id}.
    """

    def __init__(self, d):
        if not isinstance(d, dict):
            raise GraphError("a net must be a JSON object, got %s" % type(d).__name__)
        unknown = set(d) - {"inputs", "outputs", "operators"}
        if unknown:
            raise GraphError("unknown top-level key%s %s" % ("s" if len(unknown) > 1 else "",
                                                            ", ".join(sorted(map(repr, unknown)))))
        self.values, self.latest, self.inputs, self.input_values = [], {}, {}, {}
        for spec in d.get("inputs", []) or []:
            name = spec.get("name") if isinstance(spec, dict) else None
            if not isinstance(name, str):
                raise GraphError("net input %r has no name" % (spec,))
            if name in self.inputs:
                raise GraphError("net input '%s' listed twice" % name)
            if "shape" not in spec:
                raise GraphError("net input '%s' has no shape" % name)
            shape = tuple(int(s) for s in spec["shape"])
            self.inputs[name] = (shape, spec.get("dtype", "float"),
                                 bool(spec.get("requires_grad", False)))
            v = self._new_value(name, -1)
            self.input_values[name] = v.id
            v.requires_grad = self.inputs[name][2]
        self.ops = [OpDef(i, od) for i, od in enumerate(d.get("operators", []) or [])]
        self._link()
        self.outputs, self.loss_weights = [], {}
        for out in d.get("outputs", []) or []:
            if isinstance(out, dict):
                name, weight = out.get("name"), out.get("loss_weight")
            else:
                name, weight = out, None
            if not isinstance(name, str):
                raise GraphError("net output %r has no name" % (out,))
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
        return {"inputs": ins, "outputs": outs, "operators": [op.to_dict() for op in self.ops]}


def load_graph(source):
    """A Graph from a dict, a JSON string, a path to a .json/.js file, or a NetConfig."""
    if hasattr(source, "to_dict") and not isinstance(source, dict):
        source = source.to_dict()
    if isinstance(source, (str, os.PathLike)):
        text = str(source)
        if isinstance(source, os.PathLike) or not text.lstrip().startswith("{"):
            with open(text) as f:
                text = f.read()
        try:
            source = json.loads(text)
        except json.JSONDecodeError as err:
            raise GraphError("the net is not valid JSON: %s" % err) from None
    return Graph(source)
