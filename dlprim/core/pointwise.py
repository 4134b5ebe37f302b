"""The pointwise-broadcast-reduce generator (DLPrimitives' ``pointwise_operation_broadcast_reduce``).

One template serves elementwise layers, activations, optimizer updates and reductions:
inputs ``x0..``, outputs ``y0..``, scalar params ``w0..`` and an OpenCL statement string
such as ``"y0 = x0 * w0 + x1;"``. Inputs broadcast numpy-style to the output shape.

``PointwiseBroadcastReduce`` runs the same statements over the broadcast shape of the
inputs and reduces each ``yi`` over the axes where the output has size 1, with
``reduce_init``/``reduce`` statements over ``reduce_y0..`` (``"reduce_y0 += y0;"``).
The reduce statement must also combine two partial results (it is applied again in the
local-memory tree and in the second pass), as sum, max and min do.

Programs are built once per (code, dtypes, number of dims, work-group layout): shapes and
strides are kernel arguments (zero stride = broadcast), so a new batch size reuses them.
"""
import re

import numpy as np

from ..kernels import program
from ..dtypes import as_dtype, cl_type, compute_type
from ..tensor import Tensor
from ..utils import ceil_div, round_up
from . import tuning, tuning_launch

__all__ = ["PointwiseBroadcast", "PointwiseBroadcastReduce", "pointwise", "pointwise_reduce",
           "broadcast_shape"]

_NAME_RE = re.compile(r"\b(reduce_y|[xyw])(\d+)\b")
_UINT_LIMIT = 2 ** 31  # fast division is exact below it (tests lower it to reach 64-bit paths)


def broadcast_shape(shapes, what="inputs"):
    """numpy's broadcast of ``shapes`` (right-aligned, size-1 dims stretch) or a ValueError."""
    ndim = max([len(s) for s in shapes] + [0])
    out = [1] * ndim
    for s in shapes:
        for k, n in enumerate(s):
            k += ndim - len(s)
            if n != out[k] and n != 1 and out[k] != 1:
                raise ValueError("%s: shapes %s do not broadcast (dimension %d: %d vs %d)"
                                 % (what, ", ".join(str(tuple(t)) for t in shapes), k, out[k], n))
            if n != 1:
                out[k] = n
    return tuple(out)


def _specs(specs, what):
    out = []
    for i, spec in enumerate(specs):
        try:
            shape, dtype = spec
        except (TypeError, ValueError):
            raise ValueError("%s[%d]: expected (shape, dtype), got %r" % (what, i, spec)) from None
        out.append((tuple(int(n) for n in shape), as_dtype(dtype)))
    return out


def _types(dtype):
    """(storage type, compute type) in OpenCL C: float for the 16-bit floats, double for
    float64, the integer's own type (uchar for bool)."""
    return cl_type(dtype), compute_type(dtype)


def _check_names(text, what, limits):
    """Every xK/yK/wK/reduce_yK in ``text`` must exist; ``limits`` maps kind -> count."""
    for m in _NAME_RE.finditer(text):
        kind, index = m.group(1), int(m.group(2))
        if kind not in limits:
            raise ValueError("%s %r: %s%d cannot be used here" % (what, text, kind, index))
        if index >= limits[kind]:
            raise ValueError("%s %r: %s%d is unknown (there %s %d %s value%s)"
                             % (what, text, kind, index, "is" if limits[kind] == 1 else "are",
                                limits[kind], kind, "" if limits[kind] == 1 else "s"))


def index_type(largest):
    """uint32 index math while every index stays below _UINT_LIMIT, else uint64."""
    return np.uint32 if largest < _UINT_LIMIT else np.uint64


def divisor_args(it, n):
    """A dimension as kernel arguments ``(n, m, l)``: ``x / n == (mul_hi(x, m) + x) >> l``
    for x < 2^31 (Granlund & Montgomery, PLDI'94), so index math avoids integer division."""
    n = int(n)
    if it is not np.uint32 or n < 1:
        return [it(n), np.uint32(0), np.uint32(0)]
    l = (n - 1).bit_length()
    return [it(n), np.uint32((2 ** 32 * (2 ** l - n)) // n + 1), np.uint32(l)]


def _strides(shape, full):
    """Element strides of a contiguous ``shape`` seen as ``full`` (0 where it broadcasts)."""
    shape = (1,) * (len(full) - len(shape)) + tuple(shape)
    out, step = [], 1
    for n, f in zip(reversed(shape), reversed(full)):
        out.append(step if n == f and f != 1 else 0)
        step *= n
    return out[::-1]


def _collapse(full, strides, labels):
    """Drop size-1 dims and merge neighbours that share a label and are contiguous in
    every tensor; -> (dims, per-tensor strides, labels)."""
    dims, st, lab = [], [[] for _ in strides], []
    for k, n in enumerate(full):
        if n == 1:
            continue
        if dims and lab[-1] == labels[k] and all(
                s[-1] == t[k] * n for s, t in zip(st, strides)):
            dims[-1] *= n
            for s, t in zip(st, strides):
                s[-1] = t[k]
            continue
        dims.append(n)
        lab.append(labels[k])
        for s, t in zip(st, strides):
            s.append(t[k])
    return dims, st, lab


def _param_types(params, what):
    out = []
    for i, p in enumerate(params):
        dt = as_dtype(p)
        out.append((dt, _types(dt)[1]))
    return out


def typed_params(param_types, params, name):
    """``params`` as the scalar kernel arguments ``param_types`` (``_param_types``) say;
    another count is an error naming ``name``."""
    if len(params) != len(param_types):
        raise ValueError("%s: expected %d params, got %d" % (name, len(param_types), len(params)))
    return [_scalar_type(spec)(p) for p, spec in zip(params, param_types)]


_scalar_types = {}  # (dtype, compute type) -> the numpy scalar type of such a param


def _scalar_type(spec):
    kind = _scalar_types.get(spec)
    if kind is None:
        dt, ct = spec
        kind = _scalar_types[spec] = np.dtype(dt if ct != "float" else np.float32).type
    return kind


def rebind_params(launches, values):
    """Bind typed scalar ``values`` as the last arguments of prepared ``launches`` (where
    the generators put their scalar params)."""
    for launch in launches:
        first = len(launch.args) - len(values)
        for i, value in enumerate(values):
            launch.set_arg(first + i, value)


def _build(ctx, code, family_params, code_fields):
    try:
        return program.get(ctx, "pointwise", **family_params)
    except program.KernelBuildError as err:
        raise ValueError("pointwise: the expression %s does not compile on %s:\n%s"
                         % (" / ".join(repr(family_params[f]) for f in code_fields), ctx.name,
                            err.log.strip())) from None


_F32 = np.dtype(np.float32)
# what a statement may use to be computed on float vectors as it reads on floats: the
# builtins below (each takes vectors, and fmin/fmax a scalar second operand), arithmetic,
# and locals declared float; no comparison, select, cast, index or integer operator
VECTOR_CALLS = frozenset(("exp", "exp2", "expm1", "log", "log2", "log1p", "erf", "erfc",
                          "tanh", "sinh", "cosh", "sin", "cos", "sqrt", "rsqrt", "fabs",
                          "fmin", "fmax", "native_exp", "native_recip"))
_NOT_VECTOR = re.compile(r"[?<>!%&|^~\[\]\"']|==|\(\s*(?:float|int|uint|long|double|half)\s*\)")
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_TYPE = re.compile(r"\b(?:double|half|int|uint|long|ulong|short|ushort|char|uchar|bool|"
                   r"size_t|float\d+)\b")


def vector_code(code, width, float_params=False):
    """``code`` with its float locals declared float<width>, where it computes the same
    on vectors of float x, y and scalar w (VECTOR_CALLS and arithmetic only); else None.
    A cast ``(float)`` of an x or y, or of a w where ``float_params``, changes nothing and
    is dropped (the operator library's statements cast every operand)."""
    code = (_FLOAT_OF_XYW if float_params else _FLOAT_OF_XY).sub(r"\1", code)
    if width < 2 or _NOT_VECTOR.search(code) or _TYPE.search(code) or \
            any(name not in VECTOR_CALLS for name in _CALL.findall(code)):
        return None
    return re.sub(r"\bfloat\b(?=\s+[A-Za-z_])", "float%d" % width, code)


_FLOAT_OF_XY = re.compile(r"\(\s*float\s*\)\s*([xy]\d+)\b")
_FLOAT_OF_XYW = re.compile(r"\(\s*float\s*\)\s*([xyw]\d+)\b")


class _Base:
    def _check_tensors(self, xs, ys, params):
        for what, ts, specs in (("xs", xs, self.x_specs), ("ys", ys, self.y_specs)):
            if len(ts) != len(specs):
                raise ValueError("%s: %s has %d tensors, the spec has %d"
                                 % (self.name, what, len(ts), len(specs)))
            for i, (t, (shape, dtype)) in enumerate(zip(ts, specs)):
                if not isinstance(t, Tensor):
                    raise ValueError("%s: %s[%d] is not a Tensor" % (self.name, what, i))
                if t.shape != shape or t.dtype != dtype:
                    raise ValueError("%s: %s[%d] is %s %s, the spec says %s %s"
                                     % (self.name, what, i, t.shape, t.dtype.name, shape, dtype.name))
        return self._typed_params(params)

    def _typed_params(self, params):
        return typed_params(self.param_types, params, self.name)

    def __call__(self, xs, ys, params=(), queue=None, **kw):
        launches = self.launches(xs, ys, params, **kw)
        queue = queue if queue is not None else self.ctx.queue
        for launch in launches:
            launch(queue)


class PointwiseBroadcast(_Base):
    """``ys = code(xs, params) + beta * ys`` elementwise; every x broadcasts to the (common)
    y shape. beta=0 never reads y."""

    def __init__(self, ctx, x_specs, y_specs, code, params=(), name=None):
        self.ctx, self.code = ctx, code
        self.name = name or "pointwise"
        self.x_specs, self.y_specs = _specs(x_specs, "x_specs"), _specs(y_specs, "y_specs")
        self.param_types = _param_types(params, "params")
        if not self.y_specs:
            raise ValueError("%s: at least one output is needed" % self.name)
        out = self.y_specs[0][0]
        for i, (shape, _) in enumerate(self.y_specs):
            if shape != out:
                raise ValueError("%s: y shapes differ: y0 is %s, y%d is %s" % (self.name, out, i, shape))
        for i, (shape, _) in enumerate(self.x_specs):
            if len(shape) > len(out) or any(n not in (1, m) for n, m in
                                            zip(reversed(shape), reversed(out))):
                raise ValueError("%s: x%d of shape %s does not broadcast to the output shape %s"
                                 % (self.name, i, shape, out))
        _check_names(code, "%s: code" % self.name,
                     {"x": len(self.x_specs), "y": len(self.y_specs), "w": len(self.param_types)})
        self.shape, self.size = out, int(np.prod(out, dtype=np.int64))
        strides = [_strides(s, out) for s, _ in self.x_specs]
        dims, self._xstrides, _ = _collapse(out, strides, [0] * len(out))
        self._dims = dims or [1]
        if not dims:
            self._xstrides = [[0] for _ in strides]
        contiguous = _strides(self._dims, self._dims)
        x_full = tuple(s == contiguous for s in self._xstrides)
        self._it = index_type(self.size)
        self._wg = min(tuning_launch.POINTWISE_WG, ctx.facts.max_work_group)
        # one element per work-item, groups the driver's (tuning_launch.pointwise_cpu_items)
        self._per_item = tuning_launch.pointwise_cpu_items(ctx.facts, code)
        # or, over whole float32 tensors, a vector of them (vector_code)
        width = tuning.cpu_vector_width(ctx.facts)
        code_vector = vector_code(code, width, all(
            ct == "float" for _, ct in self.param_types)) if self._per_item and all(x_full) and all(
            d == _F32 for _, d in list(self.x_specs) + list(self.y_specs)) else None
        self._vector = width if code_vector is not None else 0
        self._cpu = ctx.facts.is_cpu and not self._per_item
        x_last = tuple("full" if full else {1: "1", 0: "0"}.get(st[-1], "s")
                       for full, st in zip(x_full, self._xstrides))
        mode = "pointwise_vector" if self._vector else \
            "pointwise_cpu" if self._cpu else "pointwise"
        params = dict(MODE=mode, VW=self._vector, CODE_VECTOR=code_vector or "",
                      NAME=_kernel_name(self.name), CODE=code, X_LAST=x_last,
                      XS=tuple(_types(d) for _, d in self.x_specs),
                      YS=tuple(_types(d) for _, d in self.y_specs),
                      WS=tuple(ct for _, ct in self.param_types), DIMS=len(self._dims),
                      X_FULL=x_full, IT="uint" if self._it is np.uint32 else "ulong",
                      ELEMS=1 if self._per_item else tuning_launch.POINTWISE_ELEMS,
                      REDUCE_INIT="", REDUCE="", KEPT=0,
                      RED=0, L0=1, L1=1, REDUCE_DIM0=False, FINISH_WG=1,
                      REDUCE_CPU=False, R_LAST=())
        self.program = _build(ctx, code, params, ["CODE"])
        self._kernel = params["NAME"]
        self._shape_args = None
        self._args([], [], [], 0.0)  # the shape arguments and the launch grid

    def launches(self, xs, ys, params=(), beta=0.0):
        """Prepared launches of ``ys = code + beta * ys`` over these tensors and scalar
        params. ``beta``: one number for every y, or one per y (gradients of one pass
        may assign one input and accumulate another); where it is 0, y is never read."""
        params = self._check_tensors(xs, ys, params)
        if self.size == 0:
            return []
        return [program.Launch(self.program, self._kernel, self._gsize, self._lsize,
                               self._args(xs, ys, params, beta))]

    def enqueue_now(self, xs, ys, params, beta, queue):
        """Enqueue the op now over tensors of the shapes and dtypes it was made for and
        typed params (``pointwise()``: its specs come from these very tensors)."""
        if self.size:
            program.enqueue_now(queue, self.program, self._kernel, self._gsize, self._lsize,
                                self._args(xs, ys, params, beta))

    def _args(self, xs, ys, params, beta):
        """The kernel's arguments, every tensor as (buffer, offset)."""
        it, u64 = self._it, np.uint64
        if self._shape_args is None:  # fixed by the shapes: made once per op
            self._shape_args = ([it(self.size)] + [a for n in self._dims for a in divisor_args(it, n)],
                                [[it(s) for s in st] for st in self._xstrides])
            if self._cpu:
                chunk = tuning_launch.pointwise_cpu_chunk(self.ctx.facts, self.size)
                self._gsize, self._lsize, self._tail = (ceil_div(self.size, chunk),), (1,), [it(chunk)]
            elif self._vector:
                self._gsize, self._lsize, self._tail = (ceil_div(self.size, self._vector),), None, []
            elif self._per_item:
                self._gsize, self._lsize, self._tail = (self.size,), None, []
            else:
                items = ceil_div(self.size, tuning_launch.POINTWISE_ELEMS)
                self._gsize, self._lsize, self._tail = (round_up(items, self._wg),), (self._wg,), []
        head, strides = self._shape_args
        args = list(head)
        for x, st in zip(xs, strides):
            args.append(x.buffer)
            args.append(u64(x.offset))
            args += st
        for y in ys:
            args.append(y.buffer)
            args.append(u64(y.offset))
        return args + self._tail + self._betas(beta) + list(params)

    def _betas(self, beta):
        n = len(self.y_specs)
        if not isinstance(beta, (list, tuple)):
            return [np.float32(beta)] * n
        betas = list(beta)
        if len(betas) != n:
            raise ValueError("%s: beta has %d values for %d outputs" % (self.name, len(betas), n))
        return [np.float32(b) for b in betas]

    def set_params(self, launches, params):
        """Re-bind the scalar params of launches this op prepared (they are the kernel's
        last arguments): values that change every call, such as a solver's step-dependent
        factors, without preparing new launches."""
        rebind_params(launches, self._typed_params(params))


class PointwiseBroadcastReduce(_Base):
    """The code over the broadcast shape of the xs, each y reduced over its size-1 axes:
    ``y = alpha * reduced + beta * y`` (beta=0 never reads y)."""

    def __init__(self, ctx, x_specs, y_specs, code, reduce_init="reduce_y0 = 0;",
                 reduce="reduce_y0 += y0;", params=(), name=None):
        self.ctx, self.code = ctx, code
        self.name = name or "pointwise_reduce"
        self.x_specs, self.y_specs = _specs(x_specs, "x_specs"), _specs(y_specs, "y_specs")
        self.param_types = _param_types(params, "params")
        if not self.y_specs:
            raise ValueError("%s: at least one output is needed" % self.name)
        full = broadcast_shape([s for s, _ in self.x_specs], "%s: inputs" % self.name)
        kept = self._output_shape(full)
        nx, ny, nw = len(self.x_specs), len(self.y_specs), len(self.param_types)
        _check_names(code, "%s: code" % self.name, {"x": nx, "y": ny, "w": nw})
        _check_names(reduce_init, "%s: reduce_init" % self.name, {"reduce_y": ny})
        _check_names(reduce, "%s: reduce" % self.name, {"reduce_y": ny, "y": ny})
        self.full_shape, self.out_shape = full, kept
        labels = [int(k != f) for k, f in zip(kept, full)]  # 1 = reduced
        strides = [_strides(s, full) for s, _ in self.x_specs]
        dims, xst, lab = _collapse(full, strides, labels)
        self._kept = [n for n, l in zip(dims, lab) if not l]
        self._red = [n for n, l in zip(dims, lab) if l]
        self._xst = [[s for s, l in zip(st, lab) if not l] + [s for s, l in zip(st, lab) if l]
                     for st in xst]
        self.outputs = int(np.prod(self._kept, dtype=np.int64))
        self.reduced = int(np.prod(self._red, dtype=np.int64))
        self._it = index_type(int(np.prod(full, dtype=np.int64)))
        reduce_dim0 = bool(lab) and lab[-1] == 1
        self._cpu = ctx.facts.is_cpu
        # CPUs, the innermost dimension kept, every x moving by 1 or 0 along it (a column
        # sum): a work-item takes COLUMNS outputs side by side (REDUCE_CPU with COLS)
        k_last = len(self._kept) - 1
        self._cols = tuning_launch.REDUCE_CPU_COLUMNS if (
            self._cpu and self._kept and not reduce_dim0 and self._red and
            self._kept[-1] > 1 and all(st[k_last] in (0, 1) for st in self._xst)) else 0
        if self._cpu:
            self._layout_cpu()
        else:
            self._layout(reduce_dim0)
        r_last = tuple({1: "1", 0: "0"}.get(st[-1], "s") if self._red else "0"
                       for st in self._xst)
        params = dict(MODE="reduce", NAME=_kernel_name(self.name), CODE=code,
                      REDUCE_INIT=reduce_init, REDUCE=reduce,
                      XS=tuple(_types(d) for _, d in self.x_specs),
                      YS=tuple(_types(d) for _, d in self.y_specs),
                      WS=tuple(ct for _, ct in self.param_types),
                      KEPT=len(self._kept), RED=len(self._red), L0=self._l0, L1=self._l1,
                      REDUCE_DIM0=reduce_dim0, IT="uint" if self._it is np.uint32 else "ulong",
                      DIMS=0, X_FULL=(), X_LAST=(), ELEMS=tuning_launch.REDUCE_ELEMS,
                      REDUCE_CPU=self._cpu, R_LAST=r_last,
                      FINISH_WG=self._finish_wg, COLS=self._cols,
                      K_LAST=tuple("1" if st[k_last] == 1 else "0" for st in self._xst)
                      if self._cols else ())
        self.program = _build(ctx, code, params, ["CODE", "REDUCE_INIT", "REDUCE"])
        self._kernel = params["NAME"]
        self._ws = None

    def _output_shape(self, full):
        shapes = []
        for i, (shape, _) in enumerate(self.y_specs):
            extra = len(shape) - len(full)
            if extra > 0 and any(n != 1 for n in shape[:extra]):
                raise ValueError("%s: y%d of shape %s is not a reduction of the full shape %s"
                                 % (self.name, i, shape, full))
            s = shape[extra:] if extra > 0 else (1,) * -extra + shape
            if any(n != f and n != 1 for n, f in zip(s, full)):
                raise ValueError("%s: y%d of shape %s is not a reduction of the full shape %s "
                                 "(each dimension must equal it or be 1)" % (self.name, i, shape, full))
            shapes.append(s)
        for i, s in enumerate(shapes):
            if s != shapes[0]:
                raise ValueError("%s: y shapes differ: y0 is %s, y%d is %s"
                                 % (self.name, self.y_specs[0][0], i, self.y_specs[i][0]))
        return shapes[0]

    def _layout(self, reduce_dim0):
        """Work-group of L0 x L1 threads: LR cooperate on one output (tree in local memory),
        LO outputs side by side; the contiguous axis goes to local dimension 0. When few
        work-groups would cover a large reduction, it is cut into chunks (second pass)."""
        cap = tuning_launch.reduce_wg(self.ctx.facts)
        wg = program.pow2_at_most(min(cap, self.ctx.facts.max_work_group))
        pow2 = program.pow2_at_least
        if reduce_dim0:
            lr = min(pow2(self.reduced), wg)
            lo = min(wg // lr, pow2(self.outputs))
        else:
            lo = min(pow2(self.outputs), 32, wg)
            lr = min(wg // lo, pow2(self.reduced))
        self._lr, self._lo, self._rd0 = lr, lo, reduce_dim0
        self._l0, self._l1 = (lr, lo) if reduce_dim0 else (lo, lr)
        groups = ceil_div(self.outputs, lo)
        chunks = tuning_launch.reduce_chunks(self.ctx.facts, groups, self.reduced, lr)
        self.chunk = ceil_div(self.reduced, max(chunks, 1)) if self.reduced else 1
        self.chunks = ceil_div(self.reduced, self.chunk) if self.reduced else 1
        self._finish_wg = min(64, wg, program.pow2_at_least(self.chunks))

    def _layout_cpu(self):
        """One work-item per output (or block of ``_cols`` outputs) and chunk of its
        reduction (see _layout for GPUs)."""
        self._lr = self._lo = self._l0 = self._l1 = 1
        items = self.outputs
        if self._cols:  # blocks along the innermost kept dimension
            last = self._kept[-1]
            items = self.outputs // last * ceil_div(last, self._cols)
        self._items = items
        self.chunks = tuning_launch.reduce_cpu_chunks(self.ctx.facts, items, self.reduced)
        self.chunk = ceil_div(self.reduced, self.chunks) if self.reduced else 1
        self.chunks = ceil_div(self.reduced, self.chunk) if self.reduced else 1
        self._finish_wg = 1

    def _workspace(self):
        if self._ws is None:
            self._ws = [Tensor(self.ctx, (self.chunks * self.outputs,),
                               np.float32 if _types(d)[1] == "float" else d) for _, d in self.y_specs]
        return self._ws

    def launches(self, xs, ys, params=(), alpha=1.0, beta=0.0):
        """Prepared launches: each y = alpha * (the code reduced) + beta * y."""
        params = self._check_tensors(xs, ys, params)
        if self.outputs == 0:
            return []
        # alpha and beta in the kernel's scale type (kernels/pointwise.cl ``scale_type``)
        it, f32 = self._it, (np.float64 if any(_types(d)[1] == "double" for _, d in self.y_specs)
                             else np.float32)
        ws = self._workspace() if self.chunks > 1 else list(ys)
        args = [it(self.outputs), it(self.reduced), it(self.chunk), it(self.chunks)]
        args += [a for n in self._kept + self._red for a in divisor_args(it, n)]
        for x, st in zip(xs, self._xst):
            args += [x] + [it(s) for s in st]
        args += list(ys) + ws + params + [f32(alpha), f32(beta)]
        gsize = (self._items if self._cols else self._l0 * ceil_div(self.outputs, self._lo),
                 self._l1, self.chunks)
        out = [program.Launch(self.program, self._kernel, gsize, (self._l0, self._l1, 1), args)]
        if self.chunks > 1:
            fargs = [it(self.outputs), it(self.chunks)] + ws + list(ys) + [f32(alpha), f32(beta)]
            out.append(program.Launch(self.program, self._kernel + "_finish",
                                      (self._finish_wg * self.outputs,), (self._finish_wg,), fargs))
        return out


def _kernel_name(name):
    # prefixed so that a name such as "max" or "exp" cannot clash with an OpenCL builtin
    return "pw_" + re.sub(r"\W", "_", name)


# ----- functional forms: ops memoized per context (ctx.ops) by everything that fixes them


def memo(ctx, key, make):
    """The op memoized in ``ctx.ops`` under ``key`` (everything that fixes it: shapes,
    dtypes, code), made by ``make()`` on first use. Every launcher and the ocl device
    keep their ops this way; the context keeps the most recently used ones."""
    cache = ctx.ops
    op = cache.get(key)
    if op is None:
        op = cache[key] = make()
    return op


_F64 = np.dtype(np.float64)


def param_specs(params, tensors=()):
    """The kernel types of scalar params: a numpy scalar's own dtype; a Python number, or
    a numpy float64, is a float, or a double where one of ``tensors`` holds float64 (its
    kernel computes in double: a float scalar would round 1e-12 away)."""
    if not params:
        return [], []
    wide = any(t.dtype == _F64 for t in tensors)
    types = []
    for p in params:
        dt = p.dtype if isinstance(p, np.generic) else None
        if dt is None or dt == _F64:
            types.append(_F64 if wide and not isinstance(p, (bool, np.bool_)) else "float")
        else:
            types.append(dt)
    return types, list(params)


def pointwise_op(ctx, xs, ys, code, params):
    """(the memoized ``PointwiseBroadcast`` for these tensors' shapes and dtypes, the params
    typed for it): ``op.enqueue_now(xs, ys, typed, beta, queue)`` runs it over any tensors
    of those shapes and dtypes."""
    types, values = param_specs(params, tuple(xs) + tuple(ys) if params else ())
    xsp = tuple((x.shape, x.dtype) for x in xs)  # dtype objects: .name costs microseconds
    ysp = tuple((y.shape, y.dtype) for y in ys)
    op = memo(ctx, ("pw", xsp, ysp, code, tuple(types)),
               lambda: PointwiseBroadcast(ctx, xsp, ysp, code, types))
    return op, op._typed_params(values)


def pointwise(ctx, xs, ys, code, params=(), beta=0.0, queue=None):
    """Build (memoized) and enqueue ``PointwiseBroadcast`` over these tensors now."""
    op, values = pointwise_op(ctx, xs, ys, code, params)
    op.enqueue_now(xs, ys, values, beta, queue if queue is not None else ctx.queue)


def pointwise_launches(ctx, xs, ys, code, params=(), beta=0.0):
    """``pointwise``'s launches, prepared and not enqueued (to be part of a plan)."""
    op, values = pointwise_op(ctx, xs, ys, code, params)
    return op.launches(xs, ys, values, beta)


def _pointwise_reduce_op(ctx, xs, ys, code, reduce_init, reduce, params):
    types, values = param_specs(params, tuple(xs) + tuple(ys) if params else ())
    xsp = tuple((x.shape, x.dtype) for x in xs)
    ysp = tuple((y.shape, y.dtype) for y in ys)
    op = memo(ctx, ("pwr", xsp, ysp, code, reduce_init, reduce, tuple(types)),
               lambda: PointwiseBroadcastReduce(ctx, xsp, ysp, code, reduce_init, reduce, types))
    return op, values


def pointwise_reduce(ctx, xs, ys, code, reduce_init="reduce_y0 = 0;", reduce="reduce_y0 += y0;",
                     params=(), alpha=1.0, beta=0.0, queue=None):
    """Build (memoized) and enqueue ``PointwiseBroadcastReduce`` over these tensors now."""
    op, values = _pointwise_reduce_op(ctx, xs, ys, code, reduce_init, reduce, params)
    op(xs, ys, values, queue=queue, alpha=alpha, beta=beta)


def pointwise_reduce_launches(ctx, xs, ys, code, reduce_init="reduce_y0 = 0;",
                              reduce="reduce_y0 += y0;", params=(), alpha=1.0, beta=0.0):
    """``pointwise_reduce``'s launches, prepared and not enqueued (to be part of a plan)."""
    op, values = _pointwise_reduce_op(ctx, xs, ys, code, reduce_init, reduce, params)
    return op.launches(xs, ys, values, alpha=alpha, beta=beta)
