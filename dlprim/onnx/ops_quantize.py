"""QuantizeLinear and DequantizeLinear, composed of library operators (``typed``) as
ONNX's reference computes them:

    DequantizeLinear  y = (float32(x) - float32(zero_point)) * scale, stored as the
                      scale's dtype (or ``output_dtype``); a float8/float4 x takes no
                      zero point (a constant zero is ignored)
    QuantizeLinear    integers: y = clip(rint(x / scale) + zero_point, the type's range),
                      NaN giving the lowest value (as the reference's conversion);
                      float8: y = Cast(x / scale, saturate); float4: Cast(x / scale +
                      zero_point)

per tensor (scale of one element), per axis (a 1-D scale along ``axis``) or blocked
(``block_size``: the scale has x's shape with ``ceil(d / block_size)`` along ``axis``). A
blocked scale or zero point read at run time needs whole blocks (x's axis is split in
two); a constant one is repeated on the host. x of int8, uint8, int16, uint16, int4,
uint4, int2, uint2 or a float8/float4 type; refused otherwise, naming it.
"""
import numpy as np

from ..dtypes import NARROW_TYPES, as_dtype
from .ops_library import ONNX_TYPES, typed
from .registry import Unsupported, converts

__all__ = ["INT_RANGES"]

INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
              "int16": (-32768, 32767), "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3),
              "int2": (-2, 1)}
_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_FLOAT4 = "float4_e2m1fn"
_SCALES = ("float32", "float16", "bfloat16", "float64")
_F32 = np.dtype(np.float32)


def _name(dtype):
    dt = np.dtype(dtype)
    if dt in NARROW_TYPES:
        return NARROW_TYPES[dt]
    return "bfloat16" if dt.name == "bfloat16" or dt.kind == "V" else dt.name


class _Layout:
    """How the scale and zero point of ``node`` meet x: ``work`` is x's shape while
    computing (x's own, or with ``axis`` split into blocks), ``operand`` prepares one."""

    def __init__(self, b, node, x, scale):
        self.b, self.node = b, node
        self.shape = tuple(b.shape(x))
        rank, sshape = len(self.shape), tuple(b.shape(scale))
        self.block = int(node.attr("block_size", 0) or 0)
        self.work, self.split, self.mode = self.shape, False, "tensor"
        if int(np.prod(sshape, dtype=np.int64)) == 1 and len(sshape) <= 1:
            return  # the axis does not matter
        axis = int(node.attr("axis", 1))
        if not -rank <= axis < rank:
            raise Unsupported("axis %d of a rank-%d input" % (axis, rank))
        self.axis = axis % rank
        if not self.block:
            if len(sshape) != 1 or sshape[0] != self.shape[self.axis]:
                raise Unsupported("scale of shape %s for input %s along axis %d"
                                  % (sshape, self.shape, self.axis))
            self.mode = "axis"
        else:
            d, k = self.shape[self.axis], self.block
            want = self.shape[:self.axis] + (-(-d // k),) + self.shape[self.axis + 1:]
            if self.block < 0 or sshape != want:
                raise Unsupported("block_size %d: scale of shape %s for input %s along axis %d"
                                  % (self.block, sshape, self.shape, self.axis))
            self.mode = "blocked"
            runtime = [n for n in node.inputs[1:3] if n and not b.is_const(n)]
            if runtime:
                if d % k:
                    raise Unsupported("'%s' must be a constant (blocks of %d do not divide "
                                      "axis %d of size %d)" % (runtime[0], k, self.axis, d))
                self.split = True
                self.work = self.shape[:self.axis] + (d // k, k) + self.shape[self.axis + 1:]

    def _target(self, array_shape):
        """The shape a scale or zero point takes to broadcast against ``work``."""
        if self.mode == "tensor":
            return ()
        if self.mode == "axis":
            return tuple(n if k == self.axis else 1 for k, n in enumerate(self.shape))
        if self.split:  # (..., blocks, 1, ...)
            return array_shape[:self.axis + 1] + (1,) + array_shape[self.axis + 1:]
        return self.shape

    def operand(self, name, dtype=None, tag="s"):
        """ONNX tensor ``name`` shaped to broadcast against ``work``; ``dtype``: converted
        to it (float32 holds every zero point exactly)."""
        b, node = self.b, self.node
        if b.is_const(name):
            a = np.asarray(b.const(name))
            if dtype is not None:
                a = a.astype(dtype)
            if self.mode == "blocked" and not self.split:
                a = np.repeat(a, self.block, axis=self.axis).take(
                    range(self.shape[self.axis]), axis=self.axis)
            return b.constant(a.reshape(self._target(a.shape)), node.name + "/" + tag)
        t = name
        if dtype is not None and _name(b.dtype(name)) != _name(dtype):
            t = _keep(b, typed(b, node, "copy", inputs=[name], dtype=dtype,
                               output=b.fresh(node.outputs[0] + "/" + tag),
                               name=node.name + "/" + tag))
        return reshape(b, node, t, self._target(tuple(b.shape(t))), tag + "/shape")

    def input(self, x):
        """x in the ``work`` shape."""
        return reshape(self.b, self.node, x, self.work, "x") if self.split else x

    def finish(self, t):
        """``t`` (of the ``work`` shape) as the node's output."""
        b, node = self.b, self.node
        if self.split:
            b.add("Reshape", [b.value(t)], self.shape, node, options={"dims": list(self.shape)},
                  dtype=b.dtype(t))
        else:
            b.out(node, b.value(t))


def _keep(b, t):
    b.alias[t] = t
    return t


def reshape(b, node, name, shape, tag):
    """ONNX tensor ``name`` (read at run time) viewed as ``shape``."""
    if tuple(b.shape(name)) == tuple(shape):
        return name
    return _keep(b, b.add("Reshape", [b.value(name)], shape,
                          output=b.fresh(node.outputs[0] + "/" + tag), name=node.name + "/" + tag,
                          options={"dims": list(shape)}, dtype=b.dtype(name)))


def _step(b, node, op, inputs, tag, dtype=None, attrs=None):
    """One library operator into a fresh tensor, usable by name by the next steps."""
    return _keep(b, typed(b, node, op, inputs=inputs, attrs=attrs, dtype=dtype,
                          output=b.fresh(node.outputs[0] + "/" + tag), name=node.name + "/" + tag))


def _zero_free(b, node, zp, kind):
    """A float8/float4 zero point: a constant of zeros (then unused), else Unsupported."""
    if not b.is_const(zp):
        raise Unsupported("zero point '%s' must be a constant (of zeros, for %s)" % (zp, kind))
    if np.any(np.asarray(b.const(zp)).astype(np.float32) != 0):
        raise Unsupported("zero point '%s' of %s is not zero" % (zp, kind))


@converts("DequantizeLinear")
def dequantize_linear(b, node):
    x, scale, zp = node.inputs[0], node.input(1), node.input(2)
    xt, st = _name(b.dtype(x)), _name(b.dtype(scale))
    if xt not in INT_RANGES and xt not in _FLOAT8 + (_FLOAT4,):
        raise Unsupported("x of %s" % xt)
    if st not in _SCALES:
        raise Unsupported("scale of %s" % st)
    out = node.attr("output_dtype")
    out = ONNX_TYPES.get(out) if out else st
    if out not in _SCALES:
        raise Unsupported("output_dtype %s" % out)
    if zp and _name(b.dtype(zp)) != xt:
        raise Unsupported("zero point of %s for x of %s" % (_name(b.dtype(zp)), xt))
    lay = _Layout(b, node, x, scale)
    t = _step(b, node, "copy", [lay.input(x)], "float", dtype=_F32)
    if zp and xt in INT_RANGES:
        t = _step(b, node, "sub", [t, lay.operand(zp, _F32, "zero_point")], "shifted",
                  attrs={"alpha": 1})
    elif zp:
        _zero_free(b, node, zp, xt)
    t = _step(b, node, "mul", [t, lay.operand(scale)], "scaled", dtype=as_dtype(out))
    lay.finish(t)


@converts("QuantizeLinear")
def quantize_linear(b, node):
    x, scale, zp = node.inputs[0], node.input(1), node.input(2)
    xt, st = _name(b.dtype(x)), _name(b.dtype(scale))
    if xt not in _SCALES or st not in _SCALES:
        raise Unsupported("x of %s with scale of %s (floats only)" % (xt, st))
    out = node.attr("output_dtype")
    out = ONNX_TYPES.get(out, "type %s" % out) if out else None
    if zp:
        zt = _name(b.dtype(zp))
        if out and out != zt:
            raise Unsupported("output_dtype %s with a zero point of %s" % (out, zt))
        out = zt
    out = out or "uint8"
    if out not in INT_RANGES and out not in _FLOAT8 + (_FLOAT4,):
        raise Unsupported("quantization to %s" % out)
    saturate = int(node.attr("saturate", 1))
    if saturate not in (0, 1):
        raise Unsupported("saturate=%d" % saturate)
    lay = _Layout(b, node, x, scale)
    xs, ss = lay.input(x), lay.operand(scale)
    precision = node.attr("precision")
    if precision:
        p = ONNX_TYPES.get(precision)
        if p not in _SCALES:
            raise Unsupported("precision %s" % precision)
        xs, ss = (n if _name(b.dtype(n)) == p else _step(b, node, "copy", [n], "precision",
                                                          dtype=as_dtype(p)) for n in (xs, ss))
    t = _step(b, node, "div", [xs, ss], "divided")
    if out in INT_RANGES:
        lo, hi = INT_RANGES[out]
        t = _step(b, node, "round", [t], "rounded", dtype=_F32)  # exact integers to 2^24
        if zp:
            t = _step(b, node, "add", [t, lay.operand(zp, _F32, "zero_point")], "shifted",
                      attrs={"alpha": 1})
        # fmax gives lo for NaN (the reference converts NaN to int32's lowest first)
        t = _step(b, node, "fmax", [t, b.constant(np.float32(lo), node.name + "/lo")], "low")
        t = _step(b, node, "fmin", [t, b.constant(np.float32(hi), node.name + "/hi")], "high")
        t = _step(b, node, "copy", [t], "quantized", dtype=as_dtype(out))
    elif out == _FLOAT4:  # the reference adds the zero point (zeros) before casting
        if zp:
            t = _step(b, node, "add", [t, lay.operand(zp, _F32, "zero_point")], "shifted",
                      attrs={"alpha": 1})
        t = _step(b, node, "copy", [t], "quantized", dtype=as_dtype(out))
    else:
        if zp:
            _zero_free(b, node, zp, out)
        t = _step(b, node, "copy", [t], "quantized", dtype=as_dtype(out),
                  attrs={"saturate": saturate})
    lay.finish(t)
