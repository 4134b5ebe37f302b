"""Large host-to-device copies through page-locked host memory, filled by several threads.

A write from ordinary (pageable) host memory runs at the speed at which the driver copies
it into its own page-locked buffers: 6-15 GB/s on H200 hosts, waiting or not, where
a write from page-locked memory runs at the link's 55 GB/s (docs/benchmarks.md,
"Host-to-device copies"). OpenCL's page-locked memory is a mapped
``CL_MEM_ALLOC_HOST_PTR`` buffer; ``HostStaging`` keeps one mapped for the context, grown
to the largest copy up to ``MAX_BYTES``, and cuts a copy into chunks: ``THREADS`` threads
copy the chunks into it (numpy lets go of the interpreter lock while it copies) and each
chunk's write is enqueued as soon as its bytes are there, so the host's copying and the
transfer overlap.
The caller's array is free again when ``write`` returns, even without waiting.

Only discrete GPUs take this path (``takes``): on CPU devices and GPUs that share the
host's memory a write is a plain copy already.
"""
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyopencl as cl

from .utils import round_up

__all__ = ["HostStaging", "MIN_BYTES", "CHUNK_BYTES", "THREADS", "MAX_BYTES"]

log = logging.getLogger(__name__)

# Measured on an H200's host (docs/benchmarks.md, "Host-to-device copies"), ms for a
# batch of 224x224 images, pageable write / staged with 4 threads of 4 MiB chunks / 8
# threads: 64 images (38.5 MB) 4.73 / 1.97 / 1.92, 128 images 12.33 / 4.96 / 3.28, but 16
# images (9.6 MB) 0.78 / 0.92 / 0.84: a few chunks leave the threads little to share.
# 1 and 16 MiB chunks were slower at every size.
MIN_BYTES = 16 << 20   # smaller copies go straight to the driver
CHUNK_BYTES = 4 << 20  # one thread's share and one enqueued write
THREADS = min(8, os.cpu_count() or 1)  # host copies at once
# the most page-locked memory kept: a larger copy (a whole data set) goes through it in
# windows of this size, one after the other, so it never pins the host's memory wholesale
MAX_BYTES = 256 << 20


class HostStaging:
    """The context's page-locked staging memory and the threads that fill it."""

    def __init__(self, ctx, min_bytes=None, chunk_bytes=None, threads=None, max_bytes=None,
                 enabled=None):
        """``enabled``: whether copies may take this path; by default on discrete GPUs
        only (True elsewhere serves tests and benchmarks)."""
        self.ctx = ctx
        self.min_bytes = MIN_BYTES if min_bytes is None else int(min_bytes)
        self.max_bytes = MAX_BYTES if max_bytes is None else int(max_bytes)
        self.chunk_bytes = CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
        self.threads = THREADS if threads is None else int(threads)
        if self.chunk_bytes < 1 or self.threads < 1 or self.max_bytes < 1:
            raise ValueError("HostStaging: chunk_bytes, threads and max_bytes must be positive, "
                             "got %r, %r, %r" % (chunk_bytes, threads, max_bytes))
        self.enabled = (ctx.facts.is_gpu and not ctx.facts.host_unified_memory) \
            if enabled is None else bool(enabled)
        self._buffer = self._host = None
        self._pending = []  # writes still reading the staging memory
        self._pool = None
        self._lock = threading.Lock()

    def takes(self, nbytes):
        """Whether a copy of ``nbytes`` goes through the staging memory."""
        return self.enabled and nbytes >= self.min_bytes

    def _reserve(self, queue, nbytes):
        """Mapped page-locked memory of at least ``nbytes``; None where the driver refuses
        it (the copy then goes straight to the driver)."""
        if self._host is not None and self._host.size >= nbytes:
            return self._host
        self._release()
        size = round_up(nbytes, 1 << 20)  # whole MiB, so batches of one size fit again
        try:
            self._buffer = cl.Buffer(self.ctx.cl_context, cl.mem_flags.ALLOC_HOST_PTR
                                     | cl.mem_flags.READ_WRITE, size)
            self._host, _ = cl.enqueue_map_buffer(queue, self._buffer, cl.map_flags.WRITE, 0,
                                                  (size,), np.uint8, is_blocking=True)
        except cl.Error as err:
            log.warning("page-locked staging memory of %d bytes refused (%s); host copies "
                        "go straight to the driver", size, err)
            self._buffer = self._host = None
            self.enabled = False
        return self._host

    def _drain(self):
        """Wait until no enqueued write still reads the staging memory."""
        if self._pending:
            cl.wait_for_events(self._pending)
            self._pending = []

    def _release(self):
        if self._host is not None:
            self._drain()
            self._host.base.release(self.ctx.queue)
            self._host = self._buffer = None

    def write(self, queue, buffer, dst_offset, array, wait=True):
        """Copy ``array`` (any layout) into ``buffer`` at byte ``dst_offset``; with ``wait``
        returns once it is on the device. False where the staging memory is unavailable
        (the caller copies the plain way)."""
        src = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        with self._lock:
            window = min(src.size, self.max_bytes)
            host = self._reserve(queue, window)
            if host is None:
                return False
            if self._pool is None and self.threads > 1:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="dlprim-staging")
            for base in range(0, src.size, window):  # a copy beyond max_bytes: in windows
                self._drain()  # earlier writes still read the staging memory
                self._stage(queue, buffer, dst_offset + base, src[base:base + window], host)
            if wait:
                self._drain()
        return True

    def _stage(self, queue, buffer, dst_offset, src, host):
        """Fill ``host`` from ``src`` chunk by chunk on the threads, enqueueing each chunk's
        write as soon as it is there."""
        step = self.chunk_bytes
        starts = range(0, src.size, step)

        def fill(start):
            end = min(start + step, src.size)
            np.copyto(host[start:end], src[start:end])

        done = self._pool.map(fill, starts) if self._pool else map(fill, starts)
        for start, _ in zip(starts, done):  # in order: each chunk as soon as it is there
            n = min(step, src.size - start)
            self._pending.append(cl.enqueue_copy(queue, buffer, host[start:start + n],
                                                 dst_offset=dst_offset + start,
                                                 is_blocking=False))

    def close(self):
        """Unmap the staging memory and stop the threads."""
        with self._lock:
            self._release()
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
