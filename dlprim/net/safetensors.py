"""The safetensors parameter format, read and written without the ``safetensors`` package.

Layout (the format torchvision, Hugging Face and others publish weights in)::

    header length N          8 bytes, unsigned little-endian
    header                   N bytes of JSON: {name: {"dtype": "F32", "shape": [...],
                             "data_offsets": [begin, end]}, "__metadata__": {str: str}},
                             padded with spaces
    data                     the tensors' little-endian bytes; offsets count from here

Reading maps the file into memory (``numpy.memmap``): a tensor is read from disk when
used, so a large file costs no memory up front. Everything is checked before it is
trusted: the header's size and JSON, each dtype, shape and extent (inside the data, not
overlapping another); a problem is a FileFormatError naming the file and the tensor.
"""
import json
import os
import struct

import numpy as np

from ..dtypes import bfloat16
from ..errors import FileFormatError
from ..utils import atomic_write

__all__ = ["save_safetensors", "load_safetensors", "safetensors_bytes", "is_safetensors"]

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": bfloat16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_}
NAMES = {np.dtype(t): n for n, t in DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024  # as the reference implementation: a larger one is damage


def safetensors_bytes(arrays, metadata=None):
    """The safetensors file content for {name: array} (in that order)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        kind = NAMES.get(np.dtype(a.dtype).newbyteorder("="))
        if kind is None:
            raise ValueError("safetensors: %s has dtype %s, which the format has no name for"
                             % (name, a.dtype))
        header[name] = {"dtype": kind, "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return b"".join([struct.pack("<Q", len(text)), text] + blobs)


def save_safetensors(path, arrays, metadata=None):
    """Write {name: array} as a safetensors file, atomically."""
    data = safetensors_bytes(arrays, metadata)
    atomic_write(path, lambda f: f.write(data))


def is_safetensors(head, size):
    """Whether a file of ``size`` bytes that starts with ``head`` (9 bytes or more) looks
    like safetensors: a plausible header length, then a JSON object."""
    if len(head) < 9:
        return False
    n = struct.unpack("<Q", head[:8])[0]
    return 2 <= n <= min(MAX_HEADER, size - 8) and head[8:9] == b"{"


def load_safetensors(path):
    """{name: array} of a safetensors file, memory-mapped (read-only views)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise FileFormatError("%s: %d bytes, too short for a safetensors file" % (path, size))
        n = struct.unpack("<Q", head)[0]
        if n > min(MAX_HEADER, size - 8):
            raise FileFormatError("%s: the safetensors header claims %d bytes; the file has %d"
                                  % (path, n, size))
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise FileFormatError("%s: the safetensors header is not JSON (%s)" % (path, e)) from None
    if not isinstance(header, dict):
        raise FileFormatError("%s: the safetensors header is not a JSON object" % path)
    header.pop("__metadata__", None)
    start, length = 8 + n, size - 8 - n
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(length,)) \
        if length else np.zeros(0, np.uint8)
    out, spans = {}, []
    for name, info in header.items():
        where = "%s: tensor '%s'" % (path, name)
        if not isinstance(info, dict) or set(info) - {"dtype", "shape", "data_offsets"}:
            raise FileFormatError("%s: not a {dtype, shape, data_offsets} entry" % where)
        dtype = DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise FileFormatError("%s: dtype %r is not one dlprim reads (%s)"
                                  % (where, info.get("dtype"), ", ".join(DTYPES)))
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(_count(d) for d in shape):
            raise FileFormatError("%s: shape %r is not a list of sizes" % (where, shape))
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_count, offsets)) \
                or not offsets[0] <= offsets[1] <= length:
            raise FileFormatError("%s: data_offsets %r are not inside the %d data bytes"
                                  % (where, offsets, length))
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise FileFormatError("%s: %d bytes for shape %s of %s, which needs %d"
                                  % (where, offsets[1] - offsets[0], shape, info["dtype"], nbytes))
        spans.append((offsets[0], offsets[1], name))
        raw = data[offsets[0]:offsets[1]]
        out[name] = raw.view(np.dtype(dtype).newbyteorder("<")).reshape(shape)
    spans.sort()
    for (b0, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise FileFormatError("%s: tensors '%s' and '%s' overlap" % (path, n0, n1))
    return out


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
