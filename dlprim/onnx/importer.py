"""ONNX graph -> NetConfig and weights, without a device.

Every ONNX tensor is either a *constant* (an initializer, a Constant, a Shape of a
tensor whose shape is known, or a node whose inputs are all constants: evaluated now,
see ``fold``) or a *runtime* tensor of the dlprim net, whose shape the converters track.
dlprim tensors keep the ONNX names (except where a layer writes in place over its
input, see ``IN_PLACE``); constants read by an operator at run time become
non-trainable ``Parameter`` operators, weights of Conv/Gemm/BatchNormalization become the
parameters of the dlprim layer, named as the ONNX initializers.

Steps: read -> drop nodes no output needs -> fuse patterns (``rewrite``) -> list
operators without converter -> convert the others in order, listing unsupported
variants -> one error with every problem, or name the net outputs as the model's ->
the graph passes (``dlprim.net.passes``: activations folded into their producers, the
folded value named as the activation's ONNX output). Nothing touches a device.
"""
import collections
from collections import OrderedDict

import numpy as np

from ..dtypes import NARROW_TYPES
from ..net import passes
from ..net.netconfig import NetConfig
from . import ops_attention, ops_loss, ops_math, ops_nn, ops_pool, ops_rnn, ops_shape, ops_spatial  # noqa: F401  (fill the converter table)
from . import ops_library  # noqa: F401,E402  (after the hand-written ones: theirs win)
from . import ops_quantize  # noqa: F401,E402
from .errors import OnnxImportError, UnsupportedModelError
from .fold import evaluate, foldable
from .legacy import FOLD_OPSET, broadcasts_by_attribute, normalize
from .model_reader import DEFAULT_DOMAINS, live_nodes, read_model
from .registry import CONVERTERS, Unsupported
from .rewrite import rewrite

__all__ = ["import_model", "Importer", "FIRST_OPSET"]

FIRST_OPSET = 1  # nodes of opsets before 9 are read through ``legacy``
# layers written in place (output named as the input) when nothing else reads the input
IN_PLACE = ("Activation", "Hardtanh", "Dropout", "Reshape", "Flatten", "Squeeze", "Softmax")
DTYPES = {"float32": "float", "int32": "int", "int64": "int64", "float16": "float16",
          "uint8": "uint8", "int8": "int8", "int16": "int16", "bool": "bool",
          "float64": "float64", "bfloat16": "bfloat16", "uint16": "uint16", "uint32": "uint32",
          "uint64": "uint64"}
DTYPES.update((n, n) for n in NARROW_TYPES.values())
# what takes a tensor of a narrow type (float8, float4, int4 ...: stored, never computed
# on): conversions and the operators that move its elements unchanged
NARROW_READERS = ("Cast", "CastLike", "Identity", "Reshape", "Flatten", "Squeeze",
                  "Unsqueeze", "Transpose", "DequantizeLinear", "QuantizeLinear")


def import_model(path_or_model, batch=None, live=(), mode="predict", shapes=None):
    info = read_model(path_or_model)
    imp = Importer(info, batch, live, mode, shapes)
    return imp.run()


# domains of nodes dlprim itself writes for its importer (dlprim.torch's exports)
OWN_DOMAINS = ("dlprim",)

# operators that only move or copy values: ``Importer._drop_unread`` removes them where
# nothing reads what they write
UNREAD_DROPPABLE = ("Slice", "Concat", "Reshape", "Flatten", "Squeeze", "Transpose", "Expand",
                    "Parameter")

# what a weight may pass through and still be the parameter it was (its values unchanged)
PASS_THROUGH = ("Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten")


def _given_shapes(info, shapes):
    """``shapes`` ({input name: sizes}) checked against the model's inputs: {name: tuple}."""
    if shapes is None:
        return {}
    if not isinstance(shapes, dict):
        raise OnnxImportError("shapes must be a dict {input name: sizes}, got %r" % (shapes,))
    names = [name for name, _, _ in info.inputs]
    out = {}
    for name, sizes in shapes.items():
        if name not in names:
            raise OnnxImportError("shapes: '%s' is not a model input; inputs: %s"
                                  % (name, ", ".join(names)))
        try:
            sizes = tuple(sizes)
            ok = all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0
                     for d in sizes)
        except TypeError:
            ok = False
        if not ok:
            raise OnnxImportError("shapes: input '%s' needs positive integer sizes, got %r"
                                  % (name, shapes[name]))
        out[name] = tuple(int(d) for d in sizes)
    return out


def _fixed_by(name, shape, given):
    """The model input's ``shape`` (None where symbolic) with the sizes ``given`` for it:
    the same rank, and the model's fixed sizes kept."""
    if len(given) != len(shape):
        raise OnnxImportError("shapes: input '%s' has %d dimensions, %s gives %d"
                              % (name, len(shape), given, len(given)))
    for axis, (have, want) in enumerate(zip(shape, given)):
        if have is not None and have != want:
            raise OnnxImportError("shapes: input '%s' has size %d on axis %d in the model, "
                                  "shapes gives %d" % (name, have, axis, want))
    return list(given)


class Importer:
    """``live``: initializers that are trainable parameters whose values change after
    import (PyTorch's, under ``torch.compile``): what is computed from them is not folded
    into a constant, except through ``PASS_THROUGH`` operators; such a computation runs
    in the net, reading the initializer as a trainable Parameter."""

    def __init__(self, info, batch=None, live=(), mode="predict", shapes=None):
        if info.opset is None:
            raise OnnxImportError("the model imports no default-domain opset")
        if info.opset < FIRST_OPSET:
            raise OnnxImportError("opset %d is older than the first supported, %d"
                                  % (info.opset, FIRST_OPSET))
        self.info, self.opset, self.batch = info, info.opset, batch
        self.given_shapes = _given_shapes(info, shapes)
        self.mode = mode  # the Net's mode the config is for (training exports' BatchNorm)
        self.cfg = NetConfig()
        self.consts = dict(info.initializers)
        self.live = set(live) & set(info.initializers)  # and what passes them through
        self.shapes = {}        # dlprim tensor -> shape
        self.dtypes = {}        # dlprim tensor -> numpy dtype (float32 unless add says)
        self.alias = {}         # ONNX runtime tensor -> dlprim tensor
        self.weights = OrderedDict()
        self.producer = {}      # dlprim tensor -> the operator dict writing it
        self.materialized = {}  # constant name -> dlprim tensor of its Parameter
        self.poisoned = set()
        self.problems = []
        self.nodes = live_nodes(info.nodes, info.outputs)
        # the patterns read nodes as opset 7 on spells them: not the old broadcasting
        if not any(broadcasts_by_attribute(n, self.opset) for n in self.nodes):
            self.nodes = rewrite(self.nodes, self.consts, info.outputs)
        self.consumers = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    self.consumers.setdefault(name, []).append(node)
        self.node_of = {o: n for n in self.nodes for o in n.outputs if o}  # ONNX writer
        self.graph_outputs = set(info.outputs)
        self.used_names = {n for node in self.nodes for n in node.inputs + node.outputs}
        self.used_names |= set(info.initializers) | {i[0] for i in info.inputs}
        self.op_names = set()
        self.activations = []   # (index in cfg.operators, ONNX output) of Activations added

    # ----- the passes
    def run(self):
        const = self._static_constants()
        unknown = set()
        for node in self.nodes:
            if all(n in const for n in node.outputs if n):
                continue
            if node.domain not in DEFAULT_DOMAINS and node.domain not in OWN_DOMAINS:
                self.problems.append((node.op_type, node.name, "domain '%s'" % node.domain))
            elif node.op_type not in CONVERTERS:
                self.problems.append((node.op_type, node.name, "no converter"))
            else:
                continue
            unknown.add(id(node))
        self._add_inputs()
        # convert the rest too, so that unsupported variants (a Pad mode, a Resize
        # transformation) are listed with the unknown operators in one error
        self.converted = set()
        for node in self.nodes:
            if id(node) in unknown:
                self.poisoned.update(node.outputs)
            else:
                self._convert(node)
            self.converted.add(id(node))
        self._check_outputs()
        if self.problems:
            raise UnsupportedModelError(self.problems)
        self._name_outputs()
        self._drop_unread()
        self._run_passes()
        return self.cfg, self.weights

    def _drop_unread(self):
        """Remove operators that only move values (``UNREAD_DROPPABLE``) where nothing reads
        what they write and it is no net output, until none is left: the ONNX nodes were
        all live, but a converter that reads a weight at its source leaves the nodes that
        computed it from that source unread (an LSTM whose weights PyTorch's exporter
        reorders by gates with Slices and Concats: 60 copies a pass). A Parameter goes
        where every weight it holds is held by another operator too."""
        ops = self.cfg.operators
        outputs = {o if isinstance(o, str) else o["name"] for o in self.cfg.outputs}
        while True:
            # (an operator writing in place reads its own output: not a reader of it)
            readers = collections.Counter(i for op in ops for i in set(op["inputs"]))
            held = collections.Counter(p for op in ops for p in op.get("params", ()))
            unread = [op for op in ops if op["type"] in UNREAD_DROPPABLE
                      and not any(o in outputs or readers[o] > (o in op["inputs"])
                                  for o in op["outputs"])
                      and (op["type"] != "Parameter" or
                           all(held[p] > 1 for p in op.get("params", ())))]
            if not unread:
                return
            gone = set(map(id, unread))
            ops[:] = [op for op in ops if id(op) not in gone]

    def _static_constants(self):
        """Names known at import: folding needs no shapes beyond the (static) inputs."""
        const = set(self.consts)
        for node in self.nodes:
            ins = [n for n in node.inputs if n]
            if node.op_type in ("Constant", "Shape", "Size") or \
                    (ins and all(n in const for n in ins) and self._folds(node)):
                const.update(n for n in node.outputs if n)
        return const

    def _add_inputs(self):
        for name, shape, dtype in self.info.inputs:
            if shape is None:
                raise OnnxImportError("model input '%s' has no shape" % name)
            shape = list(shape)
            if name in self.given_shapes:
                shape = _fixed_by(name, shape, self.given_shapes[name])
            elif shape and (self.batch is not None or shape[0] is None):
                shape[0] = int(self.batch) if self.batch is not None else 1
            if any(d is None for d in shape):
                raise OnnxImportError(
                    "model input '%s' has symbolic dimensions %s beyond the batch; give its "
                    "sizes with shapes={'%s': (...)} (dlprim.onnx.load, to_netconfig) or "
                    "export it with fixed sizes"
                    % (name, ["?" if d is None else d for d in shape], name))
            kind = DTYPES.get(np.dtype(dtype).name if dtype is not None else "float32")
            if kind is None:
                raise OnnxImportError("model input '%s' has dtype %s, not supported"
                                      % (name, np.dtype(dtype).name))
            self.cfg.add_input(name, shape, kind)
            self.shapes[name] = tuple(shape)
            self.dtypes[name] = np.dtype(dtype if dtype is not None else np.float32)
            self.alias[name] = name

    def _convert(self, node):
        ins = [n for n in node.inputs if n]
        if any(n in self.poisoned for n in ins):
            self.poisoned.update(node.outputs)
            return
        if node.op_type in ("Shape", "Size") and ins and not self.is_const(ins[0]):
            self._fold_shape(node)
            return
        opsets, original = self.info.opsets, node
        try:
            node = normalize(self, node)
        except Unsupported as why:
            self.problems.append((node.op_type, node.name, str(why)))
            self.poisoned.update(node.outputs)
            return
        if node is not original:  # in opset 9's spelling: evaluated so
            opsets = {d: (FOLD_OPSET if d in DEFAULT_DOMAINS else v) for d, v in opsets.items()}
        ins = [n for n in node.inputs if n]
        if all(self.is_const(n) for n in ins) and (ins or node.op_type == "Constant") \
                and self._folds(node):
            values = [self.consts[n] if n else None for n in node.inputs]
            for name, v in zip(node.outputs, evaluate(node, values, opsets)):
                if name:
                    self.consts[name] = v
            return
        try:
            self._check_narrow(node)
            if node.op_type not in CONVERTERS:
                raise Unsupported("no converter, and its inputs are not all constant")
            CONVERTERS[node.op_type](self, node)
        except Unsupported as why:
            self.problems.append((node.op_type, node.name, str(why)))
            self.poisoned.update(node.outputs)
        except OnnxImportError:
            raise
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise OnnxImportError("%s '%s': cannot convert: %s" % (node.op_type, node.name, err)) \
                from err

    def _check_narrow(self, node):
        """Only ``NARROW_READERS`` take a runtime tensor of a narrow type."""
        if node.op_type in NARROW_READERS:
            return
        for n in node.inputs:
            if n and not self.is_const(n) and self.dtype(n) in NARROW_TYPES:
                raise Unsupported("input '%s' is %s, which only %s take" % (
                    n, NARROW_TYPES[self.dtype(n)], ", ".join(NARROW_READERS)))

    def _folds(self, node):
        """Whether ``node``, its inputs constant, is evaluated at import: foldable, and
        not computing from a live parameter (whose outputs, passed through, are live)."""
        if not foldable(node):
            return False
        if not any(n in self.live for n in node.inputs if n):
            return True
        if node.op_type in PASS_THROUGH:
            self.live.update(n for n in node.outputs if n)
            return True
        return False

    def _fold_shape(self, node):
        shape = np.array(self.shape(node.inputs[0]), np.int64)
        if node.op_type == "Size":
            self.consts[node.outputs[0]] = np.array(int(np.prod(shape)), np.int64)
            return
        start, end = node.attr("start", 0), node.attr("end", None)
        self.consts[node.outputs[0]] = shape[start:end]

    def _check_outputs(self):
        """A model output the net cannot produce (a constant of a dtype no Parameter
        holds) is a problem of the node that computes it."""
        for o in self.info.outputs:
            if o in self.poisoned:
                continue
            try:
                self.value(o)
            except Unsupported as why:
                node = self.node_of.get(o)
                self.problems.append((node.op_type if node else "Initializer",
                                      node.name if node else o,
                                      "model output '%s': %s" % (o, why)))
                self.poisoned.add(o)

    def _name_outputs(self):
        """The net outputs carry the model's output names."""
        claimed, outputs = set(), []
        inputs = {i["name"] for i in self.cfg.inputs}
        for o in self.info.outputs:
            if o in self.poisoned:
                continue
            t = self.value(o)
            if t != o:
                if t in inputs or t in claimed:
                    self.add("Reshape", [t], self.shapes[t], output=o, name=o + "/copy",
                             options={"dims": [0] + list(self.shapes[t][1:])},
                             dtype=self.dtypes.get(t, np.float32))
                else:
                    self._rename(t, o)
            claimed.add(o)
            outputs.append(o)
        self.cfg.set_outputs(outputs)

    def _rename(self, old, new):
        for op in self.cfg.operators:
            op["inputs"] = [new if n == old else n for n in op["inputs"]]
            op["outputs"] = [new if n == old else n for n in op["outputs"]]
        for k, v in self.alias.items():
            if v == old:
                self.alias[k] = new
        self.shapes[new] = self.shapes[old]
        self.dtypes[new] = self.dtypes.get(old, np.dtype(np.float32))
        if old in self.producer:
            self.producer[new] = self.producer.pop(old)

    # ----- what converters use
    def is_const(self, name):
        return name in self.consts

    def const(self, name, what="input"):
        """The constant array of ``name``; a runtime tensor there is an Unsupported."""
        if name not in self.consts:
            raise Unsupported("%s '%s' must be a constant (known at import)" % (what, name))
        return self.consts[name]

    def shape(self, name):
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return self.shapes[self.value(name)]

    def dtype(self, name):
        """The numpy dtype of ONNX tensor ``name`` (a constant's own, else its dlprim
        tensor's)."""
        if name in self.consts:
            return np.asarray(self.consts[name]).dtype
        return self.dtypes.get(self.value(name), np.dtype(np.float32))

    def value(self, name):
        """The dlprim tensor holding ONNX tensor ``name`` (a constant becomes a Parameter)."""
        if name in self.alias:
            return self.alias[name]
        if name in self.consts:
            if name not in self.materialized:
                self.materialized[name] = self._parameter(name, self.consts[name])
            return self.materialized[name]
        raise OnnxImportError("tensor '%s' is produced by no node and is not a model input"
                              % name)

    def _parameter(self, name, array):
        a = np.asarray(array)
        if a.dtype != np.float32:  # indices, masks, float64: exact float32 values converted
            # on the device
            from .ops_library import typed_constant
            t = typed_constant(self, name, a.reshape(a.shape or (1,)))
        else:
            flat = a.astype(np.float32).reshape(a.shape or (1,))
            pname = self.param(name, flat)
            trainable = name in self.info.initializers or name in self.live
            t = self.fresh(name) if name in self.alias.values() else name
            t = self.add("Parameter", [], flat.shape, output=t,
                         name=self.fresh_op("const/" + name),
                         options={"shape": list(flat.shape), "is_trainable": trainable},
                         params=[pname])
        if a.ndim == 0:  # a Parameter holds at least one axis: ONNX's scalar is a view of it
            t = self.add("Reshape", [t], (), output=self.fresh(name + "/scalar"),
                         name=self.fresh_op("const/" + name + "/scalar"), options={"dims": []},
                         dtype=self.dtypes[t])
        return t

    def param(self, name, array):
        """Register a weight under ``name`` (another name if taken by a different array)."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        base, k = name, 1
        while name in self.weights:
            old = self.weights[name]
            if old.shape == a.shape and np.array_equal(old, a):
                return name
            name = "%s_%d" % (base, k)
            k += 1
        self.weights[name] = a
        return name

    def constant(self, array, base):
        """A new constant (under a fresh name from ``base``); returns its name."""
        name = self.fresh(base)
        self.consts[name] = np.asarray(array)
        return name

    def fresh(self, base):
        name, k = base, 1
        while name in self.used_names or name in self.shapes:
            name = "%s_%d" % (base, k)
            k += 1
        self.used_names.add(name)
        return name

    def fresh_op(self, base):
        name, k = base, 1
        while name in self.op_names:
            name = "%s_%d" % (base, k)
            k += 1
        self.op_names.add(name)
        return name

    def add(self, type, inputs, shape, node=None, output=None, name=None, options=None,
            params=None, frozen=False, dtype=np.float32):
        """Append a dlprim operator writing ``output`` (default: node's first output, else a
        fresh name) of ``shape`` and ``dtype``; returns the output tensor name."""
        if output is None and type in IN_PLACE and inputs and self._only_reader(node, inputs[0]):
            output = inputs[0]  # in place: the planner may then share the input's memory
        if output is None:
            output = node.outputs[0] if node is not None and node.outputs[0] not in self.alias \
                else self.fresh((node.outputs[0] if node is not None else type) + "/t")
        name = self.fresh_op(name or (node.name if node is not None else type))
        self.cfg.add(type, name=name, inputs=list(inputs), outputs=[output], options=options,
                     params=params, frozen=frozen)
        self.shapes[output] = tuple(int(s) for s in shape)
        self.dtypes[output] = np.dtype(dtype)
        self.producer[output] = self.cfg.operators[-1]
        if node is not None and (output == node.outputs[0] or output == inputs[0]):
            self.alias[node.outputs[0]] = output
        return output

    def _only_reader(self, node, t):
        """``node`` is the one reader of dlprim tensor ``t`` (through any ONNX name), which is
        neither a model output nor a net input."""
        if node is None or any(i["name"] == t for i in self.cfg.inputs):
            return False
        names = [n for n, v in self.alias.items() if v == t]
        if node.inputs[0] not in names or any(n in self.graph_outputs for n in names):
            return False
        # readers still to convert, this node included (converted ones read nothing more)
        return sum(id(c) not in self.converted for n in names for c in self.consumers.get(n, ())) == 1

    def out(self, node, tensor, i=0):
        """Record that ONNX output i of ``node`` is dlprim tensor ``tensor``."""
        self.alias[node.outputs[i]] = tensor

    def note_activation(self, node):
        """Called before an Activation of ``node`` is added: the graph passes, after
        conversion, fold it into its producer where they can (``_run_passes``); this
        notes the ONNX name that the folded value then takes."""
        self.activations.append((len(self.cfg.operators), node.outputs[0]))

    def _run_passes(self):
        """``passes.run`` over the net; a value into which an Activation was folded is
        named as the activation's ONNX output (the producer's tensor was its input)."""
        ops = self.cfg.operators
        noted = {ops[i]["name"]: onnx for i, onnx in self.activations
                 if i < len(ops) and ops[i]["type"] == "Activation"}
        folded = passes.run(self.cfg)
        kept = {op["name"] for op in folded.operators}
        self.cfg.operators = folded.operators
        self.cfg._last = folded.last
        taken = {i["name"] for i in self.cfg.inputs} | {o for op in ops for o in op["outputs"]}
        for op in [op for op in ops if op["name"] in noted and op["name"] not in kept]:
            t, onnx = op["outputs"][0], noted[op["name"]]
            if t != onnx and onnx not in taken and t not in self.graph_outputs:
                self._rename(t, onnx)
                taken.add(onnx)
