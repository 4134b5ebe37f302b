"""Kernel programs: render a Mako template, build it, memoize it per context.

``get(ctx, "gemm", TILE_M=128, ...)`` renders ``dlprim/kernels/gemm.cl`` with those
parameters, builds it for the context's device and keeps it in ``ctx.programs``; asking
again with the same parameters returns the same program without rebuilding. Binary
caching across processes is PyOpenCL's and the driver's business.

Every template sees the parameters as Mako variables plus ``facts`` (the device facts);
``<%include file="common.h"/>`` brings in the shared helpers.
"""
import os
import re
import weakref

import numpy as np
import pyopencl as cl
from mako.lookup import TemplateLookup

from ..errors import Error

__all__ = ["get", "render", "KernelBuildError", "Launch", "expand_args", "stats"]

KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_lookup = TemplateLookup(directories=[KERNEL_DIR], strict_undefined=True)

stats = {"renders": 0, "builds": 0}  # counted so tests can prove memoization


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


def get(ctx, name, **params):
    """A built ``pyopencl.Program`` for template ``name``, memoized on ``ctx``."""
    key = _key(name, params)
    program = ctx.programs.get(key)
    if program is not None:
        return program
    source = render(name, facts=ctx.facts, **params)
    options = ["-cl-std=CL1.2"]
    try:
        program = cl.Program(ctx.cl_context, source).build(options=options)
    except cl.RuntimeError as err:  # build failures arrive as RuntimeError subclasses
        log = str(err)
        raise KernelBuildError(name, ctx.name, params, source, log) from None
    stats["builds"] += 1
    ctx.programs[key] = program
    return program


def pow2_at_least(n):
    """The smallest power of two >= ``n`` (1 for n <= 1): work-group sides."""
    return 1 << max(int(n) - 1, 0).bit_length()


def expand_args(args):
    """Tensors become ``(buffer, ulong offset)``; everything else passes unchanged."""
    out = []
    for a in args:
        kargs = getattr(a, "kernel_args", None)
        if kargs is not None:
            out.extend(kargs)
        else:
            out.append(a)
    return out


# cl.Kernel objects no live Launch holds, per (program, kernel name): making one costs
# hundreds of microseconds (PyOpenCL sets up its argument handling per object), which a
# launch prepared for immediate use (eager PyTorch operators) would pay every call
_free_kernels = {}


def _kernel(program, kernel_name):
    entry = _free_kernels.get((id(program), kernel_name))
    if entry is not None and entry[1]:
        return entry[1].pop()
    return cl.Kernel(program, kernel_name)


def _release(program, kernel_name, kernel):
    # the program is kept in the entry so that its id is not reused while the entry lives
    _free_kernels.setdefault((id(program), kernel_name), (program, []))[1].append(kernel)


_declared = set()  # ids of kernels (all kept alive by a Launch or the pool) with typed scalars


def _declare_scalars(kernel, args):
    """Tell PyOpenCL the scalar argument types once per kernel object (from numpy scalars):
    binding arguments then takes microseconds instead of a hundred or more."""
    if id(kernel) in _declared:
        return
    types = []
    for a in args:
        if isinstance(a, np.generic):
            types.append(a.dtype)
        elif isinstance(a, (int, float, bool, np.ndarray)):
            return  # an untyped scalar: leave the kernel to PyOpenCL's generic binding
        else:
            types.append(None)  # buffers and local memory
    kernel.set_scalar_arg_dtypes(types)
    _declared.add(id(kernel))


class Launch:
    """One prepared kernel launch with its arguments bound once.

    A Net's execution plan is a flat list of these; running an iteration calls each.
    Each Launch owns its ``cl.Kernel`` while it lives, so bound arguments never collide;
    a dropped Launch gives its kernel back for the next one to bind anew.
    """
    __slots__ = ("kernel", "gsize", "lsize", "name", "flops", "__weakref__")

    def __init__(self, program, kernel_name, gsize, lsize, args, flops=0):
        self.kernel = _kernel(program, kernel_name)
        weakref.finalize(self, _release, program, kernel_name, self.kernel)
        args = expand_args(args)
        _declare_scalars(self.kernel, args)
        self.kernel.set_args(*args)
        self.gsize = tuple(int(g) for g in gsize)
        self.lsize = None if lsize is None else tuple(int(v) for v in lsize)
        self.name = kernel_name
        self.flops = flops

    def __call__(self, queue):
        return cl.enqueue_nd_range_kernel(queue, self.kernel, self.gsize, self.lsize)

    def __repr__(self):
        return "Launch(%s, g=%s, l=%s)" % (self.name, self.gsize, self.lsize)


def scalar(value, dtype=np.float32):
    """A kernel scalar argument of an explicit type."""
    return np.dtype(dtype).type(value)
