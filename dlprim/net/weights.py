"""Parameter files: DLPrimitives' .dlp, safetensors (``safetensors.py``) and HDF5, written
atomically.

.dlp layout (all parameters of a net, in the net's parameter order)::

    b"DLPW"                      4 bytes, the magic
    header length                4 bytes, unsigned big-endian
    header                       compact JSON: {"tensors": {name: {"dtype": "float",
                                 "shape": [...], "size": bytes, "start": offset}}}
    data                         each tensor's raw little-endian values; ``start`` counts
                                 bytes from the first byte after the header

HDF5: one dataset per parameter, named by the parameter (h5py, the ``hdf5`` extra).

Files are read only if they are regular files, and checked before they are trusted: a
damaged or foreign one is a FileFormatError naming the file and the entry at fault.

Whole-net formats of other packages register a writer in ``NET_EXPORTERS`` (dlprim.onnx
registers "onnx"), so the Net reaches them without importing those packages.
"""
import json
import math
import os
import struct
from collections import OrderedDict

import numpy as np

from ..dtypes import as_dtype, dlp_name
from ..errors import FileFormatError
from ..utils import atomic_write, check_regular_file

__all__ = ["NET_EXPORTERS", "save_dlp", "load_dlp", "parse_header", "save_hdf5", "load_hdf5",
           "load", "save", "MAGIC"]

# format -> writer(net, path, **options), filled by the packages that provide them
NET_EXPORTERS = {}

MAGIC = b"DLPW"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _little(a):
    a = np.ascontiguousarray(a)
    return a.astype(a.dtype.newbyteorder("<"), copy=False)


def dlp_bytes(arrays):
    """The .dlp file content for an ordered {name: array}."""
    tensors, start, blobs = OrderedDict(), 0, []
    for name, a in arrays.items():
        a = _little(np.asarray(a))
        tensors[name] = {"dtype": dlp_name(a.dtype), "shape": list(a.shape),
                         "size": a.nbytes, "start": start}
        blobs.append(a.tobytes())
        start += a.nbytes
    header = json.dumps({"tensors": tensors}, separators=(",", ":")).encode("utf-8")
    return b"".join([MAGIC, struct.pack(">I", len(header)), header] + blobs)


def save_dlp(path, arrays):
    """Write {name: array} as a DLPrimitives .dlp file, atomically."""
    data = dlp_bytes(arrays)
    atomic_write(path, lambda f: f.write(data))


def load_dlp(path):
    """OrderedDict name -> numpy array from a .dlp file.

    The header is checked in full before any value is read (see ``parse_header``), so a
    damaged one is a FileFormatError naming the file and the entry, never weights taken
    from the wrong bytes.
    """
    data = _read_regular(path)
    base, tensors = parse_header(path, data)
    out = OrderedDict()
    for name, (dtype, shape, start, size) in tensors.items():
        raw = np.frombuffer(data, dtype, count=size // dtype.itemsize, offset=base + start)
        out[name] = raw.reshape(shape).astype(dtype.newbyteorder("="))
    return out


def parse_header(path, data):
    """(offset of the data section, OrderedDict name -> (dtype, shape, start, size)) of the
    .dlp bytes ``data``; every entry checked: a known numeric dtype, non-negative integer
    dimensions, ``size`` equal to what the shape needs, ``[start, start + size)`` inside
    the data section and overlapping no other tensor. Names must be unique."""
    if len(data) < 8 or data[:4] != MAGIC:
        raise FileFormatError("%s is not a .dlp parameter file: it starts with %r, expected "
                              "the magic %r and a 4-byte header length" % (path, data[:4], MAGIC))
    (length,) = struct.unpack(">I", data[4:8])
    base = 8 + length
    if base > len(data):
        raise FileFormatError("%s: the header length %d runs past the end of the file (%d "
                              "bytes; truncated?)" % (path, length, len(data)))
    try:
        header = json.loads(data[8:base].decode("utf-8"), object_pairs_hook=_unique_keys)
    except (ValueError, UnicodeDecodeError) as err:
        raise FileFormatError("%s: the .dlp header is not JSON: %s" % (path, err)) from None
    tensors = header.get("tensors") if isinstance(header, dict) else None
    if not isinstance(tensors, dict):
        raise FileFormatError("%s: the .dlp header has no \"tensors\" object" % path)
    section = len(data) - base
    out = OrderedDict((name, _entry(path, name, info, section)) for name, info in tensors.items())
    spans = sorted((start, start + size, name) for name, (_, _, start, size) in out.items() if size)
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise FileFormatError("%s: tensor '%s' overlaps tensor '%s' (bytes %d..%d of the "
                                  "data section)" % (path, second, first, start, end))
    return base, out


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if dup is not None:
        raise ValueError("the name '%s' appears twice" % dup)
    return OrderedDict(pairs)


def _entry(path, name, info, section):
    """(dtype, shape, start, size) of one header entry, or a FileFormatError naming it."""
    where = "%s: tensor '%s'" % (path, name)
    if not isinstance(info, dict):
        raise FileFormatError("%s: the entry is %r, not an object" % (where, info))
    try:
        dtype = as_dtype(info.get("dtype", "float")).newbyteorder("<")
    except TypeError as err:
        raise FileFormatError("%s: %s" % (where, err)) from None
    shape = info.get("shape")
    if not isinstance(shape, list) or not all(_count(s) for s in shape):
        raise FileFormatError("%s: shape %r is not a list of non-negative integers"
                              % (where, shape))
    for key in ("size", "start"):
        if not _count(info.get(key)):
            raise FileFormatError("%s: %s %r is not a non-negative integer"
                                  % (where, key, info.get(key)))
    size, start = info["size"], info["start"]
    need = math.prod(shape) * dtype.itemsize
    if size != need:
        raise FileFormatError("%s: size %d bytes, but shape %s of %s needs %d"
                              % (where, size, tuple(shape), info.get("dtype", "float"), need))
    if start + size > section:
        raise FileFormatError("%s: bytes %d..%d run past the end of the data section (%d "
                              "bytes; truncated?)" % (where, start, start + size, section))
    return dtype, tuple(shape), start, size


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_regular(path):
    check_regular_file(path, "parameter file", FileFormatError)


def _read_regular(path):
    _check_regular(path)
    with open(path, "rb") as f:
        return f.read()


def _h5py():
    try:
        import h5py
    except ImportError:
        raise ImportError("HDF5 parameter files need h5py: pip install 'dlprim[hdf5]' "
                          "(or pip install h5py)") from None
    return h5py


def save_hdf5(path, arrays):
    """Write {name: array} as an HDF5 file, one dataset per name, atomically (needs h5py)."""
    h5py = _h5py()

    def write(f):
        with h5py.File(f, "w") as h5:
            for name, a in arrays.items():
                h5.create_dataset(name, data=np.asarray(a))
    atomic_write(path, write)


def load_hdf5(path):
    """{name: array} of every dataset in an HDF5 file (needs h5py); a file h5py cannot
    read, or a dataset that is not numbers, is a FileFormatError naming it."""
    h5py = _h5py()
    _check_regular(path)
    out = OrderedDict()

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            if obj.dtype.kind not in "fiu":
                raise FileFormatError("%s: dataset '%s' holds %s, not numbers"
                                      % (path, name, obj.dtype))
            out[name] = obj[()]
    try:
        with h5py.File(path, "r") as h5:
            h5.visititems(visit)
    except FileFormatError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        # h5py reports damage as OSError ("truncated file", "bad object header") or,
        # for some structures, ValueError/KeyError; the file name is what the user needs
        raise FileFormatError("%s: not a readable HDF5 parameter file: %s" % (path, err)) from None
    return out


def load(path):
    """Parameters from a .dlp, safetensors or HDF5 file, told apart by content (HDF5 also
    by extension)."""
    from .safetensors import is_safetensors, load_safetensors
    _check_regular(path)
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == MAGIC:
        return load_dlp(path)
    if is_safetensors(head, os.path.getsize(path)):
        return load_safetensors(path)
    if head[:8] == HDF5_MAGIC or str(path).lower().endswith((".h5", ".hdf5")):
        return load_hdf5(path)
    raise FileFormatError("%s is not a .dlp (magic DLPW), safetensors or HDF5 parameter file "
                          "(it starts with %r)" % (path, head[:8]))


def save(path, arrays):
    """Write {name: array} in the format the file name says: ``.safetensors``, ``.h5`` /
    ``.hdf5``, else DLPrimitives' .dlp."""
    name = str(path).lower()
    if name.endswith(".safetensors"):
        from .safetensors import save_safetensors
        save_safetensors(path, arrays, {"format": "dlprim"})
    elif name.endswith((".h5", ".hdf5")):
        save_hdf5(path, arrays)
    else:
        save_dlp(path, arrays)
