"""Whole-tensor comparisons answered on the host as a Python bool (``torch.equal``,
``torch.allclose``): the elementwise test runs on the device, one flag comes back."""
import torch

from .dispatch import register

aten = torch.ops.aten

__all__ = []


@register(aten.equal.default)
def _equal(a, b):
    if a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return bool(torch.all(torch.eq(a, b)).item())


@register(aten.allclose.default)
def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(torch.all(torch.isclose(a, b, rtol, atol, equal_nan)).item())
from . import ops_misc  # noqa: E402,F401
from . import ops_detection  # noqa: E402,F401  (torchvision's operators, registered by name)
