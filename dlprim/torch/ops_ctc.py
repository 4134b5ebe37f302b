"""CTC loss on ocl devices: PyTorch's ``_ctc_loss`` and ``_ctc_loss_backward`` (both the
int-list and the tensor overloads of the lengths) on core.ctc's kernels. ``ctc_loss``
itself is composite (reductions, ``zero_infinity``'s zeroing) above these. The lengths
are read on the host, as PyTorch's CUDA kernels do."""
import torch

from ..core.ctc import CTC, check_lengths
from ..core.pointwise import memo
from .dispatch import register
from .tensor import OclTensor, as_dlprim, empty, enqueue, from_numpy, numpy_dtype

aten = torch.ops.aten

__all__ = ["register_ctc_loss"]


def register_ctc_loss(library):
    """``ctc_loss`` with tensors of lengths, on the ocl device's autograd key (an aten
    IMPL Library): PyTorch's composite takes its path for tensor subclasses there, which
    divides the losses by the target lengths where they are, on the host; with the
    lengths read as the int-list overload takes them, the reduction runs on the device,
    as for CUDA's tensors."""
    library.impl("ctc_loss.Tensor", _ctc_loss_lengths_on_host, "AutogradPrivateUse1")


def _ctc_loss_lengths_on_host(log_probs, targets, input_lengths, target_lengths, blank=0,
                              reduction=1, zero_infinity=False):
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or \
                lengths.dtype.is_complex:
            raise RuntimeError("%s must be integral" % name)
    return aten.ctc_loss.IntList(log_probs, targets, _lengths(input_lengths),
                                 _lengths(target_lengths), blank, reduction, zero_infinity)


def _kernels(log_probs, targets):
    ctx = log_probs._ocl_storage.ctx
    dtype, index = numpy_dtype(log_probs.dtype), numpy_dtype(targets.dtype)
    return memo(ctx, ("ctc", dtype, index), lambda: CTC(ctx, dtype, index))


def _lengths(values):
    if isinstance(values, torch.Tensor):
        return [int(v) for v in values.reshape(-1).tolist()]
    return [int(v) for v in values]


def _operands(log_probs, targets, input_lengths, target_lengths, blank):
    """(log_probs contiguous, targets on its device, contiguous, the device
    copy of the per-sequence lengths and offsets, W)."""
    if log_probs.dim() != 3:
        raise RuntimeError("ctc_loss: log_probs must be 3-D (T, N, C), got %s"
                           % list(log_probs.shape))
    if targets.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("ctc_loss: targets must be int64 or int32, got %s" % targets.dtype)
    T, N, C = log_probs.shape
    log_probs = log_probs.contiguous()  # (the kernels read (T, N, C) rows as stored)
    if not isinstance(targets, OclTensor):
        targets = targets.to(log_probs.device)
    targets = targets.contiguous()
    il, tl = _lengths(input_lengths), _lengths(target_lengths)
    if len(il) != N:
        raise RuntimeError("ctc_loss: input_lengths must be of size batch_size (%d), got %d"
                           % (N, len(il)))
    if targets.dim() == 2 and targets.shape[0] != N:
        raise RuntimeError("ctc_loss: targets must have batch_size (%d) rows, got %d"
                           % (N, targets.shape[0]))
    info, W = check_lengths(T, C, tuple(targets.shape), il, tl, blank)
    return log_probs, targets, from_numpy(info, log_probs._ocl_storage.index, torch.int64), W


@register(aten._ctc_loss.default, aten._ctc_loss.Tensor)
def _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    log_probs, targets, info, W = _operands(log_probs, targets, input_lengths, target_lengths,
                                            blank)
    T, N, _ = log_probs.shape
    index = log_probs._ocl_storage.index
    nll = empty((N,), log_probs.dtype, index)
    log_alpha = empty((N, T, W), log_probs.dtype, index)
    ctx = log_probs._ocl_storage.ctx
    enqueue(ctx, _kernels(log_probs, targets).forward_launches(
        as_dlprim(log_probs), (N * log_probs.shape[2], log_probs.shape[2]), as_dlprim(targets),
        as_dlprim(info), W, blank, as_dlprim(log_alpha), as_dlprim(nll)))
    return nll, log_alpha


@register(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
def _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
                       neg_log_likelihood, log_alpha, blank, zero_infinity=False):
    log_probs, targets, info, W = _operands(log_probs, targets, input_lengths, target_lengths,
                                            blank)
    T, N, C = log_probs.shape
    index = log_probs._ocl_storage.index
    out = empty((T, N, C), log_probs.dtype, index)
    if tuple(log_alpha.shape) != (N, T, W):
        raise RuntimeError("ctc_loss backward: log_alpha must be (%d, %d, %d), got %s"
                           % (N, T, W, list(log_alpha.shape)))
    grad = grad.to(log_probs.dtype).reshape(-1)
    if grad.numel() != N:
        grad = grad.expand(N)  # (one value for every sequence)
    log_beta = empty((N, T, W), log_probs.dtype, index)
    ctx = log_probs._ocl_storage.ctx
    enqueue(ctx, _kernels(log_probs, targets).backward_launches(
        as_dlprim(grad), 1, as_dlprim(log_probs), (N * C, C), as_dlprim(targets),
        as_dlprim(info), W,
        blank, zero_infinity, as_dlprim(log_alpha.contiguous()),
        as_dlprim(neg_log_likelihood.contiguous()), as_dlprim(log_beta), as_dlprim(out)))
    return out
