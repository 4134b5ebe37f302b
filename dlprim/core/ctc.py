"""Connectionist temporal classification (``kernels/ctc.cl``): PyTorch's ``_ctc_loss``
(each sequence's negative log-likelihood and the forward variables log_alpha) and
``_ctc_loss_backward`` (the gradient of the log-probabilities), on the device.

The recursions run along time, so one work-group takes one sequence: its work-items
cover the extended label positions s of a step, and a barrier separates steps. The
gradient then takes one work-item per (step, sequence), which sums alpha beta per label
over the positions that carry it (the blank is every other one) and writes its row.
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..utils import round_up

__all__ = ["CTC", "check_lengths"]


def check_lengths(T, C, targets_shape, input_lengths, target_lengths, blank):
    """(per-sequence [input length, target length, target offset] rows as an int64 array,
    W = 2 max(target length) + 1) after PyTorch's checks, with its messages."""
    n = len(input_lengths)
    if len(target_lengths) != n:
        raise RuntimeError("ctc_loss: input_lengths must be of size batch_size (%d), target "
                           "lengths %d" % (n, len(target_lengths)))
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    info = np.zeros((n, 3), np.int64)
    offset = 0
    for b, (length, tl) in enumerate(zip(input_lengths, target_lengths)):
        length, tl = int(length), int(tl)
        if length < 0 or length > T:
            raise RuntimeError("Expected input_lengths to have value at most %d, but got "
                               "value %d (while checking arguments for ctc_loss_cpu)"
                               % (T, length))
        if tl < 0:
            raise RuntimeError("Expected tensor to have size at least 0 at dimension 1, but "
                               "got size %d for argument #2 'targets'" % tl)
        if len(targets_shape) == 1:
            start = offset
            offset += tl
            if offset > targets_shape[0]:
                raise RuntimeError("Expected tensor to have size at least %d at dimension 1, "
                                   "but got size %d for argument #2 'targets'"
                                   % (offset, targets_shape[0]))
        else:
            if tl > targets_shape[1]:
                raise RuntimeError("Expected tensor to have size at least %d at dimension 1, "
                                   "but got size %d for argument #2 'targets'"
                                   % (tl, targets_shape[1]))
            start = b * targets_shape[1]
        info[b] = (length, tl, start)
    W = 2 * int(max(target_lengths, default=0)) + 1
    return info, W


class CTC:
    """The kernels for one log-probability dtype (float32 or float64) and target index
    dtype."""

    def __init__(self, ctx, dtype, index_dtype):
        dtype, index_dtype = as_dtype(dtype), as_dtype(index_dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError("ctc_loss: log_probs must be float32 or float64, got %s" % dtype)
        if index_dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
            raise TypeError("ctc_loss: targets must be int64 or int32, got %s" % index_dtype)
        self.ctx = ctx
        self.program = program.get(ctx, "ctc", T=cl_type(dtype), I=cl_type(index_dtype))
        self._wg = min(256, ctx.facts.max_work_group)

    def forward_launches(self, log_probs, strides, targets, info, W, blank, log_alpha, nll):
        """log_alpha (N, T, W) and nll (N,) of log_probs (T, N, C; ``strides`` of its
        first two dims in elements, rows of C contiguous); ``info`` the device copy of
        check_lengths' rows."""
        T, N, C = log_probs.shape
        if N == 0:
            return []
        i32, i64 = np.int32, np.int64
        wg = min(self._wg, round_up(W, 32))
        return [program.Launch(self.program, "ctc_alpha", (N * wg,), (wg,),
                               [i32(T), i32(W), i32(C), i64(strides[0]), i64(strides[1]),
                                log_probs, targets, info, i64(blank), log_alpha, nll])]

    def backward_launches(self, grad, grad_stride, log_probs, strides, targets, info, W, blank,
                          zero_infinity, log_alpha, nll, log_beta, out):
        """``out`` (T, N, C, contiguous) = the gradient of log_probs for the losses' gradient
        ``grad`` (N values, ``grad_stride`` apart); ``log_beta`` (N, T, W) is scratch."""
        T, N, C = log_probs.shape
        if N == 0 or T == 0:
            return []
        i32, i64 = np.int32, np.int64
        wg = min(self._wg, round_up(W, 32))
        beta = program.Launch(self.program, "ctc_beta", (N * wg,), (wg,),
                              [i32(T), i32(W), i32(C), i64(strides[0]), i64(strides[1]),
                               log_probs, targets, info, i64(blank), log_beta])
        items = T * N
        lsize = min(self._wg, 64)
        grads = program.Launch(self.program, "ctc_grad", (round_up(items, lsize),), (lsize,),
                               [i32(T), i32(N), i32(W), i32(C), i64(strides[0]),
                                i64(strides[1]), i64(N * C), i64(C), log_probs, targets, info,
                                i64(blank), i32(bool(zero_infinity)), log_alpha, log_beta, nll,
                                grad, i64(grad_stride), out])
        return [beta, grads]
