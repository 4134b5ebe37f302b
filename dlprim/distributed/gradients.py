"""The weighted sum of the parameter gradients over the ranks, in a few large allreduces.

A Net keeps every trainable parameter's gradient in one contiguous range of one float32
arena (``net.grad_arena[:net.trainable_size]``, ``dlprim.net.parameters``); frozen
parameters and BatchNorm statistics lie after it and are never sent. The range is cut
into buckets of ``bucket_bytes`` and goes through host memory, since MPI reads and
writes host memory:

    device -> host   each bucket's copy is enqueued right after the last backward launch
                     that writes its gradients (``backward()``, which enqueues the net's
                     backward pass with the copies in it), so the buckets of the last
                     layers travel while the first layers' backward still runs; after a
                     plain ``net.backward()`` every copy is enqueued at once instead
    allreduce        bucket k starts (non-blocking) as soon as its copy has arrived,
                     while the device still computes or copies the buckets after it;
                     waiting for the next copy, the rank keeps calling into MPI, which
                     moves a non-blocking collective only inside its calls
    host -> device   bucket k is copied back as soon as its sum is complete, while the
                     later buckets are still being summed

The copies run on a queue of their own (``copy_queue``): a bucket's copy to the host
waits for a marker after its last backward launch, and the copies back overlap the rest
of the backward pass on the device's copy engines instead of queueing behind it; the
solver's update, enqueued after ``average``, waits for them (a barrier on the net's
queue).

The host side is one page-locked (pinned) array: an OpenCL buffer allocated in host
memory (``ALLOC_HOST_PTR``) and mapped once, which lets a GPU's copy engine move it
without staging, and is ordinary memory on a CPU device. Nothing waits for the device
except each bucket's own copy.

How a bucket is summed over the ranks: where several ranks share a machine (and every
machine has as many), through that machine's shared memory (``SharedSum``: each rank adds
up one slice of every bucket, machines exchange their slices' sums by MPI); otherwise by
MPI's non-blocking allreduce, started as soon as the bucket's copy arrives.
"""
import logging
import time
from typing import Any, List, Tuple

import numpy as np
import pyopencl as cl

from .comm import Communicator
from .shared_sum import SharedSum

__all__ = ["GradientAverager", "DEFAULT_BUCKET_BYTES", "pinned_array", "buckets"]

log = logging.getLogger(__name__)

DEFAULT_BUCKET_BYTES = 25 * 2 ** 20  # PyTorch DDP's default: large enough to reach link speed
PROGRESS_POLL_S = 50e-6  # between MPI progress calls while a bucket's copy is awaited


def buckets(count: int, bucket_bytes: int, itemsize: int = 4) -> List[Tuple[int, int]]:
    """``[(start, stop)]`` element ranges covering ``[0, count)``, each at most
    ``bucket_bytes`` long (at least one element)."""
    if not isinstance(bucket_bytes, (int, np.integer)) or isinstance(bucket_bytes, bool) \
            or bucket_bytes <= 0:
        raise ValueError("bucket_bytes must be a positive integer, got %r" % (bucket_bytes,))
    step = max(1, int(bucket_bytes) // itemsize)
    return [(start, min(start + step, count)) for start in range(0, count, step)]


def pinned_array(ctx: Any, count: int) -> Tuple[np.ndarray, Any]:
    """(float32 host array of ``count`` elements in page-locked memory, the OpenCL buffer
    that owns it); an ordinary numpy array and None where the driver cannot map one."""
    nbytes = max(count, 1) * 4
    try:
        buf = cl.Buffer(ctx.cl_context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR,
                        nbytes)
        host, _ = cl.enqueue_map_buffer(ctx.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE,
                                        0, (max(count, 1),), np.float32, is_blocking=True)
        return host[:count], buf
    except (cl.Error, cl.LogicError, cl.RuntimeError) as err:
        log.info("no pinned host memory on %s (%s); staging gradients in pageable memory",
                 ctx.name, err)
        return np.empty(count, np.float32), None


class GradientAverager:
    """``average(weight)`` makes every rank's trainable gradients the sum over the ranks
    of ``weight * gradient`` (weight 1/size: the mean), in ``bucket_bytes`` pieces.
    ``shared_memory`` False sums by MPI's allreduce even where ranks share a machine.
    Every rank makes its averager at the same point: making one is collective."""

    def __init__(self, net: Any, comm: Communicator,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, shared_memory: bool = True) -> None:
        self.net, self.comm, self.ctx = net, comm, net.ctx
        self.count = int(net.trainable_size)
        self.buckets = buckets(self.count, bucket_bytes)
        self.bucket_bytes = int(bucket_bytes)
        self.host, self._pinned = pinned_array(self.ctx, self.count)
        self.copy_queue = cl.CommandQueue(self.ctx.cl_context, self.ctx.device)
        self._copies = None  # the buckets' device -> host copies that backward() enqueued
        self._order = None  # (plan, [(bucket, backward launches before its copy)])
        self.shared = None  # the SharedSum where the ranks' sums go through shared memory
        if comm.size > 1 and self.count and shared_memory and SharedSum.usable(comm):
            self.shared = SharedSum(comm, self.count)
        log.info("gradient average of %d bytes in %d buckets by %s", self.nbytes,
                 len(self.buckets), "shared memory (%d ranks a machine, %d threads)"
                 % (self.shared.n, self.shared.threads) if self.shared else "MPI allreduce")

    def _ready_order(self):
        """[(bucket index, how many of the plan's backward launches write it)] in the order
        the buckets' gradients become final: a bucket is final once every operator with a
        trainable parameter in it has run its backward pass."""
        net = self.net
        plan = net.plan
        if self._order is not None and self._order[0] is plan:
            return self._order[1]
        store, done = net.store, plan.backward_done
        ready = [0] * len(self.buckets)
        starts = [a for a, _ in self.buckets]
        for op, names in enumerate(store.op_param_names):
            if op not in done:
                continue
            for name in names:
                offset, shape, trainable = store.layout[name]
                if not trainable:
                    continue
                end = offset + int(np.prod(shape, dtype=np.int64))
                first = max(0, int(np.searchsorted(starts, offset, side="right")) - 1)
                for k in range(first, len(self.buckets)):
                    if self.buckets[k][0] >= end:
                        break
                    ready[k] = max(ready[k], done[op])
        order = sorted(range(len(self.buckets)), key=lambda k: (ready[k], -k))
        self._order = (plan, [(k, ready[k]) for k in order])
        return self._order[1]

    def backward(self) -> None:
        """Enqueue the net's backward pass with each bucket's copy to the host right after
        the launch that finishes its gradients, flushing the queue there so the device
        starts; ``average`` then begins with the buckets that are already on the host."""
        net = self.net
        net.backward_check()
        queue, launches = self.ctx.queue, net.plan.backward
        copies, done = [None] * len(self.buckets), 0
        for k, ready in self._ready_order():
            for launch in launches[done:ready]:
                launch(queue)
            done = max(done, ready)
            copies[k] = self._copy_out(k, cl.enqueue_marker(queue))
            queue.flush()
        for launch in launches[done:]:
            launch(queue)
        self._copies = copies

    def _copy_out(self, k: int, after: Any) -> Any:
        """Enqueue bucket k's copy to the host on the copy queue, after event ``after``."""
        a, b = self.buckets[k]
        grads = self.net.grad_arena
        event = cl.enqueue_copy(self.copy_queue, self.host[a:b], grads.buffer,
                                src_offset=grads.byte_offset + a * 4, wait_for=[after],
                                is_blocking=False)
        self.copy_queue.flush()
        return event

    def _copy_in(self, k: int) -> Any:
        """Enqueue bucket k's sum back to the device on the copy queue. A later step's
        copy to the host is queued after it, so the host array is not rewritten before
        the device has read it."""
        a, b = self.buckets[k]
        grads = self.net.grad_arena
        event = cl.enqueue_copy(self.copy_queue, grads.buffer, self.host[a:b],
                                dst_offset=grads.byte_offset + a * 4, is_blocking=False)
        self.copy_queue.flush()
        return event

    def _wait_progressing(self, event: Any, requests: List[Any]) -> None:
        """Wait for a bucket's copy to the host while the allreduces already started go
        on: MPI libraries move a non-blocking collective only inside MPI calls, so a plain
        wait on the device would leave them stalled until the last bucket's copy."""
        if not requests:
            event.wait()
            return
        done = cl.command_execution_status.COMPLETE
        while event.command_execution_status != done:
            self.comm.progress(requests)
            time.sleep(PROGRESS_POLL_S)

    @property
    def nbytes(self) -> int:
        """Bytes each rank sends into the allreduce per step."""
        return self.count * 4

    def average(self, weight: float) -> None:
        """Replace the trainable gradients with the ranks' sum of ``weight * gradient``.
        Returns once the sums are on their way back to the device (enqueued, with the
        net's queue waiting for them)."""
        if not self.count:
            return
        copies, self._copies = self._copies, None
        if copies is None:  # after a plain net.backward(): every bucket is final now
            order = list(range(len(self.buckets)))
            marker = cl.enqueue_marker(self.ctx.queue)
            self.ctx.queue.flush()
            copies = [self._copy_out(k, marker) for k in order]
        else:  # every rank sends the buckets in the same order: the plans are the same
            order = [k for k, _ in self._ready_order()]
        if self.shared is not None:
            back = self._sum_shared(order, copies, weight)
        else:
            back = self._sum_mpi(order, copies, weight)
        cl.enqueue_barrier(self.ctx.queue, wait_for=back)

    def _sum_shared(self, order, copies, weight):
        back = []
        for k in order:
            a, b = self.buckets[k]
            copies[k].wait()
            self.shared.sum(self.host[a:b], a, b, weight)
            back.append(self._copy_in(k))
        self.shared.finish(len(order))
        return back

    def _sum_mpi(self, order, copies, weight):
        host, requests = self.host, []
        for k in order:
            a, b = self.buckets[k]
            self._wait_progressing(copies[k], requests)
            if weight != 1.0:
                host[a:b] *= np.float32(weight)
            requests.append(self.comm.iallreduce(host[a:b]))
            self.comm.progress(requests)
        back = []
        for k, request in zip(order, requests):
            request.Wait()
            back.append(self._copy_in(k))
        return back
