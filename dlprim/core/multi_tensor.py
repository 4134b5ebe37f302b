"""One statement string over many tensors per launch (``kernels/multi_tensor.cl``).

An optimizer step applies the same update to every parameter: launched one parameter
at a time, a model of a few hundred parameters pays a few hundred launches and as many
trips through Python per operator. ``MultiTensorPointwise`` runs the statements of the
pointwise generator (``"y0 = x0 * w0 + x1;"``, inputs ``x0..``, outputs ``y0..``, scalar
params ``w0..``) over *groups*: group g is a list of input tensors and a list of output
tensors of one element count n_g (an input marked ``one`` holds a single element that
every element reads, such as a parameter's step count). As many groups as the device's
kernel-argument space holds (at most ``MAX_GROUPS``) share one launch.

``MultiTensorPlan`` keeps the prepared launches over a fixed list of groups, so that an
update repeated every step over the same tensors costs a few launches and no per-tensor
Python work.
"""
import numpy as np

from ..kernels import program
from ..dtypes import as_dtype
from ..utils import ceil_div
from . import tuning, tuning_launch
from .pointwise import (_check_names, _param_types, _types, index_type, rebind_params,
                        typed_params, vector_code)

__all__ = ["MultiTensorPointwise", "MultiTensorPlan", "MAX_GROUPS"]

MAX_GROUPS = 16  # groups per launch: a switch over them picks each work-item's tensors
_ARG_BYTES = 8  # a buffer, an offset or an index: each at most 8 bytes of kernel arguments
_GPU_ELEMS = 8  # elements per work-item of a GPU work-group's chunk
_GPU_UNROLL = 4  # of them loaded together (kernels/multi_tensor.cl)
_NO_BLOCK = 2 ** 32 - 1  # the first work-group of an unused group slot: none


class MultiTensorPointwise:
    """``code`` over groups of tensors: ``ys_g = code(xs_g, params)`` for every group g,
    elementwise over the group's n_g elements.

    ``x_dtypes``/``y_dtypes``: the dtype of each input / output (the same in every group);
    ``one``: per input, whether it is a single element read for every element (default:
    none); ``params``: the dtypes of the scalar params."""

    def __init__(self, ctx, x_dtypes, y_dtypes, code, params=(), one=None, name=None):
        self.ctx, self.code = ctx, code
        self.name = name or "multi_tensor"
        self.x_dtypes = [as_dtype(d) for d in x_dtypes]
        self.y_dtypes = [as_dtype(d) for d in y_dtypes]
        self.one = tuple(bool(o) for o in (one or [False] * len(self.x_dtypes)))
        if len(self.one) != len(self.x_dtypes):
            raise ValueError("%s: one has %d flags for %d inputs"
                             % (self.name, len(self.one), len(self.x_dtypes)))
        if not self.y_dtypes:
            raise ValueError("%s: at least one output is needed" % self.name)
        self.param_types = _param_types(params, "params")
        _check_names(code, "%s: code" % self.name,
                     {"x": len(self.x_dtypes), "y": len(self.y_dtypes), "w": len(self.param_types)})
        facts = ctx.facts
        per_group = _ARG_BYTES * (2 + 2 * (len(self.x_dtypes) + len(self.y_dtypes)))
        room = facts.max_parameter_size - _ARG_BYTES * (1 + len(self.param_types))
        self.groups_per_launch = max(1, min(MAX_GROUPS, room // per_group))
        self._cpu = facts.is_cpu
        # CPUs: a work-item's chunk as float<width> vectors where the statements read the
        # same on them and everything is float32 (a square root or a division per element
        # otherwise runs scalar: AdamW's sqrt took twice a multiplication's time)
        width = tuning.cpu_vector_width(facts) if facts.is_cpu else 0
        floats = all(d == np.float32 for d in self.x_dtypes + self.y_dtypes)
        self._code_vector = (vector_code(code, width, all(
            ct == "float" for _, ct in self.param_types)) if width and floats else None) or ""
        self._vw = width if self._code_vector else 0
        self._wg = min(tuning_launch.POINTWISE_WG, facts.max_work_group)
        self._programs = {}

    def _program(self, it):
        """(program, kernel name) for index type ``it``, built once."""
        entry = self._programs.get(it)
        if entry is None:
            params = dict(NAME="mt_" + "".join(c if c.isalnum() else "_" for c in self.name),
                          CODE=self.code, G=self.groups_per_launch, CPU=self._cpu,
                          XS=tuple(_types(d) for d in self.x_dtypes),
                          YS=tuple(_types(d) for d in self.y_dtypes), X_ONE=self.one,
                          WS=tuple(ct for _, ct in self.param_types),
                          VW=self._vw, CODE_VECTOR=self._code_vector,
                          UNROLL=1 if self._cpu else _GPU_UNROLL,
                          IT="uint" if it is np.uint32 else "ulong")
            try:
                prog = program.get(self.ctx, "multi_tensor", **params)
            except program.KernelBuildError as err:
                raise ValueError("%s: the statements %r do not compile on %s:\n%s"
                                 % (self.name, self.code, self.ctx.name, err.log.strip())) from None
            entry = self._programs[it] = (prog, params["NAME"])
        return entry

    def typed_params(self, params):
        """``params`` as the kernel's scalar argument types (a count that differs is an error)."""
        return typed_params(self.param_types, params, self.name)

    def _check(self, groups):
        """The groups with elements, each as (xs, ys, n, the group's index)."""
        out = []
        for g, (xs, ys) in enumerate(groups):
            if len(xs) != len(self.x_dtypes) or len(ys) != len(self.y_dtypes):
                raise ValueError("%s: group %d has %d inputs and %d outputs, the op takes %d and %d"
                                 % (self.name, g, len(xs), len(ys), len(self.x_dtypes),
                                    len(self.y_dtypes)))
            n = ys[0].size
            for what, ts, dtypes, ones in (("x", xs, self.x_dtypes, self.one),
                                           ("y", ys, self.y_dtypes, (False,) * len(ys))):
                for i, (t, dt, one) in enumerate(zip(ts, dtypes, ones)):
                    if t.dtype != dt or t.size != (1 if one else n):
                        raise ValueError("%s: group %d's %s%d is %s of %d elements, the op "
                                         "takes %s of %d" % (self.name, g, what, i, t.dtype.name,
                                                             t.size, dt.name, 1 if one else n))
            if n:
                out.append((xs, ys, n, g))
        return out

    def launches(self, groups, params=(), slots=None):
        """Prepared launches over ``groups`` (a list of (xs, ys) of dlprim Tensors), the
        scalar ``params`` their last arguments (``MultiTensorPlan.run`` re-binds them).
        ``slots``, a list, receives per launch [(argument index of a tensor's buffer,
        (group, tensor k of the group's xs + ys))] (``program.Recording.at``)."""
        typed = self.typed_params(params)
        groups = self._check(groups)
        if not groups:
            return []
        it = index_type(max(n for _, _, n, _ in groups))
        prog, kernel = self._program(it)
        out = []
        G = self.groups_per_launch
        for first in range(0, len(groups), G):
            part = groups[first:first + G]
            if self._cpu:
                chunk = tuning_launch.pointwise_cpu_chunk(self.ctx.facts,
                                                          max(n for _, _, n, _ in part))
                lsize = 1
            else:
                chunk, lsize = self._wg * _GPU_ELEMS, self._wg
            args, blocks, places = [it(chunk)], 0, []
            for g in range(G):  # slots past the last group repeat its tensors, own no block
                xs, ys, n, index = part[min(g, len(part) - 1)]
                used = g < len(part)
                args += [it(n if used else 0), np.uint32(blocks if used else _NO_BLOCK)]
                for k, t in enumerate(list(xs) + list(ys)):
                    places.append((len(args), (index, k)))
                    args += [t.buffer, np.uint64(t.offset)]
                blocks += ceil_div(n, chunk) if used else 0
            out.append(program.Launch(prog, kernel, (blocks * lsize,), (lsize,), args + typed))
            if slots is not None:
                slots.append(places)
        return out

    def __call__(self, groups, params=(), queue=None):
        """Enqueue the op over ``groups`` now."""
        queue = queue if queue is not None else self.ctx.queue
        for launch in self.launches(groups, params):
            launch(queue)


class MultiTensorPlan:
    """Launches of a ``MultiTensorPointwise`` prepared once over fixed groups, run again
    with new scalar params (a learning rate that a schedule moves)."""

    def __init__(self, op, groups, params=(), slots=None):
        self.op = op
        self.launches = op.launches(groups, params, slots)
        self._params = tuple(params)

    def run(self, params=(), queue=None):
        """Enqueue the launches, with ``params`` bound where they changed."""
        params = tuple(params)
        if params != self._params:
            rebind_params(self.launches, self.op.typed_params(params))
            self._params = params
        if queue is None:
            self.op.ctx.run(self.launches)
            return
        for launch in self.launches:
            launch(queue)
