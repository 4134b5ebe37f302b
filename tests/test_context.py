import os
import subprocess
import sys

import pytest

import dlprim as dp
from dlprim.cli import devices


def test_context_facts(ctx):
    f = ctx.facts
    assert ctx.name and " on " in ctx.name
    assert f.compute_units >= 1 and f.global_mem > 0 and f.local_mem > 0
    assert f.max_work_group >= 1
    assert f.type in ("CPU", "GPU", "ACCELERATOR")
    assert isinstance(f.fp16, bool) and isinstance(f.fp64, bool)
    assert isinstance(f.float_atomics, bool)
    assert f.opencl_c_version.startswith("OpenCL C")


def test_device_strings_select_the_same_device(ctx):
    by_pd = dp.Context(ctx.device_string)
    assert by_pd.device == ctx.device
    index = [(p, d) for p, d, _, _ in dp.list_devices()].index((ctx.p_index, ctx.d_index))
    assert dp.Context(index).device == ctx.device
    assert dp.Context(str(index)).device == ctx.device
    kind = ctx.facts.type.lower()
    assert dp.Context(kind).facts.type == ctx.facts.type


def test_env_variable_picks_default(monkeypatch, ctx):
    monkeypatch.setenv("DLPRIM_DEVICE", ctx.device_string)
    assert dp.Context().device == ctx.device


def test_bad_device_string_lists_valid_ones():
    with pytest.raises(dp.DeviceError) as err:
        dp.Context("9:9")
    msg = str(err.value)
    assert "'9:9'" in msg and "valid" in msg and "0:0" in msg


def test_no_platform_error(tmp_path):
    """No platform at all: the error says what to install. (The ICD loader is given an
    empty vendor folder, and pyopencl is told it has no platform, since the pip PoCL of
    the cpu extra is found by pyopencl's own loader whatever the folder.)"""
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path))
    code = ("import pyopencl as cl\n"
            "def none():\n    raise cl.LogicError('clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR')\n"
            "cl.get_platforms = none\n"
            "import dlprim as dp\ntry:\n    dp.Context()\nexcept dp.DeviceError as e:\n"
            "    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "ERR no OpenCL platform found" in out.stdout, out.stdout + out.stderr
    assert 'pip install "dlprim[cpu]"' in out.stdout and str(tmp_path) in out.stdout


def test_execution_context_and_finish(ctx):
    e = ctx.make_execution_context()
    e.finish()
    ctx.finish()
    assert e.queue is ctx.queue


def test_memory_pool_counts_use_and_peak(ctx):
    before = ctx.memory.bytes_in_use
    t = dp.Tensor(ctx, (1000,), "float32")
    assert ctx.memory.bytes_in_use == before + 4000
    assert ctx.memory.peak_bytes >= before + 4000
    del t
    assert ctx.memory.bytes_in_use == before


def test_devices_cli_lists_default(capsys):
    assert devices.main([]) == 0
    out = capsys.readouterr().out
    assert "device" in out and "*" in out and ":" in out


def test_a_context_keeps_a_bounded_number_of_ops(ctx):
    """Ops memoized per shape (and the ocl device's recordings) are the most recently used
    ones: a model run over ever new shapes does not grow memory without end."""
    from dlprim.context import OPS_KEPT
    from dlprim.utils import BoundedCache
    assert isinstance(ctx.ops, BoundedCache) and ctx.ops.maxsize == OPS_KEPT
    cache = BoundedCache(3)
    for k in "abc":
        cache[k] = k
    assert cache.get("a") == "a"          # a use: "b" is now the oldest
    cache["d"] = "d"
    assert list(cache) == ["c", "a", "d"] and cache.get("b") is None


def test_queue_ring_keeps_the_order_of_one_queue(ctx, monkeypatch):
    # the ring (NVIDIA GPUs: the host runs past the driver's pending-command limit): forced
    # here to 3 queues turning every 4 launches; C = A B + beta_k C in turn, whose result
    # depends on the order, as one queue would run it
    import numpy as np
    from dlprim.core.gemm import Gemm
    monkeypatch.setenv("DLPRIM_QUEUE_RING", "3,4")
    ring = dp.Context(ctx.device_string)
    assert (ring._ring_size, ring._turn_every) == (3, 4)
    e = ring.make_execution_context()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((96, 200)) / 14, rng.standard_normal((200, 96)) / 14
    A, B = (dp.Tensor.from_numpy(ring, x.astype(np.float32)) for x in (a, b))
    C = dp.Tensor.zeros(ring, (96, 96))
    op = Gemm(ring, 96, 96, 200)
    betas = [0.5, -1.25, 2.0, 0.75, -0.5] * 6
    launches = [launch for beta in betas for launch in op.launches(A, B, C, beta=beta)]
    first = ring.queue
    ring.run(launches)
    assert len(ring._ring) == 3 and ring.queue is not first and e.queue is ring.queue
    ring.enqueued(4)  # commands a caller put on the current queue: the ring turns
    assert ring._on_queue == 0
    want = np.zeros((96, 96))
    for beta in betas:
        want = a @ b + beta * want
    np.testing.assert_allclose(C.numpy(), want, rtol=1e-4, atol=1e-4)
    monkeypatch.delenv("DLPRIM_QUEUE_RING")
    assert dp.Context(ctx.device_string)._ring_size == (8 if ctx.facts.vendor_id == "nvidia"
                                                         and ctx.facts.is_gpu else 1)
    for bad in ("0", "2,x", "1,2,3"):
        monkeypatch.setenv("DLPRIM_QUEUE_RING", bad)
        with pytest.raises(ValueError, match="DLPRIM_QUEUE_RING must be SIZE"):
            dp.Context(ctx.device_string)
