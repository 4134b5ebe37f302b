"""A converter's run of dlprim operators for one ONNX node (the composed forms of
Attention, RotaryEmbedding and the unrolled recurrent cells). It imports no converter
module (``ops_library`` imports them all): ``lib`` here is float32's."""
import numpy as np

__all__ = ["Steps", "dtype_name"]


# ONNX's TensorProto element types by number, as dlprim names them
ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
              7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
              16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
              20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn",
              24: "float8_e8m0fnu", 25: "uint2", 26: "int2"}


def dtype_name(dtype):
    dt = np.dtype(dtype)
    return "bfloat16" if dt.name == "bfloat16" or dt.kind == "V" else dt.name


class Steps:
    """Adds the operators of one node, each writing a fresh tensor registered under its
    own name (so ``typed`` and ``b.shape`` read it as an ONNX tensor)."""

    def __init__(self, b, node):
        self.b, self.node, self.k = b, node, 0

    def _out(self, tag):
        self.k += 1
        return self.b.fresh("%s/%s" % (self.node.outputs[0] or self.node.name, tag))

    def add(self, type, inputs, out_shape, tag, dtype=np.float32, output=None, **options):
        b = self.b
        t = b.add(type, [b.value(i) for i in inputs], out_shape, output=output or self._out(tag),
                  name="%s/%s" % (self.node.name, tag), options=options, dtype=dtype)
        b.alias[t] = t
        return t

    def lib(self, op, inputs, tag, dtype=None, attrs=None, output=None):
        """LibraryOp ``op`` over float32 ``inputs`` (a constant of one element after the
        first input: a scalar operand), or over any inputs stored as ``dtype`` (the
        library's conversion). ``TypedSteps`` (ops_attention) follows ONNX's type rules."""
        b = self.b
        if dtype is None and any(b.dtype(n) != np.float32 for n in inputs):
            raise ValueError("Steps.lib: %s of operands not float32 needs a dtype" % op)
        tensors, scalars = [inputs[0]], {}
        for place, n in zip("bc", inputs[1:]):
            if b.is_const(n) and np.asarray(b.consts[n]).size == 1:
                scalars[place] = float(np.asarray(b.consts[n]).reshape(()))
            else:
                tensors.append(n)
        shape = tuple(np.broadcast_shapes(*[b.shape(n) for n in tensors]))
        options = {"op": op}
        if dtype is not None:
            options["dtype"] = dtype_name(dtype)
        if attrs:
            options["attrs"] = dict(attrs)
        if scalars:
            options["scalars"] = scalars
        t = b.add("LibraryOp", [b.value(n) for n in tensors], shape,
                  output=output or self._out(tag), name="%s/%s" % (self.node.name, tag),
                  options=options, dtype=np.float32 if dtype is None else dtype)
        b.alias[t] = t
        return t

    def const(self, value, tag):
        return self.b.constant(np.asarray(value), "%s/%s" % (self.node.name, tag))

    def reshape(self, x, shape, tag, output=None):
        return self.add("Reshape", [x], shape, tag, dtype=self.b.dtype(x), output=output,
                        dims=[int(d) for d in shape])

    def transpose(self, x, perm, tag, output=None):
        shape = tuple(self.b.shape(x)[p] for p in perm)
        return self.add("Transpose", [x], shape, tag, dtype=self.b.dtype(x), output=output,
                        dims=list(perm))

    def cast(self, x, dtype, tag):
        if dtype_name(self.b.dtype(x)) == dtype_name(dtype):
            return x
        return self.lib("copy", [x], tag, dtype=dtype)

    def finish(self, i, t):
        """ONNX output i of the node is ``t``: renamed to the output's name where that name
        is still free, so the net's tensor carries it."""
        self.b.out(self.node, t, i)
