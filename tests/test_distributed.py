"""dlprim.distributed: data-parallel training over MPI.

Launched as ``mpiexec -n 2`` subprocesses (skipped, saying why, without mpi4py or an
mpiexec): 2 ranks at batch 8 end 5 SGD steps at the parameters of one process at batch
16, equal on both ranks; ``dlprim-train`` on the MNIST example reaches the accuracy of
one process and only rank 0 writes; a rank killed mid-run ends the job and leaves a
checkpoint that resumes on one process; Ctrl-C stops all ranks at one step with a
checkpoint that two ranks resume; an exception on one rank ends the others.
In-process, without MPI: the shards against the global batches, the bucketed average
against numpy with frozen parameters left alone, the config checks, the position
carried to another global batch, and the errors without mpi4py.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import dlprim as dp
from dlprim.data import ArraySource, BatchLoader
from dlprim.distributed import (Communicator, DataParallel, GradientAverager, ShardedLoader,
                                launcher_variable, part_bounds)
from dlprim.distributed.gradients import buckets
from dlprim.errors import CheckpointError
from dlprim.train import Trainer, checkpoint
from dlprim.train.config import ConfigError, apply_overrides, load_config, validate_config
from dlprim.train.parallel import batch_sizes, carry_position

from test_hostile_train import _raw

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MNIST = os.path.join(ROOT, "examples", "mnist")
MPIEXEC = (shutil.which("mpiexec", path=os.path.dirname(sys.executable))
           or shutil.which("mpiexec"))
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(
    not (HAVE_MPI4PY and MPIEXEC),
    reason="needs mpi4py and an mpiexec (pip install \"dlprim[mpi]\"): %s" % (
        "mpi4py is not installed" if not HAVE_MPI4PY else "no mpiexec beside python or on PATH"))
LAUNCH_S = 150  # an mpiexec that has not ended by then hangs


def _env(ctx, **extra):
    env = {k: v for k, v in os.environ.items() if not launcher_variable({k: v})}
    env.update(DLPRIM_DEVICE=ctx.device_string, PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join([ROOT, HERE] + [p for p in [os.environ.get("PYTHONPATH")]
                                                          if p]))
    env.update(extra)
    return env


def _mpiexec(ctx, args, cwd=None, env=None, ranks=2):
    """The finished ``mpiexec -n ranks args`` (its own session, killed whole on a hang)."""
    p = subprocess.Popen([MPIEXEC, "-n", str(ranks)] + args, env=env or _env(ctx), cwd=cwd,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=LAUNCH_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail("mpiexec %s hung for %d s:\n%s\n%s" % (" ".join(args), LAUNCH_S, out, err))
    return p.returncode, out, err


# ----- under mpiexec
@needs_mpi
@pytest.mark.parametrize("summed_by", ["shared memory", "MPI"])
def test_two_ranks_at_batch_8_step_as_one_process_at_batch_16(ctx, tmp_path, summed_by):
    from distributed_run import BatchLoader as Loader, netconfig, solver, source
    status, out, err = _mpiexec(ctx, [sys.executable, os.path.join(HERE, "distributed_run.py"),
                                      "steps", str(tmp_path)]
                                + (["mpi"] if summed_by == "MPI" else []))
    assert status == 0, out + err
    assert out.count("sums by %s" % summed_by) == 2, out  # lines may interleave
    ranks = [dict(np.load(tmp_path / ("rank%d.npz" % r))) for r in range(2)]
    # one process, the rank-0 initialisation that DataParallel broadcast, batch 16
    net = dp.Net(ctx, netconfig(16), seed=10)
    sgd = solver(net)
    batches = list(Loader(source(), 16, seed=3, prefetch=0))
    assert [len(y) for _, y in batches] == [16, 16, 16, 16, 11]
    for x, y in batches:
        sgd.zero_grad()
        net(data=x, label=y)
        net.backward()
        sgd.step()
    reference = net.get_parameters()
    assert sorted(ranks[0]) == sorted(reference)
    for name, value in reference.items():
        assert np.array_equal(ranks[0][name], ranks[1][name]), name  # identical on both
        np.testing.assert_allclose(ranks[0][name], value, rtol=0, atol=1e-5, err_msg=name)
    moved = max(np.abs(reference[n] - dp.Net(ctx, netconfig(16), seed=10).get_parameters()[n]).max()
                for n in reference)
    assert moved > 1e-2  # the steps changed the weights: the comparison means something


@needs_mpi
@pytest.mark.parametrize("ranks, machines", [(3, 1), (4, 2)])
def test_shared_memory_sums_match_numpy_on_one_machine_and_across_machines(ctx, ranks, machines):
    """Three ranks of one machine; four as two machines of two (the slices' sums go
    between the machines by MPI): weighted sums of buckets of 1 to 786k elements."""
    status, out, err = _mpiexec(ctx, [sys.executable, os.path.join(HERE, "distributed_run.py"),
                                      "shared_sum", str(machines)], ranks=ranks)
    assert status == 0, out + err
    assert out.count("shared sums over %d machines match" % machines) == ranks, out


def _mnist_config(tmp_path, **changes):
    raw = json.load(open(os.path.join(MNIST, "config.json")))
    for split in ("train", "val"):
        for key in ("images", "labels"):
            raw["data"][split][key] = os.path.join(MNIST, raw["data"][split][key])
    raw["net"]["path"] = os.path.join(MNIST, raw["net"]["path"])
    batch = raw.pop("batch")
    raw.update(epochs=1, plot=False, progress=False, distributed={"global_batch": batch})
    raw.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


@needs_mpi
def test_dlprim_train_under_mpiexec_matches_one_process_and_only_rank_0_writes(ctx, tmp_path):
    config = _mnist_config(tmp_path, out="two")
    work = tmp_path / "cwd"
    work.mkdir()
    status, out, err = _mpiexec(ctx, [sys.executable, "-m", "dlprim.train", config], cwd=work)
    assert status == 0, out + err
    assert "2 ranks (global batch 64)" in out
    assert out.count("epoch 1: train loss") == 1 and out.count("validation accuracy:") == 1
    two = float(out.split("validation accuracy:")[1].split()[0])
    one = Trainer(dict(load_config(config), out=str(tmp_path / "one")), ctx).run().val_acc
    assert one > 0.85 and abs(two - one) <= 0.01, (one, two)
    run = tmp_path / "two"
    # a second writer would have left a second checkpoint of the same step (step-N-1),
    # a second metrics row, or files in the working folder
    assert checkpoint.folders(str(run / "checkpoints")) == ["step-00000063"]
    assert len(open(run / "metrics.csv").read().splitlines()) == 2
    assert sorted(os.listdir(run)) == ["best-deploy.json", "best.dlp", "checkpoints",
                                       "metrics.csv", "model-deploy.json", "model.dlp"]
    assert os.listdir(work) == []
    state = checkpoint.load_state(os.path.join(run, "checkpoints", "step-00000063"))
    assert state["global_batch"] == 64


def _processes(mark):
    """{rank: pid} of this machine's processes whose environment holds ``mark``."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if env.get(b"DLPRIM_TEST_MARK") == mark.encode() and b"PMI_RANK" in env:
            found[int(env[b"PMI_RANK"])] = int(pid)
    return found


@needs_mpi
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the ranks through /proc")
def test_a_killed_rank_ends_the_job_and_the_checkpoint_resumes_on_one_process(ctx, tmp_path):
    raw = _raw(str(tmp_path), epochs=400, batch=4)  # 16 samples, 2 ranks: 2 steps an epoch
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    mark = uuid.uuid4().hex
    p = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "dlprim.train", str(path)],
                         env=_env(ctx, DLPRIM_TEST_MARK=mark), cwd=str(tmp_path),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        latest = tmp_path / "run" / "checkpoints" / checkpoint.LATEST
        deadline = time.time() + LAUNCH_S
        while not latest.exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert latest.exists(), "no checkpoint was written: %s" % (p.communicate()[1],)
        time.sleep(0.3)  # into later epochs, where a kill may land inside a save
        ranks = _processes(mark)
        assert sorted(ranks) == [0, 1], ranks
        os.kill(ranks[1], signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("rank 0 went on waiting for the killed rank 1")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode != 0
    # the launcher says which rank ended how (MPICH and Open MPI both name the signal)
    assert "signal 9" in out + err, (out + err)[-2000:]
    assert _processes(mark) == {}  # rank 0 ended too
    # the last checkpoint loads, and one process goes on from it (global batch 8 -> 4)
    folder = checkpoint.find(str(tmp_path / "run"))
    epoch = checkpoint.load_state(folder)["epoch"]
    assert 1 <= epoch < 400
    cfg = apply_overrides(load_config(str(path)), resume=True, epochs=epoch + 1)
    trainer = Trainer(cfg, ctx)
    trainer.resume(cfg["out"])
    assert (trainer.epoch, trainer.position) == (epoch, 0)
    result = trainer.run()
    assert result.epochs_done == epoch + 1 and not result.interrupted


@needs_mpi
def test_ctrl_c_stops_every_rank_at_one_step_with_a_checkpoint(ctx, tmp_path):
    raw = _raw(str(tmp_path), epochs=400, batch=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    p = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "dlprim.train", str(path)],
                         env=_env(ctx), cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        latest = tmp_path / "run" / "checkpoints" / checkpoint.LATEST
        deadline = time.time() + LAUNCH_S
        while not latest.exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)  # the launcher passes it on to every rank
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the ranks did not stop together after Ctrl-C")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, out + err
    assert out.count("interrupted: checkpoint saved") == 1, out + err
    state = checkpoint.load_state(checkpoint.find(str(tmp_path / "run")))
    assert state["step"] == 2 * state["epoch"] + state["position"] and state["step"] > 0
    # two ranks go on from it: rank 0 reads it and sends it to rank 1
    status, out, err = _mpiexec(ctx, [sys.executable, "-m", "dlprim.train", str(path),
                                      "--resume", "--epochs", str(state["epoch"] + 1)])
    assert status == 0, out + err
    assert out.count("resumed from") == 1 and "(epoch %d, batch %d)" % (
        state["epoch"] + 1, state["position"]) in out
    assert checkpoint.load_state(checkpoint.find(str(tmp_path / "run")))["epoch"] == \
        state["epoch"] + 1


@needs_mpi
def test_an_exception_on_one_rank_ends_the_others(ctx):
    started = time.time()
    status, out, err = _mpiexec(ctx, [sys.executable, os.path.join(HERE, "distributed_run.py"),
                                      "raise"])
    assert status != 0
    assert "a deliberate failure on rank 1" in err
    assert "rank 1 of 2 failed; aborting the job" in err
    assert "which it must not" not in out
    assert time.time() - started < LAUNCH_S


# ----- without MPI
def _run_python(ctx, code, **env):
    return subprocess.run([sys.executable, "-c", code], env=_env(ctx, **env),
                          capture_output=True, text=True, timeout=120)


def test_init_without_a_launcher_is_one_process_without_mpi4py(ctx):
    done = _run_python(ctx, "import sys, dlprim\n"
                            "comm = dlprim.distributed.init()\n"
                            "print(comm.rank, comm.size, comm.local_rank, comm.device,\n"
                            "      'mpi4py' in sys.modules, comm is dlprim.distributed.init())\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "0", ctx.device_string, "False", "True"]


BLOCK_MPI4PY = ("import sys\n"
                "class Block:\n"
                "    def find_spec(self, name, path=None, target=None):\n"
                "        if name.split('.')[0] == 'mpi4py':\n"
                "            raise ModuleNotFoundError('No module named ' + repr(name))\n"
                "sys.meta_path.insert(0, Block())\n")


def test_a_launcher_without_mpi4py_names_the_extra(ctx, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_raw(str(tmp_path))))
    code = BLOCK_MPI4PY + ("from dlprim.train.main import main\n"
                           "sys.exit(main([%r]))\n" % str(path))
    done = _run_python(ctx, code, PMI_RANK="0", PMI_SIZE="2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert 'pip install "dlprim[mpi]"' in done.stderr and "PMI_RANK" in done.stderr
    assert not (tmp_path / "run").exists()
    # the library call says the same; without a launcher it needs no mpi4py
    done = _run_python(ctx, BLOCK_MPI4PY + (
        "import dlprim.distributed as d\n"
        "try:\n"
        "    d.init()\n"
        "except d.DistributedError as err:\n"
        "    print(err)\n"
        "assert d.init(mpi=False).size == 1\n"), OMPI_COMM_WORLD_SIZE="2")
    assert "OMPI_COMM_WORLD_SIZE is set" in done.stdout and "dlprim[mpi]" in done.stdout, \
        done.stderr


@needs_mpi
def test_a_launcher_whose_job_mpi_does_not_see_is_an_error(ctx):
    """Announced 2 ranks, MPI a job of 1 (mpi4py on another MPI library than the
    launcher's): every rank would train alone on the same device; init() says so."""
    done = _run_python(ctx, "import dlprim.distributed as d\n"
                            "try:\n"
                            "    d.init()\n"
                            "except d.DistributedError as err:\n"
                            "    print(err)\n", PMI_SIZE="2")
    assert "started 2 ranks but MPI sees a job of 1" in done.stdout, done.stdout + done.stderr
    assert "MPI4PY_LIBMPI" in done.stdout


def _loader(count, batch, **kw):
    rng = np.random.default_rng(2)
    source = ArraySource(rng.random((count, 1, 2, 2), np.float32), np.arange(count) % 3)
    return BatchLoader(source, batch, seed=4, prefetch=0, **kw)


def _rows(batches):
    return [np.sort(y) for _, y in batches]


@pytest.mark.parametrize("count", [64, 75])
def test_shards_are_the_parts_of_the_global_batches(count):
    whole = list(_loader(count, 16))
    shards = [ShardedLoader(_loader(count, 8), r, 2) for r in range(2)]
    parts = [list(s) for s in shards]
    assert len(shards[0]) == len(whole) == len(parts[1])
    for b, (x, y) in enumerate(whole):
        got_x = np.concatenate([parts[0][b][0], parts[1][b][0]])
        got_y = np.concatenate([parts[0][b][1], parts[1][b][1]])
        assert np.array_equal(got_x, x) and np.array_equal(got_y, y)  # same order, too
        assert abs(len(parts[0][b][1]) - len(parts[1][b][1])) <= 1
    assert [len(y) for _, y in parts[0]][-1] == (count % 16 or 16) // 2


def test_a_shard_resumes_where_it_stopped_and_with_workers():
    fresh = ShardedLoader(_loader(75, 8), 1, 2)
    fresh.set_epoch(3)
    expected = _rows(fresh)
    resumed = ShardedLoader(_loader(75, 8, num_workers=2, worker_type="thread"), 1, 2)
    resumed.set_epoch(3)
    resumed.position = 2
    got = _rows(resumed)
    assert len(got) == len(expected) - 2
    assert all(np.array_equal(a, b) for a, b in zip(got, expected[2:]))
    assert (resumed.epoch, resumed.position) == (4, 0)


def test_a_last_batch_with_fewer_samples_than_ranks_is_left_out():
    assert part_bounds(11, 0, 2) == (0, 5) and part_bounds(11, 1, 2) == (5, 11)
    for rank in range(3):
        shard = ShardedLoader(_loader(49, 8), rank, 3)  # 2 x 24, then 1 sample: left out
        assert len(shard) == 2 and [len(y) for _, y in shard] == [8, 8]
    assert len(ShardedLoader(_loader(50, 8), 0, 2)) == 4  # 3 x 16 and 2 samples, 1 each
    assert len(ShardedLoader(_loader(50, 8, drop_last=True), 0, 2)) == 3


class _OtherRank(Communicator):
    """A stand-in for MPI: the other rank's gradients are all ``value``; records buckets."""
    size = 2

    def __init__(self, value):
        self.value, self.sizes = value, []

    def iallreduce(self, array):
        self.sizes.append(array.size)
        array += self.value
        return super().iallreduce(array)


def test_the_bucketed_average_sums_trainable_gradients_only(ctx):
    cfg = dp.NetConfig()
    cfg.add_input("data", [4, 5])
    cfg.add("InnerProduct", name="frozen", outputs="h", options={"outputs": 7}, frozen=True)
    cfg.add("InnerProduct", name="fc", inputs="h", outputs="out", options={"outputs": 3})
    cfg.add("Reduction", name="loss", inputs="out", outputs="loss")
    cfg.set_outputs(["loss"])
    net = dp.Net(ctx, cfg)
    grads = np.random.default_rng(0).standard_normal(net.grad_arena.shape).astype(np.float32)
    net.grad_arena.to_device(grads)
    comm = _OtherRank(1.5)
    averager = GradientAverager(net, comm, bucket_bytes=100)  # 25 floats a bucket
    averager.average(0.5)
    got = net.grad_arena.to_host()
    n = net.trainable_size
    assert 0 < n < grads.size and n == averager.count  # the frozen layer lies after
    np.testing.assert_allclose(got[:n], 0.5 * grads[:n] + 1.5, rtol=1e-6)
    assert np.array_equal(got[n:], grads[n:])
    assert comm.sizes == [b - a for a, b in buckets(n, 100)] and max(comm.sizes) == 25


def test_backward_sends_each_bucket_once_its_gradients_are_final(ctx):
    """averager.backward() puts a bucket's copy right after its last writer: the last
    layer's bucket goes first, before the first layer's backward has run, and the
    averaged gradients are those of net.backward() then average()."""
    cfg = dp.NetConfig()
    cfg.add_input("data", [4, 5])
    cfg.add("InnerProduct", name="fc1", outputs="h", options={"outputs": 6})
    cfg.add("Activation", name="relu", inputs="h", outputs="h", options={"activation": "relu"})
    cfg.add("InnerProduct", name="fc2", inputs="h", outputs="out", options={"outputs": 3})
    cfg.add("Reduction", name="loss", inputs="out", outputs="loss")
    cfg.set_outputs(["loss"])
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    results = []
    for overlapped in (False, True):
        net = dp.Net(ctx, cfg, seed=4)
        comm = _OtherRank(1.5)
        averager = GradientAverager(net, comm, bucket_bytes=40)  # 10 floats a bucket
        net.zero_grad()
        net(data=x)
        if overlapped:
            averager.backward()
            order = averager._ready_order()
        else:
            net.backward()
        averager.average(0.5)
        results.append((net.grad_arena.to_host(), list(comm.sizes)))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    # fc1 (30 + 6 floats) then fc2 (18 + 3), each at a multiple of 64: fc2's buckets are
    # final after its backward, before fc1's, and are sent first
    sizes = [b - a for a, b in averager.buckets]
    assert results[1][1] == [sizes[k] for k, _ in order] != results[0][1]
    positions = [p for _, p in order]
    assert positions == sorted(positions) and positions[0] < positions[-1]
    assert positions[-1] == len(net.plan.backward)
    ready = dict(order)
    at = lambda name: [ready[k] for k, (a, b) in enumerate(averager.buckets)
                       if a < net.store.layout[name][0] + 18 and b > net.store.layout[name][0]]
    assert max(at("fc2.0")) < min(at("fc1.0"))


def test_buckets_cover_the_range_and_refuse_bad_sizes():
    assert buckets(10, 16) == [(0, 4), (4, 8), (8, 10)]
    assert buckets(3, 1) == [(0, 1), (1, 2), (2, 3)] and buckets(0, 64) == []
    for bad in (0, -4, 2.5, True):
        with pytest.raises(ValueError, match="bucket_bytes"):
            buckets(10, bad)


def test_data_parallel_of_one_process_is_the_solver(ctx):
    from distributed_run import netconfig, solver
    x = np.random.default_rng(1).standard_normal((8, 1, 4, 4)).astype(np.float32)
    y = np.arange(8, dtype=np.int32) % 5
    results = []
    for wrap in (False, True):
        net = dp.Net(ctx, netconfig(8), seed=3)
        opt = solver(net)
        step = DataParallel(net, opt, Communicator()) if wrap else opt
        for _ in range(2):
            step.zero_grad()
            net(data=x, label=y)
            net.backward()
            step.step()
        results.append(net.get_parameters())
    assert all(np.array_equal(results[0][k], results[1][k]) for k in results[0])


def test_the_config_fixes_the_global_batch_or_the_batch_per_rank(tmp_path):
    raw = _raw(str(tmp_path))
    del raw["batch"]
    cfg = validate_config(dict(raw, distributed={"global_batch": 12}), str(tmp_path))
    assert cfg["batch"] == 12 and cfg["distributed"] == {"global_batch": 12, "bucket_mb": 25}
    assert batch_sizes(cfg, 1) == (12, 12) and batch_sizes(cfg, 4) == (3, 12)
    with pytest.raises(ValueError, match="global_batch 12 does not split evenly over 5 ranks"):
        batch_sizes(cfg, 5)
    plain = validate_config(dict(raw, batch=8), str(tmp_path))
    assert batch_sizes(plain, 3) == (8, 24)
    with pytest.raises(ConfigError, match="--batch: the config fixes the batch over all ranks"):
        apply_overrides(cfg, batch=4)
    for changes, culprit in (({"batch": 8, "distributed": {"global_batch": 16}},
                              "distributed.global_batch: give batch (per rank) or"),
                             ({"distributed": {"global_batch": 0}},
                              "distributed.global_batch: must be a positive integer"),
                             ({"distributed": {"bucket_mb": 0}},
                              "distributed.bucket_mb: must be > 0"),
                             ({"distributed": {"global_bach": 8}},
                              "distributed.global_bach: unknown field (did you mean "
                              "'global_batch'?)")):
        with pytest.raises(ConfigError) as info:
            validate_config(dict(raw, **changes), str(tmp_path))
        assert any(p.startswith(culprit) for p in info.value.problems), info.value.problems


def test_a_position_carries_over_to_another_global_batch():
    state = {"epoch": 2, "position": 6, "global_batch": 16}
    assert carry_position(state, 16, "s") == 6
    assert carry_position(state, 32, "s") == 3 and carry_position(state, 8, "s") == 12
    assert carry_position(dict(state, position=0), 48, "s") == 0
    assert carry_position({"epoch": 0, "position": 5}, 64, "s") == 5  # saved before ranks
    with pytest.raises(CheckpointError, match="96 samples into epoch 3 with a global batch "
                                              "of 16; a global batch of 64"):
        carry_position(state, 64, "s")


def test_waiting_for_a_bucket_copy_keeps_the_allreduces_moving():
    """MPI moves a non-blocking allreduce only inside its calls: while a later bucket's
    copy to the host is awaited, the ones already started are driven."""
    import pyopencl as cl
    from dlprim.distributed.gradients import GradientAverager

    class Copy:  # an event that completes at the fourth look
        looks = 0

        @property
        def command_execution_status(self):
            self.looks += 1
            return (cl.command_execution_status.COMPLETE if self.looks > 3
                    else cl.command_execution_status.RUNNING)

    class Comm:
        calls = []

        def progress(self, requests):
            self.calls.append(list(requests))

    averager = GradientAverager.__new__(GradientAverager)
    averager.comm = Comm()
    averager._wait_progressing(Copy(), ["bucket 0"])
    assert Comm.calls == [["bucket 0"]] * 3
