import numpy as np
import pytest

import dlprim as dp

DTYPES = [np.float32, np.float16, np.int32, np.int64, np.uint8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (31,), (33, 2), (2, 3, 65)])
def test_round_trip_is_exact(ctx, rng, dtype, shape):
    if np.issubdtype(dtype, np.floating):
        a = rng.standard_normal(shape).astype(dtype)
    else:
        a = rng.integers(0, 200, size=shape).astype(dtype)
    t = dp.Tensor.from_numpy(ctx, a)
    assert t.shape == shape and t.dtype == np.dtype(dtype)
    b = t.numpy()
    assert b.dtype == a.dtype and np.array_equal(a, b)


def test_dlprimitives_style_transfers(ctx):
    t = dp.Tensor(ctx, (2, 3), "float")
    e = ctx.make_execution_context()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t.to_device(a, e)
    out = np.zeros((2, 3), np.float32)
    t.to_host(out, e)
    assert np.array_equal(a, out)


def test_transfer_mismatch_errors(ctx):
    t = dp.Tensor(ctx, (2, 3), "float32")
    with pytest.raises(ValueError, match="shape"):
        t.to_device(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        t.to_device(np.zeros((2, 3), np.float64))
    with pytest.raises(ValueError, match="shape"):
        t.to_host(np.zeros((6,), np.float32))


def test_reshape_is_a_view(ctx):
    a = np.arange(12, dtype=np.float32)
    t = dp.Tensor.from_numpy(ctx, a)
    v = t.reshape(3, -1)
    assert v.shape == (3, 4) and v.buffer is t.buffer
    v.to_device(np.ones((3, 4), np.float32))
    assert np.array_equal(t.numpy(), np.ones(12, np.float32))
    with pytest.raises(ValueError, match="cannot reshape"):
        t.reshape(5, -1)


def test_views_at_offsets(ctx):
    t = dp.Tensor.from_numpy(ctx, np.arange(10, dtype=np.int32))
    v = t.view((3,), offset=4)
    assert np.array_equal(v.numpy(), [4, 5, 6])
    v.zero_()
    assert np.array_equal(t.numpy(), [0, 1, 2, 3, 0, 0, 0, 7, 8, 9])
    w = dp.Tensor(ctx, (3,), "int32").copy_from(t.view((3,), offset=7))
    assert np.array_equal(w.numpy(), [7, 8, 9])


def test_dtype_names(ctx):
    for name, np_type in [("float", np.float32), ("int", np.int32), ("int64", np.int64),
                          ("float16", np.float16), ("uint8", np.uint8)]:
        assert dp.Tensor(ctx, (2,), name).dtype == np.dtype(np_type)
    with pytest.raises(TypeError, match="unsupported dtype"):
        dp.Tensor(ctx, (2,), "complex64")


def test_numpy_asarray_gives_the_values(ctx):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = dp.Tensor.from_numpy(ctx, a)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("by_kernel", [False, True])
@pytest.mark.parametrize("start,count,dtype", [(0, 37, np.float32), (3, 29, np.uint8),
                                               (1, 30, np.float16), (2, 9, np.float64)])
def test_fills_in_pieces_cover_exactly_their_range(ctx, monkeypatch, start, count, dtype,
                                                   by_kernel):
    # fills go in pieces (NVIDIA's driver faults on one fill of over 2 GiB): with tiny
    # pieces, every byte of the range is written and nothing around it; ranges ending
    # past FILL_DRIVER_END (the driver's fills fail past 4-8 GiB) are copies of a block of
    # the pattern, never clEnqueueFillBuffer
    from dlprim import tensor as tensor_module
    from dlprim.net.execution_plan import Fill
    monkeypatch.setattr(tensor_module, "FILL_CHUNK", 16)
    if by_kernel:
        monkeypatch.setattr(tensor_module, "FILL_DRIVER_END", 0)
        monkeypatch.setattr(tensor_module, "FILL_BLOCK", 8)  # a block, then doubling copies

        def refused(*args, **kwargs):
            raise AssertionError("clEnqueueFillBuffer past FILL_DRIVER_END")
        monkeypatch.setattr(tensor_module.cl, "enqueue_fill_buffer", refused)
    whole = dp.Tensor.from_numpy(ctx, np.full(80, 7, dtype))
    view = dp.Tensor(ctx, (count,), dtype, buffer=whole.buffer, offset=start)
    view.zero_()
    expected = np.full(80, 7, dtype)
    expected[start:start + count] = 0
    assert np.array_equal(whole.numpy(), expected)
    Fill(view, 5)(ctx.queue)
    expected[start:start + count] = 5
    assert np.array_equal(whole.numpy(), expected)


def test_pattern_blocks_tell_wide_patterns_apart(ctx):
    """The copies' pattern block (fills past FILL_DRIVER_END) is kept per pattern: one
    block of zeros for every width, and 16-byte patterns that share their first 8 bytes
    each get their own."""
    from dlprim import tensor as tensor_module
    block = tensor_module._pattern_block
    first, second = (block(ctx, np.array([v], np.complex128)) for v in (1 + 2j, 1 + 3j))
    assert first is not second
    assert np.frombuffer(second.numpy().tobytes()[:16], np.complex128)[0] == 1 + 3j
    assert block(ctx, np.zeros(1, np.float32)) is block(ctx, np.zeros(1, np.float64))


@pytest.mark.parametrize("start,count", [(0, 64), (3, 61), (5, 1)])
def test_fills_on_intels_cpu_runtime_run_the_fill_kernel(ctx, monkeypatch, start, count):
    """Intel's CPU runtime: a fill of a 4-byte pattern from KERNEL_FILL_MIN bytes on is the
    fill kernel, never clEnqueueFillBuffer, and covers exactly its range; other widths
    keep the driver's fill."""
    from dlprim import tensor as tensor_module
    from dlprim.net.execution_plan import Fill
    monkeypatch.setattr(ctx.facts, "is_cpu", True)
    monkeypatch.setattr(ctx.facts, "vendor_id", "intel")
    monkeypatch.setattr(tensor_module, "KERNEL_FILL_MIN", 4)
    driver = tensor_module.cl.enqueue_fill_buffer
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return driver(*args, **kwargs)
    monkeypatch.setattr(tensor_module.cl, "enqueue_fill_buffer", counted)
    whole = dp.Tensor.from_numpy(ctx, np.full(80, 7, np.float32))
    view = dp.Tensor(ctx, (count,), np.float32, buffer=whole.buffer, offset=start)
    view.zero_()
    Fill(dp.Tensor(ctx, (2,), np.float32, buffer=whole.buffer, offset=78), 5)(ctx.queue)
    expected = np.full(80, 7, np.float32)
    expected[start:start + count] = 0
    expected[78:] = 5
    assert np.array_equal(whole.numpy(), expected) and not calls
    halves = dp.Tensor.from_numpy(ctx, np.full(40, 3, np.float16))
    Fill(halves, 1.5)(ctx.queue)
    assert (halves.numpy() == 1.5).all() and calls  # a 2-byte pattern: the driver's fill
