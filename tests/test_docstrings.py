"""Every public module, class, function, method and property of the user-facing API has a
docstring.

Public means: named in a module's ``__all__`` (or, for a module without one, defined
there without a leading underscore), plus every layer registered by a JSON type; for a
class, its methods and properties without a leading underscore. A method that overrides
a documented one inherits its docstring. Internals behind the Net, the convolution launchers and the
ONNX importer (graph, autograd, memory planning, algorithm modules, converters) are
documented where they are written but are not part of this list.
"""
import importlib
import inspect
import pkgutil

import dlprim

MODULES = ["dlprim", "dlprim.context", "dlprim.tensor", "dlprim.dtypes", "dlprim.utils", "dlprim.errors",
           "dlprim.net", "dlprim.net.net", "dlprim.net.netconfig",
           "dlprim.models", "dlprim.solvers", "dlprim.lr_schedules", "dlprim.net.weights",
           "dlprim.plot", "dlprim.train.config", "dlprim.cli.tune", "dlprim.onnx",
           "dlprim.kernels.program", "dlprim.layers.base"]
PACKAGES = ["dlprim.core", "dlprim.data", "dlprim.train", "dlprim.cli", "dlprim.nn",
            "dlprim.distributed"]
# the convolution algorithms and GEMM tile tables behind dlprim.core.conv / gemm
INTERNAL = {"dlprim.core.conv_gemm", "dlprim.core.conv_winograd", "dlprim.core.conv_depthwise",
            "dlprim.core.conv_im2col",
            "dlprim.core.tuning"}


def _modules():
    names = list(MODULES)
    for pkg in PACKAGES:
        names.append(pkg)
        module = importlib.import_module(pkg)
        names += [m.name for m in pkgutil.iter_modules(module.__path__, pkg + ".")
                  if not m.name.endswith("__main__") and m.name not in INTERNAL]
    return [importlib.import_module(n) for n in names]


def _public(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
    return [getattr(module, n) for n in names]


def _documented(cls, name):
    return any(getattr(vars(base).get(name), "__doc__", None) for base in cls.__mro__
               if name in vars(base))


def _member_doc(member):
    if isinstance(member, property):
        return member.__doc__ or (member.fget.__doc__ if member.fget else None)
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__.__doc__
    return member.__doc__


def undocumented():
    from dlprim.layers.base import REGISTRY
    missing, seen = [], set()
    objects = [(m.__name__, obj) for m in _modules() for obj in _public(m)]
    objects += [("layer", cls) for cls in REGISTRY.values() if cls.__module__.startswith("dlprim.")]
    for module in _modules():
        if not module.__doc__:
            missing.append("module %s" % module.__name__)
    for where, obj in objects:
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not getattr(obj, "__module__", "").startswith("dlprim"):
            continue
        key = "%s.%s" % (obj.__module__, obj.__qualname__)
        if key in seen:
            continue
        seen.add(key)
        if not obj.__doc__:
            missing.append(key)
        if not inspect.isclass(obj):
            continue
        for name, member in vars(obj).items():
            if name.startswith("_") or not (inspect.isfunction(member) or isinstance(
                    member, (property, staticmethod, classmethod))):
                continue
            if not _member_doc(member) and not any(
                    _member_doc(vars(b)[name]) for b in obj.__mro__[1:] if name in vars(b)):
                missing.append("%s.%s" % (key, name))
    return missing


def test_public_api_is_documented():
    missing = undocumented()
    assert not missing, "%d without a docstring:\n%s" % (len(missing), "\n".join(missing))


def test_the_walk_sees_the_api():
    # the check above would pass vacuously if the walk found nothing
    import dlprim.core.gemm
    keys = set()
    for module in _modules():
        keys.update("%s.%s" % (getattr(o, "__module__", ""), getattr(o, "__qualname__", ""))
                    for o in _public(module))
    for name in ("dlprim.net.net.Net", "dlprim.core.gemm.Gemm", "dlprim.plot.training_curves",
                 "dlprim.data.loader.BatchLoader", "dlprim.solvers.Adam"):
        assert name in keys, name
    assert dlprim.Net.forward.__doc__
