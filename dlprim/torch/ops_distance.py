"""p-norm distances on ocl devices: ``_cdist_forward`` / ``_cdist_backward`` (torch.cdist
outside its matrix-product path), ``_pdist_forward`` / ``_pdist_backward`` (F.pdist) and
``dist``, composed from the device's pointwise operators, vector norms and index_add.

The gradient of d = ||u||_p with respect to u, per element (PyTorch's cdist kernels, whose
conventions at d == 0 and at p = inf this follows):
    p = 0: 0;   p = 1: sign(u);   p = 2: u / d;
    p = inf: sign(u) where |u| == d, else 0;
    p < 2: sign(u) |u|^(p-1) / d^(p-1)  (0 where u == 0 and p < 1);
    else:  u |u|^(p-2) / d^(p-1);
and 0 wherever d == 0."""
import math

import torch

from .dispatch import register
from .ops_tensor import meta_of

aten = torch.ops.aten

__all__ = []


def _norm_grad(diff, dist, grad, p):
    """grad * d||diff||_p / d diff, with dist and grad broadcast against diff's last dim."""
    dist, grad = dist.unsqueeze(-1), grad.unsqueeze(-1)
    if p == 0:
        return torch.zeros_like(diff)
    if p == 1:
        g = torch.sign(diff) * grad
    elif p == 2:
        g = diff * grad / dist
    elif math.isinf(p):
        g = torch.sign(diff) * grad * (diff.abs() == dist).to(diff.dtype)
    elif p < 2:
        g = torch.sign(diff) * diff.abs().pow(p - 1) * grad / dist.pow(p - 1)
        if p < 1:
            g = torch.where(diff == 0, 0.0, g)
    else:
        g = diff * diff.abs().pow(p - 2) * grad / dist.pow(p - 1)
    return torch.where(dist == 0, 0.0, g)


@register(aten._cdist_forward.default)
def _cdist_forward(x1, x2, p, compute_mode=None):
    shape = aten._cdist_forward.default(meta_of(x1), meta_of(x2), p, compute_mode).shape
    if x1.numel() == 0 or x2.numel() == 0:
        return torch.zeros(shape, dtype=x1.dtype, device=x1.device)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return torch.linalg.vector_norm(diff, p, dim=-1).reshape(shape)


@register(aten._cdist_backward.default)
def _cdist_backward(grad, x1, x2, p, cdist):
    """dL/dx1[i] = sum over j of grad[i, j] * d||x1[i] - x2[j]||_p / d x1[i]."""
    if x1.numel() == 0 or x2.numel() == 0:
        return torch.zeros_like(x1)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    g = _norm_grad(diff, cdist, grad, p).sum(dim=-2)
    return g.sum_to_size(x1.shape).contiguous()


def _pairs(x):
    """The row pairs (i, j), i < j, in pdist's order (row-major upper triangle)."""
    n = x.shape[0]
    i, j = torch.triu_indices(n, n, 1).to(x.device)
    return i, j


@register(aten._pdist_forward.default)
def _pdist_forward(x, p=2):
    shape = aten._pdist_forward.default(meta_of(x), p).shape
    if x.shape[0] < 2:
        return torch.zeros(shape, dtype=x.dtype, device=x.device)
    i, j = _pairs(x)
    diff = x.index_select(0, i) - x.index_select(0, j)
    return torch.linalg.vector_norm(diff, p, dim=-1).reshape(shape)


@register(aten._pdist_backward.default)
def _pdist_backward(grad, x, p, pdist):
    """Each pair's gradient goes to its first row and, negated, to its second."""
    out = torch.zeros_like(x)
    if x.shape[0] < 2 or x.shape[1] == 0:
        return out
    i, j = _pairs(x)
    diff = x.index_select(0, i) - x.index_select(0, j)
    g = _norm_grad(diff, pdist, grad, p)
    return out.index_add_(0, i, g).index_add_(0, j, g, alpha=-1)


@register(aten.dist.default)
def _dist(a, b, p=2):
    if not (a.is_floating_point() and b.is_floating_point()):
        torch.dist(torch.zeros(1, dtype=a.dtype), torch.zeros(1, dtype=b.dtype))  # its error
    aten.dist.default(meta_of(a), meta_of(b), p)  # PyTorch's checks (broadcasting)
    return torch.linalg.vector_norm(torch.sub(a, b), p)
