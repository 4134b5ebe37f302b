"""Read an ONNX model into plain Python: nodes with decoded attributes, initializers as
numpy arrays, the default-domain opset, inputs and outputs."""
import os

import numpy as np

from ..utils import check_regular_file
from .errors import OnnxImportError, require_onnx
from .external_data import load_external_data, uses_external_data

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
    """A ModelProto from a path, bytes or a ModelProto, with clear errors.

    From a path, external data is read under the rules of ``external_data`` (inside the
    model's folder only); bytes and a ModelProto have no folder, so a tensor of theirs
    that keeps its data in a file is an error.
    """
    return _load(path_or_model)[0]


def _load(path_or_model):
    """(ModelProto, how errors name it)."""
    onnx = require_onnx()
    if isinstance(path_or_model, onnx.ModelProto):
        proto, label = path_or_model, "the model"
    elif isinstance(path_or_model, (bytes, bytearray)):
        label = "the model bytes"
        try:
            proto = onnx.load_model_from_string(bytes(path_or_model))
        except Exception as err:
            raise OnnxImportError("the bytes are not an ONNX model: %s" % err) from None
    elif isinstance(path_or_model, (str, os.PathLike)):
        label = os.fspath(path_or_model)
        return _load_file(onnx, label), label
    else:
        raise TypeError("expected an ONNX file path, bytes or onnx.ModelProto, got %s"
                        % type(path_or_model).__name__)
    if uses_external_data(proto):
        raise OnnxImportError("%s keeps tensor data in external files, which are found "
                              "beside the model file: pass the model's path" % label)
    return proto, label


def _load_file(onnx, path):
    check_regular_file(path, "ONNX model file", OnnxImportError)
    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as err:  # protobuf's DecodeError, or onnx's own errors
        raise OnnxImportError("'%s' is not a readable ONNX model: %s" % (path, err)) from None
    if not proto.HasField("graph"):
        # protobuf reads many foreign files (an empty one, text) as an empty message
        raise OnnxImportError("'%s' is not an ONNX model (it holds no graph)" % path)
    load_external_data(proto, path)
    return proto


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
    proto, label = _load(path_or_model)
    from onnx import numpy_helper
    if not proto.HasField("graph") or not proto.graph.node:
        raise OnnxImportError("%s: the model has no graph (no nodes)" % label)
    g = proto.graph
    opsets = {o.domain: o.version for o in proto.opset_import}
    inits = {}
    for t in g.initializer:
        try:
            inits[t.name] = numpy_helper.to_array(t)
        except (ValueError, TypeError) as err:  # data that does not fill the shape
            raise OnnxImportError("%s: initializer '%s' (shape %s) is damaged: %s"
                                  % (label, t.name, list(t.dims), err)) from None
    if len(g.sparse_initializer):
        raise OnnxImportError("sparse initializers are not supported")
    inputs = [_input_spec(vi) for vi in g.input if vi.name not in inits]
    outputs = [vi.name for vi in g.output]
    nodes = []
    for i, n in enumerate(g.node):
        name = n.name or "%s_%d" % (n.op_type, i)
        if n.op_type in ("If", "Loop", "Scan"):
            attrs = {}  # subgraph attributes are not decoded; the op is rejected later
        else:
            try:
                attrs = _attrs(n)
            except (ValueError, TypeError) as err:
                raise OnnxImportError("%s: node %s '%s' has a damaged attribute: %s"
                                      % (label, n.op_type, name, err)) from None
        nodes.append(Node(n.op_type, name, n.input, n.output, attrs, n.domain, n))
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
