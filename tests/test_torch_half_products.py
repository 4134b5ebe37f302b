"""dlprim.torch: matrix products and convolutions of 16-bit tensors run dlprim's kernels of
their own type (the tensor-core kernels where the device has them: precision "fp16" or
"bf16"), not float32 copies, and give what the CPU gives in float32 rounded once."""
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
from dlprim.torch import ops_conv, ops_nn  # noqa: E402

F = torch.nn.functional
HALVES = [(torch.float16, "fp16"), (torch.bfloat16, "bf16")]


@pytest.fixture
def gemms(monkeypatch):
    """The (precision, stored dtype) of every Gemm the ocl device makes meanwhile."""
    made = []
    real = ops_nn.Gemm

    def spy(*args, **kwargs):
        stored = kwargs.get("dtypes", ("float32",))[0]
        made.append((kwargs.get("precision"), getattr(stored, "names", None) and "bfloat16"
                     or str(stored)))  # (dlprim's bfloat16 is a structured numpy dtype)
        return real(*args, **kwargs)
    monkeypatch.setattr(ops_nn, "Gemm", spy)
    return made


def rel(got, want):
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("dtype,precision", HALVES, ids=["fp16", "bf16"])
def test_products_run_in_their_own_type(dtype, precision, gemms):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g).to(dtype) for s in ((37, 65), (65, 29)))
    a3, b3 = (torch.randn(s, generator=g).to(dtype) for s in ((3, 17, 40), (3, 40, 9)))
    w, bias = torch.randn(29, 65, generator=g).to(dtype), torch.randn(29, generator=g).to(dtype)
    cases = {"mm": (lambda x, y: x @ y, (a, b)), "bmm": (torch.bmm, (a3, b3)),
             "linear": (F.linear, (a, w, bias))}
    for name, (fn, args) in cases.items():
        got = fn(*[t.to("ocl") for t in args]).cpu()
        assert got.dtype == dtype, name
        # the CPU in float32, rounded once: what a float32-accumulating product gives
        want = fn(*[t.float() for t in args]).to(dtype).double()
        assert rel(got, want) <= 2 ** -7, name
    kinds = {m for m in gemms}
    assert kinds == {(precision, {"fp16": "float16", "bf16": "bfloat16"}[precision])}


def test_float32_products_keep_their_precision(gemms):
    a = torch.randn(9, 13).to("ocl")
    (a @ a.t()).cpu()
    assert gemms == [("fp32", "float32")]
    with_tf32 = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        (a @ a.t()[:, :5]).cpu()
    finally:
        torch.set_float32_matmul_precision(with_tf32)
    assert gemms[-1] == ("tf32", "float32")


@pytest.mark.parametrize("dtype,precision", HALVES, ids=["fp16", "bf16"])
def test_convolutions_take_their_types_precision(dtype, precision, monkeypatch):
    seen = []
    real = ops_conv._plan_2d

    def spy(ctx, cls, problem, dt_, **kw):
        op, ws = real(ctx, cls, problem, dt_, **kw)
        seen.append((cls.__name__, ops_nn.gemm_precision(dt_, strict_float32=True)))
        return op, ws
    monkeypatch.setattr(ops_conv, "_plan_2d", spy)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 9, 9, generator=g).to(dtype)
    w = torch.randn(7, 5, 3, 3, generator=g).to(dtype)
    xo, wo = x.to("ocl").requires_grad_(), w.to("ocl").requires_grad_()
    y = F.conv2d(xo, wo, padding=1)
    y.sum().backward()
    assert y.dtype == dtype and xo.grad.dtype == dtype and wo.grad.dtype == dtype
    want = F.conv2d(x.float(), w.float(), padding=1)
    assert rel(y.detach().cpu(), want.double()) <= 2 ** -6
    assert {p for _, p in seen} == {precision}
    assert {c for c, _ in seen} >= {"ConvForward", "ConvBackwardData", "ConvBackwardFilter"}
