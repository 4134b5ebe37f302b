"""The ocl dispatcher's own contract (dlprim/torch/dispatch.py): errors inside a backward
pass reach the caller, out= overloads through their functional overload, PyTorch's
decompositions, and the CPU fallback for writes, resizes, in-place views, tuples and
scalars. Operators are hidden from the table for a test, so that what is checked does not
depend on which operators have kernels today."""
import contextlib
import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
from dlprim.torch import dispatch  # noqa: E402

aten = torch.ops.aten
DEV = "ocl:0"


@contextlib.contextmanager
def hidden(*ops):
    """These overloads (and their packets) without an ocl implementation meanwhile."""
    saved = {}
    for op in ops:
        for key in (op, op.overloadpacket):
            if key in dispatch._IMPLS:
                saved[key] = dispatch._IMPLS.pop(key)
    try:
        yield
    finally:
        dispatch._IMPLS.update(saved)


@contextlib.contextmanager
def fallback():
    dt.allow_cpu_fallback()
    try:
        yield
    finally:
        dt.allow_cpu_fallback(False)


def close(got, want, tol=1e-6):
    assert got.device.type == "ocl"
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


# ----- errors inside a backward pass
def _boom(*args, **kwargs):
    raise ValueError("boom from the backward pass")


def test_an_error_in_backward_is_raised_by_backward_every_time(monkeypatch):
    # sin's backward (a C++ node, run on the ocl device thread) calls cos: make it fail.
    # Before, the second such error ended the process in std::terminate.
    monkeypatch.setitem(dispatch._IMPLS, aten.cos.default, _boom)
    for _ in range(3):
        x = torch.linspace(-1, 1, 33).to(DEV).requires_grad_()
        with pytest.raises(ValueError, match="boom from the backward pass"):
            torch.sin(x).sum().backward()
        with pytest.raises(ValueError, match="boom from the backward pass"):
            torch.autograd.grad(torch.sin(x).sum(), [x])
    monkeypatch.undo()
    x = torch.linspace(-1, 1, 33).to(DEV).requires_grad_()
    torch.sin(x).sum().backward()   # the engine still works afterwards
    close(x.grad, torch.cos(torch.linspace(-1, 1, 33)), 1e-5)


def test_an_error_in_backward_without_a_stand_in_result_is_still_an_error(monkeypatch):
    def no_meta(*args, **kwargs):
        raise RuntimeError("no meta kernel")
    monkeypatch.setitem(dispatch._IMPLS, aten.cos.default, _boom)
    monkeypatch.setattr(dispatch, "_placeholder", no_meta)
    for _ in range(2):
        x = torch.ones(5, device=DEV, requires_grad=True)
        with pytest.raises(RuntimeError):   # PyTorch's own, on the undefined result
            torch.sin(x).sum().backward()


def test_an_error_in_a_custom_functions_backward_reaches_its_caller():
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            with pytest.raises(RuntimeError):   # seen where it happens, as in eager code
                g * torch.ones(4, device=DEV)
            return g * 2
    x = torch.ones(3, device=DEV, requires_grad=True)
    Twice.apply(x).sum().backward()
    close(x.grad, torch.full((3,), 2.0))


def test_a_missing_operator_in_backward_runs_on_the_cpu_with_a_warning(caplog):
    x = torch.linspace(-1, 1, 31).to(DEV).requires_grad_()
    y = torch.sin(x).sum()
    with hidden(aten.cos.default), caplog.at_level(logging.WARNING, logger="dlprim.torch"):
        dispatch._fallback["warned"].discard("aten.cos.default")
        y.backward()
    close(x.grad, torch.cos(torch.linspace(-1, 1, 31)), 1e-5)
    assert any("aten.cos.default runs on the CPU" in r.getMessage() for r in caplog.records)


# ----- out= overloads through the functional overload
def test_out_overload_runs_the_functional_one_and_resizes_like_pytorch():
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(3)
    with hidden(aten.add.out):
        out = torch.empty(0, device=DEV)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = torch.add(a.to(DEV), b.to(DEV), out=out)
        assert not [w for w in seen if "resized" in str(w.message)]   # empty: silently
        assert got is out
        close(out, a + b)
        out = torch.zeros(5, device=DEV)
        with pytest.warns(UserWarning, match="was resized"):
            torch.add(a.to(DEV), b.to(DEV), out=out)
        close(out, a + b)
        wide = torch.zeros(2, 3, device=DEV, dtype=torch.int64)
        with pytest.raises(RuntimeError, match="cast"):
            torch.add(a.to(DEV), b.to(DEV), out=wide)
        with pytest.raises(RuntimeError, match="same device"):
            torch.add(a.to(DEV), b.to(DEV), out=torch.empty(2, 3))


def test_out_overload_with_two_outputs():
    x = torch.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    values, indices = torch.empty(0, device=DEV), torch.empty(0, device=DEV, dtype=torch.int64)
    with hidden(aten.max.dim_max):
        got = torch.max(x.to(DEV), 1, out=(values, indices))
    want = torch.max(x, 1)
    assert got[0] is values and got[1] is indices
    close(values, want.values)
    close(indices, want.indices)


# ----- PyTorch's decompositions
def test_a_decomposition_runs_on_the_device_without_the_fallback():
    x, t1, t2 = (torch.linspace(-2, 2, 65) * k for k in (1, 2, 3))
    with hidden(aten.addcmul.default):
        assert not dt.cpu_fallback_allowed()
        got = torch.addcmul(x.to(DEV), t1.to(DEV), t2.to(DEV), value=0.5)
    close(got, torch.addcmul(x, t1, t2, value=0.5), 1e-5)


def test_a_decomposition_missing_an_operator_names_both():
    x = torch.ones(3, device=DEV)
    with hidden(aten.addcmul.default, aten.addcmul.out, aten.mul.Tensor):
        with pytest.raises(NotImplementedError, match=r"aten\.mul\.Tensor.*aten\.addcmul"):
            torch.addcmul(x, x, x)
        with pytest.raises(NotImplementedError,
                           match=r"aten\.mul\.Tensor.*aten\.addcmul\.out -> aten\.addcmul"):
            torch.addcmul(x, x, x, out=torch.empty(3, device=DEV))


# ----- the CPU fallback
def test_fallback_resizes_out_of_a_factory():
    out = torch.empty(0, device=DEV)
    with hidden(aten.arange.out, aten.arange.start_out), fallback():
        got = torch.arange(5, out=out)
    assert got is out
    close(out, torch.arange(5.0))


def test_fallback_in_place_view_changes_the_ocl_tensor_and_keeps_its_storage():
    base = torch.zeros(2, 3, device=DEV)
    t = base[1]
    with hidden(aten.unsqueeze_.default, aten.transpose_.default), fallback():
        assert t.unsqueeze_(0) is t
        assert t.shape == (1, 3)
        t.fill_(7.0)
        b = torch.arange(6.0).reshape(2, 3).to(DEV)
        b.transpose_(0, 1)
    close(base, torch.tensor([[0.0, 0, 0], [7, 7, 7]]))
    close(b.contiguous(), torch.arange(6.0).reshape(2, 3).t().contiguous())


def test_fallback_resize_grows_the_storage_and_keeps_values():
    t = torch.arange(3.0).to(DEV)
    with hidden(aten.resize_.default), fallback():
        t.resize_(2, 4)
    assert t.shape == (2, 4)
    close(t.reshape(-1)[:3], torch.arange(3.0))


def test_fallback_in_place_values_tuples_scalars_and_views(caplog):
    x = torch.tensor([[3.0, 1.0, 2.0], [0.5, 4.0, -1.0]])
    with hidden(aten.max.dim, aten.equal.default, aten.diagonal.default, aten.cumsum_.default,
                aten.cumsum.default), fallback(), \
            caplog.at_level(logging.WARNING, logger="dlprim.torch"):
        dispatch._fallback["warned"].clear()
        got = torch.max(x.to(DEV), 1)
        close(got.values, x.max(1).values)
        close(got.indices, x.max(1).indices)
        assert torch.equal(x.to(DEV), x.to(DEV)) is True
        y = x.to(DEV)
        d = torch.ops.aten.diagonal.default(y)     # a view of y's storage
        d.fill_(9.0)
        close(y, torch.tensor([[9.0, 1.0, 2.0], [0.5, 9.0, -1.0]]))
        z = x.to(DEV)
        z.cumsum_(1)
        z.cumsum_(1)
        close(z, x.cumsum(1).cumsum(1))
    warned = [r.getMessage() for r in caplog.records if "runs on the CPU" in r.getMessage()]
    assert len([m for m in warned if "aten.cumsum_" in m]) == 1   # once per operator


def test_counting_operators_counts_what_reaches_the_device_and_restores_the_route():
    from dlprim.torch.dispatch import counting_operators
    x = torch.ones(3).to("ocl")
    with counting_operators() as count:
        y = (x + 1) * 2
        z = y.sum()
    assert count[0] == 3  # add, mul, sum
    with counting_operators() as again:
        pass
    assert again[0] == 0 and z.item() == 12.0 and count[0] == 3


def test_bare_ocl_is_the_default_device_for_copies_and_factories():
    """ocl:0 is dlprim's default device whatever its place in dlprim-devices: PyTorch's
    copies fill in a bare "ocl" as index 0 and the factories take the current device, so
    both land on the device DLPRIM_DEVICE names."""
    import subprocess
    import sys
    from dlprim.context import list_devices
    from dlprim.drivers import probe_device
    # (a driver that cannot build here, as pip's PoCL on a CPU its LLVM does not know,
    # is no device to name)
    devices = [e for e in list_devices() if probe_device(e[3]).ok]
    if len(devices) < 2:
        pytest.skip("one OpenCL device that builds kernels here")
    p, d, _, dev = devices[-1]
    code = ("import torch, dlprim.torch as dt\n"
            "x = torch.ones(3).to('ocl'); y = torch.zeros(3, device='ocl')\n"
            "print(x.device, y.device, x._ocl_storage.ctx.name == y._ocl_storage.ctx.name,"
            " dt.device.location(0), (x + y).sum().item())\n")
    env = dict(__import__("os").environ, DLPRIM_DEVICE="%d:%d" % (p, d))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ocl:0", "ocl:0", "True", "%d:%d" % (p, d), "3.0"]


def test_tensors_of_two_devices_are_named_as_pytorch_names_them():
    from dlprim.context import list_devices
    from dlprim.drivers import probe_device
    if dt.device_count() < 2:
        pytest.skip("one OpenCL device here")
    second = tuple(int(v) for v in dt.device.location(1).split(":"))
    if not any(e[:2] == second and probe_device(e[3]).ok for e in list_devices()):
        pytest.skip("ocl:1 cannot build kernels here (pip's PoCL on a CPU its LLVM does "
                    "not know)")
    x, y = torch.ones(3).to("ocl:0"), torch.ones(3).to("ocl:1")
    for op in (lambda: x + y, lambda: torch.cat([x, y])):
        with pytest.raises(RuntimeError, match="same device, but found at least two devices, "
                                               "ocl:0 and ocl:1"):
            op()
    assert (x + y.to("ocl:0")).sum().item() == 6.0  # a copy across devices is the way


def test_meta_answers_are_kept_for_calls_with_none_arguments():
    """PyTorch's meta kernels (mean's is Python and costs about a millisecond) run once per
    signature, a None argument (dtype=None) part of the signature like any other."""
    from dlprim.torch import ops_tensor
    x = torch.randn(2, 5, 7).to("ocl")
    x.mean(-1, keepdim=True)
    before = len(ops_tensor._meta_answers)
    for _ in range(3):
        x.mean(-1, keepdim=True)
    x.mean(1)
    assert len(ops_tensor._meta_answers) == before + 1  # the second signature only
