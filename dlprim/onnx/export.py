"""Net -> ONNX model with the net's current weights (inference semantics: BatchNorm uses
its running statistics, Dropout is the identity).

Each dlprim value becomes one ONNX tensor: a name written in place several times gets
one ONNX name per write (the last keeps the plain name, so the model's outputs are named
as the net's). Parameters become initializers under their dlprim names. The layer
translations live in ``export_ops``; the model is checked with ``onnx.checker``.
"""
import os

import numpy as np

from . import export_rnn  # noqa: F401  (registers the LSTM and GRU exporters)
from .errors import require_onnx
from ..dtypes import HALF_TYPES, as_dtype
from .export_ops import EXPORTERS

__all__ = ["export_net", "to_model", "DEFAULT_OPSET", "MIN_OPSET"]

DEFAULT_OPSET = 17
MIN_OPSET = 13  # per-axis Softmax, Squeeze axes and Split sizes as inputs


class ExportGraph:
    """The ONNX graph under construction, as export_ops sees it."""

    def __init__(self, net, opset):
        from onnx import helper
        self.helper, self.net, self.opset = helper, net, opset
        self.nodes, self.initializers = [], {}
        self.params = net.get_parameters()
        g = net.graph
        self.used = {v.name for v in g.values} | set(self.params)
        self.names = {}
        for v in g.values:
            plain = g.latest[v.name] == v.id or g.input_values.get(v.name) == v.id
            if v.name in g.input_values and g.input_values[v.name] != v.id:
                plain = False  # an input's name stays the input's
            self.names[v.id] = v.name if plain else self.fresh(v.name + "_w%d" % v.id)
        self._node_names = set()

    def fresh(self, base):
        name, k = base, 1
        while name in self.used:
            name = "%s_%d" % (base, k)
            k += 1
        self.used.add(name)
        return name

    def node(self, op_type, inputs, outputs=None, name=None, **attrs):
        """Append a node; ``outputs`` default to one fresh tensor. Returns the first output."""
        if outputs is None:
            outputs = [self.fresh((name or op_type) + "_out")]
        base = name or op_type
        node_name, k = base, 1
        while node_name in self._node_names:
            node_name = "%s_%d" % (base, k)
            k += 1
        self._node_names.add(node_name)
        self.nodes.append(self.helper.make_node(op_type, list(inputs), list(outputs),
                                                name=node_name, **attrs))
        return outputs[0]

    def const(self, array, base="const"):
        """A new initializer holding ``array``; returns its name."""
        name = self.fresh(base)
        self.initializers[name] = np.asarray(array)
        return name

    def ints(self, values, base="ints"):
        return self.const(np.asarray(values, np.int64), base)

    def scalar(self, value, base="scalar"):
        return self.const(np.asarray(value, np.float32), base)

    def param(self, name):
        if name not in self.initializers:
            self.initializers[name] = self.params[name]
        return name

    def shape(self, vid):
        return self.net.graph.values[vid].shape


def _value_info(helper, name, shape, dtype):
    from onnx import helper as h
    if as_dtype(dtype) in HALF_TYPES:  # a 16-bit activation of an fp16/bf16 net: the export is float32
        dtype = np.float32
    elem = h.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, list(shape))


def to_model(net, opset=None):
    """The ONNX ModelProto of a set-up ``net``."""
    onnx = require_onnx()
    from onnx import helper, numpy_helper
    net._need_setup()
    opset = int(opset or DEFAULT_OPSET)
    if opset < MIN_OPSET:
        raise ValueError("export needs opset %d or newer, got %d" % (MIN_OPSET, opset))
    e = ExportGraph(net, opset)
    g = net.graph
    for op, layer in zip(g.ops, net.layers):
        fn = EXPORTERS.get(op.type)
        if fn is None:
            raise ValueError("%s '%s': no ONNX export for this layer type" % (op.type, op.name))
        ins = [e.names[v] for v in op.in_values]
        outs = [e.names[v] for v in op.out_values]
        pnames = [e.param(n) for n in net.store.op_param_names[op.index]]
        fn(e, op, layer, ins, outs, pnames)
    inputs = [_value_info(helper, name, g.values[vid].shape, g.values[vid].dtype)
              for name, vid in g.input_values.items()]
    outputs = [_value_info(helper, e.names[g.latest[n]], g.values[g.latest[n]].shape,
                           g.values[g.latest[n]].dtype) for n in g.outputs]
    inits = [numpy_helper.from_array(np.asarray(a), name) for name, a in e.initializers.items()]
    graph = helper.make_graph(e.nodes, "dlprim", inputs, outputs, inits)
    model = helper.make_model(graph, producer_name="dlprim",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, _max_ir(opset))
    onnx.checker.check_model(model)
    return model


def _max_ir(opset):
    """The IR version that goes with ``opset`` (older runtimes refuse newer IR numbers)."""
    from onnx import helper
    for entry in helper.VERSION_TABLE:
        if entry[2] == opset:
            return entry[1]
    return helper.VERSION_TABLE[-1][1]


def export_net(net, path, opset=None):
    """Write ``net`` to ``path`` (atomically); returns the ModelProto."""
    from ..utils import atomic_write
    model = to_model(net, opset)
    data = model.SerializeToString()
    atomic_write(os.fspath(path), lambda f: f.write(data))
    return model
