"""Read an ONNX model into plain Python: nodes with decoded attributes, initializers as
numpy arrays, the default-domain opset, inputs and outputs."""
import os

import numpy as np

from .errors import OnnxImportError, require_onnx

__all__ = ["Node", "ModelInfo", "read_model", "load_proto", "live_nodes"]

DEFAULT_DOMAINS = ("", "ai.onnx")


class Node:
    """One ONNX node; ``inputs`` keeps '' for a left-out optional input."""
    __slots__ = ("op_type", "name", "inputs", "outputs", "attrs", "domain", "proto")

    def __init__(self, op_type, name, inputs, outputs, attrs=None, domain="", proto=None):
        self.op_type, self.name, self.domain = op_type, name, domain
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.attrs = dict(attrs or {})
        self.proto = proto

    def attr(self, key, default=None):
        return self.attrs.get(key, default)

    def input(self, i):
        """The name of input i, or None when it is absent or left out."""
        return self.inputs[i] if i < len(self.inputs) and self.inputs[i] else None

    def __repr__(self):
        return "%s '%s'" % (self.op_type, self.name)


class ModelInfo:
    """``opset`` of the default domain, ``opsets`` {domain: version}, ``initializers``
    {name: array}, ``inputs`` [(name, shape with None for symbolic dims, numpy dtype)],
    ``outputs`` [names], ``nodes`` [Node]."""

    def __init__(self, opsets, initializers, inputs, outputs, nodes):
        self.opsets = opsets
        self.opset = next((v for d, v in opsets.items() if d in DEFAULT_DOMAINS), None)
        self.initializers, self.inputs, self.outputs, self.nodes = \
            initializers, inputs, outputs, nodes


def load_proto(path_or_model):
    """A ModelProto from a path, bytes or a ModelProto, with clear errors."""
    onnx = require_onnx()
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    if isinstance(path_or_model, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(path_or_model))
        except Exception as err:
            raise OnnxImportError("the bytes are not an ONNX model: %s" % err) from None
    if isinstance(path_or_model, (str, os.PathLike)):
        path = os.fspath(path_or_model)
        if not os.path.exists(path):
            raise FileNotFoundError("ONNX model file '%s' does not exist" % path)
        try:
            return onnx.load(path)
        except Exception as err:
            raise OnnxImportError("'%s' is not a readable ONNX model: %s" % (path, err)) from None
    raise TypeError("expected an ONNX file path, bytes or onnx.ModelProto, got %s"
                    % type(path_or_model).__name__)


def _attrs(proto):
    from onnx import helper, numpy_helper
    out = {}
    for a in proto.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8") for v in value]
        elif hasattr(value, "dims") and hasattr(value, "data_type"):  # TensorProto
            value = numpy_helper.to_array(value)
        out[a.name] = value
    return out


def _input_spec(vi):
    from onnx import helper
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise OnnxImportError("model input '%s' is not a tensor" % vi.name)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
    shape = None
    if t.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return vi.name, shape, dtype


def read_model(path_or_model):
    proto = load_proto(path_or_model)
    from onnx import numpy_helper
    if not proto.HasField("graph") or not proto.graph.node:
        raise OnnxImportError("the ONNX model has no graph (no nodes)")
    g = proto.graph
    opsets = {o.domain: o.version for o in proto.opset_import}
    inits = {}
    for t in g.initializer:
        inits[t.name] = numpy_helper.to_array(t)
    if len(g.sparse_initializer):
        raise OnnxImportError("sparse initializers are not supported")
    inputs = [_input_spec(vi) for vi in g.input if vi.name not in inits]
    outputs = [vi.name for vi in g.output]
    nodes = []
    for i, n in enumerate(g.node):
        if n.op_type in ("If", "Loop", "Scan"):
            attrs = {}  # subgraph attributes are not decoded; the op is rejected later
        else:
            attrs = _attrs(n)
        nodes.append(Node(n.op_type, n.name or "%s_%d" % (n.op_type, i), n.input, n.output,
                          attrs, n.domain, n))
    return ModelInfo(opsets, inits, inputs, outputs, nodes)


def live_nodes(nodes, outputs):
    """The nodes some model output depends on, in their order."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    need, keep, stack = set(outputs), set(), list(outputs)
    while stack:
        i = producer.get(stack.pop())
        if i is None or i in keep:
            continue
        keep.add(i)
        for name in nodes[i].inputs:
            if name and name not in need:
                need.add(name)
                stack.append(name)
    return [n for i, n in enumerate(nodes) if i in keep]
