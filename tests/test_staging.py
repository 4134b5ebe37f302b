"""Host-to-device copies through page-locked staging memory (dlprim/staging.py), on any
device: the tests build a HostStaging that is enabled, with small chunks."""
import numpy as np
import pytest

from dlprim import Tensor
from dlprim.staging import HostStaging


def _staging(ctx, **kw):
    # the path discrete GPUs take, here on whatever device runs the tests
    return HostStaging(ctx, min_bytes=1, enabled=True, **kw)


@pytest.mark.parametrize("chunk, threads", [(1000, 3), (4096, 1), (1 << 20, 4)])
def test_chunks_land_where_they_belong(ctx, rng, chunk, threads):
    staging = _staging(ctx, chunk_bytes=chunk, threads=threads)
    big = Tensor.from_numpy(ctx, np.full(5000, np.nan, np.float32))
    part = big.view((3, 997), offset=123)  # a byte offset into the buffer, odd sizes
    a = rng.standard_normal((3, 997)).astype(np.float32)
    assert staging.write(ctx.queue, part.buffer, part.byte_offset, a, wait=True)
    out = big.numpy()
    np.testing.assert_array_equal(out[123:123 + a.size], a.ravel())
    assert np.isnan(out[:123]).all() and np.isnan(out[123 + a.size:]).all()
    staging.close()


def test_back_to_back_writes_without_waiting_and_a_larger_one(ctx, rng):
    """The second write waits for the first to leave the staging memory before reusing it,
    the caller's array is free at once, and a larger copy grows the memory."""
    staging = _staging(ctx, chunk_bytes=2048, threads=2)
    t1 = Tensor(ctx, (4000,), np.float32)
    t2 = Tensor(ctx, (4000,), np.float32)
    a = rng.standard_normal(4000).astype(np.float32)
    b = rng.standard_normal(4000).astype(np.float32)
    keep_a = a.copy()
    assert staging.write(ctx.queue, t1.buffer, t1.byte_offset, a, wait=False)
    a[:] = 0  # free to change once write returns
    assert staging.write(ctx.queue, t2.buffer, t2.byte_offset, b, wait=False)
    c = rng.standard_normal((3, 100000)).astype(np.float32)[:, ::2]  # not contiguous, larger
    t3 = Tensor(ctx, c.shape, np.float32)
    assert staging.write(ctx.queue, t3.buffer, t3.byte_offset, c, wait=False)
    ctx.finish()
    np.testing.assert_array_equal(t1.numpy(), keep_a)
    np.testing.assert_array_equal(t2.numpy(), b)
    np.testing.assert_array_equal(t3.numpy(), c)
    staging.close()


def test_a_copy_larger_than_the_memory_goes_in_windows(ctx, rng):
    staging = _staging(ctx, chunk_bytes=1000, threads=3, max_bytes=4096)
    a = rng.standard_normal(5000).astype(np.float32)  # 20000 bytes: 5 windows
    t = Tensor(ctx, a.shape, np.float32)
    assert staging.write(ctx.queue, t.buffer, t.byte_offset, a, wait=False)
    a_kept = a.copy()
    a[:] = 0
    assert staging._host.size == 1 << 20  # the window, in whole MiB
    np.testing.assert_array_equal(t.numpy(), a_kept)
    staging.close()


def test_to_device_goes_through_it_where_enabled(ctx, rng, monkeypatch):
    calls = []
    staging = _staging(ctx, chunk_bytes=512)
    write = staging.write
    monkeypatch.setattr(staging, "write", lambda *a, **k: calls.append(1) or write(*a, **k))
    monkeypatch.setattr(ctx, "staging", staging)
    a = rng.standard_normal((7, 333)).astype(np.float32)
    t = Tensor(ctx, a.shape, np.float32)
    t.to_device(a, wait=False)
    np.testing.assert_array_equal(t.numpy(), a)
    assert calls == [1]
    staging.close()


def test_only_discrete_gpus_and_large_copies(ctx):
    s = HostStaging(ctx)
    assert s.enabled == (ctx.facts.is_gpu and not ctx.facts.host_unified_memory)
    assert not s.takes(1000)
    with pytest.raises(ValueError, match="positive"):
        HostStaging(ctx, threads=0)
    with pytest.raises(ValueError, match="positive"):
        HostStaging(ctx, max_bytes=0)
