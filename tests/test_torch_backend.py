"""dlprim.torch: PyTorch's ``ocl`` device against PyTorch CPU, operator by operator
(forward and, through PyTorch's autograd, backward), views, copies, optimizers, the
errors and the CPU fallback, and the MNIST example script."""
import logging
import math
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
F = torch.nn.functional

DEV = "ocl"


def close(got, want, tol=1e-4, what=""):
    got = (got.cpu() if got.device.type == "ocl" else got).detach()
    want = want.detach()
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if want.dtype in (torch.bool, torch.int64, torch.int32, torch.uint8):
        assert torch.equal(got, want), what
    else:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol, err_msg=what)


def both(fn, *tensors, grads=True, tol=1e-4):
    """fn on CPU tensors and on their ocl copies; values and (if grads) input gradients
    compared; returns the ocl result."""
    cpu = [t.detach().clone().requires_grad_(grads and t.is_floating_point()) for t in tensors]
    ocl = [t.detach().to(DEV).requires_grad_(grads and t.is_floating_point()) for t in tensors]
    want, got = fn(*cpu), fn(*ocl)
    close(got, want, tol, "value")
    if grads and want.requires_grad:
        g = torch.randn(want.shape, generator=torch.Generator().manual_seed(5))
        want.backward(g)
        got.backward(g.to(DEV))
        for k, (c, o) in enumerate(zip(cpu, ocl)):
            if c.grad is not None:
                close(o.grad, c.grad, tol, "grad of input %d" % k)
    return got


def rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# ----- the device and its tensors
def test_device_exists_and_round_trips():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    y = x.to("ocl:%d" % dt.current_device())
    assert type(y) is dt.OclTensor and y.device.type == "ocl"
    assert torch.equal(y.cpu(), x)
    for dtype in (torch.int64, torch.int32, torch.bool, torch.uint8):
        v = (x > 5).to(dtype)
        assert torch.equal(v.to(DEV).cpu(), v)
    assert "device='ocl:" in repr(y) and "11." in repr(y)
    assert y.to(torch.int64).cpu().dtype == torch.int64


def test_factories_and_fills():
    assert torch.equal(torch.zeros(2, 3, device=DEV).cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(2, 3, device=DEV, dtype=torch.int64).cpu(),
                       torch.ones(2, 3, dtype=torch.int64))
    assert torch.equal(torch.full((4,), 2.5, device=DEV).cpu(), torch.full((4,), 2.5))
    torch.manual_seed(3)
    a = torch.randn(5, device=DEV)
    torch.manual_seed(3)
    assert torch.equal(a.cpu(), torch.randn(5, device=DEV).cpu())  # seeded by PyTorch's
    assert torch.zeros(3, device=DEV).sum().item() == 0.0


def test_views_share_storage_and_write_through():
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    x = base.to(DEV)
    views = {"t": lambda a: a[0].t(), "permute": lambda a: a.permute(2, 0, 1),
             "slice": lambda a: a[:, 1:, ::2], "select": lambda a: a[1],
             "expand": lambda a: a[:, :1].expand(2, 5, 4), "view": lambda a: a.view(6, 4),
             "unsqueeze": lambda a: a.unsqueeze(1), "transpose": lambda a: a.transpose(0, 2)}
    for name, view in views.items():
        v = view(x)
        assert v._ocl_storage is x._ocl_storage, name  # no copy
        close(v.contiguous(), view(base).contiguous(), what=name)
    x[1, :, 2].add_(100)       # in place through a strided view
    base[1, :, 2] += 100
    close(x, base, what="write through a view")
    x.t_() if x.dim() == 2 else None
    y = x.reshape(4, 6)        # contiguous: a view
    assert y._ocl_storage is x._ocl_storage
    z = x.permute(2, 1, 0).reshape(-1)   # not expressible as a view: a copy
    close(z, base.permute(2, 1, 0).reshape(-1), what="reshape copy")


def test_copy_between_host_and_device_with_broadcast_and_conversion():
    x = torch.zeros(3, 4, device=DEV)
    x.copy_(torch.arange(4.0))                  # host -> device, broadcast
    close(x, torch.arange(4.0).expand(3, 4).contiguous())
    x[:, 1].copy_(torch.tensor([7, 8, 9], device=DEV))   # int64 on device -> float view
    want = torch.arange(4.0).expand(3, 4).clone()
    want[:, 1] = torch.tensor([7.0, 8.0, 9.0])
    close(x, want)
    host = torch.empty(3, 4)
    host.copy_(x)
    close(host, want)


# ----- elementwise, with broadcasting and type promotion
@pytest.mark.parametrize("name,fn", [
    ("add", lambda a, b: a + b * 2), ("sub", lambda a, b: torch.sub(a, b, alpha=0.5)),
    ("mul", lambda a, b: a * b), ("div", lambda a, b: a / (b.abs() + 1)),
    ("maximum", torch.maximum), ("minimum", torch.minimum),
    ("scalars", lambda a, b: (3 - a) * 2.5 + b / 4),
    ("unary", lambda a, b: torch.exp(a).sqrt() + torch.tanh(b) - torch.sigmoid(a * b).log()),
    ("pow", lambda a, b: a.pow(2) + b.abs().pow(1.5)),
    ("relu", lambda a, b: F.relu(a) * b), ("where", lambda a, b: torch.where(a > b, a, b * 3)),
    ("clamp", lambda a, b: a.clamp(-0.5, 0.7) + b.clamp(min=0)),
    ("addcmul", lambda a, b: torch.addcmul(a, a, b, value=0.3)),
    ("lerp", lambda a, b: torch.lerp(a, b, 0.25)),
    ("remainder", lambda a, b: torch.remainder(a * 3, b.abs() + 0.5) + torch.fmod(a * 3, -1.5))])
def test_elementwise_matches_cpu_with_gradients(name, fn):
    both(fn, rand(4, 1, 5, seed=1), rand(3, 5, seed=2))


def test_type_promotion_comparisons_and_nan():
    i = torch.arange(6).reshape(2, 3)
    f = rand(2, 3)
    close((i.to(DEV) + f.to(DEV)), i + f)                 # int64 + float32 -> float32
    close((i.to(DEV) * 2), i * 2)                         # stays int64
    close((i.to(DEV) / 4), i / 4)                         # true division: float
    for op in (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge):
        close(op(i.to(DEV), 2), op(i, 2), what=str(op))
        close(op(f.to(DEV), f.to(DEV) * 0), op(f, f * 0), what=str(op))
    n = torch.tensor([1.0, float("nan"), -2.0])
    close(F.relu(n.to(DEV)), F.relu(n))
    close(torch.maximum(n.to(DEV), torch.zeros(3, device=DEV)), torch.maximum(n, torch.zeros(3)))


def test_reductions_and_argmax():
    x = rand(3, 4, 5)
    for fn in (lambda a: a.sum(), lambda a: a.sum(1), lambda a: a.sum((0, 2), keepdim=True),
               lambda a: a.mean(), lambda a: a.mean(-1), lambda a: a.amax(1),
               lambda a: a.amin((0, 1)), lambda a: a.max(), lambda a: a.min(),
               lambda a: a.max(1).values):
        both(fn, x)
    close(x.to(DEV).argmax(1), x.argmax(1))
    close(x.to(DEV).max(2, keepdim=True).indices, x.max(2, keepdim=True).indices)
    close(x.to(DEV).argmax(), x.argmax())
    close((x.to(DEV) > 0).sum(), (x > 0).sum())          # bool sums to int64
    assert x.to(DEV).sum().item() == pytest.approx(x.sum().item(), rel=1e-5)


# ----- network operators, forward and backward
def test_linear_and_matmul_paths():
    both(lambda x, w, b: F.linear(x, w, b), rand(7, 13), rand(5, 13, seed=1), rand(5, seed=2))
    both(lambda a, b: a @ b.t(), rand(6, 9), rand(4, 9, seed=1))           # transposed operand
    both(lambda a, b: torch.bmm(a, b), rand(3, 4, 5), rand(3, 5, 2, seed=1))
    # operands read in place: a transposed batch (attention's k.transpose(-1, -2)), an
    # expanded one (batch stride 0)
    both(lambda a, b: torch.bmm(a.transpose(1, 2), b.transpose(1, 2)), rand(3, 5, 4),
         rand(3, 2, 5, seed=1))
    both(lambda a, b: torch.bmm(a.expand(3, 4, 5), b), rand(1, 4, 5), rand(3, 5, 2, seed=1))
    both(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), rand(3, 2), rand(3, 4, seed=1),
         rand(4, 2, seed=2))


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=8, k=3, stride=1, padding=1, dilation=1, groups=1),
    dict(cin=4, cout=6, k=3, stride=2, padding=0, dilation=1, groups=2),
    dict(cin=6, cout=6, k=3, stride=1, padding=2, dilation=2, groups=6),   # depthwise
    dict(cin=16, cout=32, k=5, stride=1, padding=2, dilation=1, groups=1)])
def test_conv2d_matches_cpu_with_gradients(cfg):
    x = rand(2, cfg["cin"], 9, 8)
    w = rand(cfg["cout"], cfg["cin"] // cfg["groups"], cfg["k"], cfg["k"], seed=1) * 0.2
    b = rand(cfg["cout"], seed=2)
    both(lambda x, w, b: F.conv2d(x, w, b, cfg["stride"], cfg["padding"], cfg["dilation"],
                                  cfg["groups"]), x, w, b, tol=2e-4)


def test_pooling_matches_cpu_with_gradients():
    x = torch.randperm(2 * 3 * 9 * 9, generator=torch.Generator().manual_seed(0)).float()
    x = x.reshape(2, 3, 9, 9) / 100   # distinct values: one argmax per window
    both(lambda a: F.max_pool2d(a, 2), x)
    both(lambda a: F.max_pool2d(a, 3, 2, 1, ceil_mode=True), x)
    both(lambda a: F.avg_pool2d(a, 3, 2, 1), x)
    both(lambda a: F.adaptive_avg_pool2d(a, 1), x)
    both(lambda a: F.adaptive_avg_pool2d(a, (4, 6)), x)          # uneven windows: two GEMMs
    both(lambda a: F.adaptive_avg_pool2d(a[:, :, :1, :2], 6), x)  # AlexNet's 6x6 from less


def test_softmax_and_losses():
    x = rand(6, 5)
    y = torch.tensor([0, 4, 2, -100, 1, 3])
    both(lambda a: F.softmax(a, 1), x)
    both(lambda a: F.log_softmax(a, 0), x)
    both(lambda a: F.cross_entropy(a, y.to(a.device)), x)          # ignore_index -100 row
    both(lambda a: F.nll_loss(F.log_softmax(a, 1), y.clamp(min=0).to(a.device),
                              reduction="sum"), x)
    both(lambda a: F.nll_loss(F.log_softmax(a, 1), y.clamp(min=0).to(a.device),
                              reduction="none"), x)


@pytest.mark.parametrize("fn", [F.relu6, F.hardswish, F.hardsigmoid, F.silu, F.gelu,
                                lambda a: F.gelu(a, approximate="tanh"),
                                lambda a: F.leaky_relu(a, 0.1), F.hardtanh])
def test_activations_match_cpu_with_gradients(fn):
    both(fn, rand(64) * 4)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_batch_norm_matches_cpu_and_updates_running_statistics(mode):
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3, momentum=0.2)
    with torch.no_grad():
        cpu.weight.uniform_(0.5, 1.5)
        cpu.bias.uniform_(-0.5, 0.5)
        cpu.running_mean.uniform_(-1, 1)
        cpu.running_var.uniform_(0.5, 2)
    ocl = torch.nn.BatchNorm2d(3, momentum=0.2)
    ocl.load_state_dict(cpu.state_dict())
    ocl.to(DEV)
    getattr(cpu, mode)()
    getattr(ocl, mode)()
    x = rand(4, 3, 5, 6)
    xc, xo = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
    yc, yo = cpu(xc), ocl(xo)
    close(yo, yc, what="y")
    g = rand(*yc.shape, seed=9)
    yc.backward(g)
    yo.backward(g.to(DEV))
    close(xo.grad, xc.grad, what="dx")
    close(ocl.weight.grad, cpu.weight.grad, what="dweight")
    close(ocl.bias.grad, cpu.bias.grad, what="dbias")
    for name in ("running_mean", "running_var"):
        close(getattr(ocl, name), getattr(cpu, name), what=name)


def test_cat_and_dropout():
    both(lambda a, b: torch.cat([a, b * 2], 1), rand(2, 3), rand(2, 5, seed=1))
    both(lambda a, b: torch.stack([a, b]), rand(2, 3), rand(2, 3, seed=1))
    x = torch.ones(4000, device=DEV, requires_grad=True)
    torch.manual_seed(1)
    y = F.dropout(x, 0.25, training=True)
    kept = (y != 0).float().mean().item()
    assert 0.72 < kept < 0.78 and y.max().item() == pytest.approx(1 / 0.75)
    y.sum().backward()
    close(x.grad, (y != 0).cpu().float() / 0.75)           # the same mask backward
    torch.manual_seed(1)
    assert torch.equal(F.dropout(x, 0.25, training=True).cpu(), y.detach().cpu())  # seeded
    assert torch.equal(F.dropout(x, 0.25, training=False).cpu(), x.detach().cpu())


def test_network_gradients_against_float64():
    """A small VGG-like stack end to end: outputs and every gradient on ocl within float32
    accuracy of a float64 CPU run (no worse than a float32 CPU run, give or take)."""
    torch.manual_seed(0)

    def make():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))

    base = make()
    x, y = rand(2, 3, 40, 40), torch.tensor([3, 7])
    results = {}
    for name, dev, dtype in (("f64", "cpu", torch.float64), ("f32", "cpu", torch.float32),
                             ("ocl", DEV, torch.float32)):
        m = make().to(dtype)
        m.load_state_dict(base.state_dict())
        m.to(dev)
        out = m(x.to(dtype).to(dev))
        F.cross_entropy(out, y.to(dev)).backward()
        results[name] = [out.detach().cpu().double()] + \
            [p.grad.detach().cpu().double() for p in m.parameters()]
    for k, (exact, f32, ocl) in enumerate(zip(*results.values())):
        scale = exact.abs().max().item()
        err32, err = ((t - exact).abs().max().item() / scale for t in (f32, ocl))
        assert err <= max(10 * err32, 1e-5), (k, err, err32)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_cpu_with_gradients(affine):
    if affine:
        both(lambda x, w, b: F.layer_norm(x, (4, 6), w, b, 1e-3), rand(3, 5, 4, 6),
             rand(4, 6, seed=1), rand(4, 6, seed=2))
    else:
        both(lambda x: F.layer_norm(x, (6,)), rand(3, 5, 6))


def test_norms_with_a_bias_and_no_weight_match_cpu_with_gradients():
    """y = xhat + b: the bias is added though there is no weight to scale by."""
    both(lambda x, b: F.layer_norm(x, (4, 6), None, b, 1e-3), rand(3, 5, 4, 6),
         rand(4, 6, seed=2))
    both(lambda x, b: F.layer_norm(x, (6,), None, b), rand(3, 5, 6), rand(6, seed=3))
    # (PyTorch's CPU group norm has no backward without a weight: its value alone)
    both(lambda x, b: F.group_norm(x, 3, None, b, 1e-3), rand(3, 6, 5, 7), rand(6, seed=2),
         grads=False)


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_matches_cpu_with_gradients(affine):
    x = rand(3, 6, 5, 7)
    if affine:
        both(lambda x, w, b: F.group_norm(x, 3, w, b, 1e-3), x, rand(6, seed=1), rand(6, seed=2))
    else:
        both(lambda x: F.group_norm(x, 2), x)


def test_index_operators_match_cpu_with_gradients():
    table, words = rand(11, 6), torch.tensor([[3, 0, 10], [3, 3, 7]])
    both(lambda w: F.embedding(words.to(w.device), w), table)
    both(lambda w: F.embedding(words.to(w.device), w, padding_idx=3), table)
    x = rand(4, 9, 5)
    picks = torch.tensor([8, 0, 8, 2])
    both(lambda x: x.index_select(1, picks.to(x.device)), x)
    both(lambda x: x.index_select(0, picks[:2].to(torch.int32).to(x.device) % 4), x)
    both(lambda x: x[picks.to(x.device) % 4], x)
    both(lambda x: x[:, picks.to(x.device)], x)
    order = torch.randint(0, 9, (4, 6, 5), generator=torch.Generator().manual_seed(3))
    both(lambda x: x.gather(1, order.to(x.device)), x)
    # integer data gathers too
    ints = torch.arange(24).reshape(4, 6)
    close(ints.to(DEV).gather(1, order[:, :3, 0].to(DEV) % 6), ints.gather(1, order[:, :3, 0] % 6))
    base, rows = rand(5, 3), rand(4, 3, seed=1)
    at = torch.tensor([4, 0, 4, 1])
    k = torch.tensor([-7, 7, -6, 5])
    close(k.to(DEV) % 3, k % 3)
    close(torch.fmod(k.to(DEV), -4), torch.fmod(k, -4))
    close(base.to(DEV).index_add(0, at.to(DEV), rows.to(DEV), alpha=2.0),
          base.index_add(0, at, rows, alpha=2.0))
    close(base.to(DEV).scatter_add(0, at[:, None].expand(4, 3).to(DEV), rows.to(DEV)),
          base.scatter_add(0, at[:, None].expand(4, 3), rows))


@pytest.mark.parametrize("x_shape,index", [((), 0), ((), [0]), ((5,), 2), ((3, 4), 1),
                                           ((3, 4), [2, 0])])
def test_index_select_result_shape_follows_pytorch(x_shape, index):
    """A 0-d x gives a 0-d result, whatever the index's shape; a 0-d index on a tensor
    keeps the dimension (size 1)."""
    x = torch.arange(float(max(1, int(np.prod(x_shape))))).reshape(x_shape)
    i = torch.tensor(index)
    want = torch.index_select(x, 0, i)
    got = torch.index_select(x.to(DEV), 0, i.to(DEV)).cpu()
    assert got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float32])
def test_native_dropout_backward_dtype_follows_pytorch(dtype):
    """grad * mask * scale: integer and bool gradients come back in the default float type."""
    grad = torch.tensor([3, 0, 1, 2, 1]).to(dtype)
    mask = torch.tensor([1, 0, 1, 1, 0], dtype=torch.bool)
    want = torch.ops.aten.native_dropout_backward(grad, mask, 2.0)
    got = torch.ops.aten.native_dropout_backward(grad.to(DEV), mask.to(DEV), 2.0).cpu()
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_index_out_of_range_and_index_on_host_are_errors():
    with pytest.raises(IndexError, match="out of range"):
        torch.ones(3, 2, device=DEV).index_select(0, torch.tensor([0, 5], device=DEV))
    with pytest.raises(RuntimeError, match="index"):
        torch.ones(3, 2, device=DEV).index_select(0, torch.tensor([0]))


def test_optimizers_take_the_foreach_path_by_default():
    seen = []
    route = dt.tensor._route[0]

    def spy(func, args, kwargs):
        seen.append(str(func))
        return route(func, args, kwargs)
    p = torch.nn.Parameter(rand(3).to(DEV))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(3, device=DEV)
    dt.tensor.route_operators_to(spy)
    try:
        opt.step()
    finally:
        dt.tensor.route_operators_to(route)
    assert any(name.startswith("aten._foreach_") for name in seen), seen
    close(p.detach(), rand(3) - 0.1)


@pytest.mark.parametrize("kw", [dict(size=(7, 9), mode="bilinear"),
                                dict(scale_factor=2, mode="bilinear", align_corners=True),
                                dict(scale_factor=1.5, mode="nearest"),
                                dict(size=(4, 11), mode="nearest-exact")])
def test_interpolate_matches_cpu_with_gradients(kw):
    both(lambda x: F.interpolate(x, **kw), rand(2, 3, 5, 6))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_per_pixel_cross_entropy_matches_cpu_with_gradients(reduction):
    labels = torch.randint(0, 4, (2, 5, 6), generator=torch.Generator().manual_seed(2))
    labels[0, 0, :3] = -100  # ignored pixels
    both(lambda x: F.cross_entropy(x, labels.to(x.device), reduction=reduction),
         rand(2, 4, 5, 6))


def test_repeated_layers_replay_over_new_tensors():
    """A convolution and batch norm called again with the same shapes replay their first
    call's launches rebound to the new tensors: views at other storage offsets included."""
    conv = torch.nn.Conv2d(3, 5, 3, padding=1)
    bn = torch.nn.BatchNorm2d(5)
    net_cpu = torch.nn.Sequential(conv, bn)
    net_ocl = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.BatchNorm2d(5))
    net_ocl.load_state_dict(net_cpu.state_dict())
    net_ocl.to(DEV)
    big = rand(4, 3, 6, 7, seed=3)
    for x in (rand(3, 3, 6, 7), big[1:], big[:3], rand(3, 3, 6, 7, seed=4)):
        xc = x.clone().requires_grad_(True)
        xo = x.to(DEV) if x.is_contiguous() and x.storage_offset() == 0 else \
            big.to(DEV)[1:] if x.data_ptr() != big.data_ptr() else big.to(DEV)[:3]
        xo.requires_grad_(True)
        want, got = net_cpu(xc), net_ocl(xo)
        close(got, want, 1e-4, "value")
        g = rand(*want.shape, seed=5)
        want.backward(g)
        got.backward(g.to(DEV))
        close(xo.grad, xc.grad, 1e-4, "input gradient")
    for (name, a), b in zip(net_cpu.named_parameters(), net_ocl.parameters()):
        close(b.grad, a.grad, 1e-4, name)
    close(net_ocl[1].running_mean, net_cpu[1].running_mean, 1e-5, "running mean")


def test_a_replay_takes_only_views_aligned_as_its_recording(monkeypatch):
    """Batch norm's channel kernels load 4 values at a time where the rows and the
    tensors' offsets allow: a call over a view one value further in must not replay the
    aligned call's launches (misaligned vector loads), nor the reverse lose speed."""
    from dlprim.core import batchnorm
    monkeypatch.setattr(batchnorm, "default_kernels", lambda facts: "channels")
    n = 2 * 8 * 4 * 4  # rows of 16 values: vector loads where the offset allows
    base = rand(n + 1, seed=8)
    w, b = rand(8, seed=9), rand(8, seed=10)
    big = base.to(DEV)
    made = []
    record = dt.tensor.enqueue_recorded

    def spy(ctx, key, tensors, make):
        return record(ctx, key, tensors, lambda: made.append(1) or make())
    monkeypatch.setattr(dt.tensor, "enqueue_recorded", spy)
    import dlprim.torch.ops_norm as ops_norm
    monkeypatch.setattr(ops_norm, "enqueue_recorded", spy)
    for off in (0, 1, 0, 1):
        x = base[off:off + n].view(2, 8, 4, 4)
        xo = big[off:off + n].view(2, 8, 4, 4)
        want = F.batch_norm(x, None, None, w, b, training=True)
        got = F.batch_norm(xo, None, None, w.to(DEV), b.to(DEV), training=True)
        close(got, want, 1e-4, "offset %d" % off)
    assert len(made) == 2  # prepared once per alignment, replayed after


def _dispatched(fn):
    seen, route = [], dt.tensor._route[0]

    def spy(func, args, kwargs):
        seen.append(str(func))
        return route(func, args, kwargs)
    dt.tensor.route_operators_to(spy)
    try:
        fn()
    finally:
        dt.tensor.route_operators_to(route)
    return seen


def test_attention_runs_on_the_fused_kernels():
    q, k, v = rand(2, 3, 70, 8), rand(2, 3, 45, 8, seed=1), rand(2, 3, 45, 5, seed=2)
    sdpa = F.scaled_dot_product_attention
    ops = _dispatched(lambda: both(lambda q, k, v: sdpa(q, k, v), q, k, v))
    assert not any("bmm" in name or "softmax" in name for name in ops), ops  # no L x S scores
    both(lambda q, k, v: sdpa(q, k, v, scale=0.3), q, k, v)
    sq = rand(2, 3, 45, 8, seed=3)
    both(lambda q, k, v: sdpa(q, k, v, is_causal=True), sq, k, v)
    keep = torch.rand(2, 1, 1, 45, generator=torch.Generator().manual_seed(4)) > 0.3
    keep[0] = False  # every key of sample 0 masked: zeros, as PyTorch's math path gives
    both(lambda q, k, v: sdpa(q, k, v, attn_mask=keep.to(q.device)), q, k, v)
    bias = rand(70, 45, seed=5)
    both(lambda q, k, v: sdpa(q, k, v, attn_mask=bias.to(q.device)), q, k, v)
    both(lambda q, k, v: sdpa(q, k, v), rand(4, 9, 6), rand(4, 11, 6, seed=1), rand(4, 11, 6, seed=2))
    # grouped-query heads: each of k's and v's 2 heads read by 3 query heads (gradients
    # summed over each group), on the fused kernels
    gqa = (rand(2, 6, 37, 8), rand(2, 2, 41, 8, seed=1), rand(2, 2, 41, 8, seed=2))
    ops = _dispatched(lambda: both(lambda q, k, v: sdpa(q, k, v, enable_gqa=True, is_causal=True),
                                   *gqa))
    assert not any("bmm" in name or "softmax" in name for name in ops), ops
    # what the kernels do not cover takes PyTorch's math path, on the device (a 3-D mask
    # over the batch broadcast by a 4-D attention's batch and heads is, a 5-D one is not)
    both(lambda q, k, v: sdpa(q, k, v, attn_mask=bias.reshape(1, 1, 1, 70, 45).to(q.device)),
         q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))
    with pytest.raises(RuntimeError):  # heads that do not divide: PyTorch's own error
        sdpa(*(t.to(DEV) for t in (rand(1, 4, 5, 8), rand(1, 3, 6, 8), rand(1, 3, 6, 8))),
             enable_gqa=True)


@pytest.mark.parametrize("half, unit", [(torch.float16, 2 ** -11), (torch.bfloat16, 2 ** -8)])
def test_half_attention_runs_on_the_fused_kernels(half, unit):
    """float16 and bfloat16 q, k, v take the fused kernels too (16-bit storage): values
    and gradients against float32 attention of the same 16-bit values, within a few of
    the storage's roundings (``unit``) of the largest value."""
    sdpa = F.scaled_dot_product_attention
    q, k, v = (rand(2, 3, 37, 16, seed=s).to(half) for s in range(3))
    g = rand(2, 3, 37, 16, seed=5).to(half)
    keep = torch.rand(2, 1, 1, 37, generator=torch.Generator().manual_seed(4)) > 0.3
    bias = rand(37, 37, seed=6).to(half)
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": keep}, {"attn_mask": bias}):
        cpu = [t.float().requires_grad_(True) for t in (q, k, v)]
        ocl = [t.to(DEV).requires_grad_(True) for t in (q, k, v)]
        dev_kwargs = {n: m.to(DEV) if torch.is_tensor(m) else m for n, m in kwargs.items()}
        cpu_kwargs = {n: m.float() if torch.is_tensor(m) and m.is_floating_point() else m
                      for n, m in kwargs.items()}
        want = sdpa(*cpu, **cpu_kwargs)
        ops = _dispatched(lambda: ocl.append(sdpa(*ocl[:3], **dev_kwargs)))
        got = ocl.pop()
        assert not any("bmm" in name or "softmax" in name for name in ops), (kwargs, ops)
        assert got.dtype == half
        want.backward(g.float())
        got.backward(g.to(DEV))
        for what, o, c in [("value", got, want)] + [
                ("grad of " + n, a.grad, b.grad) for n, a, b in zip("qkv", ocl, cpu)]:
            assert o.dtype == half, what
            err = (o.cpu().float() - c.detach()).abs().max().item()
            assert err <= 4 * unit * max(c.abs().max().item(), 1.0), (kwargs, what, err)


def test_attention_dropout_runs_on_the_fused_kernels():
    """dropout_p takes the fused kernels: each weight is kept with probability 1 - p and
    scaled by 1 / (1 - p), the same weights in the backward pass, a new draw per call and
    the same after the same torch.manual_seed. The mask is read out through the kernels
    themselves (q = k = 0 weighs every key alike, v = I puts weight (i, j) at out[i, j]),
    then values and gradients are checked against float64 with that mask."""
    sdpa, p = F.scaled_dot_product_attention, 0.3
    n, h, lq, lk, d = 2, 3, 37, 45, 16

    def keep(seed):  # the factors the kernels draw after torch.manual_seed(seed)
        torch.manual_seed(seed)
        zq, zk = torch.zeros(n, h, lq, d, device=DEV), torch.zeros(n, h, lk, d, device=DEV)
        eye = torch.eye(lk).expand(n, h, lk, lk).contiguous().to(DEV)
        ops = _dispatched(lambda: out.append(sdpa(zq, zk, eye, dropout_p=p)))
        assert not any("bmm" in name or "softmax" in name for name in ops), ops
        return out.pop().cpu().double() * lk
    out = []
    factors = keep(5)
    kept = factors > 0.5
    assert torch.allclose(factors[kept], torch.full_like(factors[kept], 1 / (1 - p)))
    assert abs((~kept).double().mean().item() - p) < 0.03  # 9990 draws: 4.7 sigma
    assert torch.equal(keep(5), factors) and not torch.equal(keep(6), factors)
    q, k, v = rand(n, h, lq, d, seed=1), rand(n, h, lk, d, seed=2), rand(n, h, lk, d, seed=3)
    g = rand(n, h, lq, d, seed=4)
    cpu = [t.double().requires_grad_(True) for t in (q, k, v)]
    weights = torch.softmax(cpu[0] @ cpu[1].transpose(-2, -1) / math.sqrt(d), -1)
    want = (weights * factors) @ cpu[2]
    want.backward(g.double())
    ocl = [t.to(DEV).requires_grad_(True) for t in (q, k, v)]
    torch.manual_seed(5)
    got = sdpa(*ocl, dropout_p=p)
    got.backward(g.to(DEV))
    for what, a, b in [("value", got, want)] + [("grad of " + x, t.grad, c.grad)
                                                 for x, t, c in zip("qkv", ocl, cpu)]:
        err = (a.cpu().double() - b.detach()).abs().max().item()
        assert err <= 1e-4 * max(b.abs().max().item(), 1.0), (what, err)


def test_attention_and_triangles():
    q, k, v = rand(2, 3, 7, 8), rand(2, 3, 7, 8, seed=1), rand(2, 3, 7, 8, seed=2)
    both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)
    both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    mask[0] = False    # a row masked whole: zeros (PyTorch's safe softmax), not NaN
    both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.device)),
         q, k, v)
    x = rand(2, 5, 7)
    for d in (-1, 0, 2):
        close(x.to(DEV).tril(d), x.tril(d))
        close(x.to(DEV).triu(d), x.triu(d))


# ----- modules and optimizers on the device, without host round trips
@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3),
    lambda p: torch.optim.Adam(p, lr=0.01),
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),     # the _foreach_ operators
    # fused=True: one launch per parameter (aten._fused_*_ on the device)
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.1, fused=True),
    lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=1e-2, fused=True),
    lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True, maximize=True, fused=True),
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, fused=True)])
def test_optimizer_steps_match_cpu(make):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 4 * 4, 3))
    twin = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 3))
    twin.load_state_dict(net.state_dict())
    twin.to(DEV)
    assert all(p.device.type == "ocl" for p in twin.parameters())
    opt_cpu, opt_ocl = make(net.parameters()), make(twin.parameters())
    x, y = rand(5, 2, 6, 6), torch.tensor([0, 1, 2, 1, 0])
    for _ in range(3):
        for model, opt, xx, yy in ((net, opt_cpu, x, y), (twin, opt_ocl, x.to(DEV), y.to(DEV))):
            opt.zero_grad()
            F.cross_entropy(model(xx), yy).backward()
            opt.step()
    for (name, a), b in zip(net.state_dict().items(), twin.state_dict().values()):
        close(b, a, 1e-4, name)


# ----- what is not there: a clear error, or the CPU on request
def test_unsupported_operator_names_itself_and_falls_back_on_request(caplog):
    a = torch.tensor([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])  # symmetric
    x = a.to(DEV)
    with pytest.raises(NotImplementedError,
                       match=r"aten\._linalg_eigh.*Tensor\[3, 3\] float32 ocl"):
        torch.linalg.eigvalsh(x)
    dt.allow_cpu_fallback()
    try:
        with caplog.at_level(logging.WARNING, logger="dlprim.torch"):
            got = torch.linalg.eigvalsh(x)
            torch.linalg.eigvalsh(x)
        close(got, torch.linalg.eigvalsh(a))
        assert got.device.type == "ocl"
        warned = [r for r in caplog.records if "aten._linalg_eigh" in r.getMessage()]
        assert len(warned) == 1     # once per operator
        y = torch.empty(2, device=DEV)    # out= of the wrong size: resized, written back
        torch.linalg.eigvalsh(x, out=y)
        close(y, torch.linalg.eigvalsh(a))
    finally:
        dt.allow_cpu_fallback(False)
    with pytest.raises(TypeError, match="cpu()"):
        x.numpy()


def test_bad_device_index_is_an_error():
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.zeros(2, device="ocl:%d" % dt.device_count())


# ----- an ordinary training script, only the device string changed
def test_mnist_script_trains_on_ocl_like_on_cpu():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "mnist"))
    try:
        import train_pytorch
    finally:
        sys.path.pop(0)
    args = ["--epochs", "2", "--limit", "512", "--batch", "32"]
    ocl = train_pytorch.main(args + ["--device", DEV])
    cpu = train_pytorch.main(args + ["--device", "cpu"])
    assert ocl > 0.7 and abs(ocl - cpu) <= 0.03, (ocl, cpu)


# ----- the eval-mode fast paths of PyTorch's transformer modules
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_encoder_layer_fast_path(norm_first, activation):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=norm_first,
                                             activation=activation).eval()
    x = rand(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])  # a padded second sequence
    with torch.no_grad():
        want = layer(x, src_key_padding_mask=pad)
        layer.to(DEV)
        calls = []
        dispatch = __import__("dlprim.torch.dispatch", fromlist=["_IMPLS"])
        op = torch.ops.aten._transformer_encoder_layer_fwd.default
        real = dispatch._IMPLS[op]
        dispatch._IMPLS[op] = lambda *a, **k: calls.append(1) or real(*a, **k)
        try:
            got = layer(x.to(DEV), src_key_padding_mask=pad.to(DEV))
        finally:
            dispatch._IMPLS[op] = real
    assert calls, "the fast path was not taken"
    close(got, want, 1e-5)


def test_multi_head_attention_fast_path_with_weights():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q, kv = rand(2, 3, 16), rand(2, 5, 16, seed=1)
    mask = torch.tensor([[False] * 5, [False] * 2 + [True] * 3])
    with torch.no_grad():
        want = [mha(q, kv, kv, key_padding_mask=mask, need_weights=w) for w in (False, True)]
        mha.to(DEV)
        w = (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias)
        for need, (out, weights) in zip((False, True), want):
            got = torch.ops.aten._native_multi_head_attention(
                q.to(DEV), kv.to(DEV), kv.to(DEV), 16, 2, *w,
                torch.where(mask, float("-inf"), 0.0).to(DEV), need, True, 1)
            close(got[0], out, 1e-5)
            if need:
                close(got[1], weights, 1e-5)


def test_masked_fill():
    a, m = rand(3, 4), rand(3, 4, seed=1) > 0
    close(a.to(DEV).masked_fill(m.to(DEV), -1.5), a.masked_fill(m, -1.5))
    close(a.to(DEV).masked_fill(m.to(DEV), torch.tensor(2.0).to(DEV)),
          a.masked_fill(m, torch.tensor(2.0)))
    i = torch.arange(12).reshape(3, 4)
    close(i.to(DEV).masked_fill_(m.to(DEV), 7), i.masked_fill(m, 7))
    b = a.clone().to(DEV).requires_grad_()
    b.masked_fill(m.to(DEV), 0.0).sum().backward()     # the gradient of what was kept
    close(b.grad, (~m).float())


def test_select_backward_runs_on_the_device(caplog):
    with caplog.at_level(logging.WARNING, logger="dlprim.torch"):
        both(lambda x: x[:, 2] * 2 + x.select(2, -1)[:, :1], rand(3, 4, 5))
    assert not [r for r in caplog.records if "select_backward" in r.getMessage()]


def test_float32_matmul_precision_high_asks_for_tf32():
    from dlprim.torch import device
    a, b = rand(5, 7), rand(7, 3, seed=1)
    ctx = device.context(0)

    def precisions():
        return {k[-2] for k in ctx.ops if isinstance(k, tuple) and k[:1] == ("torch_gemm",)
                and k[1:4] == (5, 3, 7)}
    before = precisions()
    torch.set_float32_matmul_precision("high")
    try:
        got = a.to(DEV) @ b.to(DEV)
    finally:
        torch.set_float32_matmul_precision("highest")
    assert precisions() - before == {"tf32"}
    close(got, a @ b, 2e-3)    # TF32 operands where the device has tensor cores


@pytest.mark.parametrize("backward_first", [True, False])
def test_a_backward_before_the_import_is_named(backward_first):
    # PyTorch's autograd engine counts the devices at the first backward pass of a
    # process: one before `import dlprim.torch` leaves ocl without a queue. The first ocl
    # tensor then warns with what to change (a fresh process: this one imported already)
    import subprocess
    cpu_backward = "x = torch.ones(2, requires_grad=True); (x * 2).sum().backward()\n"
    program = ("import warnings\nwarnings.simplefilter('always')\nimport torch\n"
               + (cpu_backward if backward_first else "")
               + "import dlprim.torch\n"
               + "w = torch.ones(3, device='ocl', requires_grad=True)\n"
               + ("" if backward_first else cpu_backward)
               + "print('forward', float((w * 2).sum()))\n"
               + ("" if backward_first else "(w * 3).sum().backward(); print('grad', w.grad.tolist())\n"))
    env = dict(os.environ, DLPRIM_DEVICE=os.environ.get("DLPRIM_TEST_DEVICE", "")
               or os.environ.get("DLPRIM_DEVICE", ""))
    if not env["DLPRIM_DEVICE"]:
        del env["DLPRIM_DEVICE"]
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "forward 6.0" in done.stdout
    named = "AutogradOrderWarning" in done.stderr and "<string>:" in done.stderr
    assert named == backward_first, done.stderr
    if backward_first:
        assert "Import dlprim.torch before the first backward pass" in done.stderr
    else:
        assert "grad [3.0, 3.0, 3.0]" in done.stdout
