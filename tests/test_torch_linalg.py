"""dlprim.torch's linear algebra against PyTorch CPU: products (float32, float16 through
float32, integers where they are exact), matrix-vector products, dot, trace, cross, the
small dense factorizations (LU, solve, inverse, det, slogdet, Cholesky, triangular
solves) with their gradients through PyTorch's autograd, the composite operators that
reach them, and the errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")

DEV = "ocl"


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


def close(got, want, tol):
    assert got.device.type == "ocl"
    want = want.detach()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    got = got.detach().cpu().reshape(got.shape)
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=tol, atol=tol)


def both(fn, *tensors, tol=1e-4, grads=True):
    """fn on CPU tensors and on ocl copies: values, and for float32 the input gradients."""
    grads = grads and all(t.dtype == torch.float32 for t in tensors)
    cpu = [t.clone().requires_grad_(grads) for t in tensors]
    ocl = [t.to(DEV).requires_grad_(grads) for t in tensors]
    want, got = fn(*cpu), fn(*ocl)
    close(got, want, tol)
    if grads:
        g = rand(*want.shape, seed=9)
        want.backward(g)
        got.backward(g.to(DEV))
        for c, o in zip(cpu, ocl):
            close(o.grad, c.grad, tol * 10)
    return got


DTYPES = [(torch.float32, 1e-4), (torch.float16, 2e-2)]


@pytest.mark.parametrize("dtype,tol", DTYPES + [(torch.int64, 0), (torch.int32, 0)])
@pytest.mark.parametrize("n,m", [(1, 1), (31, 33), (65, 2)])
def test_mv_dot_addmv_addr(dtype, tol, n, m):
    a, v, w = rand(n, m, dtype=dtype), rand(m, dtype=dtype), rand(n, dtype=dtype)
    both(torch.mv, a, v, tol=tol)
    both(torch.dot, v, v, tol=tol)
    both(torch.vdot, v, v, tol=tol)
    both(lambda c, x, y: torch.addmv(c, x, y, beta=2, alpha=3), w, a, v, tol=tol)
    both(lambda c, x, y: torch.addmv(c, x, y, beta=0), w, a, v, tol=tol)
    both(lambda c, x, y: torch.addr(c, x, y, beta=2, alpha=-1), rand(n, m, dtype=dtype), w, v,
         tol=tol)
    both(torch.outer, w, v, tol=tol)


def test_addr_bool_and_nan_beta_zero():
    a, b = torch.tensor([True, False, True]), torch.tensor([False, True])
    c = torch.tensor([[True, False], [False, False], [False, True]])
    both(lambda c, x, y: torch.addr(c, x, y), c, a, b)
    both(lambda c, x, y: torch.addr(c, x, y, beta=False), c, a, b)
    nan = torch.full((3,), float("nan"))
    got = torch.addmv(nan.to(DEV), rand(3, 4).to(DEV), rand(4).to(DEV), beta=0)
    assert not torch.isnan(got.cpu()).any()


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("b,n,k,m", [(1, 1, 1, 1), (3, 31, 33, 5), (2, 65, 1, 3)])
def test_batched_products(dtype, tol, b, n, k, m):
    x, y = rand(b, n, k, dtype=dtype), rand(b, k, m, dtype=dtype)
    both(lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5, alpha=2), rand(b, n, m, dtype=dtype),
         x, y, tol=tol)
    both(lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5), rand(m, dtype=dtype), x, y, tol=tol)
    both(lambda c, x, y: torch.addbmm(c, x, y, beta=-1, alpha=0.5), rand(n, m, dtype=dtype), x, y,
         tol=tol)
    both(torch.bmm, x, y, tol=tol)
    both(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2), rand(n, m, dtype=dtype), x[0],
         y[0], tol=tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_matmul_every_rank_and_composites(dtype, tol):
    shapes = [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)),
              ((2, 3, 5), (5,)), ((2, 3, 5), (5, 4)), ((5,), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 2))]
    for sa, sb in shapes:
        both(torch.matmul, rand(*sa, dtype=dtype), rand(*sb, dtype=dtype), tol=tol)
    a, b = rand(3, 4, dtype=dtype), rand(4, 5, dtype=dtype)
    both(lambda a, b: torch.einsum("ij,jk->ik", a, b), a, b, tol=tol)
    both(lambda a, b: torch.einsum("ij,ij->i", a, b), a, a, tol=tol)
    both(lambda a, b: torch.tensordot(a, b, dims=([1], [0])), a, b, tol=tol)
    both(torch.kron, a, b, tol=tol)
    both(torch.inner, a, rand(6, 4, dtype=dtype), tol=tol)
    both(lambda a, b, c: torch.linalg.multi_dot([a, b, c]), a, b, rand(5, 2, dtype=dtype), tol=tol)


@pytest.mark.parametrize("dtype,tol", DTYPES + [(torch.int64, 0), (torch.int32, 0)])
def test_trace_and_cross(dtype, tol):
    for shape in [(1, 1), (31, 33), (65, 3)]:
        both(torch.trace, rand(*shape, dtype=dtype), tol=tol)
    both(lambda a, b: torch.linalg.cross(a, b), rand(33, 3, dtype=dtype), rand(33, 3, dtype=dtype),
         tol=tol)
    both(lambda a, b: torch.cross(a, b, dim=0), rand(3, 5, dtype=dtype), rand(3, 1, dtype=dtype),
         tol=tol)


def well_conditioned(*shape, seed=0):
    n = shape[-1]
    return rand(*shape, seed=seed) + n * torch.eye(n)


@pytest.mark.parametrize("n", [1, 2, 31, 33, 64])
def test_solve_inv_det(n):
    A = well_conditioned(3, n, n)
    B = rand(3, n, 2)
    both(torch.linalg.solve, A, B, tol=1e-3)
    both(torch.linalg.solve, A[0], B[0, :, 0], tol=1e-3)
    both(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT, tol=1e-3)
    both(torch.linalg.inv, A, tol=1e-3)
    both(lambda a: torch.linalg.det(a / n), A, tol=1e-3)
    both(lambda a: torch.linalg.slogdet(a)[1], A, tol=1e-3)
    both(lambda a: torch.linalg.slogdet(a)[0], -A, tol=1e-3, grads=False)
    LU, piv = torch.linalg.lu_factor(A.to(DEV))
    want_lu, want_piv = torch.linalg.lu_factor(A)
    close(LU, want_lu, 1e-3)
    assert torch.equal(piv.cpu(), want_piv)
    close(torch.linalg.lu_solve(LU, piv, B.to(DEV), adjoint=True),
          torch.linalg.lu_solve(want_lu, want_piv, B, adjoint=True), 1e-3)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 33, 31), (1, 1), (64, 64)])
def test_lu_rectangular_and_unpacked(shape):
    A = rand(*shape)
    LU, piv = torch.linalg.lu_factor(A.to(DEV))
    want_lu, want_piv = torch.linalg.lu_factor(A)
    close(LU, want_lu, 1e-3)
    assert torch.equal(piv.cpu(), want_piv)
    for k in range(3):
        both(lambda a: torch.linalg.lu(a)[k], A, tol=1e-3, grads=k > 0)
    P, L, U = torch.lu_unpack(LU, piv)
    close(P @ L @ U, A, 1e-4)


def test_pivoting_and_singular():
    A = torch.tensor([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]])
    both(torch.linalg.det, A)
    both(torch.linalg.inv, A)
    singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    close(torch.linalg.det(singular.to(DEV)), torch.linalg.det(singular), 1e-6)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(singular.to(DEV))
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.solve(torch.zeros(2, 2, device=DEV), torch.ones(2, device=DEV))
    inv, info = torch.linalg.inv_ex(torch.zeros(2, 3, 3).to(DEV))
    assert info.cpu().tolist() == [1, 1]


@pytest.mark.parametrize("n", [1, 31, 33])
def test_cholesky_and_triangular(n):
    M = rand(2, n, n)
    S = M @ M.mT + n * torch.eye(n)
    both(torch.linalg.cholesky, S, tol=1e-3)
    both(lambda s: torch.linalg.cholesky(s, upper=True), S, tol=1e-3)
    B = rand(2, n, 3)
    T = torch.linalg.cholesky(S)
    both(lambda t, b: torch.linalg.solve_triangular(t, b, upper=False), T, B, tol=1e-3)
    both(lambda t, b: torch.linalg.solve_triangular(t.mT, b, upper=True, unitriangular=True),
         T, B, tol=1e-3)
    both(lambda t, b: torch.linalg.solve_triangular(t, b, upper=False, left=False), T, B.mT,
         tol=1e-3)
    both(lambda b, t: torch.cholesky_solve(b, t), B, T, tol=1e-3)
    both(lambda b, t: torch.cholesky_solve(b, t.mT, upper=True), B, T, tol=1e-3)
    both(torch.cholesky_inverse, T, tol=1e-3)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(-S.to(DEV))


def test_float64():
    try:
        torch.zeros(1, dtype=torch.float64).to(DEV)
    except TypeError:
        pytest.skip("the device has no float64")
    A = well_conditioned(2, 33, 33).double()
    B = rand(2, 33, 3).double()
    for fn, args in ((torch.bmm, (A, B)), (torch.linalg.solve, (A, B)), (torch.linalg.det, (A,)),
                     (torch.linalg.cholesky, (A @ A.mT,)), (torch.mv, (A[0], B[0, :, 0]))):
        close(fn(*[a.to(DEV) for a in args]), fn(*args), 1e-9)


def test_errors():
    with pytest.raises(RuntimeError):
        torch.dot(torch.ones(3, device=DEV), torch.ones(4, device=DEV))
    with pytest.raises(RuntimeError):
        torch.dot(torch.ones(3, device=DEV), torch.ones(3, device=DEV, dtype=torch.float16))
    with pytest.raises(RuntimeError):
        torch.mv(torch.ones(3, 2, device=DEV), torch.ones(3, device=DEV))
    with pytest.raises(RuntimeError):
        torch.linalg.solve(torch.ones(3, 4, device=DEV), torch.ones(3, device=DEV))
    with pytest.raises(RuntimeError):
        torch.linalg.cross(torch.ones(4, 2, device=DEV), torch.ones(4, 2, device=DEV))
    with pytest.raises(NotImplementedError, match="64"):
        torch.linalg.inv(torch.ones(65, 65).to(DEV))
    with pytest.raises(NotImplementedError):
        torch.trace(torch.ones(2, 2, dtype=torch.bool, device=DEV))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_grouped_mm_every_layout(dtype):
    """torch._grouped_mm as a mixture of experts calls it: a's rows in groups (2-D by 3-D,
    an empty group among them), b's columns in groups (3-D by 2-D), the inner dim in groups
    (2-D by 2-D: a 3-D result), and the batched 3-D by 3-D; against the CPU's kernel."""
    g = torch.Generator().manual_seed(0)
    rows = torch.tensor([3, 3, 9, 12], dtype=torch.int32)
    cols = torch.tensor([8, 8, 24, 32], dtype=torch.int32)
    cases = [(torch.randn(12, 16, generator=g), torch.randn(4, 16, 8, generator=g), rows),
             (torch.randn(4, 8, 16, generator=g), torch.randn(16, 32, generator=g), cols),
             (torch.randn(8, 32, generator=g), torch.randn(32, 8, generator=g), cols),
             (torch.randn(4, 8, 16, generator=g), torch.randn(4, 16, 8, generator=g), None)]
    for a, b, offs in cases:
        a, b = a.to(dtype), b.to(dtype)
        want = torch._grouped_mm(a, b, offs)
        got = torch._grouped_mm(a.to("ocl"), b.to("ocl"),
                                None if offs is None else offs.to("ocl")).cpu()
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2 if dtype != torch.float32
                                   else 1e-5, atol=1e-2 if dtype != torch.float32 else 1e-5)


def test_repeated_products_replay_over_new_operands():
    """A product repeated with one signature replays the launches recorded by the first
    call over each call's own operands: new tensors, views further into a storage, both
    operands in one storage, and a bias; each result is its own call's."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4 * 24 * 24, generator=g)
    dev = base.to(DEV)
    bias = torch.randn(24, generator=g)
    for k in range(4):
        a = base[k * 576:(k + 1) * 576].view(24, 24)
        b = torch.randn(24, 24, generator=g)
        da = dev[k * 576:(k + 1) * 576].view(24, 24)
        torch.testing.assert_close((da @ b.to(DEV)).cpu(), a @ b, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close((da @ da.t()).cpu(), a @ a.t(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.addmm(bias.to(DEV), da, b.to(DEV)).cpu(),
                                   torch.addmm(bias, a, b), rtol=1e-5, atol=1e-5)
