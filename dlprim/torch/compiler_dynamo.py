"""How dynamo (``torch.compile``'s tracer) sees ``ocl`` tensors: as tensors of a device.

An ``OclTensor`` is a Python tensor subclass with a ``__torch_dispatch__`` of its own and
no ``__tensor_flatten__``. dynamo gives such an object no tensor variable: it becomes an
opaque user object, every operator on it breaks the graph and runs eagerly, and since
dynamo's frame hook is still on while those operators run, it goes on to compile
dlprim's own dispatch code (called from C++) frame by frame, which fails inside pyopencl
(``_set_arg_multi(): incompatible function arguments``, ``TypeError: an integer is
required``). Nothing of the subclass matters to a graph, though: its sizes, strides,
dtype and device are PyTorch's own, and fake tensors on the ``ocl`` device compute
every shape through the meta kernels. So ``install`` has dynamo wrap an OclTensor as it
wraps a plain tensor, and keeps dlprim's code out of its tracing.

dynamo is imported on the first ``torch.compile`` call (it takes seconds), so this
waits for it: ``install`` runs when ``torch._dynamo`` has been imported.

Inductor generates code for CPUs and CUDA-like devices only; a graph of ocl tensors
given to it is refused with what to use instead (``backend="dlprim"``), not left to fail
inside its code generator (``KeyError: 'ocl'``). Backends that run the graph's operators
("eager", "aot_eager") run them on ocl.
"""
import importlib.abc
import importlib.util
import logging
import sys

log = logging.getLogger(__name__)

__all__ = ["install", "install_when_imported"]

# backends known to have no code generator for the ocl device
_NO_OCL_CODEGEN = ("inductor",)

_installed = []


def _backend_name(compiler_fn):
    """The name torch.compile was given for the backend (dynamo wraps it), or None."""
    for attr in ("_compiler_name", "compiler_name", "__name__"):
        name = getattr(compiler_fn, attr, None)
        if isinstance(name, str):
            return name
    return None


def _refusing(backend):
    """A compiler function for dynamo that refuses a graph of ocl tensors, naming what to
    use. (dynamo turns an error raised while it traces into a graph break, but one the
    backend raises reaches the caller.)"""
    def refuse(gm, example_inputs, **kwargs):
        raise RuntimeError(
            "torch.compile(backend=%r) has no code generator for tensors on the ocl device; "
            "use torch.compile(model, backend='dlprim') (the graphs become dlprim Nets on "
            "the device), or dlprim.torch.compile(model)" % backend)
    return refuse


# the code dlprim runs under an operator on ocl tensors: its own modules, pyopencl's, and
# the kernel-argument setters pyopencl generates (pytools names their code so)
_SKIPPED_MODULES = ("dlprim", "pyopencl")
_SKIPPED_GENERATED = "<generated: 'pyopencl"


def _skip_device_code(trace_rules):
    """Keep dynamo out of dlprim's device code: it runs under dynamo's frame hook whenever
    an operator on ocl tensors runs eagerly (at a graph break), and is never the user's
    model."""
    for name in _SKIPPED_MODULES:
        trace_rules.add(name)
    dirs = getattr(trace_rules, "SKIP_DIRS", None)
    if isinstance(dirs, list) and hasattr(trace_rules, "_recompile_re"):
        dirs.append(_SKIPPED_GENERATED)  # (a prefix of the file name, as the dirs are)
        trace_rules._recompile_re()


def _register(backend):
    """``backend`` as torch.compile's "dlprim": an installed dlprim is found through its
    entry point (setup.cfg's torch_dynamo_backends); a source tree on the path is not."""
    if backend is None:
        return
    try:
        # the registry itself: list_backends() would import every backend (inductor) while
        # torch.compile is still importing dynamo
        from torch._dynamo.backends import registry
        if "dlprim" not in registry._COMPILER_FNS:
            registry.register_backend(backend, name="dlprim")
    except Exception as e:  # another PyTorch's registry
        log.warning("dlprim: could not register torch.compile's backend 'dlprim' (%s); pass "
                    "backend=dlprim.torch.backend instead", e)


def install(backend=None):
    """Have dynamo trace OclTensors as tensors of the ocl device, and know ``backend`` as
    "dlprim" (once per process)."""
    if _installed:
        return
    _register(backend)
    try:
        import torch._dynamo.trace_rules as trace_rules
        from torch._dynamo.variables.builder import VariableBuilder
    except ImportError as e:  # another PyTorch layout: the old behaviour stays
        log.warning("dlprim: dynamo's tensor wrapping not found (%s); torch.compile of ocl "
                    "models may fail, use dlprim.torch.compile(model) instead", e)
        return
    from .tensor import OclTensor
    _installed.append(True)
    _skip_device_code(trace_rules)
    wrap = VariableBuilder._wrap

    def _wrap(self, value):
        if type(value) is OclTensor:
            output = self.tx.output
            name = _backend_name(output.compiler_fn)
            if name in _NO_OCL_CODEGEN:
                output.compiler_fn = _refusing(name)
            return self.wrap_tensor(value)
        return wrap(self, value)
    VariableBuilder._wrap = _wrap


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``install`` right after ``torch._dynamo`` is imported."""

    def __init__(self, backend=None):
        self.busy = False
        self.backend = backend

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo" or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return None
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        install(self.backend)


def install_when_imported(backend=None):
    """``install(backend)`` now if dynamo is loaded, else as soon as it is."""
    if "torch._dynamo" in sys.modules:
        install(backend)
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(backend))
