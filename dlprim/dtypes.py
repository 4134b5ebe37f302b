"""The element types dlprim stores, and their names in OpenCL C and in DLPrimitives' files.

Pure numpy: the JSON graph, the weight files and the layer specs use these without
needing an OpenCL driver.
"""
import numpy as np

__all__ = ["DTYPES", "as_dtype", "cl_type", "dlp_name", "float32", "half", "int32", "int64",
           "uint8"]

# name -> numpy dtype; DLPrimitives spells float32 "float" and int32 "int"
DTYPES = {
    "float32": np.float32, "float": np.float32,
    "float16": np.float16, "half": np.float16,
    "int32": np.int32, "int": np.int32,
    "int64": np.int64, "long": np.int64,
    "uint8": np.uint8,
}
_CL_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "half",
             np.dtype(np.int32): "int", np.dtype(np.int64): "long",
             np.dtype(np.uint8): "uchar"}
_DLP_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float16): "float16",
              np.dtype(np.int32): "int", np.dtype(np.int64): "int64",
              np.dtype(np.uint8): "uint8"}


# DLPrimitives' Python constants (``dp.float32``, ``dp.half`` ...) for the types dlprim
# stores; its bfloat16, int8, int16, uint16, uint32 and uint64 have no kernels here
float32 = np.dtype(np.float32)
half = np.dtype(np.float16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)

_known = {}  # what as_dtype was given -> its answer (every tensor asks: keep it cheap)


def as_dtype(dtype):
    """A numpy dtype from a name ('float', 'int64', ...) or a numpy dtype; else an error."""
    try:
        return _known[dtype]
    except (KeyError, TypeError):
        pass
    dt = _as_dtype(dtype)
    try:
        _known[dtype] = dt
    except TypeError:
        pass
    return dt


def _as_dtype(dtype):
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise TypeError("unsupported dtype %r; supported: %s" % (dtype, ", ".join(sorted(DTYPES))))
        return np.dtype(DTYPES[dtype])
    dt = np.dtype(dtype)
    if dt not in _CL_TYPES:
        raise TypeError("unsupported dtype %s; supported: %s" % (dt, ", ".join(sorted(DTYPES))))
    return dt


def cl_type(dtype):
    """The OpenCL C type name of a dtype ('float', 'half', 'int', 'long', 'uchar')."""
    return _CL_TYPES[as_dtype(dtype)]


def dlp_name(dtype):
    """The dtype as DLPrimitives' JSON nets spell it (inputs, Parameter options); .dlp
    headers use its writer's names (``dlprim.net.weights.DLP_WRITTEN``)."""
    return _DLP_NAMES[as_dtype(dtype)]
