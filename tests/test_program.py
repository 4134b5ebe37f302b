import numpy as np
import pytest

import dlprim as dp
from dlprim.kernels import program
from dlprim.utils import round_up


def test_memoized_build(ctx):
    p1 = program.get(ctx, "fill", dtype="float")
    builds = program.stats["builds"]
    p2 = program.get(ctx, "fill", dtype="float")
    assert p1 is p2 and program.stats["builds"] == builds
    p3 = program.get(ctx, "fill", dtype="int")
    built = program.stats["builds"] - builds  # 0 where a test before built it in this process
    assert p3 is not p1 and built in (0, 1)
    assert program.get(ctx, "fill", dtype="int") is p3 and program.stats["builds"] == builds + built


def test_launch_with_offsets(ctx):
    t = dp.Tensor.from_numpy(ctx, np.zeros(70, np.float32))
    v = t.view((65,), offset=3)
    prg = program.get(ctx, "fill", dtype="float")
    launch = program.Launch(prg, "fill", (round_up(65, 32),), (32,),
                            [np.uint64(65), v, np.float32(2.5)])
    launch(ctx.queue)
    out = t.numpy()
    assert np.all(out[3:68] == 2.5) and np.all(out[:3] == 0) and np.all(out[68:] == 0)


def test_build_error_shows_source_and_params(ctx, tmp_path, monkeypatch):
    (tmp_path / "broken.cl").write_text(
        "__kernel void broken(__global float *y)\n{\n    y[0] = undefined_name_${N};\n}\n")
    monkeypatch.setattr(program, "_lookup",
                        program.TemplateLookup(directories=[str(tmp_path), program.KERNEL_DIR]))
    with pytest.raises(dp.KernelBuildError) as err:
        program.get(ctx, "broken", N=7)
    msg = str(err.value)
    assert "broken" in msg and "N=7" in msg and ctx.facts.name in msg
    assert ">>    3|     y[0] = undefined_name_7;" in msg


def _fill_launch(prg, t, value):
    return program.Launch(prg, "fill", (round_up(t.size, 64),), (64,),
                          [np.uint64(t.size), t, np.float32(value)])


def test_launch_called_again_keeps_its_arguments(ctx):
    """The first call binds a shared kernel; a second takes a kernel of its own. Another
    launch of the same kernel in between must not change what either one writes."""
    prg = program.get(ctx, "fill", dtype="float")
    a, b = dp.Tensor(ctx, (70,)), dp.Tensor(ctx, (70,))
    fill_a, fill_b = _fill_launch(prg, a, 1.0), _fill_launch(prg, b, 2.0)
    fill_a(ctx.queue)
    fill_b(ctx.queue)
    b.zero_()
    fill_a.set_arg(3, np.float32(3.0))
    fill_a(ctx.queue)
    fill_b(ctx.queue)
    np.testing.assert_array_equal(a.to_host(), 3.0)
    np.testing.assert_array_equal(b.to_host(), 2.0)


def test_recording_replays_over_other_tensors(ctx):
    prg = program.get(ctx, "fill", dtype="float")
    first = dp.Tensor(ctx, (70,))
    recording = program.Recording.of([_fill_launch(prg, first, 5.0)], [first])
    whole = dp.Tensor.zeros(ctx, (80,))
    recording.replay(ctx.queue, [whole.view((70,), offset=7)])
    got = whole.to_host()
    np.testing.assert_array_equal(got[7:77], 5.0)
    np.testing.assert_array_equal(np.r_[got[:7], got[77:]], 0.0)
    # two views of one buffer cannot be told apart: no recording
    assert program.Recording.of([_fill_launch(prg, first, 5.0)],
                                [first.view((35,)), first.view((35,), offset=35)]) is None


def test_sm90a_instructions_retarget_the_ptx():
    # kernels/wgmma.h's instructions ride the sm_90 build as comments, then the PTX is
    # rebuilt for sm_90a with them unmarked; another target is refused, not mis-built
    ptx = (".version 9.0\n.target sm_90, texmode_independent\n.address_size 64\n"
           "\t" + program.SM90A + "wgmma.fence.sync.aligned;\n\tbar.sync 0;\n")
    out = program.sm90a_ptx(ptx)
    assert ".target sm_90a, texmode_independent" in out and program.SM90A not in out
    assert "\twgmma.fence.sync.aligned;\n\tbar.sync 0;" in out
    with pytest.raises(Exception, match="sm_90 target"):
        program.sm90a_ptx(ptx.replace("sm_90,", "sm_80,"))


def _ahead_templates(tmp_path, monkeypatch):
    """A template whose source is new to every cache (a value drawn for this run), and
    one that does not build."""
    (tmp_path / "ahead.cl").write_text(
        "__kernel void ahead(__global float *y, ulong y_offset)\n"
        "{\n    y[y_offset + get_global_id(0)] = ${VALUE}.0f;  // ${SALT}\n}\n")
    (tmp_path / "broken_ahead.cl").write_text(
        "__kernel void broken_ahead(__global float *y)\n{\n    y[0] = undefined_${N};\n}\n")
    monkeypatch.setattr(program, "_lookup",
                        program.TemplateLookup(directories=[str(tmp_path), program.KERNEL_DIR]))
    monkeypatch.setenv("DLPRIM_CACHE_DIR", str(tmp_path / "cache"))  # the marks of builds
    return int(np.random.default_rng().integers(1 << 30))


def test_programs_built_ahead_by_worker_processes(ctx, tmp_path, monkeypatch):
    salt = _ahead_templates(tmp_path, monkeypatch)
    monkeypatch.setenv("DLPRIM_BUILD_WORKERS", "2")
    builds = program.stats["builds"]
    with program.building_ahead(ctx):
        pool = program._ahead[id(ctx)]
        for value in (1, 2, 3):
            program.prefetch(ctx, "ahead", VALUE=value, SALT=salt)
        program.prefetch(ctx, "ahead", VALUE=1, SALT=salt)  # asked twice: built once
        # the workers' builds are in the caches; this process's build waits for them
        t = dp.Tensor.from_numpy(ctx, np.zeros(8, np.float32))
        for value in (3, 1, 2):
            prg = program.get(ctx, "ahead", VALUE=value, SALT=salt)
            program.Launch(prg, "ahead", (8,), (8,), [t])(ctx.queue)
            assert np.all(t.numpy() == value)
    assert pool.counts == {"built": 3, "failed": 0} and not pool._threads
    assert program.stats["builds"] == builds + 3 and id(ctx) not in program._ahead
    # a later start (nothing memoized) finds them marked as built: no worker starts,
    # each is built here at its request, from the caches
    for key in [k for k in ctx.programs if k[0] == "ahead"]:
        del ctx.programs[key]
    with program.building_ahead(ctx):
        again = program._ahead[id(ctx)]
        program.prefetch(ctx, "ahead", VALUE=2, SALT=salt)
        assert program.stats["builds"] == builds + 4
    assert again.counts == {"built": 0, "failed": 0} and not again._threads
    # one only asked for in the block (a Net builds its programs after setup) is marked
    # by its worker's build: the next start builds it here too
    with program.building_ahead(ctx):
        program.prefetch(ctx, "ahead", VALUE=5, SALT=salt)
    for key in [k for k in ctx.programs if k[0] == "ahead"]:
        del ctx.programs[key]
    with program.building_ahead(ctx):
        third = program._ahead[id(ctx)]
        program.prefetch(ctx, "ahead", VALUE=5, SALT=salt)
    assert third.counts == {"built": 0, "failed": 0} and not third._threads


def test_program_a_worker_cannot_build_fails_as_in_process(ctx, tmp_path, monkeypatch):
    _ahead_templates(tmp_path, monkeypatch)
    monkeypatch.setenv("DLPRIM_BUILD_WORKERS", "1")
    with program.building_ahead(ctx):
        pool = program._ahead[id(ctx)]
        program.prefetch(ctx, "broken_ahead", N=5)
        with pytest.raises(dp.KernelBuildError) as err:
            program.get(ctx, "broken_ahead", N=5)
    assert pool.counts == {"built": 0, "failed": 1}
    assert ">>    3|     y[0] = undefined_5;" in str(err.value)


def test_building_ahead_off_builds_at_once(ctx, tmp_path, monkeypatch):
    salt = _ahead_templates(tmp_path, monkeypatch)
    monkeypatch.setenv("DLPRIM_BUILD_WORKERS", "0")
    builds = program.stats["builds"]
    with program.building_ahead(ctx):
        assert id(ctx) not in program._ahead
        program.prefetch(ctx, "ahead", VALUE=4, SALT=salt)
        assert program.stats["builds"] == builds + 1  # built here, at the request
    monkeypatch.setenv("DLPRIM_BUILD_WORKERS", "two")
    with pytest.raises(ValueError, match="DLPRIM_BUILD_WORKERS='two'"):
        with program.building_ahead(ctx):
            pass


def test_build_workers_by_device(monkeypatch):
    from dlprim.kernels import build_ahead
    monkeypatch.delenv("DLPRIM_BUILD_WORKERS", raising=False)
    monkeypatch.delenv("PYOPENCL_NO_CACHE", raising=False)
    gpu, cpu = type("F", (), {"is_gpu": True}), type("F", (), {"is_gpu": False})
    monkeypatch.setattr(build_ahead.os, "cpu_count", lambda: 16)
    assert build_ahead.worker_count(gpu) == 8 and build_ahead.worker_count(cpu) == 0
    monkeypatch.setattr(build_ahead.os, "cpu_count", lambda: 2)
    assert build_ahead.worker_count(gpu) == 1
    monkeypatch.setenv("PYOPENCL_NO_CACHE", "1")  # a worker's build would not be kept
    assert build_ahead.worker_count(gpu) == 0
    monkeypatch.setenv("DLPRIM_BUILD_WORKERS", "3")
    assert build_ahead.worker_count(cpu) == 3
