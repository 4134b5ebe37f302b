"""dlprim.torch: every common dtype on the ocl device against PyTorch CPU: round trips,
the cast matrix (every pair, contiguous and strided), fill and the factories, add and mul,
float64's precision, int64 beyond 2^53, and float64 refused on a device without fp64."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")

from dlprim.torch import device as ocl_device  # noqa: E402

DEV = "ocl"
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]
INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
FP64 = ocl_device.context(0).facts.fp64
needs_fp64 = pytest.mark.skipif(not FP64, reason="the device has no cl_khr_fp64")


def available(dtypes):
    return [pytest.param(d, marks=needs_fp64) if d is torch.float64 else d for d in dtypes]


def name(d):
    return str(d).replace("torch.", "")


# values every dtype's conversion rules see: fractions (truncation), negatives (uint8
# wraps through int64), values past int8's range (integers wrap), zero and -0.0 (bool)
VALUES = torch.tensor([0.0, -0.0, 1.0, 1.5, -1.5, 2.75, -7.25, 100.5, 200.7, -129.5, 3e4,
                       -3e4, 0.25, 1e-3, 65.0, 127.0, 128.0, 255.0, -128.0, 42.0, -2.5])


def sample(dtype, n=65, seed=0):
    """n values of ``dtype`` (a work-group edge and then some), reproducibly."""
    g = torch.Generator().manual_seed(seed)
    return VALUES[torch.randint(0, len(VALUES), (n,), generator=g)].to(dtype)


def same(got, want, what=""):
    got = got.cpu()
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    # bitwise equal where the values are not NaN (the casts are exact: one rounding each)
    assert torch.equal(got, want), (what, got.tolist(), want.tolist())


@pytest.mark.parametrize("dtype", available(DTYPES), ids=name)
def test_round_trip(dtype):
    x = sample(dtype).reshape(5, 13)
    o = x.to(DEV)
    assert o.dtype == dtype and o.device.type == "ocl"
    same(o, x, "round trip")
    same(o.t().contiguous(), x.t().contiguous(), "transposed")
    assert o[2, 3].item() == x[2, 3].item()
    same(o.clone(), x, "clone")
    same(o[2, 3], x[2, 3], "0-dim")  # a scalar stays 0-dim on its way back
    same(torch.tensor(7, dtype=dtype).to(DEV), torch.tensor(7, dtype=dtype), "0-dim")


@pytest.mark.parametrize("src", available(DTYPES), ids=name)
def test_cast_matrix(src):
    """src -> every dtype on the device, contiguous and from a strided view, vs CPU."""
    x = sample(src, 3 * 33).reshape(3, 33)
    o = x.to(DEV)
    for dst in DTYPES:
        if dst is torch.float64 and not FP64:
            continue
        want = x.to(dst)
        same(o.to(dst), want, "%s -> %s" % (name(src), name(dst)))
        same(o.t().to(dst), x.t().to(dst), "%s -> %s strided" % (name(src), name(dst)))
        strided = torch.zeros(33, 3, dtype=dst).to(DEV).t()  # copy_ into a strided dst
        strided.copy_(o)
        same(strided, want, "copy_ %s -> %s" % (name(src), name(dst)))


def test_layouts_follow_pytorch():
    """.to, clone and the *_like factories keep a dense layout (preserve_format) or take
    the memory format asked for, on the device and on the way to the CPU."""
    x = sample(torch.float32, 2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    o = x.to(DEV)
    cases = [lambda t: t.to(torch.int16, memory_format=torch.channels_last),
             lambda t: t.transpose(1, 2).to(torch.bfloat16), lambda t: t.transpose(1, 2).clone(),
             lambda t: torch.zeros_like(t.permute(3, 2, 1, 0), dtype=torch.int8),
             lambda t: t.permute(0, 2, 3, 1).to("cpu", torch.float16),
             lambda t: t.transpose(1, 2).contiguous(),
             lambda t: torch.full_like(t[:, :1].expand(2, 3, 4, 5), 3)]
    for k, f in enumerate(cases):
        want, got = f(x), f(o)
        assert got.stride() == want.stride(), (k, got.stride(), want.stride())
        same(got, want, "case %d" % k)
    assert torch.empty(2, 3, 4, 5, memory_format=torch.channels_last, device=DEV).stride() == \
        (60, 1, 15, 3)
    same(o[:0].to(torch.int8), x[:0].to(torch.int8), "empty")


def test_pytorch_conversion_rules():
    """Float to integer truncates toward zero; to uint8 through int64 (-1.5 -> 255); to bool
    is != 0 (NaN too); integers wrap."""
    x = torch.tensor([-1.5, 2.9, -2.9, 0.0, float("nan"), 300.0, -129.0])
    o = x.to(DEV)
    assert o.to(torch.int32).tolist()[:4] == [-1, 2, -2, 0]
    assert o.to(torch.uint8).tolist()[0] == 255
    assert o.to(torch.bool).tolist() == [True, True, True, False, True, True, True]
    assert o.to(torch.int8).tolist()[5:] == [44, 127]
    o.to(torch.int64).cpu()  # NaN to an integer is undefined in PyTorch: no crash
    big = torch.tensor([2 ** 40 + 3, -(2 ** 40) - 1, 70000])
    same(big.to(DEV).to(torch.int8), big.to(torch.int8))
    same(big.to(DEV).to(torch.int16), big.to(torch.int16))


@pytest.mark.parametrize("dtype", available(DTYPES), ids=name)
def test_cpu_copies_into_views(dtype):
    """copy_ from the CPU into a strided ocl view and from ocl into a CPU view."""
    x = sample(dtype, 4 * 31).reshape(4, 31)
    o = torch.zeros(31, 4, dtype=dtype).to(DEV)
    o.t().copy_(x)
    same(o.t(), x, "host -> strided ocl")
    host = torch.zeros(31, 4, dtype=dtype)
    host.t().copy_(o.t())
    same(host.t(), x, "strided ocl -> host")
    mixed = torch.zeros(4, 31, dtype=torch.float32).to(DEV)
    mixed.copy_(x)  # another dtype from the CPU converts as PyTorch does
    same(mixed, x.to(torch.float32), "host -> ocl float32")


@pytest.mark.parametrize("dtype", available(DTYPES), ids=name)
def test_fill_and_factories(dtype):
    value = True if dtype is torch.bool else (100 if dtype in INTS else -2.75)
    for shape in [(1,), (33,), (3, 65)]:
        same(torch.full(shape, value, dtype=dtype, device=DEV), torch.full(shape, value, dtype=dtype))
        same(torch.zeros(shape, dtype=dtype, device=DEV), torch.zeros(shape, dtype=dtype))
        same(torch.ones(shape, dtype=dtype, device=DEV), torch.ones(shape, dtype=dtype))
    x = sample(dtype, 3 * 33).reshape(3, 33)
    o = x.to(DEV)
    same(torch.zeros_like(o), torch.zeros_like(x))
    same(torch.ones_like(o), torch.ones_like(x))
    same(torch.full_like(o, value), torch.full_like(x, value))
    same(o.new_full((2, 5), value), x.new_full((2, 5), value))
    view = o.t()[::2]  # fill_ and zero_ of a strided view leave the rest alone
    view.fill_(value)
    want = x.clone()
    want.t()[::2].fill_(value)
    same(o, want, "fill_ of a view")
    o.t()[1::2].zero_()
    want.t()[1::2].zero_()
    same(o, want, "zero_ of a view")


def test_fill_converts_as_pytorch_does():
    """A fill value converts like PyTorch's (truncation, != 0), an overflow is refused."""
    same(torch.full((3,), 2.9, device=DEV).to(torch.int32), torch.full((3,), 2.9).to(torch.int32))
    same(torch.zeros(3, dtype=torch.int16, device=DEV).fill_(-7.9),
         torch.zeros(3, dtype=torch.int16).fill_(-7.9))
    same(torch.zeros(3, dtype=torch.bool, device=DEV).fill_(0.5),
         torch.zeros(3, dtype=torch.bool).fill_(0.5))
    same(torch.zeros(3, dtype=torch.bool, device=DEV).fill_(5), torch.zeros(3, dtype=torch.bool).fill_(5))
    assert torch.full((2,), 7, dtype=torch.bool, device=DEV).to(torch.uint8).tolist() == [1, 1]
    same(torch.zeros(3, dtype=torch.bfloat16, device=DEV).fill_(1.00390625),
         torch.zeros(3, dtype=torch.bfloat16).fill_(1.00390625))
    with pytest.raises(RuntimeError):
        torch.zeros(3, dtype=torch.uint8).fill_(300)
    with pytest.raises(RuntimeError):
        torch.zeros(3, dtype=torch.uint8, device=DEV).fill_(300)


def test_int64_beyond_2_53():
    """int64 values no float holds exactly survive transfers, copies, casts and fills."""
    big = [2 ** 53 + 1, -(2 ** 62) - 7, 2 ** 63 - 1, -(2 ** 63)]
    x = torch.tensor(big)
    o = x.to(DEV)
    assert o.tolist() == big
    assert o.t().clone().tolist() == big
    assert o[0].item() == 2 ** 53 + 1
    assert torch.full((33,), 2 ** 53 + 1, device=DEV).tolist() == [2 ** 53 + 1] * 33
    assert torch.zeros(2, dtype=torch.int64, device=DEV).fill_(2 ** 62 + 3).tolist() == [2 ** 62 + 3] * 2
    same(o.to(torch.int32), x.to(torch.int32))


@needs_fp64
def test_float64_precision():
    """float64 keeps what float32 rounds away: 1 + 1e-12, through transfers, casts, fills
    and a kernel computing in double."""
    x = torch.tensor([1 + 1e-12, -1 - 1e-12, 1e300, 5e-324], dtype=torch.float64)
    o = x.to(DEV)
    assert o.tolist() == x.tolist()
    assert o[0].item() == 1 + 1e-12
    assert torch.full((3,), 1 + 1e-12, dtype=torch.float64, device=DEV).tolist() == [1 + 1e-12] * 3
    same(o.to(torch.float32), x.to(torch.float32))
    same(o.to(torch.float16), x.to(torch.float16))
    same(torch.tensor([2 ** 53 + 1]).to(DEV).to(torch.float64), torch.tensor([2 ** 53 + 1]).to(torch.float64))
    one = torch.ones(33, dtype=torch.float64, device=DEV)
    tiny = torch.full((33,), 1e-12, dtype=torch.float64, device=DEV)
    assert ((one + tiny) - one).cpu().eq(torch.tensor(1e-12, dtype=torch.float64) + 1 - 1).all()


def test_float64_refused_without_fp64(monkeypatch):
    """On a device without cl_khr_fp64 float64 is refused at creation and transfer, naming
    the device and the dtype; other dtypes still work."""
    facts = ocl_device.context(0).facts
    monkeypatch.setattr(facts, "fp64", False)
    message = (r"float64 is not supported on %s \(no cl_khr_fp64\); use float32"
               % re.escape(facts.name))
    with pytest.raises(TypeError, match=message):
        torch.zeros(3, dtype=torch.float64, device=DEV)
    with pytest.raises(TypeError, match=message):
        torch.ones(3, dtype=torch.float64).to(DEV)
    o = torch.ones(3).to(DEV)
    with pytest.raises(TypeError, match=message):
        o.to(torch.float64)
    with pytest.raises(TypeError, match=message):
        torch.empty(3, device=DEV, dtype=torch.float64)
    assert o.to(torch.int64).tolist() == [1, 1, 1]


@pytest.mark.parametrize("dtype", available(DTYPES), ids=name)
def test_add_mul(dtype):
    """add and mul in each dtype vs CPU (result dtype and values; half and bfloat16 compute
    in float and round once, as PyTorch's CPU kernels do)."""
    a = sample(dtype, 65, seed=1)
    b = sample(dtype, 65, seed=2)
    if dtype is torch.bool:
        pairs = [(a + b, a.to(DEV) + b.to(DEV)), (a * b, a.to(DEV) * b.to(DEV))]
    else:
        a, b = a.reshape(5, 13), b.reshape(5, 13)
        oa, ob = a.to(DEV), b.to(DEV)
        pairs = [(a + b, oa + ob), (a * b, oa * ob), (a + b[0], oa + ob[0]),
                 (a.t() * b.t(), oa.t() * ob.t())]
    for want, got in pairs:
        if dtype.is_floating_point:
            got = got.cpu()
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
        else:
            same(got, want, "add/mul %s" % name(dtype))


def test_pointwise_kernels_take_every_storage():
    """The pointwise generator directly over dlprim tensors of every storage dtype: the
    compute type is float for 16-bit floats, double for float64, the integer's own type
    otherwise (integers wrap), bool as uchar."""
    import dlprim as dp
    from dlprim.core.pointwise import pointwise
    from dlprim.dtypes import bfloat16, bfloat16_values, to_bfloat16
    ctx = ocl_device.context(0)
    x = np.array([1, 2, 100, 120, -3, 7, 0] * 5)
    cases = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16, np.float32]
    cases += [np.float64] if FP64 else []
    for t in cases:
        a = x.astype(t)
        xa = dp.Tensor.from_numpy(ctx, a)
        y = dp.Tensor(ctx, a.shape, t)
        pointwise(ctx, [xa, xa], [y], "y0 = x0 * x1 + w0;", [3])
        want = (a * a + t(3)).astype(t)
        np.testing.assert_array_equal(y.numpy(), want, err_msg=str(t))
    bf = dp.Tensor.from_numpy(ctx, to_bfloat16(x.astype(np.float32) / 3))
    y = dp.Tensor(ctx, x.shape, bfloat16)
    pointwise(ctx, [bf], [y], "y0 = x0 * 2;")
    np.testing.assert_array_equal(y.numpy(), bfloat16_values(to_bfloat16(bfloat16_values(bf.to_host()) * 2)))
    flags = dp.Tensor.from_numpy(ctx, x != 0)
    y = dp.Tensor(ctx, x.shape, np.bool_)
    pointwise(ctx, [flags], [y], "y0 = !x0;")
    np.testing.assert_array_equal(y.numpy(), x == 0)
    if FP64:  # a Python float param of a double kernel is a double
        a = dp.Tensor.from_numpy(ctx, np.ones(33))
        y = dp.Tensor(ctx, (33,), np.float64)
        pointwise(ctx, [a], [y], "y0 = x0 + w0;", [1e-12])
        np.testing.assert_array_equal(y.numpy(), np.ones(33) + 1e-12)


def test_double_pragma_only_where_double_is_used():
    """cl_khr_fp64 is enabled in the programs that use double, and in no other."""
    from dlprim.kernels import program
    facts = ocl_device.context(0).facts
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"
    assert pragma in program.render("fill", facts=facts, dtype="double")
    assert pragma not in program.render("fill", facts=facts, dtype="float")
    assert pragma not in program.render("fill", facts=facts, dtype="long")
    # a device without fp64 gets the refusal from the compiler, naming it and the dtype
    import types
    bare = types.SimpleNamespace(fp64=False, is_cpu=facts.is_cpu, name="Tiny GPU")
    source = program.render("fill", facts=bare, dtype="double")
    assert pragma not in source
    assert '#error "float64 is not supported on Tiny GPU (no cl_khr_fp64)' in source


@needs_fp64
def test_default_dtype_change_reaches_cached_signatures():
    """A Python float promotes integers to the default dtype: a signature seen before
    torch.set_default_dtype gives the new dtype after it (the result caches key on it)."""
    x = torch.arange(4).to(DEV)
    assert (x * 2.5).dtype == torch.float32 and (x / 3).dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    try:
        for got, want in (((x * 2.5), torch.arange(4) * 2.5), ((x / 3), torch.arange(4) / 3),
                          (torch.true_divide(x, 3), torch.true_divide(torch.arange(4), 3))):
            assert got.dtype == want.dtype == torch.float64
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    finally:
        torch.set_default_dtype(torch.float32)
    assert (x * 2.5).dtype == torch.float32
