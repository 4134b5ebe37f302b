"""The idx file format of the MNIST distribution, plain or gzip-compressed.

Header: two zero bytes, a type code, the number of dimensions; then one big-endian
uint32 per dimension; then the data, big-endian, row-major. MNIST images are
``0x00000803`` (uint8, 3 dims: count, rows, cols), labels ``0x00000801`` (uint8, 1 dim).
Compression is recognised by the gzip magic bytes, not by the file name.
"""
import gzip
import os

import numpy as np

from .errors import DataError, MissingDataError

__all__ = ["read_idx", "read_idx_shape", "write_idx", "IDX_TYPES"]

# type code -> big-endian numpy dtype
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path):
    if not os.path.isfile(path):
        raise MissingDataError("%s: no such file" % path)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DataError("%s: corrupt gzip data (%s)" % (path, e)) from None
    return raw


def _header(path, raw, ndim):
    """(dtype, shape, header size) from the leading bytes ``raw`` of idx file ``path``."""
    if len(raw) < 4:
        raise DataError("%s: too short for an idx header (%d bytes)" % (path, len(raw)))
    magic = int.from_bytes(raw[:4], "big")
    code, dims = raw[2], raw[3]
    if raw[:2] != b"\0\0" or code not in IDX_TYPES or dims == 0:
        expected = "0x%08x" % (0x0800 | ndim) if ndim else "0x000008NN"
        raise DataError("%s: not an idx file (magic 0x%08x, expected %s)" % (path, magic, expected))
    if ndim is not None and dims != ndim:
        raise DataError("%s: idx magic 0x%08x has %d dimensions, expected %d (magic 0x%08x)"
                        % (path, magic, dims, ndim, 0x0800 | ndim))
    header = 4 + 4 * dims
    if len(raw) < header:
        raise DataError("%s: idx header cut short" % path)
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.dtype(IDX_TYPES[code]), shape, header


def read_idx_shape(path, ndim=None):
    """The shape recorded in the header of idx file ``path``, reading only the header."""
    if not os.path.isfile(path):
        raise MissingDataError("%s: no such file" % path)
    with open(path, "rb") as f:
        gz = f.read(2) == _GZIP_MAGIC
    try:
        with (gzip.open if gz else open)(path, "rb") as f:
            head = f.read(4 + 4 * 255)
    except (OSError, EOFError) as e:
        raise DataError("%s: corrupt gzip data (%s)" % (path, e)) from None
    return _header(path, head, ndim)[1]


def read_idx(path, ndim=None):
    """The array stored in idx file ``path``; ``ndim`` checks the number of dimensions."""
    raw = _read_bytes(path)
    dtype, shape, header = _header(path, raw, ndim)
    want = int(np.prod(shape)) * dtype.itemsize
    have = len(raw) - header
    if have != want:
        raise DataError("%s: idx header says shape %s (%d bytes of data), file has %d"
                        % (path, "x".join(map(str, shape)), want, have))
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=False)


def write_idx(path, array):
    """Write ``array`` as an idx file; gzip-compressed (reproducibly) when path ends in .gz."""
    array = np.ascontiguousarray(array)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in IDX_TYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        raise TypeError("idx cannot store dtype %s" % array.dtype)
    if not 0 < array.ndim < 256:
        raise ValueError("idx stores 1..255 dimensions, got %d" % array.ndim)
    head = bytes([0, 0, code, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    body = head + array.astype(IDX_TYPES[code], copy=False).tobytes()
    if str(path).endswith(".gz"):
        body = gzip.compress(body, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(body)
