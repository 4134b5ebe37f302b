"""What ``net(**arrays)`` accepts: the rules for data a caller hands a net from the host.

- Every name is a net input, and every net input that an operator reads is given: a
  missing one would run on whatever its buffer held from an earlier call. (The
  DLPrimitives way, ``net.tensor(name).to_device(...)`` then ``net.forward()``, writes
  the buffers itself and is not checked.)
- Each array holds numbers of the input's kind: floats for a float input (float64 and
  float16 are converted, as numpy would store them), integers for an integer input
  (values must fit its dtype), bools for a bool input. Strings, objects, complex
  numbers, integers for a float input, floats for an integer one and bools for anything
  but a bool input are refused: dlprim never rounds, truncates or reinterprets what it
  is given. A narrow input (float8, float4, int4, uint4, int2, uint2) takes an array of
  its own ml_dtypes dtype, as onnx.numpy_helper gives them; int4, uint4, int2 and uint2
  inputs also take integers that fit.
- Each operator that reads a net input may check the values on the host before they are
  copied (``Layer.check_input_data``; the losses check labels), so the planned loop never
  waits for the device.

Pure numpy.
"""
import numpy as np

from ..dtypes import NARROW_TYPES, bfloat16, dtype_name, is_float, to_bfloat16
from ..errors import InputError

__all__ = ["readers", "as_arrays", "check_values", "converted"]


def readers(graph, layers):
    """{net input name: [(layer, input position)]} of the operators that read each input."""
    out = {}
    for name, vid in graph.input_values.items():
        out[name] = [(layers[op], pos) for op, pos in graph.values[vid].consumers]
    return out


def _who(readers_of):
    names = ["%s '%s'" % (layer.type_name, layer.name) for layer, _ in readers_of]
    if len(names) > 2:
        names = names[:2] + ["%d more" % (len(names) - 2)]
    return "read by " + " and ".join(names) if names else "read by no operator"


def as_arrays(inputs, graph, readers_of):
    """The inputs as numpy arrays of numbers, every needed input present; else an
    InputError naming the input."""
    for name in inputs:
        if name not in graph.inputs:
            raise InputError("net(...): '%s' is not a net input; inputs: %s"
                             % (name, ", ".join(graph.inputs) or "none"))
    missing = [n for n in graph.inputs if n not in inputs and readers_of[n]]
    if missing:
        n = missing[0]
        raise InputError(
            "net(...): input '%s' is missing (%s); give every input an operator reads%s, or "
            "write it with net.tensor('%s').to_device(...) and call net.forward()"
            % (n, _who(readers_of[n]), " (also missing: %s)" % ", ".join(missing[1:])
               if missing[1:] else "", n))
    arrays = {}
    for name, value in inputs.items():
        try:
            a = np.asarray(value)
        except (ValueError, TypeError) as err:  # ragged lists
            raise InputError("net input '%s': not an array of numbers (%s)" % (name, err)) \
                from None
        if a.dtype.kind not in "iufb" and a.dtype not in NARROW_TYPES:
            raise InputError("net input '%s' (%s) takes numbers; got %s data"
                             % (name, _who(readers_of[name]), a.dtype.name))
        arrays[name] = a
    return arrays


def check_values(arrays, readers_of):
    """Each reading layer's host check (labels in range ...)."""
    for name, a in arrays.items():
        for layer, pos in readers_of[name]:
            layer.check_input_data(pos, a, name)


def converted(name, a, dtype, readers_of):
    """``a`` as a contiguous array of the input's ``dtype``; the kinds must match."""
    if dtype in NARROW_TYPES or a.dtype in NARROW_TYPES:
        return _narrow(name, a, dtype, readers_of)
    if "b" in (dtype.kind, a.dtype.kind):  # bools only for bools, both ways
        if dtype.kind != a.dtype.kind:
            raise InputError("net input '%s' is %s (%s); got %s data: convert it yourself "
                             "(dlprim does not guess)" % (name, dtype_name(dtype),
                                                          _who(readers_of[name]), a.dtype.name))
    elif is_float(dtype):
        if a.dtype.kind != "f":
            raise InputError("net input '%s' is %s (%s); got %s data: convert it yourself "
                             "(dlprim does not guess)" % (name, dtype_name(dtype),
                                                          _who(readers_of[name]), a.dtype.name))
    elif a.dtype.kind == "f":
        raise InputError("net input '%s' is %s (%s); got %s data: integers are needed, and "
                         "dlprim never rounds or truncates" % (name, dtype.name,
                                                              _who(readers_of[name]), a.dtype.name))
    elif a.size and a.dtype != dtype:
        info = np.iinfo(dtype)
        bad = (a < info.min) | (a > info.max)
        if bad.any():
            pos = np.unravel_index(int(np.flatnonzero(bad)[0]), a.shape)
            raise InputError("net input '%s' is %s; value %d at position %s does not fit"
                             % (name, dtype.name, a[pos].item(), tuple(int(p) for p in pos)))
    if dtype == bfloat16:  # rounded to nearest even, as the device stores
        return to_bfloat16(a)
    return np.require(a, dtype, "C")  # keeps a 0-d input 0-d (ascontiguousarray makes it (1,))


def _narrow(name, a, dtype, readers_of):
    """A narrow input from an array of its dtype (or integers that fit a sub-byte integer
    type); a narrow array for another input is refused."""
    if a.dtype == dtype:
        return np.require(a, dtype, "C")
    if dtype in NARROW_TYPES and a.dtype.kind in "iu" and a.dtype not in NARROW_TYPES and \
            NARROW_TYPES[dtype] in ("int4", "uint4", "int2", "uint2"):
        bits = int(NARROW_TYPES[dtype][-1])
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.name[0] == "i" \
            else (0, (1 << bits) - 1)
        bad = (a < lo) | (a > hi)
        if bad.any():
            pos = np.unravel_index(int(np.flatnonzero(bad)[0]), a.shape)
            raise InputError("net input '%s' is %s; value %d at position %s does not fit"
                             % (name, dtype.name, a[pos].item(), tuple(int(p) for p in pos)))
        return np.require(a.astype(dtype), dtype, "C")
    raise InputError("net input '%s' is %s (%s); got %s data: convert it yourself (ml_dtypes "
                     "arrays of the input's dtype; dlprim does not guess)"
                     % (name, dtype_name(dtype), _who(readers_of[name]), a.dtype.name))
