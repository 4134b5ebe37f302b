"""A recurrent layer's whole time loop in one launch per direction (``kernels/
recurrent_persistent.cl``), where the device can keep every work-group of the launch
resident at once: GPUs, after a probe.

The step-per-launch loop of ``core/recurrent.py`` costs two launches a step (the hidden
GEMM and the gates), and on GPUs a launch's host cost (tens of microseconds on NVIDIA's
driver while work is pending) is more than the step's arithmetic. Here P work-groups, at
most one per compute unit, each own U hidden units for the whole sequence and meet at a
grid barrier (a counter in global memory) once per step.

A grid barrier deadlocks if the device does not run every work-group at once, so a plan
is used only after its own launch passed a probe on the device (memoized per context), and
its spin is bounded: a launch that waits too long marks itself failed and writes NaN.
CPUs never take it: their runtimes run work-groups on a few threads, one after another
(forced to one work-group on a 2-core EPYC with Intel's runtime, an LSTM took 10x the
launch-per-step loop's time).
"""
import logging

import numpy as np
import pyopencl as cl

from ..kernels import program
from ..tensor import Tensor
from ..utils import ceil_div
from . import tuning
from .recurrent_seq import Seq
from .copy import fill_launches
from .gemm import copies_async

__all__ = ["PersistentPlan", "plan", "shared_parts"]

log = logging.getLogger(__name__)

THREADS_MAX = 256      # work-items per work-group owning units and rows
THREADS_TARGET = 512   # work-items per work-group with the columns split
KSPLIT_MAX = 8
ROWS_MAX = 8           # batch rows per work-item
KC_MAX = 64            # columns staged per round
KC_STREAM_MAX = 256    # with W_hh's columns staged too
KC_LOCAL_MIN = 16      # fewer with W_hh's slice in local memory: stream it instead
SPINS = 1 << 24        # counter reads before a barrier gives up (seconds, not steps)
PROBE_SPINS = 1 << 16
PARTS_BYTES_MAX = 256 << 20
# NVIDIA's driver reports 48 KiB of local memory a work-group, but Hopper builds and runs
# kernels whose __local arrays take a compute unit's local memory less the 1 KiB it
# reserves a work-group (tuning.WGMMA_CU_LOCAL): a plan of that, less a KiB for the
# kernel's small arrays, is tried first on NVIDIA GPUs, and kept where its probe builds
# and runs it. W_hh's slice of hidden 1024 then stays in local memory (forward 28.5 ->
# 22.6 ms, forward + backward 85.9 -> 53.0 at 64 x 1024, H200: docs/benchmarks.md)
LARGE_LOCAL_BYTES = tuning.WGMMA_CU_LOCAL - 2 * 1024
# the forward's rounds of h copied by cp.async (NVIDIA, sm_80 on) into up to this many
# stages of ASYNC_COLUMNS columns (the first that fits two stages) beside W_hh's slice,
# all but one in flight while one is multiplied
ASYNC_STAGES = 4
ASYNC_COLUMNS = (64,)


def _pad4(n):
    """A local row of n floats: n rounded up to a multiple of 4, plus 4 (float4 loads,
    rows 4 banks apart: the kernel's strides)."""
    return (n + 3) // 4 * 4 + 4


class PersistentPlan:
    """The launch shape of one ``RecurrentPass``: ``groups`` work-groups of ``threads``
    work-items; a work-group owns ``units`` hidden units, a work-item one unit's ``rows``
    batch rows (at least ``rows`` where given) and 1/``ksplit`` of the columns of the
    step's products; ``kc`` columns staged a round. ``backward_plan``: the plan whose
    backward launch the pass takes (itself unless ``plan()`` splits them)."""

    def __init__(self, ctx, cell, batch, hidden, groups=None, local_bytes=None, rows=None):
        self.ctx, self.cell, self.N, self.H = ctx, cell, int(batch), int(hidden)
        self.backward_plan = self  # the plan of the backward's launch: plan() may split
        self.local_bytes = ctx.facts.local_mem if local_bytes is None else int(local_bytes)
        self.G = 4 if cell == "lstm" else 3
        groups = ctx.facts.compute_units if groups is None else int(groups)
        self.units = ceil_div(self.H, max(1, min(groups, self.H)))
        self.groups = ceil_div(self.H, self.units)
        # more rows a work-item while a unit's rows need too many work-items
        rows = forward_rows(self.N) if rows is None else int(rows)
        while self.units * ceil_div(self.N, rows) > THREADS_MAX and rows < ROWS_MAX:
            rows *= 2
        self.rows = rows
        self.row_groups = ceil_div(self.N, rows)
        self.owners = self.units * self.row_groups  # work-items owning units and rows
        self.budget = self.local_bytes - 256  # local bytes a work-group may use
        # W_hh's slice in local memory where it leaves room for rounds of at least
        # KC_LOCAL_MIN columns; else staged beside h
        local = self.budget - self._resident_bytes() >= 4 * self.N * (KC_LOCAL_MIN + 4)
        self.weights = self.kc = self.ksplit = self.threads = self.fits = self.sums = None
        self.use_weights("local" if local else "stream")

    def _resident_bytes(self):
        """Local bytes of the W_hh slice held for the launch: the forward's G U rows or the
        backward's U columns, rows padded to a multiple of 4, plus 4."""
        return 4 * self.units * max(self.G * _pad4(self.H), _pad4(self.G * self.H))

    def use_weights(self, where):
        """Where the work-groups keep their W_hh slices: "local" (loaded once) or "stream"
        (KC columns a round beside the staged rows); sets the round size and the column
        split that fit beside them. (Read from global memory each step, the slices cost
        150 us a step where streaming took 47: hidden 1024, batch 64, H200.)"""
        G, budget = self.G, self.budget
        if where == "local":
            room, per_column, most = budget - self._resident_bytes(), 4 * self.N, KC_MAX
        elif where == "stream":
            room, per_column, most = budget, 4 * (self.N + G * self.units), KC_STREAM_MAX
        else:
            raise ValueError("use_weights: 'local' or 'stream', got %r" % (where,))
        self.weights = where
        self.kc = min(most, (room // per_column - 4) // 4 * 4)
        # rounds copied by cp.async where two stages or more fit
        self.stages = 0
        if where == "local" and _async_copies(self.ctx):
            for kc in ASYNC_COLUMNS:
                stages = min(ASYNC_STAGES, room // (per_column * (kc + 4)))
                if stages >= 2:
                    self.stages, self.kc = stages, kc
                    break
        # the columns of a product split among KSPLIT work-items (then summed): more
        # work-items to hide the latencies, where the rows alone give few; the parts'
        # sums go through the staging memory, grown where they need more
        owners, sums = self.owners, 4 * self.owners * self.rows * G
        streamed = 4 * G * self.units * (self.kc + 4) if where == "stream" else 0
        self.ksplit = 1
        while owners * self.ksplit * 2 <= min(THREADS_TARGET, self.ctx.facts.max_work_group) \
                and self.ksplit < KSPLIT_MAX:
            self.ksplit *= 2
        while self.ksplit > 1 and (self.ksplit - 1) * sums > room - streamed:
            self.ksplit //= 2
        self.threads = owners * self.ksplit
        self.fits = self.kc >= 4 and owners <= min(THREADS_MAX, self.ctx.facts.max_work_group)
        # the backward's dh_prev as every work-group's share summed by the units' owners
        # (its own gradient columns times its own rows of W_hh): no N x G H staging a
        # step, for a buffer of 2 P x N x P U floats; with W_hh's rows in local memory
        # beside N x G U gradients
        own = 4 * (self.N * _pad4(G * self.units) + G * self.units * _pad4(self.H)
                   + (self.ksplit - 1) * owners * self.rows)
        self.sums = (where == "local" and own <= budget
                     and self.parts_elements() * 4 <= PARTS_BYTES_MAX)

    def parts_elements(self):
        """Floats of the backward's summed shares (``sums``): two steps' P x P blocks of
        N x units."""
        return 2 * self.groups * self.groups * self.N * self.units

    def _program(self, bias, save=0, dy=0, sums=False, stages=0, timing=False):
        emulated = {"MMA_EMULATE": True} if stages and self.ctx.facts.vendor_id != "nvidia" \
            else {}
        return program.get(self.ctx, "recurrent_persistent", CELL=self.cell, N=self.N,
                           H=self.H, U=self.units, NB=self.rows, KC=self.kc,
                           WEIGHTS=self.weights, BIAS=int(bias), SAVE=int(save), DY=int(dy),
                           THREADS=self.threads, NG=self.row_groups, KSPLIT=self.ksplit,
                           SUMS=int(sums), ASYNC=stages, TIMING=int(timing), **emulated)

    def _launch(self, prg, kernel, args):
        return program.Launch(prg, kernel, (self.groups * self.threads,), (self.threads,),
                              args)

    def forward_launches(self, L, reverse, xseq, w_hh, b_hh, h0, c0, y, sync, cells=None,
                         gates=None, spins=SPINS, times=None):
        """The pass in one launch (after the counter's reset). ``xseq``, ``y``: Seqs of
        the input projection and of h; ``cells``: as ``RecurrentPass.forward_launches``;
        ``times``: a uint64 tensor of groups x L x 8 for the steps' phase clocks (NVIDIA;
        ``benchmarks/rnn_step_phases.py``)."""
        # cp.async copies 16 bytes: every row of h (h0's, y's) must start on them
        starts = (h0.offset, y.tensor.offset + y.offset, y.step, y.row, self.H)
        aligned = all(int(x) % 4 == 0 for x in starts)
        prg = self._program(b_hh is not None, save=gates is not None,
                            stages=self.stages if aligned else 0, timing=times is not None)
        args = [np.int32(L), np.int32(reverse), np.uint32(spins),
                xseq.tensor, np.uint64(xseq.offset), np.uint64(xseq.step), np.uint64(xseq.row),
                w_hh]
        if b_hh is not None:
            args.append(b_hh)
        args.append(h0)
        if self.cell == "lstm":
            full = cells.size >= L * self.N * self.H
            args += [c0, cells, np.int32(full)]
        args += [y.tensor, np.uint64(y.offset), np.uint64(y.step), np.uint64(y.row)]
        if gates is not None:
            args.append(gates)
        if times is not None:
            args.append(times)
        args.append(sync)
        return fill_launches(self.ctx, sync, 0) + \
            [self._launch(prg, self.cell + "_persistent_forward", args)]

    def backward_launches(self, L, reverse, w_hh, dh, dc, gates, dxg, dhg, sync, dy=None,
                          cells=None, c0=None, hseq=None, h0=None, parts=None, spins=SPINS,
                          times=None):
        """The time loop of the backward pass in one launch: dxg (and the GRU's dhg) for
        every step; ``dh``/``dc`` hold the last step's gradients on entry and the initial
        states' on return. ``parts``: ``parts_elements()`` floats of scratch where
        ``sums``; ``times``: as ``forward_launches``."""
        prg = self._program(False, dy=dy is not None, sums=self.sums, timing=times is not None)
        args = [np.int32(L), np.int32(reverse), np.uint32(spins)]
        if dy is not None:
            args += [dy.tensor, np.uint64(dy.offset), np.uint64(dy.step), np.uint64(dy.row)]
        args += [w_hh, dh]
        if self.cell == "lstm":
            args += [dc, cells, c0]
        else:
            args += [hseq.tensor, np.uint64(hseq.offset), np.uint64(hseq.step),
                     np.uint64(hseq.row), h0, dhg]
        args += [gates, dxg]
        if self.sums:
            args.append(parts)
        if times is not None:
            args.append(times)
        args.append(sync)
        return fill_launches(self.ctx, sync, 0) + \
            [self._launch(prg, self.cell + "_persistent_backward", args)]


def _probe(ctx, p):
    """Whether the launch of plan ``p`` has every work-group resident: a two-step forward
    with a small spin bound, its failure flag read back. A plan past the local memory the
    device reports has its backward built too (its arrays are not the forward's), where
    the pass takes it (a forward plan of more rows leaves its backward to another)."""
    N, H = p.N, p.H
    G = p.G * H
    L = 2
    try:
        if p.local_bytes > ctx.facts.local_mem and p.backward_plan is p:
            p._program(False, sums=p.sums)
        t = {name: Tensor.zeros(ctx, shape) for name, shape in (
            ("xg", (L * N * G,)), ("w", (G, H)), ("h0", (N, H)), ("y", (L * N * H,)),
            ("cells", (2 * N * H,)))}
        sync = Tensor.zeros(ctx, (2,), "uint32")
        for launch in p.forward_launches(L, False, Seq(t["xg"], 0, N * G, G), t["w"], None,
                                         t["h0"], t["h0"], Seq(t["y"], 0, N * H, H), sync,
                                         cells=t["cells"], spins=PROBE_SPINS):
            launch(ctx.queue)
        failed = int(sync.numpy()[1])
    except Exception as err:  # a build or launch the driver refuses
        log.info("recurrent layers: no one-launch loop in %d KiB of local memory on %s (%s)",
                 p.local_bytes // 1024, ctx.facts.name, str(err).splitlines()[0])
        return False
    if failed:
        log.info("recurrent layers: one launch per step on %s (%d work-groups are not "
                 "resident at once)", ctx.facts.name, p.groups)
    return not failed


def shared_parts(ctx, elements):
    """The backward's scratch of summed shares, at least ``elements`` floats, one per
    context: the passes run one after another on its queue."""
    held = ctx.__dict__.get("_rnn_parts")
    if held is None or held.size < elements:
        held = ctx.__dict__["_rnn_parts"] = Tensor(ctx, (elements,))
    return held


def forward_rows(batch):
    """Batch rows a work-item takes in the forward: each weight read from local memory
    then serves that many rows. 2 from 32 rows (14.7 against 17.3 us a step at 64 x 512,
    H200); 4 from 64, where the forward prefetches its step's input projection (the gates'
    loads no longer wait a row at a time: LSTM 64 x 1024 36.2 -> 29.5 us a step, GRU
    29.0 -> 25.0; docs/benchmarks.md)."""
    return 4 if batch >= 64 else 2 if batch >= 32 else 1


def backward_rows(batch):
    """Batch rows a work-item takes in the backward: 2 from 32 rows. Its shares of
    dh_prev are summed from local memory per row, and 4 rows made them slower (LSTM
    64 x 1024 32.7 -> 40.2 us a step, H200)."""
    return 2 if batch >= 32 else 1


def _real_gpu(ctx):
    """Whether the device itself says GPU and not CPU (the facts may be emulated for tests;
    oclgrind says both)."""
    kind = ctx.device.type
    return bool(kind & cl.device_type.GPU) and not kind & cl.device_type.CPU


def plan(ctx, cell, batch, hidden, groups=None):
    """The PersistentPlan for a pass on ``ctx``, or None where it takes one launch per step:
    CPUs, shapes beyond the kernel's limits, launches the probe found not resident.
    ``groups`` forces a number of work-groups (tests: 1 runs anywhere, probe-free)."""
    if groups is None and not _real_gpu(ctx):
        return None
    known = ctx.__dict__.setdefault("_persistent_rnn", {})

    def works(p):
        if not p.fits:
            return False
        if p.groups == 1:
            return True
        key = (cell, p.N, p.H, groups, p.local_bytes, p.rows)
        if key not in known:
            known[key] = _probe(ctx, p)
        return known[key]

    for local_bytes in _local_sizes(ctx, groups):
        back = PersistentPlan(ctx, cell, batch, hidden, groups, local_bytes,
                              rows=backward_rows(batch))
        if not works(back):
            continue
        # the forward's own plan where it takes more rows (probed after the backward's
        # is set: the probe then builds no backward for it)
        ahead = PersistentPlan(ctx, cell, batch, hidden, groups, local_bytes,
                               rows=forward_rows(batch))
        ahead.backward_plan = back
        return ahead if ahead.rows > back.rows and works(ahead) else back
    return None


def _async_copies(ctx):
    """Whether the forward may copy its rounds by cp.async: NVIDIA GPUs where the
    tensor-core GEMM's cp.async probe passes."""
    return _real_gpu(ctx) and ctx.facts.vendor_id == "nvidia" and copies_async(ctx, "fp16")


def _local_sizes(ctx, groups):
    """The local memory a plan may take, in the order tried: on NVIDIA GPUs first what
    their kernels may really hold (LARGE_LOCAL_BYTES), then what the device reports."""
    reported = ctx.facts.local_mem
    if groups is None and ctx.facts.vendor_id == "nvidia" and reported < LARGE_LOCAL_BYTES:
        return (LARGE_LOCAL_BYTES, reported)
    return (reported,)
