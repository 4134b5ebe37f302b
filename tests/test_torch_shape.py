"""Creation, shape and view operators on the ocl device against PyTorch's CPU results:
factories, flip / roll / repeat / pads (with gradients), scatters and copies of views,
shuffles, im2col / col2im, in-place view operators and resize_."""
import pytest

torch = pytest.importorskip("torch")
import dlprim.torch  # noqa: E402,F401
import torch.nn.functional as F  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.int64, torch.bool]


def _make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 8
    return (x > 0) if dtype == torch.bool else x.to(dtype)


def _same(actual, expected):
    assert actual.device.type == "ocl"
    assert actual.dtype == expected.dtype and tuple(actual.shape) == tuple(expected.shape)
    # float16 sequences: PyTorch's CPU rounds every step to half, the device once
    tol = 4e-3 if expected.dtype == torch.float16 else 1e-5
    torch.testing.assert_close(actual.cpu(), expected, rtol=tol, atol=tol, equal_nan=True)


def _both(fn, *tensors):
    """fn on the CPU tensors and on their ocl copies; the results must agree."""
    _same(fn(*[t.to("ocl") for t in tensors]), fn(*tensors))


# ----- creation
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_sequences(dtype):
    for args in [(0, 33), (1, 65, 3), (20, -13, -3)]:
        _same(torch.arange(*args, dtype=dtype, device="ocl"), torch.arange(*args, dtype=dtype))
    for start, end, steps in [(-3, 17, 31), (2, 3, 1), (0, 1, 0), (5, -5, 65)]:
        _same(torch.linspace(start, end, steps, dtype=dtype, device="ocl"),
              torch.linspace(start, end, steps, dtype=dtype))
    _same(torch.logspace(0, 2, 33, base=3, dtype=dtype, device="ocl").float(),
          torch.logspace(0, 2, 33, base=3, dtype=dtype).float())
    _same(torch.eye(31, 33, dtype=dtype, device="ocl"), torch.eye(31, 33, dtype=dtype))


def test_filled_factories():
    for dtype in DTYPES:
        _same(torch.eye(33, dtype=dtype, device="ocl"), torch.eye(33, dtype=dtype))
        _same(torch.full((2, 33), 3, dtype=dtype, device="ocl"),
              torch.full((2, 33), 3, dtype=dtype))
        _same(torch.zeros(65, dtype=dtype, device="ocl"), torch.zeros(65, dtype=dtype))
        _same(torch.ones(1, 31, dtype=dtype, device="ocl"), torch.ones(1, 31, dtype=dtype))
        _same(torch.scalar_tensor(1, dtype=dtype, device="ocl"),
              torch.scalar_tensor(1, dtype=dtype))


def test_sequence_details():
    _same(torch.arange(0.5, 3.1, 0.3, device="ocl"), torch.arange(0.5, 3.1, 0.3))
    _same(torch.arange(0.5, 5, 1.5, dtype=torch.int64, device="ocl"),
          torch.arange(0.5, 5, 1.5, dtype=torch.int64))
    start, end = torch.tensor(2.0), torch.tensor(5.0)
    _same(torch.linspace(start.to("ocl"), end.to("ocl"), 7), torch.linspace(start, end, 7))
    out = torch.empty(3, dtype=torch.int64, device="ocl")
    torch.arange(10, out=out)  # resized in place, as PyTorch does
    _same(out, torch.arange(10))
    with pytest.raises(RuntimeError):
        torch.arange(0, 10, -1, device="ocl")


def test_tril_triu_indices():
    from dlprim.torch import ops_shape
    try:
        torch.tril_indices(3, 3, device="ocl")
    except NotImplementedError:  # the factories not wired into the backend key yet
        lib = torch.library.Library("aten", "IMPL")
        ops_shape.register_factories(lib)
        test_tril_triu_indices.lib = lib
    for r, c, off in [(4, 5, 0), (33, 31, -3), (3, 7, 2), (0, 3, 0)]:
        _same(torch.tril_indices(r, c, off, device="ocl"), torch.tril_indices(r, c, off))
        _same(torch.triu_indices(r, c, off, device="ocl"), torch.triu_indices(r, c, off))


# ----- gathers along axes
@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_repeat_rot90(dtype):
    x = _make((2, 3, 33), dtype)
    _both(lambda t: torch.flip(t, [0, 2]), x)
    _both(lambda t: torch.flip(t, [-2]), x)
    _both(lambda t: torch.roll(t, [1, -5], [0, 2]), x)
    _both(lambda t: torch.roll(t, 70), x)
    _both(lambda t: t.repeat(2, 1, 1, 3), x)
    _both(lambda t: torch.tile(t, (2,)), x)
    _both(lambda t: t[:, 1:, ::2].repeat(1, 2, 1), x)  # a strided input
    for k in (-1, 0, 1, 2, 3):
        _both(lambda t: torch.rot90(t, k, [1, 2]), x)
    _both(lambda t: torch.repeat_interleave(t, 3, dim=1), x)
    counts = torch.tensor([2, 0, 31])
    _both(lambda t, r: torch.repeat_interleave(t, r, dim=1), x, counts)
    _both(lambda r: torch.repeat_interleave(r), counts)
    with pytest.raises(RuntimeError):
        torch.repeat_interleave(torch.tensor([1, -1]).to("ocl"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pads_forward(dtype):
    x = _make((2, 3, 5, 7), dtype)
    _both(lambda t: F.pad(t, (2, -3, 1, 1), value=1), x)
    _both(lambda t: F.pad(t, (-7, 0)), x)
    if dtype != torch.bool:  # PyTorch has no reflection / replication pads of bool
        for mode in ("reflect", "replicate"):
            _both(lambda t: F.pad(t, (1, 2, 3, 4), mode=mode), x)
            _both(lambda t: F.pad(t, (4, 6), mode=mode), x[0])
        _both(lambda t: F.pad(t, (-1, 2, 2, -1), mode="replicate"), x)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 33), (3, 31)), ((2, 3, 5, 7), (1, 2, 3, 4)),
                                       ((1, 2, 3, 4, 5), (1, 2, 2, 1, 0, 2))])
def test_pad_gradients(mode, shape, pad):
    if mode == "reflect":
        pad = tuple(min(p, n - 1) for p, n in zip(pad, [s for s in reversed(shape)
                                                      for _ in (0, 1)]))
    xc = torch.randn(shape, requires_grad=True)
    xo = xc.detach().to("ocl").requires_grad_()
    yc, yo = F.pad(xc, pad, mode=mode), F.pad(xo, pad, mode=mode)
    _same(yo, yc.detach())
    g = torch.randn(yc.shape)
    yc.backward(g)
    yo.backward(g.to("ocl"))
    _same(xo.grad, xc.grad)


def test_pad_errors():
    x = torch.randn(1, 2, 3).to("ocl")
    with pytest.raises(RuntimeError):
        F.pad(x, (3, 0), mode="reflect")  # a reflection pad must be below the size
    with pytest.raises(RuntimeError):
        torch.flip(x, [0, 0])


# ----- views copied, scattered into, embedded
@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_and_scatters(dtype):
    x = _make((5, 33, 4), dtype)
    src = _make((5, 4), dtype, seed=1)
    _both(lambda t, s: torch.select_scatter(t, s, 1, 31), x, src)
    _both(lambda t, s: torch.slice_scatter(t, s, 1, 3, 13, 2), x, _make((5, 5, 4), dtype))
    _both(lambda t, s: torch.diagonal_scatter(t, s, 1, 0, 2), x, _make((33, 3), dtype))
    _both(lambda t, s: torch.as_strided_scatter(t, s, (3, 3), (7, 2), 5), x,
          _make((3, 3), dtype))
    _both(lambda t: torch.as_strided_copy(t, (4, 3), (3, 1), 2), x)
    _both(lambda t: torch.narrow_copy(t, 1, 3, 29), x)
    _both(lambda t: torch.diag_embed(t, 1, 0, 2), x)
    _both(lambda t: torch.diag(t[:, 0, 0], -1), x)
    _both(lambda t: t.tril(-1), x)
    _both(lambda t: t.clone().triu_(2), x)


def test_as_strided_over_partial_views():
    """as_strided of a view reads the view's storage, from the view's offset by default
    and from the storage's start when given an offset (PyTorch's semantics)."""
    for dtype in DTYPES:
        base = _make((20,), dtype)
        view_c, view_o = base[5:15], base.to("ocl")[5:15]
        for offset in (None, 0, 10):
            kw = {} if offset is None else {"storage_offset": offset}
            _same(torch.as_strided(view_o, (2, 2), (1, 2), **kw),
                  torch.as_strided(view_c, (2, 2), (1, 2), **kw))


def test_shuffles_and_im2col():
    x = _make((2, 8, 3, 5), torch.float32)
    _both(lambda t: F.pixel_shuffle(t, 2), x)
    _both(lambda t: F.pixel_unshuffle(t, 2), x[:, :, :2, :4])
    _both(lambda t: F.channel_shuffle(t, 4), x)
    xc = torch.randn(2, 3, 9, 10, requires_grad=True)
    xo = xc.detach().to("ocl").requires_grad_()
    kw = dict(kernel_size=(3, 2), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
    uc, uo = F.unfold(xc, **kw), F.unfold(xo, **kw)
    _same(uo, uc.detach())
    g = torch.randn(uc.shape)
    uc.backward(g)
    uo.backward(g.to("ocl"))
    _same(xo.grad, xc.grad)  # col2im
    _same(F.fold(g.to("ocl"), (9, 10), **kw), F.fold(g, (9, 10), **kw))
    x = _make((3, 5, 7), torch.float32)  # unbatched
    _both(lambda t: F.unfold(t, (2, 3)), x)
    _both(lambda t: F.fold(t, (5, 7), (2, 3)), F.unfold(x, (2, 3)))


def test_unfold_backward():
    for step in (1, 3, 5):
        xc = torch.randn(5, 33, requires_grad=True)
        xo = xc.detach().to("ocl").requires_grad_()
        uc, uo = xc.unfold(1, 4, step), xo.unfold(1, 4, step)
        g = torch.randn(uc.shape)
        uc.backward(g)
        uo.backward(g.to("ocl"))
        _same(xo.grad, xc.grad)


def test_flip_roll_gradients():
    xc = torch.randn(3, 31, requires_grad=True)
    xo = xc.detach().to("ocl").requires_grad_()
    g = torch.randn(3, 31)
    (torch.roll(torch.flip(xc, [1]), 5, 1) * g).sum().backward()
    (torch.roll(torch.flip(xo, [1]), 5, 1) * g.to("ocl")).sum().backward()
    _same(xo.grad, xc.grad)


# ----- in-place metadata operators
def test_inplace_views_change_the_tensor():
    t = torch.arange(6.0).reshape(2, 3).to("ocl")
    assert t.unsqueeze_(1).shape == (2, 1, 3) and t.stride() == (3, 3, 1)
    assert t.squeeze_(1).shape == (2, 3)
    assert t.t_().shape == (3, 2) and t.stride() == (1, 3)
    assert t.transpose_(0, 1).shape == (2, 3)
    assert t.swapdims_(0, 1).shape == (3, 2)
    t.as_strided_((2, 2), (1, 2), 1)
    _same(t, torch.arange(6.0).as_strided((2, 2), (1, 2), 1))
    # autograd follows the in-place view (group norm's backward needs unsqueeze_)
    a = torch.randn(3, 4, requires_grad=True)
    b = a.to("ocl") * 2
    b.unsqueeze_(0).transpose_(0, 2)
    assert b.shape == (4, 3, 1)
    (b * torch.arange(12.0).reshape(4, 3, 1).to("ocl")).sum().backward()
    torch.testing.assert_close(a.grad, 2 * torch.arange(12.0).reshape(4, 3).t())


def test_resize_grows_and_keeps_values():
    t = torch.arange(6, dtype=torch.int64).to("ocl")
    view = t[:]
    t.resize_(2, 5)
    assert t.shape == (2, 5) and t.stride() == (5, 1)
    assert t.flatten()[:6].cpu().tolist() == list(range(6))
    t[1].fill_(7)
    assert view.cpu().tolist()[:5] == list(range(5))  # the view shares the grown storage
    t.resize_(3)
    assert t.cpu().tolist() == [0, 1, 2]
    t.resize_as_(torch.empty(2, 2, device="ocl"))
    assert t.shape == (2, 2)
    with pytest.raises(RuntimeError):
        t.resize_(-1)


def test_arange_repeated_and_its_errors_each_time():
    """arange's result shape is kept per (start, end, step, dtype): repeated calls, other
    arguments and the errors (raised every time, never kept) as on the CPU."""
    for args in [(0, 16), (2, 17, 3), (0.5, 7.0, 1.5), (5,), (10, 0, -3), (1, 1),
                 (0, 2 ** 40, 2 ** 38)] * 2:
        for dtype in (torch.int64, torch.float32):
            got = torch.arange(*args, dtype=dtype, device="ocl").cpu()
            assert torch.equal(got, torch.arange(*args, dtype=dtype)), (args, dtype)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="step must be nonzero"):
            torch.arange(0, 5, 0, device="ocl")
