"""dlprim.torch: torch.autocast("ocl") follows CUDA's autocast policy (products in the
16-bit type, range-sensitive operators in float32, mixed inputs to the widest), and
torch.amp.GradScaler("ocl") scales, unscales, skips and adapts as on the CPU."""
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
F = torch.nn.functional

HALVES = [torch.float16, torch.bfloat16]


def ocl(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to("ocl")


@pytest.mark.parametrize("low", HALVES, ids=["fp16", "bf16"])
def test_products_run_in_the_autocast_dtype(low):
    a, b = ocl(5, 7), ocl(7, 3, seed=1)
    x, w = ocl(2, 3, 9, 9), ocl(4, 3, 3, 3, seed=2)
    with torch.autocast("ocl", dtype=low):
        outs = {"mm": a @ b, "linear": F.linear(a, b.t()), "conv2d": F.conv2d(x, w),
                "bmm": torch.bmm(a[None], b[None]), "sdpa": F.scaled_dot_product_attention(
                    ocl(1, 2, 4, 8), ocl(1, 2, 4, 8, seed=3), ocl(1, 2, 4, 8, seed=4))}
    for name, out in outs.items():
        assert out.dtype == low, name
    torch.testing.assert_close(outs["mm"].float().cpu(),
                               (a.cpu().to(low).float() @ b.cpu().to(low).float()),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("low", HALVES, ids=["fp16", "bf16"])
def test_sensitive_operators_run_in_float32(low):
    h = ocl(4, 6, dtype=low)
    with torch.autocast("ocl", dtype=low):
        outs = {"softmax": torch.softmax(h, -1), "log_softmax": F.log_softmax(h, 1),
                "sum": h.sum(), "sum_dim": h.sum(1), "exp": h.exp(),
                "layer_norm": F.layer_norm(h, (6,)), "mse": F.mse_loss(h, h * 2),
                "cumsum": h.cumsum(0)}
        explicit = h.sum(dtype=torch.float16)  # the caller's dtype wins
        promoted = torch.addcmul(ocl(4, 6), h, h)  # float32 and 16-bit inputs: float32
        kept = ocl(3, 3, dtype=torch.float64) @ ocl(3, 3, dtype=torch.float64) \
            if dt.context(0).facts.fp64 else None
        ints = torch.arange(6, device="ocl").sum()
    for name, out in outs.items():
        assert out.dtype == torch.float32, name
    torch.testing.assert_close(outs["softmax"].cpu(), torch.softmax(h.cpu().float(), -1))
    assert explicit.dtype == torch.float16
    assert promoted.dtype == torch.float32
    assert kept is None or kept.dtype == torch.float64
    assert ints.dtype == torch.int64


def test_disabled_inside_and_refused_operators():
    a = ocl(4, 4)
    with torch.autocast("ocl", dtype=torch.float16):
        with torch.autocast("ocl", enabled=False):
            assert (a @ a).dtype == torch.float32
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(torch.sigmoid(a), torch.rand(4, 4).to("ocl"))
    assert (a @ a).dtype == torch.float32


def _train(device, steps=6):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 16, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    scales = []
    for i in range(steps):
        x = torch.randn(5, 8, generator=g)
        if i == 2:
            x[0, 0] = float("inf")  # an overflow: the step is skipped, the scale backs off
        loss = m(x.to(device)).square().mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, [p.detach().cpu() for p in m.parameters()]


def test_grad_scaler_matches_the_cpu():
    (cpu_scales, cpu_params), (ocl_scales, ocl_params) = _train("cpu"), _train("ocl")
    assert ocl_scales == cpu_scales
    assert cpu_scales[2] < cpu_scales[1]  # the overflow was seen
    for got, want in zip(ocl_params, cpu_params):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_autocast_training_step_with_the_scaler():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 6 * 6, 5)).to("ocl")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("ocl")
    before = [p.detach().cpu().clone() for p in m.parameters()]
    with torch.autocast("ocl", dtype=torch.float16):
        out = m(ocl(2, 3, 8, 8))
        loss = F.cross_entropy(out, torch.tensor([1, 3]).to("ocl"))
    assert out.dtype == torch.float16 and loss.dtype == torch.float32
    scaler.scale(loss).backward()
    assert all(p.grad.dtype == torch.float32 for p in m.parameters())
    scaler.step(opt)
    scaler.update()
    assert all(not torch.equal(a, p.detach().cpu()) for a, p in zip(before, m.parameters()))
