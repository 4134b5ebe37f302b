"""The fused recurrent cells PyTorch calls once per time step on an accelerator, on the
gate kernels of the Net's recurrent layers (``kernels/recurrent.cl``): what ``nn.LSTM``,
``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` reach on ocl. PyTorch computes the gate
products itself (``F.linear`` of the input and of the hidden state) and hands the cell
their sums; its autograd formulas call the backward cells.

- ``_thnn_fused_lstm_cell(igates, hgates, cx, b_ih, b_hh) -> (hy, cy, workspace)``: the
  workspace (N, 4H) holds the activated gates i, f, g, o;
- ``_thnn_fused_lstm_cell_backward_impl(dhy, dcy, cx, cy, workspace, has_bias)
  -> (dgates, dcx, dbias)``;
- ``_thnn_fused_gru_cell(igates, hgates, hx, b_ih, b_hh) -> (hy, workspace)``: the
  workspace (N, 5H) holds r, z, n and the hidden n-gate's product (N x 4H, one row of
  four blocks per sample) followed by hx (N x H);
- ``_thnn_fused_gru_cell_backward(dhy, workspace, has_bias)
  -> (d_igates, d_hgates, dhx, d_b_ih, d_b_hh)``: dhx is the direct part (dhy z);
  PyTorch adds what flows through the hidden product.

The kernels compute in float32; 16-bit gates are widened first and the results stored
back in their dtype. An absent gradient (``None``) is zeros.
"""
import numpy as np
import torch

from ..core.pointwise import memo
from ..kernels import program
from ..utils import round_up
from .dispatch import register
from .ops_tensor import convert
from .tensor import as_dlprim, empty, enqueue

aten = torch.ops.aten

__all__ = []

_WG = 64  # work-items along the hidden units (recurrent.cl's launch: unit j, row n)


def _float(t):
    """t as a contiguous float32 ocl tensor (a copy where it is not one already)."""
    if t.dtype != torch.float32:
        t = convert(t, torch.float32)
    return t if t.is_contiguous() else t.contiguous()


def _gates(what, igates, hgates, state, blocks):
    """(N, H) of a cell call, its float32 operands checked: gates (N, blocks*H), the
    state (N, H)."""
    if igates.dim() != 2 or igates.shape != hgates.shape or state.dim() != 2 or \
            igates.shape[0] != state.shape[0] or igates.shape[1] != blocks * state.shape[1]:
        raise RuntimeError("%s: gates of shape %s and %s and a state of shape %s: expected "
                           "(N, %d*H) and (N, H)" % (what, tuple(igates.shape),
                                                     tuple(hgates.shape), tuple(state.shape),
                                                     blocks))
    return int(state.shape[0]), int(state.shape[1])


def _launch(ctx, cell, kernel, n, h, args, save=True):
    prg = memo(ctx, ("torch_rnn_cell", cell, save),
               lambda: program.get(ctx, "recurrent", CELL=cell, SAVE=int(save), DY=0))
    return program.Launch(prg, kernel, (round_up(h, _WG), n), (_WG, 1),
                          [np.int32(n), np.int32(h)] + args)


def _at(t):
    """Kernel arguments of a contiguous ocl tensor: buffer and offset of its first element."""
    d = as_dlprim(t)
    return [d.buffer, np.uint64(d.offset)]


def _with_bias(gates, *biases):
    """gates plus the biases given (summed first: one pass over the gates, a step's
    largest tensor), float32 and contiguous."""
    given = [b for b in biases if b is not None]
    if not given:
        return _float(gates)
    bias = given[0] if len(given) == 1 else given[0] + given[1]
    return _float(gates + bias)


def _zeros_or(t, shape, like):
    if t is None:
        return torch.zeros(shape, dtype=torch.float32, device=like.device)
    return _float(t).clone()


def _stored(t, dtype):
    return t if dtype == torch.float32 else convert(t, dtype)


@register(aten._thnn_fused_lstm_cell.default)
def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    n, h = _gates("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, 4)
    dtype, index = input_gates.dtype, input_gates._ocl_storage.index
    xg = _with_bias(input_gates, input_bias, hidden_bias)  # biases: either side of the sum
    hg, c_prev = _float(hidden_gates), _float(cx)
    hy, cy = empty((n, h), torch.float32, index), empty((n, h), torch.float32, index)
    work = empty((n, 4 * h), torch.float32, index)
    if n and h:
        args = (_at(xg) + [np.uint64(4 * h)] + _at(hg) + _at(c_prev) + _at(cy) + _at(hy)
                + [np.uint64(h)] + _at(work))
        enqueue(cx._ocl_storage.ctx, [_launch(cx._ocl_storage.ctx, "lstm", "lstm_forward",
                                              n, h, args)])
    return _stored(hy, dtype), _stored(cy, dtype), _stored(work, dtype)


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    n, h = int(cx.shape[0]), int(cx.shape[1])
    dtype, index = cx.dtype, cx._ocl_storage.index
    dh = _zeros_or(grad_hy, (n, h), cx)
    dc = _zeros_or(grad_cy, (n, h), cx)  # dcy in; the kernel leaves dcx = dc f there
    dgates = empty((n, 4 * h), torch.float32, index)
    if n and h:
        args = (_at(dh) + _at(dc) + _at(_float(workspace)) + _at(_float(cy)) + _at(_float(cx))
                + _at(dgates))
        enqueue(cx._ocl_storage.ctx, [_launch(cx._ocl_storage.ctx, "lstm", "lstm_backward",
                                              n, h, args)])
    dbias = dgates.sum(0) if has_bias else None
    return (_stored(dgates, dtype), _stored(dc, dtype),
            None if dbias is None else _stored(dbias, dtype))


@register(aten._thnn_fused_gru_cell.default)
def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    n, h = _gates("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, 3)
    dtype, index = input_gates.dtype, input_gates._ocl_storage.index
    # b_hh joins the hidden side: the n gate is tanh(xg_n + r (hg_n + b_hn))
    xg, hg = _with_bias(input_gates, input_bias), _with_bias(hidden_gates, hidden_bias)
    h_prev = _float(hx)
    hy = empty((n, h), torch.float32, index)
    work = empty((n, 5 * h), torch.float32, index)  # r, z, n, hg_n rows, then hx
    if n and h:
        flat = work.view(-1)
        saved, kept = flat[:4 * n * h], flat[4 * n * h:]
        args = (_at(xg) + [np.uint64(3 * h)] + _at(hg) + _at(h_prev) + [np.uint64(h)]
                + _at(hy) + [np.uint64(h)] + _at(saved))
        enqueue(hx._ocl_storage.ctx, [_launch(hx._ocl_storage.ctx, "gru", "gru_forward",
                                              n, h, args)])
        kept.copy_(h_prev.reshape(-1))
    return _stored(hy, dtype), _stored(work, dtype)


@register(aten._thnn_fused_gru_cell_backward.default)
def _gru_cell_backward(grad_hy, workspace, has_bias):
    n, h = int(grad_hy.shape[0]), int(grad_hy.shape[1])
    if tuple(workspace.shape) != (n, 5 * h):
        raise RuntimeError("_thnn_fused_gru_cell_backward: a workspace of shape %s for a "
                           "gradient of shape %s: expected (N, 5*H)"
                           % (tuple(workspace.shape), tuple(grad_hy.shape)))
    dtype, index = grad_hy.dtype, grad_hy._ocl_storage.index
    dh = _float(grad_hy).clone()  # dhy in; the kernel leaves dhx's direct part, dh z, there
    flat = _float(workspace).reshape(-1)
    saved, h_prev = flat[:4 * n * h], flat[4 * n * h:]
    dxg = empty((n, 3 * h), torch.float32, index)
    dhg = empty((n, 3 * h), torch.float32, index)
    if n and h:
        args = (_at(dh) + _at(saved) + _at(h_prev) + [np.uint64(h)] + _at(dxg) + _at(dhg))
        enqueue(grad_hy._ocl_storage.ctx, [_launch(grad_hy._ocl_storage.ctx, "gru",
                                                   "gru_backward", n, h, args)])
    biases = (dxg.sum(0), dhg.sum(0)) if has_bias else (None, None)
    return tuple(None if t is None else _stored(t, dtype) for t in (dxg, dhg, dh) + biases)
