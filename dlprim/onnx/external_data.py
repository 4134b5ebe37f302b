"""ONNX tensors whose bytes live in files beside the model ("external data"), read safely.

A model names each such file by a ``location`` relative to the model's folder. The file
comes from whoever made the model, so the location is not trusted: after resolving
``..`` and symbolic links it must lie inside that folder and be a regular file, and
``offset``/``length`` must lie inside the file and match the tensor's size. Anything else
is an OnnxImportError naming the model file, the tensor and the location; nothing outside
the folder is ever opened. onnx's own loader is not used for this, so the rules do not
change with the onnx version.
"""
import math
import os

from .errors import OnnxImportError

__all__ = ["uses_external_data", "load_external_data"]


def _tensors(graph):
    """Every TensorProto of a graph: initializers, attribute tensors, nested graphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def _is_external(tensor):
    from onnx import TensorProto
    return tensor.data_location == TensorProto.EXTERNAL


def uses_external_data(model):
    """True if some tensor of ``model`` keeps its bytes in another file."""
    return any(_is_external(t) for t in _tensors(model.graph))


def load_external_data(model, model_path):
    """Read every external tensor of ``model`` (loaded from ``model_path``) into the
    model itself, under the rules in the module docstring."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(model_path)))
    for tensor in _tensors(model.graph):
        if _is_external(tensor):
            where = "%s: tensor '%s'" % (model_path, tensor.name)
            tensor.raw_data = _read(where, tensor, folder)
            del tensor.external_data[:]
            tensor.data_location = 0  # TensorProto.DEFAULT: the bytes are in raw_data now


def _read(where, tensor, folder):
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location")
    if not location:
        raise OnnxImportError("%s: external data without a location" % where)
    path = os.path.realpath(os.path.join(folder, location))
    if os.path.commonpath([folder, path]) != folder:
        raise OnnxImportError("%s: external data location '%s' lies outside the model's "
                              "folder %s; refused" % (where, location, folder))
    if not os.path.exists(path):
        raise OnnxImportError("%s: external data file '%s' does not exist (looked for %s)"
                              % (where, location, path))
    if not os.path.isfile(path):
        raise OnnxImportError("%s: external data '%s' is not a regular file" % (where, location))
    offset = _count(where, info, "offset", 0)
    need = _nbytes(tensor)
    length = _count(where, info, "length", need)
    size = os.path.getsize(path)
    if length is None:
        length = size - offset
    if need is not None and length != need:
        raise OnnxImportError("%s: external data length %d bytes, but shape %s needs %d"
                              % (where, length, list(tensor.dims), need))
    if offset + length > size:
        raise OnnxImportError("%s: bytes %d..%d of '%s' asked for, the file has %d"
                              % (where, offset, offset + length, location, size))
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _count(where, info, key, default):
    if key not in info:
        return default
    text = info[key]
    if not (text.isascii() and text.isdigit()):
        raise OnnxImportError("%s: external data %s %r is not a non-negative integer"
                              % (where, key, text))
    return int(text)


def _nbytes(tensor):
    """The bytes a tensor of a plain element type needs; None for the others (strings,
    packed 4-bit types), whose length is then not checked."""
    from onnx import TensorProto as T
    itemsize = {T.FLOAT: 4, T.DOUBLE: 8, T.FLOAT16: 2, T.BFLOAT16: 2, T.BOOL: 1,
                T.INT8: 1, T.UINT8: 1, T.INT16: 2, T.UINT16: 2, T.INT32: 4, T.UINT32: 4,
                T.INT64: 8, T.UINT64: 8}.get(tensor.data_type)
    return None if itemsize is None else math.prod(tensor.dims) * itemsize
