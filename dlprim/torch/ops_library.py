"""The ocl implementations of the operator library's pointwise operators (dlprim.ops),
generated from their declarations: nothing here is written per operator.

For each declared unary / binary / ternary operator, every overload of its ATen packets
(functional, and the ``name_`` in-place packet) is registered. A call binds the overload's
schema: the first arguments (or the declaration's ``inputs``) are the operands, tensors or
scalars; the rest are attributes, named in the expression (``{alpha}``) or consumed by a
callable expression. The output shape and dtype are PyTorch's (its meta kernel); the
kernel computes in the output's dtype, or, for predicates and comparisons, in the operands'
promoted dtype, with 16-bit floats widened to float.
"""
import numpy as np
import torch

from .. import ops as library
from ..core.pointwise import pointwise_op
from .dispatch import register
from .ops_math import _BUILDS, _result, _overlaps, _promoted, _scalar
from .ops_tensor import convert
from .tensor import OclTensor, as_dlprim, empty, numpy_dtype, write_into
from ..dtypes import cl_type
from ..utils import BoundedCache

aten = torch.ops.aten

__all__ = ["generated"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ARITY = {"unary": 1, "binary": 2, "ternary": 3}
_PLACES = "abc"


def _compute_type(dtype):
    """(the C type a kernel computes this dtype in, its dtype class)."""
    if dtype in _FLOATS:
        return ("double" if dtype == torch.float64 else "float"), "float"
    if dtype == torch.bool:
        return "uchar", "bool"
    return cl_type(numpy_dtype(dtype)), "int"


def _param(value, ctype):
    """A scalar operand or attribute as a kernel argument of the compute type's kind."""
    if isinstance(value, bool):
        return np.int64(value)
    if isinstance(value, int) and ctype not in ("float", "double"):
        return np.int64(value)
    return np.float64(value) if ctype == "double" else np.float32(value)


class _Schema:
    """What binding a call needs of an overload's schema, read once per (operator,
    overload): the argument names in order, which are the operands, the defaults."""
    __slots__ = ("names", "inputs", "attrs", "defaults")

    def __init__(self, op, overload):
        schema = overload._schema.arguments
        self.names = [s.name for s in schema]
        kept = [s.name for s in schema if not (s.alias_info and s.alias_info.is_write
                                               and s.kwarg_only)]
        self.inputs = tuple(op.inputs or kept[:_ARITY[op.kind]])
        self.attrs = tuple(n for n in kept if n not in self.inputs)
        self.defaults = {s.name: s.default_value for s in schema if s.has_default_value()}

    def bind(self, args, kwargs):
        """(the operands in order, {attribute: value}) of a call, defaults filled in."""
        bound = dict(zip(self.names, args))
        if kwargs:
            bound.update(kwargs)
        defaults = self.defaults
        return ([bound[n] if n in bound else defaults.get(n) for n in self.inputs],
                {n: bound[n] if n in bound else defaults.get(n) for n in self.attrs})


_SCHEMAS = {}  # (operator name, overload) -> _Schema
# (operator name, overload, compute dtype, out dtype, operand kinds, attribute values) ->
# (code, the operands' places, the attributes passed as parameters): everything of a
# call's kernel but its tensors and scalar values, worked out once per signature (the most
# recent ones: attribute values are part of the key)
_CODES = BoundedCache(4096)


def _schema(op, overload):
    key = (op.name, overload)
    found = _SCHEMAS.get(key)
    if found is None:
        found = _SCHEMAS[key] = _Schema(op, overload)
    return found


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


class _Call:
    """One operator call bound to its overload's schema."""

    def __init__(self, op, overload, args, kwargs, bound=None):
        schema = _schema(op, overload)
        self.op, self.overload, self.defaults = op, overload, schema.defaults
        self.inputs, self.attrs = bound or schema.bind(args, kwargs)

    def code(self, compute_dtype, out_dtype):
        """(dlprim tensors, params, code) of the kernel."""
        inputs = [None if v is None else _scalar(v) for v in self.inputs]
        kinds = tuple(None if v is None else (isinstance(v, OclTensor) or type(v))
                      for v in inputs)
        key = (self.op.name, self.overload, compute_dtype, out_dtype, kinds,
               tuple((k, _hashable(v)) for k, v in self.attrs.items()))
        found = _CODES.get(key)
        if found is None:
            found = _CODES[key] = self._prepare(compute_dtype, out_dtype, inputs)
        code, ctype, attr_params = found
        self.attr_params = attr_params
        tensors, params = [], []
        for value in inputs:
            if value is None:
                continue
            if isinstance(value, OclTensor):
                tensors.append(value)
            else:
                params.append(_param(value, ctype))
        for attr in attr_params:
            params.append(_param(_scalar(self.attrs[attr]), ctype))
        return tensors, params, code

    def _prepare(self, compute_dtype, out_dtype, inputs):
        """(code, compute C type, the attributes the code takes as parameters, in order) of
        this call's signature; the refusals."""
        op = self.op
        ctype, cls = _compute_type(compute_dtype)
        if cls not in op.dtypes or (compute_dtype == torch.float64 and not op.double):
            raise NotImplementedError("dlprim.torch: %s is not implemented for %s on ocl "
                                      "devices" % (op.name, compute_dtype))
        out_ctype = cl_type(numpy_dtype(out_dtype))
        present = tuple(v is not None for v in inputs)
        expr = op.expr_for(cls, dict(self.attrs, present=present), out_ctype)
        if expr is None:
            raise NotImplementedError("dlprim.torch: %s with %s is not implemented for %s on "
                                      "ocl devices" % (op.name, self.attrs, compute_dtype))
        names = {"T": ctype, "R": ctype if cls == "float" else "float"}
        n_tensors = n_params = 0
        for place, value in zip(_PLACES, inputs):
            if value is None:
                continue  # an absent optional operand: the expression was chosen without it
            if isinstance(value, OclTensor):
                names[place] = "((%s)x%d)" % (ctype, n_tensors)
                n_tensors += 1
            else:
                names[place] = "((%s)w%d)" % (ctype, n_params)
                n_params += 1
        attr_params = []
        for attr, value in self.attrs.items():
            placeholder = "{%s}" % attr
            if placeholder in expr and value is not None:
                names[attr] = "w%d" % n_params
                n_params += 1
                attr_params.append(attr)
            elif attr not in op.attrs and value is not None \
                    and value != self.defaults.get(attr):
                raise NotImplementedError("dlprim.torch: %s with %s=%r is not implemented on "
                                          "ocl devices" % (op.name, attr, value))
        return "y0 = %s;" % expr.format(**names), ctype, tuple(attr_params)


def _compute_dtype(op, call, out_dtype):
    if op.promote == "bool":
        return _promoted(*[_scalar(v) for v in call.inputs])
    return out_dtype


def _run(op, functional, args, kwargs, out=None, result=None):
    bound = key = None
    if out is None and result is None:
        bound = _schema(op, functional).bind(args, kwargs)
        key = _plan_key(op, functional, *bound)
        plan = _PLANS.get(key) if key is not None else None
        if plan is not None:
            return plan.run(*bound)
    shape, dtype, _ = result or _result(functional, args, kwargs, None)
    call = _Call(op, functional, args, kwargs, bound)
    tensors, params, code = call.code(_compute_dtype(op, call, dtype), dtype)
    ref = next(t for t in list(args) + list(kwargs.values()) if isinstance(t, OclTensor))
    storage = ref._ocl_storage
    out = empty(shape, dtype, storage.index) if out is None else out
    if out.numel():
        xs, ys = [as_dlprim(t) for t in tensors], [as_dlprim(out)]
        pw, typed = pointwise_op(storage.ctx, xs, ys, code, params)
        pw.enqueue_now(xs, ys, typed, 0.0, storage.ctx.queue)
        if key is not None:
            _PLANS[key] = _Plan(call, shape, dtype, storage, pw, params)
    return out


# (operator, overload, per operand: an ocl tensor's shape, strides, dtype and device / a
# number's type / absent, per attribute its value) -> _Plan: what a call of that signature
# computes is the same every time, so the second such call takes the first one's result
# layout, kernel and argument types and binds only its own tensors and numbers
PLANS_KEPT = 8192
_PLANS = BoundedCache(PLANS_KEPT)


def _operand_key(v):
    if type(v) is OclTensor:
        return (v.shape, v.stride(), v.dtype, v._ocl_storage.index)
    if isinstance(v, torch.Tensor):  # a CPU scalar tensor: its value is a kernel argument
        return (v.shape, v.dtype, v.device.type)
    if v is None or isinstance(v, (bool, int, float)):
        return type(v)
    return None  # anything else: no plan


def _plan_key(op, overload, inputs, attrs):
    """The signature of a bound call (see _PLANS), None where it has none."""
    operands = []
    for value in inputs:
        k = _operand_key(value)
        if k is None:
            return None
        operands.append(k)
    try:
        attrs = tuple((type(v), v) for v in attrs.values())
        hash(attrs)
    except TypeError:
        return None
    # (a Python float operand promotes to the default dtype: part of the signature)
    return (op.name, overload, tuple(operands), attrs, torch.get_default_dtype())


class _Plan:
    """A signature's output layout, prepared kernel and argument types (see _PLANS)."""
    __slots__ = ("shape", "dtype", "index", "ctx", "pw", "attr_params", "kinds",
                 "param_dtypes")

    def __init__(self, call, shape, dtype, storage, pw, params):
        self.shape, self.dtype = shape, dtype
        self.index, self.ctx, self.pw = storage.index, storage.ctx, pw
        self.kinds = tuple(None if v is None else isinstance(_scalar(v), OclTensor)
                           for v in call.inputs)
        self.param_dtypes = tuple(type(p) for p in params)
        self.attr_params = call.attr_params

    def run(self, inputs, attrs):
        """The call of bound ``inputs`` and ``attrs``: a new output, the kernel enqueued."""
        xs, params = [], []
        types = iter(self.param_dtypes)
        for value, tensor in zip(inputs, self.kinds):
            if tensor:
                xs.append(as_dlprim(value))
            elif tensor is not None:
                params.append(next(types)(_scalar(value)))
        for name in self.attr_params:
            params.append(next(types)(_scalar(attrs[name])))
        out = empty(self.shape, self.dtype, self.index)
        if out.numel():
            ys = [as_dlprim(out)]
            self.pw.enqueue_now(xs, ys, self.pw._typed_params(params), 0.0, self.ctx.queue)
        return out


def _register(op, functional, inplace):
    register(functional)(lambda *a, **k: _run(op, functional, a, k))

    def build(_ctype, *args, **kwargs):
        # what torch.optim's _foreach_ calls run as one multi-tensor kernel (ops_math)
        dtype = _result(functional, args, kwargs, None)[1]
        call = _Call(op, functional, args, kwargs)
        return call.code(_compute_dtype(op, call, dtype), dtype)
    _BUILDS[functional] = (functional, build, None)
    if inplace is None:
        return
    _BUILDS[inplace] = (functional, build, None)

    def run_inplace(self, *args, **kwargs):
        full = (self,) + args
        result = _result(functional, full, kwargs, None)
        if result[0] == self.shape and result[1] == self.dtype and self.is_contiguous() \
                and not _overlaps(self, args, kwargs):
            # elementwise: each output element is written after its own inputs are read
            return _run(op, functional, full, kwargs, out=self, result=result)
        _result(inplace, full, kwargs, None)  # PyTorch's checks (broadcast into self, casting)
        out = _run(op, functional, full, kwargs, result=result)
        if out.dtype != self.dtype:
            out = convert(out, self.dtype)
        return write_into(self, as_dlprim(out))
    register(inplace)(run_inplace)


def _signature(overload):
    """The types of an overload's arguments (the tensor written in place counts as a
    Tensor): what pairs a functional overload with its in-place one."""
    return tuple(str(a.type) for a in overload._schema.arguments)


def _inplace_of(packet, functional):
    """The overload of in-place ``packet`` taking what ``functional`` takes (pow_.Scalar
    is pow.Tensor_Scalar's, not pow.Scalar's, whose base is a number), or None."""
    if packet is None:
        return None
    want = _signature(functional)
    for name in packet.overloads():
        candidate = getattr(packet, name)
        if _signature(candidate) == want:
            return candidate
    return None


generated = []  # (operator name, ATen overload) registered here, for the docs and tests
for _op in library.OPS.values():
    if _op.kind not in _ARITY:
        continue
    for _packet_name in _op.aten:
        _packet = getattr(aten, _packet_name, None)
        if _packet is None:
            continue
        _inplace_packet = getattr(aten, _packet_name + "_", None)
        for _name in _packet.overloads():
            if _name == "out" or _name.endswith("_out"):
                continue  # dispatch runs the functional overload and copies into out
            _f = getattr(_packet, _name)
            _register(_op, _f, _inplace_of(_inplace_packet, _f))
            generated.append((_op.name, _f))
