"""dlprim.torch: torch.special's Bessel functions (J0, J1, Y0, Y1, K0, K1 and the scaled
K's), Airy Ai and ndtri on the ocl device against PyTorch CPU: every branch of their
approximations (small and large arguments, the switch points, negatives, zero, +-inf,
NaN) in float32 and float64, integer and bool inputs (promoted to float), strided and
work-group-edge shapes, out=, and ndtri's gradient."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("dlprim.torch")

DEV = "ocl"
S = torch.special
INF, NAN = float("inf"), float("nan")

# arguments on both sides of every switch point: J/Y at 5 (and J0's tiny-x form),
# K at 2, Ai at +-2.09, 8.32 and 103.892, plus the special values
BESSEL = [-INF, -1e4, -200.0, -10.0, -5.5, -5.0, -3.0, -1.0, -1e-6, -0.0, 0.0, 1e-7, 1e-5,
          1e-3, 0.5, 1.0, 1.999, 2.0, 2.001, 2.405, 3.0, 4.99, 5.0, 5.01, 7.0, 8.5, 20.0,
          50.0, 100.0, 700.0, 1e4, 1e10, INF, NAN]
AIRY = [-INF, -1e3, -50.0, -10.0, -2.5, -2.091, -2.09, -2.0, -1.0, -0.1, -0.0, 0.0, 0.1,
        1.0, 2.0, 2.089, 2.09, 3.0, 8.3, 8.33, 20.0, 103.0, 103.9, 200.0, INF, NAN]
PROBABILITY = [-INF, -1.0, -1e-30, 0.0, 1e-300, 1e-40, 1e-20, 1e-14, 1e-10, 1e-3, 0.1,
               0.1353, 0.1354, 0.2, 0.5, 0.8, 0.8646, 0.8647, 0.9, 0.999, 1 - 1e-7,
               1 - 1e-15, 1.0, 1.0 + 1e-7, 2.0, INF, NAN]

FUNCTIONS = {
    "bessel_j0": (S.bessel_j0, BESSEL),
    "bessel_j1": (S.bessel_j1, BESSEL),
    "bessel_y0": (S.bessel_y0, BESSEL),
    "bessel_y1": (S.bessel_y1, BESSEL),
    "modified_bessel_k0": (S.modified_bessel_k0, BESSEL),
    "modified_bessel_k1": (S.modified_bessel_k1, BESSEL),
    "scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0, BESSEL),
    "scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1, BESSEL),
    "airy_ai": (S.airy_ai, AIRY),
    "ndtri": (S.ndtri, PROBABILITY),
}
TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-12, 1e-14)}


def close(got, want, dtype):
    assert got.device.type == DEV
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)


def arguments(points, dtype, seed=0):
    """The branch points, then random ones over the interesting range (odd count: the
    last work-group is partial)."""
    g = torch.Generator().manual_seed(seed)
    if points is PROBABILITY:
        extra = torch.rand(65, generator=g, dtype=torch.float64)
    else:
        extra = (torch.rand(65, generator=g, dtype=torch.float64) - 0.3) * 30
    return torch.cat([torch.tensor(points, dtype=torch.float64), extra]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_values_on_every_branch(name, dtype):
    fn, points = FUNCTIONS[name]
    x = arguments(points, dtype)
    close(fn(x.to(DEV)), fn(x), dtype)


@pytest.mark.parametrize("name", ["bessel_j0", "bessel_y1", "modified_bessel_k0", "ndtri"])
def test_integer_and_bool_inputs_compute_in_float(name):
    fn, _ = FUNCTIONS[name]
    for x in (torch.arange(-3, 12, dtype=torch.int64), torch.tensor([True, False, True]),
              torch.tensor([0, 1, 7, 200], dtype=torch.int32)):
        got = fn(x.to(DEV))
        assert got.dtype == torch.float32
        close(got, fn(x), torch.float32)


@pytest.mark.parametrize("n", [1, 31, 33, 65])
def test_strided_and_edge_shapes(n):
    x = (torch.rand(n, 3, dtype=torch.float64) * 12 - 2).to(torch.float32)
    for fn in (S.bessel_j1, S.airy_ai, S.scaled_modified_bessel_k1):
        close(fn(x.to(DEV).t()), fn(x.t()), torch.float32)
        close(fn(x.to(DEV)[::2]), fn(x[::2]), torch.float32)


def test_out_overload():
    x = torch.linspace(0.01, 20, 33)
    out = torch.empty(0, device=DEV)
    got = S.bessel_y0(x.to(DEV), out=out)
    assert got is out
    close(out, S.bessel_y0(x), torch.float32)


def test_ndtri_gradient():
    x = torch.tensor([1e-6, 0.01, 0.3, 0.5, 0.77, 0.999], requires_grad=True)
    y = x.detach().to(DEV).requires_grad_()
    S.ndtri(x).sum().backward()
    S.ndtri(y).sum().backward()
    close(y.grad, x.grad, torch.float32)
