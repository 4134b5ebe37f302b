"""Normalisation on ocl devices: PyTorch's ``_native_batch_norm_legit`` family and its
backward on dlprim's ``BatchNormOps`` (batch statistics, the running statistics updated
in place as PyTorch does, or the running statistics in evaluation), and layer norm over
the trailing dims on the pointwise-broadcast-reduce generator.

float16 and bfloat16 inputs are stored 16-bit and computed in float32; the statistics are
float32 inside, and returned as PyTorch's CPU returns them: float32 where a parameter or
running statistic is float32 (its "mixed type" case), else in the input's dtype. float64
inputs (devices with cl_khr_fp64) keep everything float64: statistics, parameters and the
arithmetic, in double."""
import math

import torch
from torch._decomp import decomposition_table

from ..core.batchnorm import BatchNormOps
from ..core.normalization import GroupNormOps
from ..core.pointwise import memo, pointwise_launches
from ..tensor import Tensor
from .dispatch import register
from .ops_tensor import convert
from .tensor import accumulate_dtype, as_dlprim, empty, enqueue_recorded, numpy_dtype

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_HALF = (torch.float16, torch.bfloat16)

aten = torch.ops.aten

__all__ = ["weight_norm_backward"]


def _shape(x):
    n, c = x.shape[0], x.shape[1]
    return n, c, math.prod(x.shape[2:])


def _check_float(what, x):
    if x.dtype not in _FLOATS:
        raise NotImplementedError("dlprim.torch: %s on ocl devices takes float32, float16, "
                                  "bfloat16 or float64, got %s" % (what, x.dtype))


def _stat_dtype(x, *params):
    """The dtype of the saved statistics, as on PyTorch's CPU."""
    if x.dtype in _HALF and any(p is not None and p.dtype == torch.float32
                                        for p in params):
        return torch.float32
    return x.dtype


def _acc(x):
    """The dtype of the launchers' statistics and parameters for input x."""
    return accumulate_dtype(x.dtype)


def _as(t, dtype):
    return t if t is None or t.dtype == dtype else convert(t, dtype)


def _op(x, eps, affine):
    ctx = x._ocl_storage.ctx
    shape, dtype = _shape(x), numpy_dtype(x.dtype)
    return memo(ctx, ("torch_bn", shape, float(eps), bool(affine), dtype),
                 lambda: BatchNormOps(ctx, shape, eps, affine, dtype=dtype))


def _scratch(ctx, c, dtype=torch.float32):
    """Four (C,) vectors of ``dtype`` (the statistics') for the values a batch norm needs
    only between its own launches (variance, partial counts, the sums of an absent
    gradient, running statistics nobody keeps). One set per context, C and dtype serves
    every such layer: the queue is in order, so a layer's launches are done with them
    before the next layer's start."""
    key = ("torch_bn_scratch", c, dtype)
    vectors = ctx.ops.get(key)
    if vectors is None:
        vectors = ctx.ops[key] = [Tensor(ctx, (c,), numpy_dtype(dtype)) for _ in range(4)]
    return vectors


def _forward(x, weight, bias, running_mean, running_var, training, momentum, eps):
    _check_float("batch norm", x)
    stat_dtype = _stat_dtype(x, weight, bias, running_mean, running_var)
    kept = running_mean, running_var  # updated in place, in their own dtype
    acc = _acc(x)
    weight, bias, running_mean, running_var = (_as(t, acc) for t in (weight, bias, running_mean,
                                                                      running_var))
    if weight is None and bias is not None:  # the launchers take a bias with a weight
        weight = torch.ones_like(bias)
    out, mean, rstd = _forward_stats(x, weight, bias, running_mean, running_var, training,
                                     momentum, eps)
    if training and kept[0] is not None and kept[0].dtype != acc:
        kept[0].copy_(running_mean)
        kept[1].copy_(running_var)
    return out, _as(mean, stat_dtype), _as(rstd, stat_dtype)


def _forward_stats(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Batch norm of x with parameters and running statistics in ``_acc(x)``."""
    ctx, index = x._ocl_storage.ctx, x._ocl_storage.index
    n, c, s = _shape(x)
    affine = weight is not None
    op = _op(x, eps, affine)
    out = empty(x.shape, x.dtype, index)
    f = _acc(x)
    mean, rstd = empty((c,), f, index), empty((c,), f, index)
    xs, ys = as_dlprim(x).view((n, c, s)), as_dlprim(out).view((n, c, s))
    gamma = as_dlprim(weight) if affine else None
    beta = as_dlprim(bias) if bias is not None else None
    if affine and beta is None:
        beta = Tensor(ctx, (c,), numpy_dtype(f))
        beta.zero_()
    if training:
        var, scratch, r_mean, r_var = _scratch(ctx, c, f)  # r_*: where no running statistics
        if running_mean is not None and not (running_mean.is_contiguous()
                                             and running_var.is_contiguous()):
            # updated in place: a copy would take the update and lose it
            raise NotImplementedError("dlprim.torch: batch norm running statistics must be "
                                      "contiguous")
        if running_mean is not None:
            r_mean, r_var = as_dlprim(running_mean), as_dlprim(running_var)
        # the scratch vectors are not rebound: they stay in the recording
        ts = (xs, ys, as_dlprim(mean), r_mean, r_var, gamma, beta,
              as_dlprim(rstd))
        enqueue_recorded(ctx, (op, "train", float(momentum)), ts, lambda: (
            op.stats_launches(ts[0], ts[2], var, ts[3], ts[4], momentum, scratch)
            + op.apply_launches(ts[0], ts[1], ts[2], var, ts[5], ts[6])
            + pointwise_launches(ctx, [var], [ts[7]], "y0 = rsqrt(x0 + w0);",
                                 [float(eps)])))
        return out, mean, rstd
    ts = (xs, ys, as_dlprim(running_mean), as_dlprim(running_var), gamma, beta)
    enqueue_recorded(ctx, (op, "eval"), ts, lambda: op.apply_launches(*ts))
    return out, empty((0,), f, index), empty((0,), f, index)


@register(aten._native_batch_norm_legit.default)
def _bn_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _forward(x, weight, bias, running_mean, running_var, training, momentum, eps)


@register(aten._native_batch_norm_legit.no_stats)
def _bn_legit_no_stats(x, weight, bias, training, momentum, eps):
    return _forward(x, weight, bias, None, None, True, momentum, eps)


@register(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    return _forward(x, weight, bias, running_mean, running_var, False, momentum, eps)


@register(aten.native_batch_norm.default)
def _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _forward(x, weight, bias, running_mean, running_var,
                    training or running_mean is None, momentum, eps)


@register(aten.native_batch_norm_backward.default)
def _bn_backward(grad, x, weight, running_mean, running_var, save_mean, save_rstd, train, eps,
                 output_mask):
    _check_float("batch norm", x)
    param_dtype = weight.dtype if weight is not None else x.dtype
    had_weight = weight is not None
    acc = _acc(x)
    weight = _as(weight, acc)
    if weight is None and (output_mask[1] or output_mask[2]):
        # the parameter sums are gamma's and beta's gradients whatever gamma is
        weight = empty((x.shape[1],), acc, x._ocl_storage.index).fill_(1.0)
    dx, dw, db = _bn_backward_stats(_as(grad, x.dtype), x, weight, *(_as(t, acc) for t in (
        running_mean, running_var, save_mean, save_rstd)), train, eps, output_mask)
    return dx, _as(dw, param_dtype) if had_weight else None, _as(db, param_dtype)


def _bn_backward_stats(grad, x, weight, running_mean, running_var, save_mean, save_rstd,
                       train, eps, output_mask):
    """Batch norm's gradients with parameters and statistics in ``_acc(x)`` (dw, db in it
    too)."""
    ctx, index = x._ocl_storage.ctx, x._ocl_storage.index
    n, c, s = _shape(x)
    affine = weight is not None
    op = _op(x, eps, affine)
    rstd = None
    f = _acc(x)
    scratch = _scratch(ctx, c, f)
    if train:
        mean, rstd = as_dlprim(save_mean), as_dlprim(save_rstd)
        var = scratch[0]  # back from 1 / sqrt(var + eps), in the plan
    else:
        mean, var = as_dlprim(running_mean), as_dlprim(running_var)
    dx = empty(x.shape, x.dtype, index) if output_mask[0] else None
    dw = empty((c,), f, index) if output_mask[1] and affine else None
    db = empty((c,), f, index) if output_mask[2] and affine else None
    # the per-channel sums of dy and dy*xhat are dbeta and dgamma: reduced straight into them
    sums = tuple(as_dlprim(t) if t is not None else spare
                 for t, spare in zip((db, dw), scratch[1:3]))
    ts = (as_dlprim(x).view((n, c, s)), as_dlprim(grad).view((n, c, s)), mean, var) + sums + (
        as_dlprim(weight) if affine else None,
        as_dlprim(dx).view((n, c, s)) if dx is not None else None, rstd)
    wanted = dw is not None or db is not None

    def plan():
        var_back = [] if rstd is None else pointwise_launches(
            ctx, [ts[8]], [ts[3]], "y0 = 1.0f / (x0 * x0) - w0;", [float(eps)])
        return var_back + op.backward_launches(*ts[:4], ts[4:6], gamma=ts[6], dx=ts[7],
                                               sums_wanted=wanted, batch_stats=bool(train))
    enqueue_recorded(ctx, (op, "backward", bool(train), wanted), ts, plan)
    return dx, dw, db


# ----- layer norm and group norm: core.normalization's launchers over an (N, G, K, S)
# view, recorded per signature like batch norm's
def _norm_op(x, view, affine, bias):
    """The launchers of one view (any eps: it is a forward launch argument)."""
    ctx, dtype = x._ocl_storage.ctx, numpy_dtype(x.dtype)
    return memo(ctx, ("torch_norm", view, affine, bias, dtype),
                 lambda: GroupNormOps(ctx, view, 1e-5, affine, bias=bias, dtype=dtype))


def _norm_forward(x, view, weight, bias, eps, stat_shape):
    _check_float("layer and group norm", x)
    ctx, index = x._ocl_storage.ctx, x._ocl_storage.index
    stat_dtype = _stat_dtype(x, weight, bias)
    acc = _acc(x)
    weight, bias = _as(weight, acc), _as(bias, acc)
    out = empty(x.shape, x.dtype, index)
    mean, rstd = (empty(stat_shape, acc, index) for _ in range(2))
    if x.numel() == 0:
        return out, _as(mean, stat_dtype), _as(rstd, stat_dtype)
    op = _norm_op(x, view, weight is not None, bias is not None)
    ts = (as_dlprim(x), as_dlprim(out), as_dlprim(mean), as_dlprim(rstd),
          as_dlprim(weight) if weight is not None else None,
          as_dlprim(bias) if bias is not None else None)
    enqueue_recorded(ctx, (op, "forward", float(eps)), ts,
                     lambda: op.forward_launches(*ts, eps=eps))
    return out, _as(mean, stat_dtype), _as(rstd, stat_dtype)


def _norm_backward(grad, x, view, mean, rstd, weight, output_mask, param_shape, param_dtype):
    """dx, dweight, dbias (dbias wherever output_mask asks: a bias may come without a
    weight, and its gradient is the sum of dy either way)."""
    _check_float("layer and group norm", x)
    ctx, index = x._ocl_storage.ctx, x._ocl_storage.index
    grad = _as(grad, x.dtype)
    f = _acc(x)
    mean, rstd, weight = _as(mean, f), _as(rstd, f), _as(weight, f)
    dx = empty(x.shape, x.dtype, index) if output_mask[0] else None
    dw = empty(param_shape, f, index) if output_mask[1] and weight is not None else None
    db = empty(param_shape, f, index) if output_mask[2] else None
    if x.numel() == 0:
        for t in (dw, db):
            if t is not None:
                as_dlprim(t).zero_()
        return dx, _as(dw, param_dtype), _as(db, param_dtype)
    op = _norm_op(x, view, weight is not None, db is not None)  # the backward reads neither
    stats = view[0] * view[1]
    sums = (Tensor(ctx, (stats,), numpy_dtype(f)), Tensor(ctx, (stats,), numpy_dtype(f)))
    ts = (as_dlprim(x), as_dlprim(grad), as_dlprim(mean), as_dlprim(rstd),
          as_dlprim(dx) if dx is not None else None,
          as_dlprim(weight) if weight is not None else None,
          as_dlprim(dw) if dw is not None else None,
          as_dlprim(db) if db is not None else None) + sums
    enqueue_recorded(ctx, (op, "backward"), ts, lambda: op.backward_launches(
        *ts[:4], dx=ts[4], weight=ts[5], dweight=ts[6], dbias=ts[7], sums=ts[8:],
        param_beta=0.0))
    return dx, _as(dw, param_dtype), _as(db, param_dtype)


def _layer_view(x, normalized_shape):
    k = math.prod(normalized_shape)
    return (x.numel() // max(k, 1), 1, k, 1)


@register(aten.native_layer_norm.default)
def _layer_norm(x, normalized_shape, weight, bias, eps):
    stat_shape = tuple(x.shape[:x.dim() - len(normalized_shape)]) + (1,) * len(normalized_shape)
    return _norm_forward(x, _layer_view(x, normalized_shape), weight, bias, eps, stat_shape)


@register(aten.native_layer_norm_backward.default)
def _layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    mask = (output_mask[0], output_mask[1] and weight is not None,
            output_mask[2] and bias is not None)
    return _norm_backward(grad, x, _layer_view(x, normalized_shape), mean, rstd, weight, mask,
                          tuple(normalized_shape), _param_dtype(x, weight, bias))


@register(aten.native_group_norm.default)
def _group_norm(x, weight, bias, n, c, hw, groups, eps):
    return _norm_forward(x, (n, groups, c // groups, hw), weight, bias, eps, (n, groups))


@register(aten.native_group_norm_backward.default)
def _group_norm_backward(grad, x, mean, rstd, weight, n, c, hw, groups, output_mask):
    return _norm_backward(grad, x, (n, groups, c // groups, hw), mean, rstd, weight,
                          output_mask, (c,), weight.dtype if weight is not None else mean.dtype)


# PyTorch's newer batch norm entry points (what torch.nn.functional.batch_norm calls in
# training and evaluation): the same forward, an empty reserve (cuDNN's workspace)
@register(aten._batch_norm_with_update.default)
def _bn_with_update(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, rstd = _forward(x, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, rstd, empty((0,), torch.uint8, x._ocl_storage.index)


@register(aten._batch_norm_no_update.default)
def _bn_no_update(x, weight, bias, running_mean, running_var, momentum, eps):
    out, mean, rstd = _forward(x, weight, bias, running_mean, running_var,
                               running_mean is None, momentum, eps)
    return out, mean, rstd, empty((0,), torch.uint8, x._ocl_storage.index)


# its backward: native_batch_norm_backward, by PyTorch's reference decomposition
register(aten.batch_norm_backward.default)(decomposition_table[aten.batch_norm_backward.default])


def _param_dtype(x, *params):
    return next((p.dtype for p in params if p is not None), x.dtype)


# ----- weight normalization (nn.utils.weight_norm, parametrizations.weight_norm): PyTorch
# decomposes the forward (_weight_norm_interface) into norms and products; its backward
# has no decomposition, so it is written here in the same ATen operators, on the device
@register(aten._weight_norm_interface_backward.default)
def weight_norm_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """(grad_v, grad_g) of w = g * v / norms, norms the 2-norm of v over every dim but
    ``dim`` (every dim where dim is -1), as PyTorch's kernel: grad_g = sum(grad_w * v) /
    norms over those dims, grad_v = g / norms * (grad_w - v * sum(grad_w * v) / norms^2)."""
    dims = [d for d in range(saved_v.dim()) if d != dim % saved_v.dim()] if dim != -1 \
        else list(range(saved_v.dim()))
    dots = aten.sum.dim_IntList(aten.mul.Tensor(grad_w, saved_v), dims, True)
    norms = aten.reshape.default(saved_norms, dots.shape)
    g = aten.reshape.default(saved_g, dots.shape)
    grad_g = aten.div.Tensor(dots, norms)
    scaled = aten.mul.Tensor(saved_v, aten.div.Tensor(grad_g, norms))
    grad_v = aten.mul.Tensor(aten.div.Tensor(g, norms), aten.sub.Tensor(grad_w, scaled))
    return grad_v, aten.reshape.default(grad_g, saved_g.shape)
