"""Whether PyTorch's autograd engine can run backward passes through ``ocl`` tensors in
this process, checked once, when the first ocl device's context is made.

The engine makes one queue per device index at the first backward pass of a process,
counting the devices of the device types registered at that moment. ``ocl`` registers
when ``dlprim.torch`` is imported, so a backward pass that ran before that import (a
model trained on the CPU first) leaves the engine without a queue for any ocl device,
and every later backward through an ocl tensor stops on PyTorch's internal assertion
about ``device_ready_queues_``, which names nothing a user can act on. A backward pass of
one ocl scalar here either starts the engine with ocl counted (nothing ran before) or
finds it started without: then ``AutogradOrderWarning`` says what to change."""
import logging
import os
import sys
import warnings

import torch

__all__ = ["AutogradOrderWarning", "check"]

log = logging.getLogger(__name__)

_checked = []


class AutogradOrderWarning(UserWarning):
    """Backward passes through ocl tensors cannot run in this process: PyTorch's autograd
    engine started before ``dlprim.torch`` was imported."""


def _callers_level():
    """warnings.warn's stacklevel of the first caller outside dlprim and torch (the
    program's line that made the first ocl tensor)."""
    roots = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
             os.path.dirname(os.path.abspath(torch.__file__)))
    frame, level = sys._getframe(1), 1  # check(), which calls warn
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(roots):
        frame, level = frame.f_back, level + 1
    return level


def check(index):
    """Run the check once a process, on device ``ocl:index`` (whose context exists)."""
    if _checked:
        return
    _checked.append(index)
    from torch.utils._python_dispatch import _disable_current_modes
    try:
        # outside any fake or tracing mode of the caller, with gradients on
        with _disable_current_modes(), torch.inference_mode(False), torch.enable_grad():
            probe = torch.zeros((), device="ocl:%d" % index, requires_grad=True)
            probe.backward()
    except RuntimeError as err:
        if "device_ready_queues_" not in str(err):
            log.debug("the autograd engine's check did not run: %s", err)
            return
        warnings.warn(
            "dlprim.torch: this process ran a PyTorch backward pass before dlprim.torch was "
            "imported, and PyTorch's autograd engine counts devices only at its first backward "
            "pass, so backward passes through ocl tensors will fail (an internal assertion "
            "about device_ready_queues_). Forward passes work. Import dlprim.torch before the "
            "first backward pass, at the top of the program, and start the process again.",
            AutogradOrderWarning, stacklevel=_callers_level())
    except Exception as err:  # the check must never stop the program
        log.debug("the autograd engine's check did not run: %s", err)
