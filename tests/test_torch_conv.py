"""dlprim.torch: convolutions (1-D to 3-D, plain and transposed), pooling, resampling,
grid_sample and affine_grid on the ``ocl`` device against PyTorch CPU, forward and
(float32, through autograd) backward, with shapes that cross work-group edges."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
F = torch.nn.functional

DEV = "ocl"


def both(fn, *tensors, dtype=torch.float32, tol=None, grads=True):
    """fn on CPU tensors and their ocl copies; values, and for float32 the gradients of
    sum(out * cotangent) for every float input. float16 is held to the CPU's float32
    result of the same (rounded) inputs: the CPU lacks some float16 kernels."""
    tol = tol or (1e-4 if dtype == torch.float32 else 2e-2)
    grads = grads and dtype == torch.float32 and any(t.is_floating_point() for t in tensors)
    cpu = [t.to(dtype).float().detach().requires_grad_(grads and t.is_floating_point())
           if t.is_floating_point() else t for t in tensors]
    ocl = [t.to(dtype).to(DEV).detach().requires_grad_(grads and t.is_floating_point())
           if t.is_floating_point() else t.to(DEV) for t in tensors]
    want, got = fn(*cpu), fn(*ocl)
    if want.is_floating_point():
        want = want.to(dtype)
    assert got.device.type == DEV and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.cpu().float().detach().numpy(),
                               want.float().detach().numpy(), rtol=tol, atol=tol)
    if grads:
        cot = torch.randn(want.shape)
        gw = torch.autograd.grad((want * cot).sum(), [t for t in cpu if t.requires_grad])
        gg = torch.autograd.grad((got * cot.to(DEV)).sum(), [t for t in ocl if t.requires_grad])
        # a test whose gradients could all pass as zeros tests nothing
        assert sum(float(b.abs().sum()) for b in gw) > 0
        for a, b in zip(gg, gw):
            np.testing.assert_allclose(a.cpu().numpy(), b.numpy(), rtol=tol, atol=tol)


def randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


# ----- convolutions
CONVS = [  # (dims, input, weight, arguments)
    (1, (2, 4, 33), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
    (1, (1, 3, 31), (4, 3, 5), dict(padding="same", dilation=2)),
    (2, (2, 3, 9, 33), (5, 3, 3, 3), dict(padding=1)),
    (2, (1, 4, 7, 8), (4, 1, 3, 3), dict(stride=2, groups=4)),
    (3, (2, 4, 5, 6, 7), (6, 2, 3, 2, 3),
     dict(stride=(1, 2, 1), padding=(1, 0, 2), dilation=(1, 1, 2), groups=2)),
    (3, (1, 2, 3, 4, 65), (3, 2, 1, 1, 3), dict(padding="same")),
]


@pytest.mark.parametrize("dims,x_shape,w_shape,kw", CONVS)
def test_conv(dims, x_shape, w_shape, kw):
    conv = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    b = randn(w_shape[0])
    both(lambda x, w, b: conv(x, w, b, **kw), randn(*x_shape), randn(*w_shape), b)


TRANSPOSED = [
    (1, (2, 4, 7), (4, 3, 3), dict(stride=3, padding=1, output_padding=2, dilation=2)),
    (2, (2, 4, 5, 33), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    # output_padding past what the plain convolution reaches (dilation above the stride)
    (2, (1, 2, 4, 4), (2, 1, 4, 5), dict(stride=(3, 2), padding=(1, 2), dilation=4,
                                          output_padding=(2, 3), groups=2)),
    (3, (2, 4, 3, 4, 5), (4, 3, 3, 2, 3), dict(stride=2, padding=1, output_padding=1,
                                                groups=2)),
]


@pytest.mark.parametrize("dims,x_shape,w_shape,kw", TRANSPOSED)
def test_conv_transpose(dims, x_shape, w_shape, kw):
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[dims - 1]
    b = randn(w_shape[1] * kw.get("groups", 1))
    both(lambda x, w, b: conv(x, w, b, **kw), randn(*x_shape), randn(*w_shape), b)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_half(dims):
    conv = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    x, w = randn(2, 4, *(6,) * dims), randn(4, 2, *(3,) * dims)
    both(lambda x, w: conv(x, w, padding=1, groups=2), x, w, dtype=torch.float16)
    convt = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[dims - 1]
    both(lambda x, w: convt(x, w, stride=2, groups=2), x, w, dtype=torch.float16)


def test_conv_paths():
    """2-D (and 1-D) convolutions run on the 2-D launchers, 3-D on conv_nd."""
    x2, w2 = randn(1, 2, 5, 5).to(DEV), randn(3, 2, 3, 3).to(DEV)
    x3, w3 = randn(1, 2, 4, 5, 5).to(DEV), randn(3, 2, 3, 3, 3).to(DEV)
    ctx = x2._ocl_storage.ctx
    F.conv2d(x2, w2)
    plans = [k for k in ctx.ops if isinstance(k, tuple) and k[0] == "torch_conv2d_plan"]
    assert any(k[2][0] == (1, 2, 5, 5) for k in plans)
    F.conv3d(x3, w3)
    assert any(isinstance(k, tuple) and k[0] == "conv_nd" and k[5] == (4, 5, 5) for k in ctx.ops)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_integer(dims):
    x = (randn(2, 4, *(5,) * dims) * 5).long()
    w = (randn(4, 2, *(3,) * dims) * 5).long()
    b = torch.arange(4)
    conv = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    convt = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[dims - 1]
    both(lambda x, w, b: conv(x, w, b, padding=1, stride=2, groups=2), x, w, b)
    both(lambda x, w, b: convt(x, w, b, padding=1, stride=2, output_padding=1, groups=2),
         x, w, b)


def test_conv3d_in_chunks(monkeypatch):
    """A batch whose columns exceed the buffer runs in chunks, filter gradients summed."""
    from dlprim.core import conv_nd
    monkeypatch.setattr(conv_nd, "COLUMN_ELEMENTS", 2 * 3 * 8 * 27)
    both(lambda x, w: F.conv3d(x, w, padding=1), randn(5, 3, 3, 3, 3), randn(2, 3, 2, 2, 2))
    both(lambda x, w: F.conv_transpose3d(x, w), randn(5, 3, 2, 2, 2), randn(3, 2, 2, 2, 2))


def test_conv_errors():
    x, w = randn(1, 3, 5, 5), randn(4, 2, 3, 3)
    with pytest.raises(RuntimeError):
        F.conv2d(x, w)  # the CPU's error first: the same type on ocl
    with pytest.raises(RuntimeError):
        F.conv2d(x.to(DEV), w.to(DEV))
    with pytest.raises((NotImplementedError, RuntimeError)):
        F.conv2d(x.long().to(DEV), w.long().to(DEV))


# ----- pooling
POOLS = [
    ("max_pool1d", (2, 3, 33), dict(kernel_size=3, stride=2, padding=1, dilation=2,
                                    ceil_mode=True)),
    ("max_pool2d", (2, 3, 9, 31), dict(kernel_size=(3, 2), stride=(2, 1), padding=1,
                                       ceil_mode=True)),
    ("max_pool3d", (1, 2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=1,
                                         dilation=(1, 1, 2))),
    ("avg_pool1d", (2, 3, 33), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True,
                                    count_include_pad=False)),
    ("avg_pool2d", (2, 3, 9, 31), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                       divisor_override=5)),
    ("avg_pool3d", (1, 2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=1,
                                         count_include_pad=False)),
    ("adaptive_max_pool1d", (2, 3, 33), dict(output_size=5)),
    ("adaptive_max_pool2d", (2, 3, 9, 31), dict(output_size=(4, 7))),
    ("adaptive_max_pool3d", (1, 2, 5, 6, 7), dict(output_size=(3, 4, 5))),
    ("adaptive_avg_pool1d", (2, 3, 33), dict(output_size=5)),
    ("adaptive_avg_pool2d", (2, 3, 9, 31), dict(output_size=(4, 7))),
    ("adaptive_avg_pool3d", (1, 2, 5, 6, 7), dict(output_size=(3, 4, 5))),
    ("lp_pool1d", (2, 3, 33), dict(norm_type=2, kernel_size=3, stride=2)),
    ("lp_pool2d", (2, 3, 9, 31), dict(norm_type=3, kernel_size=3, stride=2)),
]


@pytest.mark.parametrize("name,shape,kw", POOLS)
def test_pool(name, shape, kw):
    fn = getattr(F, name)
    x = randn(*shape)
    if name.startswith("lp"):
        x = x.abs() + 0.1
    both(lambda x: fn(x, **kw), x)
    both(lambda x: fn(x, **kw), x, dtype=torch.float16)
    if "max" in name:   # the indices too, and an unbatched input
        both(lambda x: fn(x, return_indices=True, **kw)[1], x, grads=False)
        both(lambda x: fn(x, **kw), x[0])


def test_pool_paths():
    """2-D float32 pooling stays on the Net's Pool2D; what it does not take (dilation,
    float16) runs on pooling_nd."""
    x = randn(1, 2, 7, 7).to(DEV)
    ctx = x._ocl_storage.ctx
    F.max_pool2d(x, 3, 2)
    assert any(isinstance(k, tuple) and k[0] == "torch_pool" and k[2] == (3, 3)
               for k in ctx.ops)
    F.max_pool2d(x.half(), 3, 2, dilation=2)
    assert any(isinstance(k, tuple) and k[0] == "pooling_nd" and k[1] == "max" for k in ctx.ops)


def test_max_pool_nan_and_int():
    x = randn(1, 2, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, 2:4, 2:4] = float("-inf")
    got, gi = F.max_pool2d(x.to(DEV), 3, 2, 1, return_indices=True)
    want, wi = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert torch.equal(gi.cpu(), wi)
    np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())
    xi = (randn(2, 3, 7, 9) * 10).long()
    assert torch.equal(F.max_pool2d(xi.to(DEV), 3, 2).cpu(), F.max_pool2d(xi, 3, 2))


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_max_unpool(dims):
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[dims - 1]
    unpool = (F.max_unpool1d, F.max_unpool2d, F.max_unpool3d)[dims - 1]
    x = randn(2, 3, *(6,) * dims)
    y, idx = pool(x, 2, return_indices=True)
    both(lambda y, i: unpool(y, i, 2), y, idx)


def test_max_unpool_bad_index():
    y, idx = F.max_pool2d(randn(1, 2, 4, 4), 2, return_indices=True)
    idx[0, 1, 1, 0] = 16
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError, match="invalid max index: 16"):
            F.max_unpool2d(y.to(dev), idx.to(dev), 2)


def test_pool_errors():
    x = randn(1, 2, 4, 4)
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError):
            F.max_pool2d(x.to(dev), 2, padding=2)   # padding above half the kernel
        with pytest.raises(RuntimeError):
            F.avg_pool3d(x.to(dev), 5)              # an empty output


# ----- resampling
def _modes(dims):
    linear = ("linear", "bilinear", "trilinear")[dims - 1]
    return ["nearest", "nearest-exact", linear, "area"] + (["bicubic"] if dims == 2 else [])


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_interpolate(dims):
    x = randn(2, 3, *(5, 7, 4)[:dims])
    for mode in _modes(dims):
        corners = [False, True] if mode in ("linear", "bilinear", "trilinear", "bicubic") \
            else [None]
        for kw in (dict(scale_factor=2), dict(size=(3, 33, 4)[:dims]),
                   dict(scale_factor=0.6, recompute_scale_factor=False)):
            for ac in corners:
                args = dict(kw, mode=mode, align_corners=ac)
                both(lambda x: F.interpolate(x, **args), x)
    both(lambda x: F.interpolate(x, scale_factor=1.5, mode=_modes(dims)[2]), x,
         dtype=torch.float16)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias(mode):
    x = randn(2, 3, 17, 33)
    for kw in (dict(size=(5, 7)), dict(size=(34, 11)), dict(scale_factor=1.7)):
        for ac in (False, True):
            both(lambda x: F.interpolate(x, mode=mode, antialias=True, align_corners=ac, **kw),
                 x)


def test_interpolate_errors():
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError):
            torch.ops.aten.upsample_nearest2d(randn(1, 1, 4, 4).to(dev), [0, 4])
        with pytest.raises(RuntimeError):
            torch.ops.aten.upsample_linear1d(randn(1, 4).to(dev), [8], False)
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.ops.aten.upsample_bilinear2d(torch.ones(1, 1, 2, 2, dtype=torch.long).to(DEV),
                                           [4, 4], False)


def test_interpolate_nearest_integers():
    """uint8 as PyTorch's CPU; int64 (no CPU kernel) keeps every bit of large values."""
    x = (randn(2, 3, 5, 7) * 100).to(torch.uint8)
    for mode in ("nearest", "nearest-exact"):
        want = F.interpolate(x, scale_factor=1.7, mode=mode)
        assert torch.equal(F.interpolate(x.to(DEV), scale_factor=1.7, mode=mode).cpu(), want)
        big = F.interpolate(x.long().to(DEV) + 2 ** 40, scale_factor=1.7, mode=mode)
        assert torch.equal(big.cpu(), want.long() + 2 ** 40)


# ----- grid_sample, affine_grid
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample(mode, padding):
    x = randn(2, 3, 5, 33)
    grid = torch.rand(2, 4, 6, 2, generator=torch.Generator().manual_seed(1)) * 2.4 - 1.2
    for ac in (False, True):
        both(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                        align_corners=ac), x, grid)
    both(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                    align_corners=False), x, grid, dtype=torch.float16,
         tol=5e-2)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d(mode):
    x = randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3, generator=torch.Generator().manual_seed(2)) * 2.4 - 1.2
    for padding, ac in (("zeros", False), ("border", True), ("reflection", False)):
        both(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                        align_corners=ac), x, grid)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_bicubic(padding):
    x = randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2, generator=torch.Generator().manual_seed(3)) * 2.4 - 1.2
    for ac in (False, True):
        both(lambda x, g: F.grid_sample(x, g, mode="bicubic", padding_mode=padding,
                                        align_corners=ac), x, grid)
    x3, grid3 = randn(1, 1, 2, 2, 2), torch.zeros(1, 1, 1, 1, 3)
    for dev in ("cpu", DEV):   # no bicubic in 3-D
        with pytest.raises(RuntimeError):
            F.grid_sample(x3.to(dev), grid3.to(dev), mode="bicubic", align_corners=False)


@pytest.mark.parametrize("size", [(2, 3, 5, 33), (2, 3, 1, 7), (2, 3, 3, 4, 5)])
def test_affine_grid(size):
    theta = randn(2, len(size) - 2, len(size) - 1)
    for ac in (False, True):
        both(lambda t: F.affine_grid(t, size, align_corners=ac), theta)


@pytest.mark.parametrize("kw", [dict(stride=2, padding="valid"), dict(padding="same"),
                                dict(stride=[2], padding=[1], dilation=[1])],
                         ids=["valid", "same", "one_value_lists"])
def test_one_value_for_every_spatial_dim(kw):
    """PyTorch expands a one-element stride, padding or dilation to every spatial dim
    (padding='valid' reaches the device as [0])."""
    g = torch.Generator().manual_seed(0)
    for x, w in ((torch.randn(2, 3, 9, 8, generator=g), torch.randn(4, 3, 3, 2, generator=g)),
                 (torch.randn(2, 3, 9, generator=g), torch.randn(4, 3, 3, generator=g))):
        if kw.get("padding") == "same" and "stride" in kw:
            continue
        conv = torch.nn.functional.conv2d if x.dim() == 4 else torch.nn.functional.conv1d
        torch.testing.assert_close(conv(x.to("ocl"), w.to("ocl"), **kw).cpu(), conv(x, w, **kw),
                                   rtol=1e-5, atol=1e-5)
