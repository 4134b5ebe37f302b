"""Parameter files: DLPrimitives' .dlp, safetensors (``safetensors.py``) and HDF5, written
atomically.

.dlp layout, written byte for byte as DLPrimitives' ``Net::save_parameters`` writes it::

    b"DLPW"                      4 bytes, the magic
    header length                4 bytes, unsigned big-endian
    header                       compact JSON: {"tensors": {name: {"dtype": "float",
                                 "shape": [...], "size": bytes, "start": offset}}}
    data                         each tensor's raw little-endian values; ``start`` counts
                                 bytes from the first byte after the header

DLPrimitives keeps parameters in a ``std::map`` and its JSON objects are maps too, so
tensors come in the byte order of their UTF-8 names (in the header and in the data) and
each entry's keys in the order dtype, shape, size, start. Names are raw UTF-8; only the
double quote, the backslash and control characters are escaped (as its json writer
does). dtypes are spelled as its ``data_type_to_string`` spells them (``DLP_WRITTEN``).
Two differences, both where DLPrimitives would lose information: a 0-d array is written,
as DLPrimitives writes a 0-d shape, without a ``shape`` key, but with its one value
(DLPrimitives' 0-d tensors are empty: size 0, no data); and sizes and offsets are exact
integers (DLPrimitives prints them through a double with 16 digits, so from 10^16 bytes
on it would round them).

Reading takes every dtype name DLPrimitives writes or reads (``DLP_READ``: also
``float32``, ``float16`` and ``int``) and returns arrays of the stored type, bfloat16 as
float32 (exactly; numpy has no bfloat16); the Net converts what it loads to float32
(``parameters.py`` refuses values float32 cannot hold).

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
from collections import OrderedDict, namedtuple
from typing import Any, Mapping, Union

import numpy as np

from ..errors import FileFormatError, ParameterError
from ..utils import atomic_write, check_regular_file

__all__ = ["NET_EXPORTERS", "save_dlp", "load_dlp", "parse_header", "save_hdf5", "load_hdf5",
           "load", "save", "MAGIC", "DLP_WRITTEN", "DLP_READ"]

# format -> writer(net, path, **options), filled by the packages that provide them
NET_EXPORTERS = {}

MAGIC = b"DLPW"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"

BFLOAT16 = "bfloat16"  # no numpy type: read as float32, written from ml_dtypes' bfloat16
# numpy dtype -> the name DLPrimitives' writer gives it (data_type_to_string)
DLP_WRITTEN = {np.dtype(t): n for t, n in (
    (np.float64, "double"), (np.int64, "int64"), (np.uint64, "uint64"),
    (np.float32, "float"), (np.int32, "int32"), (np.uint32, "uint32"),
    (np.float16, "half"), (np.int16, "int16"), (np.uint16, "uint16"),
    (np.int8, "int8"), (np.uint8, "uint8"))}
# every name a .dlp header may hold -> the numpy dtype of its bytes: what the writer
# writes, and what DLPrimitives' reader also accepts (string_to_data_type)
DLP_READ = dict({n: t for t, n in DLP_WRITTEN.items()}, **{
    "float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
    "int": np.dtype(np.int32), BFLOAT16: np.dtype(np.uint16)})


def _little(a):
    return a.astype(a.dtype.newbyteorder("<"), copy=False)


def _dlp_dtype_name(name, dtype):
    if dtype.name == BFLOAT16 and dtype.itemsize == 2:
        return BFLOAT16
    try:
        return DLP_WRITTEN[dtype.newbyteorder("=")]
    except KeyError:
        raise ParameterError("parameter '%s' has dtype %s, which a .dlp file cannot hold "
                             "(it holds %s and %s)" % (name, dtype, ", ".join(
                                 sorted(DLP_WRITTEN.values())), BFLOAT16)) from None


def _utf8(name):
    if not isinstance(name, str):
        raise ParameterError("parameter name %r is not a string" % (name,))
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ParameterError("parameter name %r is not valid Unicode text (%s)"
                             % (name, err)) from None


def dlp_bytes(arrays: Mapping[str, Any]) -> bytes:
    """The .dlp file content for {name: array}: the bytes DLPrimitives writes for the same
    parameters (tensors in UTF-8 byte order of their names; see the module docstring)."""
    tensors, start, blobs = OrderedDict(), 0, []
    for _, name in sorted((_utf8(n), n) for n in arrays):
        a = np.asarray(arrays[name])
        entry = {"dtype": _dlp_dtype_name(name, a.dtype)}
        if a.ndim:   # DLPrimitives writes no shape for a 0-d tensor
            entry["shape"] = [int(n) for n in a.shape]
        data = _little(a).tobytes()   # C order, 0-d arrays included
        entry["size"], entry["start"] = len(data), start
        tensors[name] = entry
        blobs.append(data)
        start += len(data)
    # ensure_ascii=False: raw UTF-8, escaping only '"', '\\' and control characters (the
    # same set and \u00xx spelling as DLPrimitives' json writer); integers as they are
    header = json.dumps({"tensors": tensors}, separators=(",", ":"),
                        ensure_ascii=False).encode("utf-8")
    return b"".join([MAGIC, struct.pack(">I", len(header)), header] + blobs)


def save_dlp(path: Union[str, os.PathLike], arrays: Mapping[str, Any]) -> None:
    """Write {name: array} as a DLPrimitives .dlp file, atomically (the bytes DLPrimitives
    writes for the same parameters)."""
    data = dlp_bytes(arrays)
    atomic_write(path, lambda f: f.write(data))


def load_dlp(path: Union[str, os.PathLike]) -> "OrderedDict[str, np.ndarray]":
    """OrderedDict name -> numpy array from a .dlp file, in the file's dtype (bfloat16 as
    float32).

    The header is checked in full before any value is read (see ``parse_header``), so a
    damaged one is a FileFormatError naming the file and the entry, never weights taken
    from the wrong bytes.
    """
    data = _read_regular(path)
    base, tensors = parse_header(path, data)
    out = OrderedDict()
    for name, e in tensors.items():
        raw = np.frombuffer(data, e.dtype, count=e.size // e.dtype.itemsize,
                            offset=base + e.start)
        value = raw.reshape(e.shape).astype(e.dtype.newbyteorder("="))
        if e.dtype_name == BFLOAT16:
            # bfloat16 is the top half of a float32: exact, and numpy has no type for it
            value = (value.astype(np.uint32) << 16).view(np.float32)
        out[name] = value
    return out


class DlpEntry(namedtuple("DlpEntry", "dtype_name dtype shape start size")):
    """One checked tensor of a .dlp header: its dtype as spelled there, the numpy dtype of
    its little-endian bytes (uint16 for bfloat16), shape, and byte range."""
    __slots__ = ()


def parse_header(path, data):
    """(offset of the data section, OrderedDict name -> DlpEntry) of the .dlp bytes
    ``data``; every entry checked: a dtype of ``DLP_READ``, non-negative integer
    dimensions (no ``shape``: 0-d), ``size`` equal to what the shape needs, ``[start, start
    + size)`` inside the data section and overlapping no other tensor. Names must be
    unique."""
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
    spans = sorted((e.start, e.start + e.size, name) for name, e in out.items() if e.size)
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
    """The DlpEntry of one header entry, or a FileFormatError naming it."""
    where = "%s: tensor '%s'" % (path, name)
    if not isinstance(info, dict):
        raise FileFormatError("%s: the entry is %r, not an object" % (where, info))
    dtype_name = info.get("dtype", "float")
    dtype = DLP_READ.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise FileFormatError("%s: dtype %r is not one a .dlp file holds (%s)"
                              % (where, dtype_name, ", ".join(sorted(DLP_READ))))
    shape = info.get("shape", [])   # DLPrimitives writes no shape for a 0-d tensor
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
        raise FileFormatError("%s: size %d bytes, but shape %s of %s needs %d%s" % (
            where, size, tuple(shape), dtype_name, need,
            " (no shape is a 0-d tensor of one value; DLPrimitives' own 0-d tensors are "
            "empty and have no value to load)" if "shape" not in info and size == 0 else ""))
    if start + size > section:
        raise FileFormatError("%s: bytes %d..%d run past the end of the data section (%d "
                              "bytes; truncated?)" % (where, start, start + size, section))
    return DlpEntry(dtype_name, dtype.newbyteorder("<"), tuple(shape), start, size)


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
