"""Tiny layers registered under test-only types, so Net tests need no real layer.

Kernels are plain OpenCL built once per context (counted in ``BUILDS`` so tests can prove
that a reshape builds nothing). Every buffer travels as (pointer, element offset).
"""
import numpy as np
import pyopencl as cl

from dlprim.kernels.program import Launch
from dlprim.layers.base import REGISTRY, Layer, ParamSpec, Setup, TensorSpec, register
from dlprim.tensor import Tensor

BUILDS = {"count": 0}
_PROGRAMS = {}

SOURCE = r"""
#define B(T, x) __global T *x, ulong x##_o
#define AT(x, i) x[x##_o + (i)]
__kernel void scale_fwd(ulong n, B(const float, x), B(const float, w), B(float, y))
{ ulong i = get_global_id(0); if (i < n) AT(y, i) = AT(w, 0) * AT(x, i); }
__kernel void scale_bwd_x(ulong n, int acc, B(const float, dy), B(const float, w), B(float, dx))
{ ulong i = get_global_id(0); if (i < n) { float g = AT(w, 0) * AT(dy, i);
  AT(dx, i) = acc ? AT(dx, i) + g : g; } }
__kernel void dot_add(ulong n, B(const float, a), B(const float, b), B(float, out))
{ if (get_global_id(0) == 0) { float s = 0; for (ulong i = 0; i < n; i++) s += AT(a, i) * AT(b, i);
  AT(out, 0) += s; } }
__kernel void relu_fwd(ulong n, B(const float, x), B(float, y))
{ ulong i = get_global_id(0); if (i < n) AT(y, i) = fmax(AT(x, i), 0.0f); }
__kernel void relu_bwd(ulong n, int acc, B(const float, y), B(const float, dy), B(float, dx))
{ ulong i = get_global_id(0); if (i < n) { float g = AT(y, i) > 0 ? AT(dy, i) : 0.0f;
  AT(dx, i) = acc ? AT(dx, i) + g : g; } }
__kernel void add_fwd(ulong n, B(const float, a), B(const float, b), B(float, y))
{ ulong i = get_global_id(0); if (i < n) AT(y, i) = AT(a, i) + AT(b, i); }
__kernel void copy_acc(ulong n, int acc, B(const float, src), B(float, dst))
{ ulong i = get_global_id(0); if (i < n) AT(dst, i) = acc ? AT(dst, i) + AT(src, i) : AT(src, i); }
__kernel void sqloss_fwd(ulong n, B(const float, x), B(const float, t), B(float, y))
{ if (get_global_id(0) == 0) { float s = 0; for (ulong i = 0; i < n; i++) {
  float d = AT(x, i) - AT(t, i); s += 0.5f * d * d; } AT(y, 0) = s; } }
__kernel void sqloss_bwd(ulong n, int acc, B(const float, x), B(const float, t), B(const float, dy),
                         B(float, dx))
{ ulong i = get_global_id(0); if (i < n) { float g = (AT(x, i) - AT(t, i)) * AT(dy, 0);
  AT(dx, i) = acc ? AT(dx, i) + g : g; } }
__kernel void twice_via_ws(ulong n, B(const float, x), B(float, ws), B(float, y))
{ ulong i = get_global_id(0); if (i < n) { AT(ws, i) = AT(x, i); AT(y, i) = 2.0f * AT(ws, i); } }
"""


def program(ctx):
    prg = _PROGRAMS.get(id(ctx))
    if prg is None:
        prg = cl.Program(ctx.cl_context, SOURCE).build()
        BUILDS["count"] += 1
        _PROGRAMS[id(ctx)] = prg
    return prg


def _n(t):
    return np.uint64(t.size)


def _acc(flag):
    return np.int32(1 if flag else 0)


class _Base(Layer):
    def build(self, in_specs):
        self.prg = program(self.ctx)
        return self._setup(in_specs)

    def L(self, name, t, *args):
        return Launch(self.prg, name, (max(t.size, 1),), None, (_n(t),) + args)


def _register(name, cls):
    if name not in REGISTRY:
        register(name)(cls)
    return REGISTRY[name]


class Scale(_Base):
    """y = w * x with a scalar w; in-place allowed, though backward reads x (for dw)."""
    OPTIONS = {"init": 1.0}
    INPLACE = True

    def _setup(self, s):
        if len(s) != 1:
            self.fail("takes one input, got %d" % len(s))
        return Setup([TensorSpec(s[0].shape)], [ParamSpec((1,))])

    def init_params(self, params, rng):
        params[0].to_device(np.array([self.options["init"] + rng.uniform(-0.2, 0.2)], np.float32))

    def forward(self, x, y, p, ws, saved):
        return [self.L("scale_fwd", y[0], x[0], p[0], y[0])]

    def backward(self, x, dx, y, dy, p, dp, ws, saved, acc):
        out = []
        if dx[0] is not None:
            out.append(self.L("scale_bwd_x", dx[0], _acc(acc[0]), dy[0], p[0], dx[0]))
        if dp[0] is not None:
            out.append(Launch(self.prg, "dot_add", (1,), None, (_n(x[0]), x[0], dy[0], dp[0])))
        return out


class Relu(_Base):
    INPLACE = True
    BACKWARD_READS_INPUTS = False
    BACKWARD_READS_OUTPUTS = True

    def _setup(self, s):
        return Setup([TensorSpec(s[0].shape)])

    def forward(self, x, y, p, ws, saved):
        return [self.L("relu_fwd", y[0], x[0], y[0])]

    def backward(self, x, dx, y, dy, p, dp, ws, saved, acc):
        return [self.L("relu_bwd", dx[0], _acc(acc[0]), y[0], dy[0], dx[0])] if dx[0] is not None else []


class Add(_Base):
    BACKWARD_READS_INPUTS = False

    def _setup(self, s):
        if s[0].shape != s[1].shape:
            self.fail("input shapes differ: %s and %s" % (s[0].shape, s[1].shape))
        return Setup([TensorSpec(s[0].shape)])

    def forward(self, x, y, p, ws, saved):
        return [self.L("add_fwd", y[0], x[0], x[1], y[0])]

    def backward(self, x, dx, y, dy, p, dp, ws, saved, acc):
        return [self.L("copy_acc", d, _acc(a), dy[0], d) for d, a in zip(dx, acc) if d is not None]


class SqLoss(_Base):
    """loss = sum(0.5 (x - t)^2); the target must be float."""

    def _setup(self, s):
        if s[1].dtype != np.float32:
            self.fail("label must be float32, got %s" % s[1].dtype)
        return Setup([TensorSpec((1,))])

    def forward(self, x, y, p, ws, saved):
        return [Launch(self.prg, "sqloss_fwd", (1,), None, (_n(x[0]), x[0], x[1], y[0]))]

    def backward(self, x, dx, y, dy, p, dp, ws, saved, acc):
        return [self.L("sqloss_bwd", dx[0], _acc(acc[0]), x[0], x[1], dy[0], dx[0])] if dx[0] is not None else []


class Param(_Base):
    """No inputs: outputs its parameter (shape from options)."""
    OPTIONS = {"shape": [4]}

    def _setup(self, s):
        shape = tuple(self.options["shape"])
        return Setup([TensorSpec(shape)], [ParamSpec(shape)])

    def init_params(self, params, rng):
        params[0].to_device(rng.standard_normal(params[0].shape).astype(np.float32))

    def forward(self, x, y, p, ws, saved):
        return [self.L("copy_acc", y[0], _acc(False), p[0], y[0])]

    def backward(self, x, dx, y, dy, p, dp, ws, saved, acc):
        return [self.L("copy_acc", dp[0], _acc(True), dy[0], dp[0])] if dp[0] is not None else []


class TwiceWS(_Base):
    """y = 2 x through a workspace of x's size; backward dx = 2 dy (no workspace)."""
    BACKWARD_READS_INPUTS = False

    def _setup(self, s):
        return Setup([TensorSpec(s[0].shape)], workspace=int(np.prod(s[0].shape)) * 4)

    def forward(self, x, y, p, ws, saved):
        # the Net gives a uint8 workspace of the asked bytes; view it as floats
        assert ws.dtype == np.uint8 and ws.nbytes == x[0].nbytes and ws.byte_offset % 256 == 0
        wsf = Tensor(self.ctx, x[0].shape, np.float32, buffer=ws.buffer, offset=ws.byte_offset // 4)
        return [self.L("twice_via_ws", y[0], x[0], wsf, y[0])]

    def backward(self, x, dx, y, dy, p, dp, ws, saved, acc):
        if dx[0] is None:
            return []
        return [self.L("copy_acc", dx[0], _acc(acc[0]), dy[0], dx[0]),
                self.L("copy_acc", dx[0], _acc(True), dy[0], dx[0])]


class NoGrad(_Base):
    """Copies its input and has no backward pass (stops gradients)."""
    HAS_BACKWARD = False

    def _setup(self, s):
        return Setup([TensorSpec(s[0].shape)])

    def forward(self, x, y, p, ws, saved):
        return [self.L("copy_acc", y[0], _acc(False), x[0], y[0])]


for _name, _cls in [("_TestScale", Scale), ("_TestRelu", Relu), ("_TestAdd", Add),
                    ("_TestSqLoss", SqLoss), ("_TestParam", Param), ("_TestTwiceWS", TwiceWS),
                    ("_TestNoGrad", NoGrad)]:
    _register(_name, _cls)
