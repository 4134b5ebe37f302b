"""Pointwise operators of the operator library (dlprim.ops) as layers, their code
generated from the declarations the ``ocl`` device runs, so the Net, ONNX import and
``torch.compile`` compute what PyTorch does.

``LibraryOp``: any pointwise operator over 1-3 inputs of any dtype the Net holds,
``{"type": "LibraryOp", "options": {"op": "lt"}}``.

- Inputs broadcast as numpy (and ONNX) do. An operand may instead be a constant number,
  ``"scalars": {"b": 2}`` (operands are named a, b, c): it takes part in type promotion as
  a Python number does in PyTorch (it does not widen a tensor's dtype of its own class).
- The output dtype is the declaration's promotion rule: ``same`` (PyTorch's promotion of
  the operands), ``float`` (integers and bools compute in float32), ``bool``
  (comparisons, predicates: stored as uint8 0/1, as the device stores bool) or ``int64``.
  ``"dtype"`` stores the result as another dtype (PyTorch's conversion, ``dtypes.cl_cast``).
  The operator ``copy`` (ONNX Cast) is the conversion alone: ``{"op": "copy", "dtype":
  "int64"}``.
- The narrow types (``dtypes.NARROW_TYPES``: float8, float4, int4, uint4, int2, uint2)
  take ``copy`` only, converted as ONNX's Cast converts (``dtypes.cl_cast``), with Cast's
  attributes ``"attrs": {"saturate": 0}`` (float8: out of range gives NaN or inf, not the
  largest value) and ``"round_mode"`` (float8e8m0: ``up``, ``down``, ``nearest``); every
  other operator refuses them.
- ``"attrs"``: the attribute values the expression takes (``div``'s ``rounding_mode``,
  ``add``'s ``alpha``).
- Backward is the declaration's gradient expression per input (over ``a``, ``b``, ``c``,
  ``y``, ``dy`` and the attributes), for float inputs of a float result; a broadcast
  input's gradient is summed over the axes it was stretched along. Integer and bool
  values take no gradient (the Net's autograd sends none through them). Where the
  gradient reads only ``y`` (one input), the layer may run in place.

``Pointwise``: the one-input float operators with a gradient (``layer_operators()``),
``{"type": "Pointwise", "options": {"op": "sin"}}``: what ``dlprim.nn.functional`` and the
generated ONNX converters write.
"""
import re

import numpy as np

from .. import ops as library
from ..core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce, broadcast_shape
from ..dtypes import as_dtype, bfloat16, cl_cast, cl_type, compute_type, dtype_name, is_float, \
    is_narrow
from ..ops import layer_operators
from ..utils import is_int
from .base import Setup, TensorSpec, Layer, register

__all__ = ["LibraryOp", "Pointwise", "result_dtype", "promote_types", "pointwise_operators",
           "layer_operators"]

_ARITY = {"unary": 1, "binary": 2, "ternary": 3}
_PLACES = "abc"
_F32, _F64, _I64, _BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int64, np.bool_))
_CAST = "copy"  # the library's conversion between dtypes (ONNX Cast)
# launcher declarations whose pointwise case this layer runs: (arity, expression, gradients)
_SELECT = ("({a} != 0 ? {b} : {c})", (None, "a != 0 ? dy : 0", "a != 0 ? 0 : dy"))
# the attributes of a conversion (ONNX Cast's): their values and defaults
_CAST_ATTRS = {"saturate": ((0, 1, True, False), 1), "round_mode": (("up", "down", "nearest"), "up")}


def pointwise_operators():
    """The names of the operators ``LibraryOp`` runs: every unary, binary and ternary
    declaration, and ``copy`` (a dtype conversion)."""
    return [op.name for op in library.OPS.values() if op.kind in _ARITY] + [_CAST, "where"]


def _cls(dtype):
    return "float" if is_float(dtype) else ("bool" if dtype == _BOOL else "int")


_RANK = {"bool": 0, "int": 1, "float": 2}


def promote_types(dtypes, scalars=()):
    """PyTorch's type promotion of tensors of ``dtypes`` and Python numbers ``scalars``: the
    highest dtype class wins; within it the widest tensor dtype (int8 with uint8: int16,
    int32 with uint32: int64, as numpy; float16 with bfloat16: float32); a number of a higher class than every tensor gives that
    class's default (int64, float32)."""
    dtypes = [as_dtype(d) for d in dtypes]
    best = max(_RANK[_cls(d)] for d in dtypes)
    top = [d for d in dtypes if _RANK[_cls(d)] == best]
    out = top[0]
    for d in top[1:]:
        out = _pair(out, d)
    for s in scalars:
        kind = "bool" if isinstance(s, (bool, np.bool_)) else ("int" if is_int(s) else "float")
        if _RANK[kind] > _RANK[_cls(out)]:
            out = _F32 if kind == "float" else _I64
    return out


def _pair(a, b):
    if a == b:
        return a
    if {a, b} == {np.dtype(np.float16), bfloat16}:
        return _F32
    if is_float(a):
        return a if a.itemsize >= b.itemsize else b
    if (a.kind == "u") != (b.kind == "u"):  # unsigned with signed: a signed type holding both
        unsigned, signed = (a, b) if a.kind == "u" else (b, a)
        if signed.itemsize > unsigned.itemsize:
            return signed
        if unsigned.itemsize == 8:
            raise TypeError("uint64 and %s have no common integer type" % signed)
        return np.dtype("int%d" % (16 * unsigned.itemsize))
    return a if a.itemsize >= b.itemsize else b


def result_dtype(op, dtypes, scalars=(), attrs=None):
    """(compute dtype, output dtype) of declaration ``op`` over operands of ``dtypes`` and
    numbers ``scalars``, with attributes ``attrs``."""
    common = promote_types(dtypes, scalars)
    # true division of integers gives floats (torch.div without a rounding mode)
    true_div = op.name == "div" and (attrs or {}).get("rounding_mode") is None
    if (op.promote == "float" or true_div) and not is_float(common):
        common = _F32
    out = {"bool": _BOOL, "int64": _I64}.get(op.promote, common)
    return common, out


def _int64_bits(v):
    """An integer parameter as int64: a uint64 value above int64's range passes its bits
    (the kernel converts the parameter to the compute type)."""
    v = int(v)
    return np.int64(v - (1 << 64) if v >= 1 << 63 else v)


@register("LibraryOp")
class LibraryOp(Layer):
    """``y = op(a[, b[, c]])`` for ``op`` any pointwise operator of the library
    (``pointwise_operators()``); see the module docstring for the options."""
    CARRIES_NARROW = True  # its own check: only 'copy' (a conversion) takes them
    OPTIONS = {"op": None, "attrs": {}, "scalars": {}, "dtype": None}
    HALF_STORAGE = "follows"

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name=name, **options)
        self.check_options()

    def check_options(self):
        """Read the operator's declaration and check ``attrs``, ``scalars`` and ``dtype``
        against it; a LayerError names the option."""
        name = self.options["op"]
        if name not in pointwise_operators():
            self.fail("option 'op': %r is not a pointwise operator of the library; known: %s"
                      % (name, ", ".join(sorted(pointwise_operators()))))
        self.op = library.get(name)
        self.arity = {_CAST: 1, "where": 3}.get(name) or _ARITY[self.op.kind]
        attrs, scalars = self.options["attrs"] or {}, self.options["scalars"] or {}
        if not isinstance(attrs, dict) or not isinstance(scalars, dict):
            self.fail("options 'attrs' and 'scalars' must be objects {name: value}")
        bad = [k for k in scalars if k not in _PLACES[:self.arity]]
        if bad:
            self.fail("option 'scalars': %s is not an operand (a%s)"
                      % (bad[0], ", b, c"[:3 * (self.arity - 1)]))
        for k, v in scalars.items():
            if isinstance(v, (str, list, dict)) or v is None:
                self.fail("option 'scalars': %s must be a number, got %r" % (k, v))
        self.attrs, self.scalars = dict(attrs), dict(scalars)
        self.out_dtype = None
        if self.options["dtype"] is not None:
            try:
                self.out_dtype = as_dtype(self.options["dtype"])
            except TypeError as err:
                self.fail("option 'dtype': %s" % err)
        elif name == _CAST:
            self.fail("option 'dtype' is required by 'copy' (the dtype to convert to)")
        if name == _CAST:
            for k, v in self.attrs.items():
                if k not in _CAST_ATTRS or v not in _CAST_ATTRS[k][0]:
                    self.fail("option 'attrs': 'copy' takes saturate (0 or 1) and round_mode "
                              "('up', 'down' or 'nearest'), got %s=%r" % (k, v))
        self.places = [p for p in _PLACES[:self.arity] if p not in self.scalars]

    # ----- forward
    def build(self, in_specs):
        if len(in_specs) != len(self.places):
            self.fail("%s takes %d input tensor%s (%s), got %d" % (
                self.op.name, len(self.places), "" if len(self.places) == 1 else "s",
                ", ".join(self.places), len(in_specs)))
        try:
            self.shape = broadcast_shape([s.shape for s in in_specs], "inputs")
        except ValueError as err:
            self.fail(str(err))
        dtypes = [s.dtype for s in in_specs]
        narrow = [d for d in dtypes + [self.out_dtype] if d is not None and is_narrow(d)]
        if narrow and self.op.name != _CAST:
            self.fail("%s does not take %s tensors: the narrow types are stored, converted "
                      "('copy') and moved, never computed on" % (self.op.name,
                                                                 dtype_name(narrow[0])))
        if self.op.name == _CAST:
            self.compute, natural = dtypes[0], dtypes[0]
        elif self.op.name == "where":  # the condition takes no part in promotion
            chosen = [s.dtype for p, s in zip(self.places, in_specs) if p != "a"]
            self.compute = natural = promote_types(chosen or [_BOOL], [
                v for p, v in self.scalars.items() if p != "a"])
        else:
            self.compute, natural = result_dtype(self.op, dtypes, list(self.scalars.values()),
                                                 self.attrs)
        out = self.out_dtype or natural
        code, types, self._values = self._forward_code(self.compute, natural, out)
        self._fwd = PointwiseBroadcast(self.ctx, [(s.shape, s.dtype) for s in in_specs],
                                       [(self.shape, out)], code, types,
                                       name="%s_forward" % self.op.name)
        self._bwd = {}
        return Setup([TensorSpec(self.shape, out)], flags=self._flags(in_specs, out))

    def _names(self, compute, params):
        """Placeholder -> C text for the operands (``x0``.. tensors, ``w``.. numbers, in
        the compute type); ``params``: list the number parameters are appended to."""
        ctype = compute_type(compute)
        names = {"T": ctype, "R": ctype if is_float(compute) else "float"}
        k = 0
        for p in _PLACES[:self.arity]:
            if p in self.scalars:
                names[p] = "((%s)w%d)" % (ctype, len(params))
                params.append(self.scalars[p])
            else:
                names[p] = "((%s)x%d)" % (ctype, k)
                k += 1
        return names

    def _expr(self, compute, natural):
        cls = _cls(compute)
        op = self.op
        if op.name == "where":
            return _SELECT[0]
        if cls not in op.dtypes:
            self.fail("%s does not take %s operands (it takes %s)"
                      % (op.name, dtype_name(compute), ", ".join(op.dtypes)))
        if compute == _F64 and not (op.double and self.ctx.facts.fp64):
            self.fail("%s in float64 is not available on %s" % (op.name, self.ctx.name))
        attrs = dict(self.attrs, present=(True,) * self.arity)
        expr = op.expr_for(cls, attrs, cl_type(natural))
        if expr is None:
            self.fail("%s has no %s code for attributes %s" % (op.name, cls, self.attrs))
        return expr

    def _attr_params(self, text, names, params, compute):
        """Attributes named in ``text`` (as ``{name}`` or a bare word) become parameters."""
        for attr, value in self.attrs.items():
            if re.search(r"\{%s\}|\b%s\b" % (attr, attr), text) and not isinstance(value, str):
                if value is None:
                    self.fail("attribute %r has no value" % attr)
                names[attr] = "w%d" % len(params)
                params.append(value)
        missing = set(re.findall(r"\{(\w+)\}", text)) - set(names)
        if missing:
            self.fail("%s needs attribute%s %s (option 'attrs')"
                      % (self.op.name, "s" if len(missing) > 1 else "", ", ".join(sorted(missing))))

    def _param_types(self, params, compute):
        """Numbers typed as the compute type's kind: integers as int64 for integer code,
        else float (double beside float64)."""
        types = []
        for v in params:
            if is_float(compute):
                types.append(_F64 if compute == _F64 else "float")
            else:
                types.append(_I64)
        return types, [np.float64(v) if is_float(compute) else _int64_bits(v) for v in params]

    def _forward_code(self, compute, natural, out):
        params = []
        if self.op.name == _CAST:
            value = "x0"
        else:
            expr = self._expr(compute, natural)
            names = self._names(compute, params)
            self._attr_params(expr, names, params, compute)
            value = expr.format(**names)
        if out != natural:
            value = cl_cast(natural, out, "(%s)" % value, **self._cast_attrs())
        types, values = self._param_types(params, compute)
        return "y0 = %s;" % value, types, values

    def _cast_attrs(self):
        """saturate and round_mode of a conversion (their defaults elsewhere)."""
        if self.op.name != _CAST:
            return {}
        return {k: self.attrs.get(k, default) for k, (_, default) in _CAST_ATTRS.items()}

    def forward(self, x, y, params, ws, saved):
        return self._fwd.launches(x, y, self._values)

    # ----- backward
    def _grads(self):
        """{input position: gradient expression} of the float inputs that take one."""
        if not is_float(self.out_spec_dtype) or self.op.name == _CAST:
            grads = {0: "dy"} if self.op.name == _CAST and is_float(self.out_spec_dtype) \
                and is_float(self.in_specs[0].dtype) else {}
            return grads
        out = {}
        grad = _SELECT[1] if self.op.name == "where" else (self.op.grad or ())
        for pos, place in enumerate(self.places):
            k = _PLACES.index(place)
            if k < len(grad) and grad[k] is not None and is_float(self.in_specs[pos].dtype):
                out[pos] = grad[k]
        return out

    def _flags(self, in_specs, out):
        self.out_spec_dtype = out
        grads = self._grads()
        text = " ".join(grads.values())
        words = set(re.findall(r"\b[a-z]\w*\b", text))
        reads_in = bool(words & set(_PLACES))
        reads_out = "y" in words
        return self.default_flags(
            has_backward=bool(grads), backward_reads_inputs=reads_in,
            backward_reads_outputs=reads_out,
            inplace=bool(grads) and not reads_in and len(in_specs) == 1
            and in_specs[0].dtype == out,
            no_grad_inputs=[i for i in range(len(in_specs)) if i not in grads])

    def _grad_op(self, pos):
        """(the op writing input ``pos``'s gradient, its number parameters, the names of
        the tensors it reads after dy: operand places and 'y')."""
        found = self._bwd.get(pos)
        if found is not None:
            return found
        compute = self.compute
        ctype = compute_type(compute)
        expr = self._grads()[pos].replace("{R}", ctype if is_float(compute) else "float")
        params = []
        names = self._names(compute, params)
        self._attr_params(expr, names, params, compute)
        words = set(re.findall(r"\b[a-z]\w*\b", expr))
        reads = [p for p in self.places if p in words] + (["y"] if "y" in words else [])
        subst = {"dy": "((%s)x0)" % ctype}
        subst.update({p: names[p] for p in _PLACES[:self.arity] if p in self.scalars})
        subst.update({r: "((%s)x%d)" % (ctype, k + 1) for k, r in enumerate(reads)})
        subst.update({a: "((%s)%s)" % (ctype, names[a]) for a in self.attrs if a in names})
        code = "y0 = %s;" % re.sub(r"\b\w+\b", lambda m: subst.get(m.group(0), m.group(0)),
                                   expr)
        specs = {p: (s.shape, s.dtype) for p, s in zip(self.places, self.in_specs)}
        specs["y"] = (self.shape, self.out_spec_dtype)
        xs = [(self.shape, self.out_spec_dtype)] + [specs[r] for r in reads]
        types, values = self._param_types(params, compute)
        dx = (self.in_specs[pos].shape, self.in_specs[pos].dtype)
        name = "%s_backward" % self.op.name
        if dx[0] == self.shape:
            op = PointwiseBroadcast(self.ctx, xs, [dx], code, types, name=name)
        else:  # summed over the axes the input was stretched along
            op = PointwiseBroadcastReduce(self.ctx, xs, [dx], code, params=types,
                                          name=name + "_reduce")
        found = self._bwd[pos] = (op, values, reads)
        return found

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        out = []
        given = dict(zip(self.places, x), y=y[0])
        for pos in self._grads():
            if dx[pos] is None:
                continue
            op, values, reads = self._grad_op(pos)
            ins = [dy[0]] + [given[r] for r in reads]
            out += op.launches(ins, [dx[pos]], values, beta=float(accumulate[pos]))
        return out


@register("Pointwise")
class Pointwise(LibraryOp):
    """``y = op(x)`` for ``op`` a one-input float operator of the library with a gradient
    (``layer_operators()``)."""
    OPTIONS = {"op": None}

    def check_options(self):
        """Read the operator's declaration: one input, float, with a gradient."""
        name = self.options["op"]
        if name not in layer_operators():
            self.fail("option 'op': %r is not a one-input float operator with a gradient; "
                      "known: %s" % (name, ", ".join(sorted(layer_operators()))))
        self.options = dict(self.options, attrs={}, scalars={}, dtype=None)
        super().check_options()
        self.options = {"op": name}

    def config(self):
        return {"op": self.options["op"]}
