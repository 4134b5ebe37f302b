"""The element types dlprim stores, and their names in OpenCL C and in DLPrimitives' files.

Pure numpy: the JSON graph, the weight files and the layer specs use these without
needing an OpenCL driver.
"""
import numpy as np

__all__ = ["DTYPES", "as_dtype", "cl_type", "cl_limits", "compute_type", "dlp_name", "float32", "half",
           "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool_",
           "HALF_TYPES", "is_float", "dtype_name", "cl_cast", "to_bfloat16", "bfloat16_values",
           "NARROW_TYPES", "is_narrow"]

# bfloat16 (float32's sign, exponent and top 7 mantissa bits) has no numpy type: its
# elements are the 16 bits themselves, in a one-field structured dtype, so that numpy
# does no arithmetic on them by mistake. ``to_bfloat16`` rounds float values into it,
# ``bfloat16_values`` gives them back as float32 (exactly); Tensor.numpy() does that.
bfloat16 = np.dtype([("bfloat16", "<u2")])

# name -> numpy dtype; DLPrimitives spells float32 "float" and int32 "int"; the OpenCL C
# names of the others are accepted too ("double", "long", "short", "char")
DTYPES = {
    "float32": np.float32, "float": np.float32,
    "float16": np.float16, "half": np.float16,
    "bfloat16": bfloat16, "bf16": bfloat16,
    "float64": np.float64, "double": np.float64,
    "int8": np.int8, "char": np.int8,
    "int16": np.int16, "short": np.int16,
    "int32": np.int32, "int": np.int32,
    "int64": np.int64, "long": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16, "ushort": np.uint16,
    "uint32": np.uint32, "uint": np.uint32,
    "uint64": np.uint64, "ulong": np.uint64,
    "bool": np.bool_,
}
# The narrow types (ONNX's float8, 4-bit and 2-bit types, named as ml_dtypes names them)
# are storage only: a tensor of one holds its codes, one element per byte as ml_dtypes'
# (and onnx.numpy_helper's) arrays do (sub-byte types unpacked: every kernel addresses an
# element, and two work-items never share a byte). Nothing computes on them: conversions
# (``cl_cast``, the LibraryOp 'copy', ONNX Cast) decode and encode the codes
# (kernels/narrow_float.h), layout copies move the bytes (their compute type is the code,
# uchar). Their numpy dtypes are ml_dtypes', which onnx installs; without it there are none.
# name -> (kind, the value type they decode to in OpenCL C, the codec's name in the kernels)
_NARROW = {"float8_e4m3fn": ("f8", "float", "e4m3fn"), "float8_e4m3fnuz": ("f8", "float", "e4m3fnuz"),
           "float8_e5m2": ("f8", "float", "e5m2"), "float8_e5m2fnuz": ("f8", "float", "e5m2fnuz"),
           "float8_e8m0fnu": ("e8m0", "float", "e8m0"), "float4_e2m1fn": ("f4", "float", "e2m1"),
           "int4": ("int", "char", "int4"), "uint4": ("int", "uchar", "uint4"),
           "int2": ("int", "char", "int2"), "uint2": ("int", "uchar", "uint2")}
try:
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover (onnx requires it)
    _ml = None
NARROW_TYPES = {} if _ml is None else {np.dtype(getattr(_ml, n)): n for n in _NARROW}
DTYPES.update((n, dt) for dt, n in NARROW_TYPES.items())
# numpy dtype -> (OpenCL C storage type, DLPrimitives' name); bool is one byte, 0 or 1
_TYPES = {np.dtype(np.float32): ("float", "float"), np.dtype(np.float16): ("half", "float16"),
          bfloat16: ("bfloat16", "bfloat16"), np.dtype(np.float64): ("double", "double"),
          np.dtype(np.int8): ("char", "int8"), np.dtype(np.int16): ("short", "int16"),
          np.dtype(np.int32): ("int", "int"), np.dtype(np.int64): ("long", "int64"),
          np.dtype(np.uint8): ("uchar", "uint8"), np.dtype(np.uint16): ("ushort", "uint16"),
          np.dtype(np.uint32): ("uint", "uint32"), np.dtype(np.uint64): ("ulong", "uint64"),
          np.dtype(np.bool_): ("uchar", "bool")}
_TYPES.update((dt, ("uchar", n)) for dt, n in NARROW_TYPES.items())
_CL_TYPES = {dt: names[0] for dt, names in _TYPES.items()}
_DLP_NAMES = {dt: names[1] for dt, names in _TYPES.items()}
# what kernels compute a storage type in: 16-bit floats widen to float (no cl_khr_fp16
# needed), every other type computes in itself
_COMPUTE = {"half": "float", "bfloat16": "float"}


# DLPrimitives' Python constants (``dp.float32``, ``dp.half`` ...) for the types dlprim
# stores
float32 = np.dtype(np.float32)
half = np.dtype(np.float16)
float64 = np.dtype(np.float64)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
bool_ = np.dtype(np.bool_)

# the 16-bit float storages of mixed precision ("fp16", "bf16"): loads widen them to
# float32, stores round to nearest even
HALF_TYPES = (half, bfloat16)

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
    """The OpenCL C type name of a dtype ('float', 'half', 'double', 'char', 'long', 'uchar'
    for uint8 and bool ...)."""
    return _CL_TYPES[as_dtype(dtype)]


# the OpenCL C expressions of each type's lowest and highest value (the floats' infinities):
# where a max or a min starts
_LIMITS = {"char": ("CHAR_MIN", "CHAR_MAX"), "short": ("SHRT_MIN", "SHRT_MAX"),
           "int": ("INT_MIN", "INT_MAX"), "long": ("LONG_MIN", "LONG_MAX"),
           "uchar": ("0", "UCHAR_MAX"), "ushort": ("0", "USHRT_MAX"), "uint": ("0", "UINT_MAX"),
           "ulong": ("0", "ULONG_MAX")}


def cl_limits(ctype):
    """(lowest, highest) of OpenCL C type ``ctype`` as C expressions: -INFINITY and
    INFINITY for the floating types, the limits.h constants for the integers."""
    return _LIMITS.get(ctype, ("-INFINITY", "INFINITY"))


def compute_type(dtype):
    """The OpenCL C type kernels compute a dtype's values in: float for float16 and
    bfloat16, the storage type itself otherwise."""
    st = _CL_TYPES[as_dtype(dtype)]
    return _COMPUTE.get(st, st)


def dlp_name(dtype):
    """The dtype as DLPrimitives' JSON nets spell it (inputs, Parameter options); .dlp
    headers use its writer's names (``dlprim.net.weights.DLP_WRITTEN``)."""
    return _DLP_NAMES[as_dtype(dtype)]


def is_float(dtype):
    """Whether elements of ``dtype`` are floating point (float32, float16, bfloat16,
    float64; the narrow float types are codes, not computed on)."""
    dt = as_dtype(dtype)
    return (dt.kind == "f" and dt not in NARROW_TYPES) or dt == bfloat16


def is_narrow(dtype):
    """Whether ``dtype`` is one of the narrow storage types (``NARROW_TYPES``: float8,
    float4, int4, uint4, int2, uint2), which only conversions and layout copies take."""
    return as_dtype(dtype) in NARROW_TYPES


def dtype_name(dtype):
    """dlprim's name of a dtype: numpy's, and "bfloat16" for bfloat16."""
    dt = as_dtype(dtype)
    return "bfloat16" if dt == bfloat16 else dt.name


def to_bfloat16(values):
    """``values`` (any float array) rounded to bfloat16, to nearest even as the kernels
    store; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7fffffff) > 0x7f800000
    rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16
    out = np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)
    return out.view(bfloat16).reshape(np.shape(values))


def bfloat16_values(bits):
    """The float32 values of a bfloat16 array (exact)."""
    bits = np.ascontiguousarray(bits)
    if bits.dtype != bfloat16:
        raise TypeError("bfloat16_values: a bfloat16 array, got %s" % bits.dtype)
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(bits.shape)


def cl_cast(src, dst, value, saturate=True, round_mode="up"):
    """An OpenCL C expression: ``value`` (a ``src`` element in ``compute_type(src)``)
    converted to ``compute_type(dst)`` as PyTorch converts: to bool is ``!= 0`` (NaN is
    true); floats to integers truncate toward zero, to the narrow ones (uint8, int8,
    int16) through int64 as PyTorch's uint8 cast does (-1.5 -> 255); otherwise C's
    conversion (integers wrap, doubles round to nearest).

    To and from the narrow types as ONNX's Cast converts (``_narrow_cast``); ``saturate``
    (float8 and float8e8m0 destinations) and ``round_mode`` (float8e8m0: "up", "down",
    "nearest") are Cast's attributes."""
    src, dst = as_dtype(src), as_dtype(dst)
    if src in NARROW_TYPES or dst in NARROW_TYPES:
        return _narrow_cast(src, dst, value, saturate, round_mode)
    ct = compute_type(dst)
    if dst == bool_ and src != bool_:
        return "(uchar)((%s) != 0)" % value
    if compute_type(src) == ct:
        return value
    if is_float(src) and not is_float(dst) and dst.itemsize < 4:
        return "(%s)(long)(%s)" % (ct, value)
    return "(%s)(%s)" % (ct, value)


_INT_MASKS = {"int4": 15, "uint4": 15, "int2": 3, "uint2": 3}
_ROUND_MODES = {"up": 0, "down": 1, "nearest": 2}


def _narrow_cast(src, dst, value, saturate, round_mode):
    """``cl_cast`` where a side is narrow: a narrow source decodes to its value (float,
    char or uchar, exact), which converts on as that type would; a narrow destination
    encodes from float (a double rounded once, as ml_dtypes does from 0.7: through a float
    rounded to odd; float8e8m0 from the double's nearest float, as onnx.numpy_helper's;
    wide integers as float, exact wherever the result is finite) or, for the integer
    types, keeps the low bits of the integer (floats truncated toward zero first): ONNX's
    "discard higher bits", and for floats beyond the type ONNX's "undefined"."""
    if src == dst:
        return value
    if src in NARROW_TYPES:
        _, vtype, codec = _NARROW[NARROW_TYPES[src]]
        value = "dlp_nf_%s_value(%s)" % (codec, value)
        src = {"float": float32, "char": int8, "uchar": uint8}[vtype]
        if dst not in NARROW_TYPES:
            return cl_cast(src, dst, value)
    name = NARROW_TYPES[dst]
    kind, _, codec = _NARROW[name]
    if kind == "int":
        whole = "(long)(%s)" % value if is_float(src) else "(%s)" % value
        return "(uchar)(%s & %d)" % (whole, _INT_MASKS[name])
    f = value if compute_type(src) == "float" else "(float)(%s)" % value
    if src == float64 and kind != "e8m0":
        f = "DLP_NF_FROM_DOUBLE(%s)" % value
    if kind == "f8":
        return "dlp_nf_%s_bits(%s, %d)" % (codec, f, 1 if saturate else 0)
    if kind == "e8m0":
        if round_mode not in _ROUND_MODES:
            raise ValueError("round_mode %r: one of %s" % (round_mode, ", ".join(_ROUND_MODES)))
        return "dlp_nf_e8m0_bits(%s, %d, %d)" % (f, 1 if saturate else 0, _ROUND_MODES[round_mode])
    return "dlp_nf_%s_bits(%s)" % (codec, f)
