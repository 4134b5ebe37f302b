"""Parameter files: DLPrimitives' .dlp and HDF5, written atomically.

.dlp layout (all parameters of a net, in the net's parameter order)::

    b"DLPW"                      4 bytes, the magic
    header length                4 bytes, unsigned big-endian
    header                       compact JSON: {"tensors": {name: {"dtype": "float",
                                 "shape": [...], "size": bytes, "start": offset}}}
    data                         each tensor's raw little-endian values; ``start`` counts
                                 bytes from the first byte after the header

HDF5: one dataset per parameter, named by the parameter (h5py, the ``hdf5`` extra).

Whole-net formats of other packages register a writer in ``NET_EXPORTERS`` (dlprim.onnx
registers "onnx"), so the Net reaches them without importing those packages.
"""
import json
import struct
from collections import OrderedDict

import numpy as np

from ..dtypes import as_dtype, dlp_name
from ..utils import atomic_write

__all__ = ["NET_EXPORTERS", "save_dlp", "load_dlp", "save_hdf5", "load_hdf5", "load", "MAGIC"]

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
    """OrderedDict name -> numpy array from a .dlp file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != MAGIC or len(data) < 8:
        raise ValueError("%s is not a .dlp parameter file (no DLPW magic)" % path)
    (length,) = struct.unpack(">I", data[4:8])
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
        tensors = header["tensors"]
    except (ValueError, KeyError, UnicodeDecodeError) as err:
        raise ValueError("%s: bad .dlp header: %s" % (path, err)) from None
    base = 8 + length
    out = OrderedDict()
    for name, info in tensors.items():
        dtype = as_dtype(info.get("dtype", "float")).newbyteorder("<")
        shape = tuple(int(s) for s in info["shape"])
        size, start = int(info["size"]), int(info["start"])
        if size != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ValueError("%s: tensor '%s' has size %d bytes, its shape %s needs %d"
                             % (path, name, size, shape, int(np.prod(shape)) * dtype.itemsize))
        if base + start + size > len(data):
            raise ValueError("%s: tensor '%s' runs past the end of the file (truncated?)"
                             % (path, name))
        raw = np.frombuffer(data, dtype, count=size // dtype.itemsize, offset=base + start)
        out[name] = raw.reshape(shape).astype(dtype.newbyteorder("="))
    return out


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
    """{name: array} of every dataset in an HDF5 file (needs h5py)."""
    h5py = _h5py()
    out = OrderedDict()
    with h5py.File(path, "r") as h5:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        h5.visititems(visit)
    return out


def load(path):
    """Parameters from a .dlp or HDF5 file, by magic (else by extension)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] == MAGIC:
        return load_dlp(path)
    if head == HDF5_MAGIC or str(path).lower().endswith((".h5", ".hdf5")):
        return load_hdf5(path)
    raise ValueError("%s is neither a .dlp (DLPW) nor an HDF5 parameter file" % path)
