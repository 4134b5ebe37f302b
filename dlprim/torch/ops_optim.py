"""``torch.optim``'s fused updates on ocl devices (``fused=True``): one pointwise launch
per parameter for the whole SGD / Adam / AdamW step, where the default path issues five
to ten operators per parameter. The step count is read on the device (the optimizer
keeps it there for fused updates), so nothing waits for the host."""
import numpy as np
import torch

from ..core.pointwise import pointwise_op
from .dispatch import register
from .tensor import as_dlprim

aten = torch.ops.aten

__all__ = []


def _update_each(code, values, pairs):
    """One pointwise launch of ``code`` per parameter, over each (xs, ys) of dlprim tensors:
    the op and its typed params are looked up once per parameter shape, not per parameter."""
    ops = {}
    for xs, ys in pairs:
        key = tuple((t.shape, t.dtype) for t in xs + ys)
        entry = ops.get(key)
        if entry is None:
            entry = ops[key] = pointwise_op(xs[0].ctx, xs, ys, code, values)
        op, typed = entry
        op.enqueue_now(xs, ys, typed, 0.0, xs[0].ctx.queue)


def _check(op, tensors, grad_scale, found_inf):
    if grad_scale is not None or found_inf is not None:
        raise NotImplementedError("dlprim.torch: %s with a gradient scaler (mixed precision) "
                                  "is not supported on ocl devices" % op)
    for t in tensors:
        if t.dtype != torch.float32 or not t.is_contiguous():
            raise NotImplementedError("dlprim.torch: %s takes contiguous float32 tensors on ocl "
                                      "devices, got %s %s" % (op, t.dtype, list(t.stride())))


def _adam(op, decoupled, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
          lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf):
    _check(op, list(params) + list(grads) + list(exp_avgs) + list(exp_avg_sqs),
           grad_scale, found_inf)
    # x0 param, x1 grad, x2 exp_avg, x3 exp_avg_sq, x4 step, [x5 max_exp_avg_sq];
    # w: lr, beta1, beta2, weight_decay, eps, sign (-1 to maximize)
    decay = ("float p = x0 * (1.0f - w0 * w3); float g = w5 * x1;" if decoupled
             else "float p = x0; float g = w5 * x1 + w3 * x0;")
    code = (decay + " float m = x2 + (1.0f - w1) * (g - x2);"
            " float v = w2 * x3 + (1.0f - w2) * g * g;"
            " float bc1 = 1.0f - pow(w1, x4), bc2 = 1.0f - pow(w2, x4);")
    if amsgrad:
        code += (" float vmax = fmax(x5, v); y3 = vmax;"
                 " y0 = p - w0 / bc1 * m / (sqrt(vmax) / sqrt(bc2) + w4);")
    else:
        code += " y0 = p - w0 / bc1 * m / (sqrt(v) / sqrt(bc2) + w4);"
    code += " y1 = m; y2 = v;"
    values = [np.float32(v) for v in (lr, beta1, beta2, weight_decay, eps,
                                      -1.0 if maximize else 1.0)]
    def pairs():
        for i, p in enumerate(params):
            if p.numel() == 0:
                continue
            step = as_dlprim(state_steps[i]).view((1,) * p.dim())
            pd, m, v = as_dlprim(p), as_dlprim(exp_avgs[i]), as_dlprim(exp_avg_sqs[i])
            xs, ys = [pd, as_dlprim(grads[i]), m, v, step], [pd, m, v]
            if amsgrad:
                vmax = as_dlprim(max_exp_avg_sqs[i])
                xs.append(vmax)
                ys.append(vmax)
            yield xs, ys
    _update_each(code, values, pairs())


def _fused_adam(name, decoupled):
    """The aten._fused_adam_ / _fused_adamw_ implementation (AdamW: decoupled decay)."""
    def run(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
            beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
        _adam(name, decoupled, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
              state_steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
              found_inf)
    return run


register(aten._fused_adam_.default)(_fused_adam("Adam(fused=True)", False))
register(aten._fused_adamw_.default)(_fused_adam("AdamW(fused=True)", True))


@register(aten._fused_sgd_.default)
def _fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
                nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    _check("SGD(fused=True)", list(params) + list(grads), grad_scale, found_inf)
    # x0 param, x1 grad, [x2 momentum buffer]; w: lr, weight_decay, momentum, dampening, sign
    code = "float d = w4 * x1 + w1 * x0;"
    if momentum:
        code += (" float b = %s; y1 = b;" % ("d" if is_first_step else "w2 * x2 + (1.0f - w3) * d"))
        code += " d = %s;" % ("d + w2 * b" if nesterov else "b")
    code += " y0 = x0 - w0 * d;"
    values = [np.float32(v) for v in (lr, weight_decay, momentum, dampening,
                                      -1.0 if maximize else 1.0)]
    def pairs():
        for i, p in enumerate(params):
            if p.numel() == 0:
                continue
            pd = as_dlprim(p)
            xs, ys = [pd, as_dlprim(grads[i])], [pd]
            if momentum:
                buf = as_dlprim(momentum_buffer_list[i])
                xs.append(buf)
                ys.append(buf)
            yield xs, ys
    _update_each(code, values, pairs())
