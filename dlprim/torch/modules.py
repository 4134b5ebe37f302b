"""``nn.Module`` conversions that involve the ocl device keep shared parameters shared.

PyTorch converts a module's parameters (``.to``, ``.cpu``, ``.half``, ...) in place,
keeping each Parameter object, only when the old and the new tensor have "compatible
shallow-copy types", which CPU and CUDA tensors have and an ``OclTensor`` (a Python
wrapper tensor) does not. Otherwise every module gets a new Parameter of its own, so a
weight two modules share (a language model's tied input and output embeddings) becomes
two weights, silently: training diverges from the same model on the CPU or CUDA.

PyTorch has the in-place conversion for such tensors too, ``swap_tensors`` (the object
keeps its identity and takes the new tensor's contents), behind a global switch,
``torch.__future__.set_swap_module_params_on_conversion``. ``keep_parameters_shared``
turns that switch on for the duration of a conversion that involves ocl (a module with
an ocl parameter or buffer, or a conversion that produces ocl tensors) and leaves every
other conversion as PyTorch does it. Where PyTorch cannot swap a parameter (something
else holds a reference to it), the conversion makes new Parameter objects as PyTorch
would, and then puts back the sharing it broke.
"""
import functools
import logging
import threading

import torch

__all__ = ["keep_parameters_shared"]

log = logging.getLogger("dlprim.torch")

_plain_apply = torch.nn.Module._apply


def _tensors(module):
    for p in module.parameters():
        yield p
    for b in module.buffers():
        yield b


def _makes_ocl(module, fn):
    """Whether ``fn`` (the per-tensor conversion of ``Module._apply``) gives ocl tensors:
    asked of an empty tensor of the module's first parameter's dtype, so nothing is
    copied."""
    first = next(_tensors(module), None)
    if first is None:
        return False
    probe = torch.empty(0, dtype=first.dtype, device=first.device)
    try:
        with torch.no_grad():
            out = fn(probe)
    except Exception:  # noqa: BLE001 - a conversion the probe cannot take is not ours
        return False
    return isinstance(out, torch.Tensor) and out.device.type == "ocl"


def _involves_ocl(module, fn):
    return any(t.device.type == "ocl" for t in _tensors(module)) or _makes_ocl(module, fn)


def _sharing(module):
    """The places (module, name) of every parameter that more than one place holds."""
    places = {}
    for owner in module.modules():
        for name, p in owner._parameters.items():
            if p is not None:
                places.setdefault(id(p), []).append((owner, name))
    return [where for where in places.values() if len(where) > 1]


def _share_again(sharing):
    """Each group of places holds one parameter again: the first place's."""
    for (owner, name), *others in sharing:
        kept = owner._parameters[name]
        for other, other_name in others:
            other._parameters[other_name] = kept


_converting = threading.local()  # .active: inside a conversion the outermost call decided


@functools.wraps(_plain_apply)
def _apply(self, fn, recurse=True):
    """The outermost ``_apply`` of a conversion decides for the whole tree (the calls it
    makes on the submodules run as PyTorch's), so nothing is asked twice."""
    if getattr(_converting, "active", False):
        return _plain_apply(self, fn, recurse)
    _converting.active = True
    try:
        return _convert(self, fn, recurse)
    finally:
        _converting.active = False


def _convert(self, fn, recurse):
    future = torch.__future__
    if future.get_swap_module_params_on_conversion() or not _involves_ocl(self, fn):
        return _plain_apply(self, fn, recurse)
    sharing = _sharing(self)
    future.set_swap_module_params_on_conversion(True)
    try:
        return _plain_apply(self, fn, recurse)
    except RuntimeError as err:
        # swap_tensors refuses a parameter that something else holds a reference to (the
        # graph of a weight computed from it: nn.utils.weight_norm's hook): such modules
        # convert as PyTorch converts them, new Parameter objects, and the parameters
        # that were shared are shared again afterwards
        if "Couldn't swap" not in str(err):
            raise
        log.debug("dlprim.torch: %s; converting with new parameters instead", err)
    finally:
        future.set_swap_module_params_on_conversion(False)
    out = _plain_apply(self, fn, recurse)
    _share_again(sharing)
    return out


def keep_parameters_shared():
    """Install the conversion above as ``nn.Module._apply`` (once)."""
    if torch.nn.Module._apply is not _apply:
        torch.nn.Module._apply = _apply
