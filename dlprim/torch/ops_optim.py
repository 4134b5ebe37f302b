"""``torch.optim``'s fused updates on ocl devices (``fused=True``): the whole SGD / Adam /
AdamW step as multi-tensor launches (``multi_tensor.run_lists``: up to 16 parameters per
launch, prepared once per list of tensors), where the default path issues five to ten
operators per parameter. The step count is read on the device (the optimizer keeps it
there for fused updates), so nothing waits for the host."""
import numpy as np
import torch

from .dispatch import register
from .multi_tensor import run_lists

aten = torch.ops.aten

__all__ = ["amp_unscale_", "amp_update_scale_"]


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
    if grad_scale is not None or found_inf is not None:
        _check(op, [], grad_scale, found_inf)
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
    keep = [i for i, p in enumerate(params) if p.numel()]
    xs = [[t[i] for i in keep] for t in (params, grads, exp_avgs, exp_avg_sqs, state_steps)]
    ys = [xs[0], xs[2], xs[3]]
    if amsgrad:
        xs.append([max_exp_avg_sqs[i] for i in keep])
        ys.append(xs[-1])
    run_lists(op, code, xs, ys, values, one=[False] * 4 + [True] + [False] * amsgrad,
              check=lambda: _check(op, [t for k, lst in enumerate(xs) if k != 4 for t in lst],
                                   grad_scale, found_inf))


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
    if grad_scale is not None or found_inf is not None:
        _check("SGD(fused=True)", [], grad_scale, found_inf)
    # x0 param, x1 grad, [x2 momentum buffer]; w: lr, weight_decay, momentum, dampening, sign
    code = "float d = w4 * x1 + w1 * x0;"
    if momentum:
        code += (" float b = %s; y1 = b;" % ("d" if is_first_step else "w2 * x2 + (1.0f - w3) * d"))
        code += " d = %s;" % ("d + w2 * b" if nesterov else "b")
    code += " y0 = x0 - w0 * d;"
    values = [np.float32(v) for v in (lr, weight_decay, momentum, dampening,
                                      -1.0 if maximize else 1.0)]
    keep = [i for i, p in enumerate(params) if p.numel()]
    xs = [[params[i] for i in keep], [grads[i] for i in keep]]
    ys = [xs[0]]
    if momentum:
        xs.append([momentum_buffer_list[i] for i in keep])
        ys.append(xs[2])
    run_lists("SGD(fused=True)", code, xs, ys, values,
              check=lambda: _check("SGD(fused=True)", [t for lst in xs for t in lst],
                                   grad_scale, found_inf))


# ----- torch.amp.GradScaler on ocl: both steps as device operators (no host round trip)
@register(aten._amp_foreach_non_finite_check_and_unscale_.default)
def amp_unscale_(grads, found_inf, inv_scale):
    """Every gradient times inv_scale, in place; found_inf set to 1 where any gradient
    holds an inf or a nan (left as it was otherwise), as PyTorch's kernel does. The check
    is one largest magnitude per gradient (inf or nan where one is) and a few operators
    over them, not an operator chain per gradient."""
    held = [g for g in grads if g.numel()]
    if held:
        largest = torch.stack(torch._foreach_norm(held, float("inf")))
        bad = torch.isfinite(largest).logical_not().any().to(found_inf.dtype)
        found_inf.copy_(torch.maximum(found_inf, bad.reshape(found_inf.shape)))
    if grads:
        torch._foreach_mul_(list(grads), inv_scale)


@register(aten._amp_update_scale_.default)
def amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                      growth_interval):
    """PyTorch's rule: after an overflow the scale times backoff_factor and the count of
    clean steps back to 0; after growth_interval clean steps the scale times growth_factor
    (where that stays finite) and the count back to 0; else the count plus one."""
    found = found_inf > 0
    clean = growth_tracker + 1
    grown = scale * growth_factor
    grow = found.logical_not() & (clean >= growth_interval)
    new_scale = torch.where(found, scale * backoff_factor,
                            torch.where(grow & torch.isfinite(grown), grown, scale))
    scale.copy_(new_scale)
    growth_tracker.copy_(torch.where(found | grow, torch.zeros_like(clean), clean))
    return scale
