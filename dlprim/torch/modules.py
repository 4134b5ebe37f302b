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
other conversion as PyTorch does it.
"""
import functools
import logging

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


@functools.wraps(_plain_apply)
def _apply(self, fn, recurse=True):
    future = torch.__future__
    if future.get_swap_module_params_on_conversion() or not _involves_ocl(self, fn):
        return _plain_apply(self, fn, recurse)
    future.set_swap_module_params_on_conversion(True)
    try:
        return _plain_apply(self, fn, recurse)
    finally:
        future.set_swap_module_params_on_conversion(False)


def keep_parameters_shared():
    """Install the conversion above as ``nn.Module._apply`` (once)."""
    if torch.nn.Module._apply is not _apply:
        torch.nn.Module._apply = _apply
