"""Losses on ocl devices.

Most of PyTorch's losses are composite (``cross_entropy``, ``kl_div``, ``l1_loss``, the
margin and embedding losses, ``poisson_nll_loss`` ...): the dispatcher decomposes them
above the device into operators dlprim runs. The ones with ATen kernels of their own run
here as PyTorch's reference decompositions (``torch._decomp``), whose pieces are ocl
operators, so nothing leaves the device; each was checked against the CPU's kernel
(tests/test_torch_loss.py). Where a reference decomposition is missing or differs from
the CPU (``multilabel_margin_loss_forward``'s counts labels after the first -1;
``soft_margin_loss``'s computes float16 in float32, where the CPU's overflows), and for
``multi_margin_loss`` (whose reference builds a class index with ``arange``; a scatter
does without), the loss is written here from its formula, over ocl operators too.
``nll_loss`` keeps dlprim's row kernel (``core.loss``) for the common case, (N, C)
float32 scores without class weights.
"""
import torch
from torch._decomp import decomposition_table

from . import ops_nn, ops_embedding_bag, ops_ctc  # noqa: F401  (embedding_bag, ctc_loss)
from .dispatch import register

aten = torch.ops.aten

__all__ = []

_MEAN, _SUM = 1, 2


def _reference(*packets):
    """The functional overload of these packets as PyTorch decomposes it (their out=
    overloads go through it: see dispatch)."""
    for packet in packets:
        fn = decomposition_table[packet.default]
        register(packet.default)(_no_elements_safe(fn) if packet._qualified_op_name.endswith(
            "_backward") else fn)


def _no_elements_safe(backward):
    """A loss's backward whose reference divides by the element count in Python: an empty
    input has an empty gradient."""
    def run(grad, x, *args, **kwargs):
        if x.numel() == 0:
            return torch.empty_like(x)
        return backward(grad, x, *args, **kwargs)
    return run


_reference(aten.mse_loss, aten.mse_loss_backward, aten.smooth_l1_loss,
           aten.smooth_l1_loss_backward, aten.huber_loss, aten.huber_loss_backward,
           aten.binary_cross_entropy_backward, aten.binary_cross_entropy_with_logits,
           aten.soft_margin_loss_backward)


# ----- binary_cross_entropy: the CPU refuses probabilities outside [0, 1] (NaN included),
# which a log would turn into a silent NaN; the check reads one pair of flags back
def _check_probabilities(x, target):
    bad = torch.stack([~((v >= 0) & (v <= 1)).all() for v in (x, target)]).tolist()
    for what, flag in zip(("input", "target"), bad):
        if flag:
            raise RuntimeError("all elements of %s should be between 0 and 1" % what)


@register(aten.binary_cross_entropy.default)
def _binary_cross_entropy(x, target, weight=None, reduction=_MEAN):
    _check_probabilities(x, target)
    return decomposition_table[aten.binary_cross_entropy.default](x, target, weight, reduction)


# ----- soft_margin_loss: log(1 + exp(-y x)) step by step in the input's dtype, as the
# CPU's kernel does (in float16 exp(-y x) overflows to inf past 11: so does the CPU's loss)
@register(aten.soft_margin_loss.default)
def _soft_margin_loss(x, target, reduction=_MEAN):
    return _reduce_rows(torch.log1p(torch.exp(-x * target)), reduction)


# ----- nll_loss: dlprim's row kernel where it applies, else the reference decomposition
def _labels(target):
    """The CPU's check of the labels' dtype; bytes become int64 (the kernels' type)."""
    if target.dtype == torch.uint8:
        return target.to(torch.int64)
    if target.dtype != torch.int64:
        raise RuntimeError("expected target dtype to be Long or Byte, but got %s"
                           % str(target.dtype).replace("torch.", "").capitalize())
    return target


def _fast_nll(x, target, weight, dims=2):
    return (weight is None and x.dim() == dims and x.dtype == torch.float32
            and target.dtype == torch.int64 and x.numel() > 0)


def _fast_nll2d(x, target, weight):
    return _fast_nll(x, target, weight, 4)


def _poisoned(out, target, classes, ignore_index):
    """The row kernel leaves out a label outside [0, C) as if ignored, where the CPU raises:
    its loss becomes NaN instead (no host round trip to raise)."""
    bad = ((target < 0) | (target >= classes)) & (target != ignore_index)
    if out.dim():
        return torch.where(bad.reshape(out.shape), torch.full_like(out, float("nan")), out)
    return torch.where(bad.any(), torch.full_like(out, float("nan")), out)


def _register_nll(forward, backward, fast, fast_forward, fast_backward):
    """nll_loss / nll_loss2d and their backward: the row kernel (ops_nn) where ``fast``
    says it serves the call, else PyTorch's decomposition over ocl operators."""
    @register(forward)
    def run_forward(x, target, weight, reduction, ignore_index):
        target = _labels(target)
        if fast(x, target, weight):
            out, total = fast_forward(x, target, weight, reduction, ignore_index)
            return _poisoned(out, target, x.shape[1], ignore_index), total
        return decomposition_table[forward](x, target, weight, reduction, ignore_index)

    @register(backward)
    def run_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
        target = _labels(target)
        if fast(x, target, weight):
            return fast_backward(grad, x, target, weight, reduction, ignore_index,
                                 total_weight)
        return decomposition_table[backward](grad, x, target, weight, reduction,
                                             ignore_index, total_weight)


_register_nll(aten.nll_loss_forward.default, aten.nll_loss_backward.default, _fast_nll,
              ops_nn._nll_loss_forward, ops_nn._nll_loss_backward)
_register_nll(aten.nll_loss2d_forward.default, aten.nll_loss2d_backward.default, _fast_nll2d,
              ops_nn._nll_loss2d_forward, ops_nn._nll_loss2d_backward)


def _reduce_rows(per_row, reduction):
    if reduction == _MEAN:
        return per_row.mean()
    if reduction == _SUM:
        return per_row.sum()
    return per_row


def _row_scale(grad, n, reduction):
    """d loss / d per-row loss, as an (n, 1) column."""
    if reduction == _MEAN:
        return (grad / n).expand(n).unsqueeze(1)
    if reduction == _SUM:
        return grad.expand(n).unsqueeze(1)
    return grad.reshape(n, 1)


# ----- multi_margin_loss: loss_n = sum_{i != y} max(0, m - x_y + x_i)^p w_y / C
def _multi_margin_terms(x, target, p, margin, weight):
    """(x as (N, C), target as (N, 1), z (N, C) with the y column and inactive terms 0,
    the y column's weight w_y (N, 1) or None)."""
    if p not in (1, 2):
        raise RuntimeError("multi_margin_loss: only p == 1 and p == 2 supported")
    x2 = torch.atleast_2d(x)
    n, c = x2.shape
    if x.dim() > 2 or c == 0:
        raise RuntimeError("multi_margin_loss: expected non-empty vector or matrix with "
                           "optional 0-dim batch size, but got: %s" % (list(x.shape),))
    if target.numel() != n or target.dim() > 1:
        raise RuntimeError("multi_margin_loss: inconsistent target size, expected %d but got "
                           "%s" % (n, list(target.shape)))
    t = target.reshape(n, 1)
    z = margin - torch.gather(x2, 1, t) + x2
    others = torch.ones_like(z).scatter(1, t, 0.0)  # the target's own column adds nothing
    z = torch.where((z > 0) & (others > 0), z, torch.zeros_like(z))
    return x2, t, z, (None if weight is None else weight.reshape(-1)[t])


@register(aten.multi_margin_loss.default)
def _multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=_MEAN):
    x2, _, z, w = _multi_margin_terms(x, target, p, margin, weight)
    terms = z if p == 1 else z * z
    if w is not None:
        terms = terms * w
    per_row = terms.sum(1) / x2.shape[1]
    if reduction not in (_MEAN, _SUM):
        return per_row.reshape(x.shape[:-1])
    return _reduce_rows(per_row, reduction)


@register(aten.multi_margin_loss_backward.default)
def _multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=_MEAN):
    x2, t, z, w = _multi_margin_terms(x, target, p, margin, weight)
    n, c = x2.shape
    g = z * 2 if p == 2 else (z > 0).to(z.dtype)
    if w is not None:
        g = g * w
    g = g * (_row_scale(grad, n, reduction) / c)
    # x_y appears with a minus sign in every active term of its row
    g = g - torch.zeros_like(g).scatter_add(1, t, g.sum(1, keepdim=True))
    return g.reshape(x.shape)


# ----- multilabel_margin_loss: loss_n = sum_{j labelled} sum_{i not a label}
# max(0, 1 - (x_{y_j} - x_i)) / C, the labels being target's entries before its first -1
def _multilabel_terms(x, target):
    """x as (N, C); the labels (N, J) (0 in the slots from the first -1 on); is_target
    (N, C); the hinge terms z (N, J, I), 0 where not counted; and where they count."""
    x2, t2 = torch.atleast_2d(x), torch.atleast_2d(target)
    counted = (t2 == -1).cumsum(1) == 0
    labels = torch.where(counted, t2, torch.zeros_like(t2))
    hits = torch.zeros_like(x2).scatter_add(1, labels, counted.to(x2.dtype))
    is_target = hits > 0
    z = 1.0 - torch.gather(x2, 1, labels).unsqueeze(2) + x2.unsqueeze(1)
    live = (z > 0) & counted.unsqueeze(2) & ~is_target.unsqueeze(1)
    return x2, labels, is_target, torch.where(live, z, torch.zeros_like(z)), live


@register(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss_forward(x, target, reduction):
    _check_multilabel(x, target)
    x2, _, is_target, z, _ = _multilabel_terms(x, target)
    per_row = z.sum((1, 2)) / x2.shape[1]
    loss = _reduce_rows(per_row, reduction)
    if reduction not in (_MEAN, _SUM) and x.dim() < 2:
        loss = loss.reshape(())
    return loss, is_target.to(x.dtype).reshape(target.shape)


def _check_multilabel(x, target):
    if x.dim() > 2 or (x.dim() > 0 and x.shape[-1] == 0):
        raise RuntimeError("multilabel_margin_loss: expected non-empty vector or matrix with "
                           "optional 0-dim batch size, but got: %s" % (list(x.shape),))
    if tuple(target.shape) != tuple(x.shape):
        raise RuntimeError("multilabel_margin_loss: inconsistent target size: %s for input "
                           "of size: %s" % (list(target.shape), list(x.shape)))


@register(aten.multilabel_margin_loss_backward.default)
def _multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    x2, labels, _, _, live = _multilabel_terms(x, target)
    n, c = x2.shape
    live = live.to(x2.dtype)
    scale = _row_scale(grad, n, reduction) / c
    # +1 for x_i per live (j, i), -1 for x_{y_j}
    g = live.sum(1) - torch.zeros_like(x2).scatter_add(1, labels, live.sum(2))
    return (g * scale).reshape(x.shape)
