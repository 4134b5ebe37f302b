"""NetConfig: build the DLPrimitives JSON net from Python.

>>> cfg = NetConfig()
>>> cfg.add_input("data", (64, 1, 28, 28))
>>> cfg.add("Convolution2D", name="conv1", options={"channels_out": 8, "kernel": 3})
'conv1'
>>> cfg.add("Activation", options={"activation": "relu"}, inplace=True)   # reads conv1
'conv1'
>>> cfg.set_outputs(["conv1"]); net = dlprim.Net(ctx, cfg)

``add`` reads the previous operator's first output unless ``inputs`` says otherwise, and
writes a tensor named like the operator unless ``outputs`` (or ``inplace``) says otherwise.
"""
import builtins
import copy
import json

from ..dtypes import DTYPES, dlp_name
from ..utils import shape_problem
from .graph import GraphError, load_graph

__all__ = ["NetConfig"]


class NetConfig:
    """A DLPrimitives JSON net under construction: inputs, outputs and operators.

    ``NetConfig(source)`` starts from an existing net (dict, JSON text, file path or another
    NetConfig); ``dlprim.Net(ctx, cfg)`` builds it.
    """
    def __init__(self, source=None):
        self.inputs, self.outputs, self.operators = [], [], []
        self._last = None
        if source is not None:
            d = load_graph(source).to_dict()
            self.inputs, self.outputs, self.operators = d["inputs"], d["outputs"], d["operators"]
            if self.operators:
                self._last = self.operators[-1]["outputs"][0]

    def add_input(self, name, shape, dtype="float", requires_grad=False):
        """Declare a net input; returns its name. ``shape`` holds integers (8.9 or "8" is an
        error, never truncated); ``dtype`` is a DLPrimitives name or a numpy dtype."""
        if not isinstance(name, str) or not name:
            raise GraphError("add_input: the name must be a non-empty string, got %r" % (name,))
        if any(i["name"] == name for i in self.inputs):
            raise GraphError("net input '%s' declared twice" % name)
        if not isinstance(shape, (list, tuple, str)) and hasattr(shape, "__iter__"):
            shape = tuple(shape)  # a numpy shape array or a torch.Size
        problem = shape_problem(shape, "shape")
        if problem:
            raise GraphError("add_input('%s'): %s" % (name, problem))
        if not isinstance(dtype, str):
            try:
                dtype = dlp_name(dtype)
            except TypeError as err:
                raise GraphError("add_input('%s'): dtype %s" % (name, err)) from None
        elif dtype not in DTYPES:
            raise GraphError("add_input('%s'): dtype %r is unknown; known: %s"
                             % (name, dtype, ", ".join(sorted(DTYPES))))
        spec = {"name": name, "shape": [int(s) for s in shape], "dtype": dtype}
        if requires_grad:
            spec["requires_grad"] = True
        self.inputs.append(spec)
        if self._last is None:
            self._last = name
        return name

    def add(self, type, name=None, inputs=None, outputs=None, options=None, params=None,
            frozen=False, inplace=False):
        """Append an operator; returns its output name (a list if it has several)."""
        if not isinstance(type, str) or not type:
            raise GraphError("add: the operator type must be a string, got %r" % (type,))
        if name is None:
            name = "%s_%d" % (type.lower(), len(self.operators))
        if any(op["name"] == name for op in self.operators):
            raise GraphError("operator '%s' added twice" % name)
        if options is not None and not isinstance(options, dict):
            raise GraphError("add('%s'): options must be a dict {option: value}, got %s"
                             % (name, builtins.type(options).__name__))
        if inputs is None:
            if self._last is None:
                inputs = []
            else:
                inputs = [self._last]
        elif isinstance(inputs, str):
            inputs = [inputs]
        if outputs is None:
            outputs = [inputs[0]] if inplace and inputs else [name]
        elif isinstance(outputs, str):
            outputs = [outputs]
        op = {"name": name, "type": type, "inputs": list(inputs), "outputs": list(outputs)}
        if options:
            op["options"] = copy.deepcopy(dict(options))
        if params is not None:
            op["params"] = list(params)
        if frozen:
            op["frozen"] = True
        self.operators.append(op)
        self._last = outputs[0]
        return outputs[0] if len(outputs) == 1 else list(outputs)

    @property
    def last(self):
        """The tensor the next ``add`` reads by default."""
        return self._last

    def set_outputs(self, outputs, loss_weights=None):
        """Net outputs: names (or {name, loss_weight}); ``loss_weights`` {name: w} adds weights."""
        if isinstance(outputs, str):
            outputs = [outputs]
        loss_weights = loss_weights or {}
        self.outputs = [{"name": o, "loss_weight": float(loss_weights[o])}
                        if isinstance(o, str) and o in loss_weights else o for o in outputs]

    def to_dict(self):
        """The net as a JSON-ready dict (a deep copy)."""
        return {"inputs": copy.deepcopy(self.inputs), "outputs": copy.deepcopy(self.outputs),
                "operators": copy.deepcopy(self.operators)}

    def to_json(self):
        """The net as a JSON-ready dict as DLPrimitives' ``to_json`` gives it: ``to_dict``,
        with the last operator's outputs as the net outputs when none were set."""
        d = self.to_dict()
        if not d["outputs"] and d["operators"]:
            d["outputs"] = list(d["operators"][-1]["outputs"])
        return d

    def to_str(self, indent=2):
        """``to_json`` as JSON text (DLPrimitives' name; ``str(cfg)`` and ``save`` give
        the same)."""
        return json.dumps(self.to_json(), indent=indent)

    def __str__(self):
        return self.to_str()

    def save(self, path):
        """Write the JSON net to ``path`` atomically."""
        from ..utils import atomic_write
        text = self.to_str().encode("utf-8")
        atomic_write(path, lambda f: f.write(text))

    def __len__(self):
        return len(self.operators)

    def __repr__(self):
        return "NetConfig(%d inputs, %d operators, outputs %s)" % (
            len(self.inputs), len(self.operators), self.outputs)
