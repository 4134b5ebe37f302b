"""Kernel programs: render a Mako template, build it, memoize it per context.

``get(ctx, "gemm", TILE_M=128, ...)`` renders ``dlprim/kernels/gemm.cl`` with those
parameters, builds it for the context's device and keeps it in ``ctx.programs``; asking
again with the same parameters returns the same program without rebuilding. Binary
caching across processes is PyOpenCL's and the driver's business.

Every template sees the parameters as Mako variables plus ``facts`` (the device facts);
``<%include file="common.h"/>`` brings in the shared helpers.
"""
import contextlib
import os
import re
import threading
import time
import weakref

import numpy as np
import pyopencl as cl
from mako.lookup import TemplateLookup

from ..errors import Error
from ..tensor import Tensor
from . import build_ahead
from .build_worker import SM90A, TargetError, build, sm90a_ptx  # noqa: F401 (sm90a_ptx: tests)

__all__ = ["get", "prefetch", "building_ahead", "render", "KernelBuildError", "Launch",
           "Recording", "enqueue_now", "expand_args", "stats", "build_seconds"]

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_lookup = TemplateLookup(directories=[KERNEL_DIR], strict_undefined=True)

stats = {"renders": 0, "builds": 0}  # counted so tests can prove memoization
# template -> [builds, seconds in the driver's compiler]: where a cold start goes
build_seconds = {}


class KernelBuildError(Error, RuntimeError):
    """A kernel failed to build; carries the device, parameters and annotated source."""

    def __init__(self, name, device, params, source, log):
        self.name, self.device, self.params, self.source, self.log = name, device, params, source, log
        super().__init__(self._message())

    def _message(self):
        lines = self.source.splitlines()
        wanted = sorted({int(m) for m in re.findall(r":(\d+):(?:\d+:)?", self.log)})
        shown = set()
        for n in wanted or range(1, min(len(lines), 40) + 1):
            shown.update(range(max(1, n - 3), min(len(lines), n + 3) + 1))
        excerpt, last = [], 0
        for n in sorted(shown):
            if last and n != last + 1:
                excerpt.append("     ...")
            mark = ">>" if n in wanted else "  "
            excerpt.append("%s%5d| %s" % (mark, n, lines[n - 1]))
            last = n
        params = ", ".join("%s=%r" % kv for kv in sorted(self.params.items()))
        return ("failed to build kernel template %r for %s with parameters {%s}\n"
                "compiler log:\n%s\nsource:\n%s"
                % (self.name, self.device, params, self.log.strip(), "\n".join(excerpt)))


def render(name, facts=None, **params):
    """The OpenCL source of template ``name`` with ``params`` filled in."""
    template = _lookup.get_template(name + ".cl")
    stats["renders"] += 1
    return template.render(facts=facts, **params)


def _key(name, params):
    return (name,) + tuple(sorted((k, repr(v)) for k, v in params.items()))


OPTIONS = ["-cl-std=CL1.2"]
_ahead = {}  # id(ctx) -> its AheadBuilds while a building_ahead block is open


@contextlib.contextmanager
def building_ahead(ctx):
    """Within the block, ``prefetch`` hands programs to worker processes
    (``build_ahead``); leaving it waits for them. Where nothing is built ahead (CPUs,
    ``DLPRIM_BUILD_WORKERS=0``) or a block for ``ctx`` is open already, it does nothing."""
    pool = None if id(ctx) in _ahead else build_ahead.open_for(ctx)
    if pool is None:
        yield
        return
    _ahead[id(ctx)] = pool
    try:
        yield
    finally:
        del _ahead[id(ctx)]
        pool.close()


def prefetch(ctx, name, **params):
    """Ask for the program ``get`` will be asked for: built by a worker process inside a
    ``building_ahead`` block, at once (``get``) outside one."""
    pool = _ahead.get(id(ctx))
    if pool is None:
        get(ctx, name, **params)
        return
    key = _key(name, params)
    if key in ctx.programs:
        return
    start = time.perf_counter()
    source = render(name, facts=ctx.facts, **params)
    if pool.built_before(source, OPTIONS):  # in the caches: built here faster than a worker starts
        _build_kept(ctx, name, params, key, source, start)
    else:
        pool.submit(key, source, OPTIONS)


def get(ctx, name, ahead=False, **params):
    """A built ``pyopencl.Program`` for template ``name``, memoized on ``ctx``; with
    ``ahead``, only asked for (``prefetch``), and None returned."""
    if ahead:
        return prefetch(ctx, name, **params)
    key = _key(name, params)
    program = ctx.programs.get(key)
    if program is not None:
        return program
    start = time.perf_counter()  # (a wait for a worker's build counts as building)
    pool = _ahead.get(id(ctx))
    source = pool.source(key) if pool is not None else None
    if source is None:
        source = render(name, facts=ctx.facts, **params)
    return _build_kept(ctx, name, params, key, source, start)


def _build_kept(ctx, name, params, key, source, start):
    """Build ``source`` for ``ctx``, keep it under ``key``, count the seconds since ``start``."""
    try:
        program = build(ctx.cl_context, source, OPTIONS)
    except (cl.RuntimeError, TargetError) as err:  # build failures: RuntimeError subclasses
        log = str(err)
        raise KernelBuildError(name, ctx.name, params, source, log) from None
    spent = build_seconds.setdefault(name, [0, 0.0])
    spent[0] += 1
    spent[1] += time.perf_counter() - start
    stats["builds"] += 1
    ctx.programs[key] = program
    return program


def pow2_at_least(n):
    """The smallest power of two >= ``n`` (1 for n <= 1): work-group sides."""
    return 1 << max(int(n) - 1, 0).bit_length()


def pow2_at_most(n):
    """The largest power of two <= ``n`` (1 for n <= 1): work-group sides."""
    return 1 << max(int(n).bit_length() - 1, 0)


def expand_args(args):
    """Tensors become ``(buffer, ulong offset)``; everything else passes unchanged."""
    out = []
    for a in args:
        if type(a) is Tensor:  # the common case, without the attribute lookup
            out.append(a.buffer)
            out.append(np.uint64(a.offset))
            continue
        kargs = getattr(a, "kernel_args", None)
        if kargs is not None:
            out.extend(kargs)
        else:
            out.append(a)
    return out


# cl.Kernel objects no live Launch holds, per (program, kernel name): making one costs
# hundreds of microseconds (PyOpenCL sets up its argument handling per object)
_free_kernels = {}
# one kernel object per (program, kernel name) for launches enqueued once: the arguments
# are bound just before the enqueue (OpenCL copies them at the enqueue, so the object is
# free again right after), under a lock because PyTorch's backward runs on a thread of its own
_shared_kernels = {}
_shared_lock = threading.Lock()


def _kernel(program, kernel_name):
    entry = _free_kernels.get((id(program), kernel_name))
    if entry is not None and entry[1]:
        return entry[1].pop()
    return cl.Kernel(program, kernel_name)


def _release(program, kernel_name, kernel):
    # the program is kept in the entry so that its id is not reused while the entry lives
    _free_kernels.setdefault((id(program), kernel_name), (program, []))[1].append(kernel)


def _shared_kernel(program, kernel_name):
    entry = _shared_kernels.get((id(program), kernel_name))
    if entry is None:
        entry = _shared_kernels[(id(program), kernel_name)] = (program, cl.Kernel(program, kernel_name))
    return entry[1]


def enqueue_now(queue, program, kernel_name, gsize, lsize, args, wait_for=None):
    """Enqueue one launch of a kernel now with these (expanded) arguments, on the kernel
    object shared for launches made once: no Launch to prepare or keep. ``wait_for``:
    events (of other queues) it waits for."""
    kernel = _shared_kernel(program, kernel_name)
    with _shared_lock:
        _declare_scalars(kernel, args)
        kernel.set_args(*args)
        return cl.enqueue_nd_range_kernel(queue, kernel, gsize, lsize, wait_for=wait_for)


_declared = set()  # ids of kernels (all kept alive by a Launch or a pool) with typed scalars


def _scalar_types(args):
    """Each argument's numpy dtype (None for buffers and local memory), or None where an
    untyped scalar leaves the kernel to PyOpenCL's generic binding."""
    types = []
    for a in args:
        if isinstance(a, np.generic):
            types.append(a.dtype)
        elif isinstance(a, (int, float, bool, np.ndarray)):
            return None
        else:
            types.append(None)
    return types


def _declare_scalars(kernel, args):
    """Tell PyOpenCL the scalar argument types once per kernel object (from numpy scalars):
    binding arguments then takes a microsecond instead of a hundred or more."""
    if id(kernel) in _declared:
        return
    types = _scalar_types(args)
    if types is not None:
        kernel.set_scalar_arg_dtypes(types)
        _declared.add(id(kernel))


def _bound_kernel(program, name, types):
    """A kernel object of its own (a recording's that keeps its arguments bound), its
    scalar types declared (``_scalar_types``)."""
    kernel = cl.Kernel(program, name)
    if types is not None:
        kernel.set_scalar_arg_dtypes(types)
    return kernel


class Launch:
    """One prepared kernel launch with its arguments.

    A Net's execution plan is a flat list of these; running an iteration calls each. The
    first call binds the arguments to a kernel object shared by every launch of that
    kernel, just before the enqueue: an eager operator's launch, enqueued once, costs a few
    microseconds of host time. A launch called again (a plan's) takes a ``cl.Kernel`` of its
    own with the arguments bound once, and gives it back when it is dropped.
    """
    __slots__ = ("program", "kernel", "args", "gsize", "lsize", "name", "flops", "_called",
                 "__weakref__")

    def __init__(self, program, kernel_name, gsize, lsize, args, flops=0):
        self.program = program
        self.kernel = None
        self.args = expand_args(args)
        self.gsize = tuple(int(g) for g in gsize)
        self.lsize = None if lsize is None else tuple(int(v) for v in lsize)
        self.name = kernel_name
        self.flops = flops
        self._called = False

    def __call__(self, queue):
        kernel = self.kernel
        if kernel is None:
            if not self._called:
                self._called = True
                return enqueue_now(queue, self.program, self.name, self.gsize, self.lsize,
                                   self.args)
            kernel = self._own_kernel()
        return cl.enqueue_nd_range_kernel(queue, kernel, self.gsize, self.lsize)

    def _own_kernel(self):
        kernel = self.kernel = _kernel(self.program, self.name)
        weakref.finalize(self, _release, self.program, self.name, kernel)
        _declare_scalars(kernel, self.args)
        kernel.set_args(*self.args)
        return kernel

    def set_arg(self, index, value):
        """Re-bind argument ``index`` (counted with every tensor as two arguments)."""
        self.args[index] = value
        if self.kernel is not None:
            self.kernel.set_arg(index, value)

    def __repr__(self):
        return "Launch(%s, g=%s, l=%s)" % (self.name, self.gsize, self.lsize)


class Recording:
    """Launches prepared once over some tensors, replayed over other tensors of the same
    shapes and dtypes: each (buffer, offset) argument pair that pointed into one of the
    tensors is rebound to the same place in its counterpart, and every other argument
    (op-owned tables and workspaces, sizes, scalars) is kept. An eager operator repeated
    with the same signature skips preparing its launches again.

    ``Recording.of`` answers None where the tensors cannot be told apart by their buffers
    (two of them views of one buffer): such a call is prepared anew each time, unless its
    maker says where each tensor's arguments are (``Recording.at``).
    """
    __slots__ = ("steps", "checked", "bound", "places", "_types")

    def __init__(self, steps):
        self.steps = steps  # [(shared kernel, gsize, lsize, args, [(arg, tensor, delta)])]
        self.checked = None  # what the user last verified a replay over (its own business)
        self.bound = None  # Recording.at: per step, the arguments its own kernel holds
        self.places = None  # Recording.at: the tensors' (address, offset) its kernels hold
        self._types = None  # Recording.at: per step, its arguments' scalar types

    @staticmethod
    def at(launches, slots):
        """The recording of ``launches`` with the tensors' places given: ``slots[i]`` lists
        (argument index of a buffer, tensor index) for launch i, the offset argument
        following the buffer and pointing at the tensor's first element. Views of one
        buffer are told apart by where they sit, not by their buffer."""
        steps, types = [], []
        for launch, places in zip(launches, slots):
            args = list(launch.args)
            for k, _ in places:
                args[k] = args[k + 1] = None
            # a kernel of its own, its arguments kept bound: a replay sets only those that
            # moved (an optimizer's lists are mostly the same tensors step after step)
            types.append(_scalar_types(launch.args))
            steps.append((_bound_kernel(launch.program, launch.name, types[-1]), launch.gsize,
                          launch.lsize, args, [(k, i, 0) for k, i in places]))
        recording = Recording(steps)
        recording.bound, recording._types = [None] * len(steps), types
        return recording

    @staticmethod
    def of(launches, tensors):
        """The recording of ``launches`` as prepared over ``tensors`` (dlprim Tensors,
        None for an absent one), or None where two tensors share a buffer."""
        owner = {}
        for i, t in enumerate(tensors):
            if t is None:
                continue
            if id(t.buffer) in owner:
                return None
            owner[id(t.buffer)] = i
        steps = []
        for launch in launches:
            args, patches = list(launch.args), []
            for k, a in enumerate(args):
                i = owner.get(id(a))
                if i is None:
                    continue
                if k + 1 >= len(args) or not isinstance(args[k + 1], np.uint64):
                    return None  # a tensor's buffer without its offset: not ours to rebind
                patches.append((k, i, int(args[k + 1]) - tensors[i].offset))
            for k, _, _ in patches:  # rebound at every replay: hold on to none of them
                args[k] = args[k + 1] = None
            kernel = _shared_kernel(launch.program, launch.name)
            with _shared_lock:
                _declare_scalars(kernel, launch.args)
            steps.append((kernel, launch.gsize, launch.lsize, args, patches))
        return Recording(steps)

    def replay(self, queue, tensors, last=(), places=None):
        """Enqueue the recorded launches over ``tensors`` (in the recorded order); ``last``:
        typed scalars that replace each launch's last arguments (the generators' params,
        values that change from call to call). ``places`` (``Recording.at``): each tensor's
        (buffer address, offset), where given only the tensors whose place moved since
        the last replay are rebound."""
        if self.bound is not None:
            self._replay_bound(queue, tensors, last, places)
            return
        u64, enqueue = np.uint64, cl.enqueue_nd_range_kernel
        with _shared_lock:
            for kernel, gsize, lsize, template, patches in self.steps:
                args = list(template)
                for k, i, delta in patches:
                    t = tensors[i]
                    args[k] = t.buffer
                    args[k + 1] = u64(t.offset + delta)
                if last:
                    args[len(args) - len(last):] = last
                kernel.set_args(*args)
                enqueue(queue, kernel, gsize, lsize)


    def _replay_bound(self, queue, tensors, last, places):
        """``replay`` on the kernels of ``Recording.at``: each kernel keeps its arguments,
        and only those of the tensors whose place moved since the last replay (all of
        them without ``places``) are set again: one by one where a few moved, all at
        once where many did (a call per argument costs several times one argument of a
        call that sets them all)."""
        moved = None
        if places is not None and self.places is not None:
            moved = () if places == self.places else \
                {i for i, (now, before) in enumerate(zip(places, self.places)) if now != before}
        self.places = places
        u64, enqueue = np.uint64, cl.enqueue_nd_range_kernel
        for s, (kernel, gsize, lsize, template, patches) in enumerate(self.steps):
            held = self.bound[s]
            todo = patches if moved is None or held is None else \
                [p for p in patches if p[1] in moved] if moved else ()
            start = len(template) - len(last)
            if held is None or len(todo) > _ONE_BY_ONE:
                args = list(template)
                for k, i, delta in patches:
                    t = tensors[i]
                    args[k], args[k + 1] = t.buffer, u64(t.offset + delta)
                if last:
                    args[start:] = last
                elif held is not None:  # the params of the last replay
                    args[start:] = held[start:]
                kernel.set_args(*args)
                self.bound[s] = [a.int_ptr if isinstance(a, cl.MemoryObjectHolder) else a
                                 for a in args]
            else:
                for k, i, delta in todo:
                    t = tensors[i]
                    if held[k] != t.buffer.int_ptr:
                        kernel.set_arg(k, t.buffer)
                        held[k] = t.buffer.int_ptr
                    offset = t.offset + delta
                    if held[k + 1] != offset:
                        kernel.set_arg(k + 1, u64(offset))
                        held[k + 1] = offset
                for j, value in enumerate(last):
                    if held[start + j] != value:
                        kernel.set_arg(start + j, value)
                        held[start + j] = value
            enqueue(queue, kernel, gsize, lsize)

    def fork(self):
        """This recording with kernels of its own (``Recording.at``'s): replays over one
        list of tensors keep their arguments bound while another list replays the
        original."""
        steps = [(_bound_kernel(kernel.program, kernel.function_name, types), gsize, lsize,
                  template, patches)
                 for (kernel, gsize, lsize, template, patches), types in zip(self.steps,
                                                                             self._types)]
        forked = Recording(steps)
        forked.bound, forked._types = [None] * len(steps), self._types
        return forked


# a replay sets the arguments of at most this many moved tensors one by one, else all
_ONE_BY_ONE = 8


def scalar(value, dtype=np.float32):
    """A kernel scalar argument of an explicit type."""
    return np.dtype(dtype).type(value)
