"""The sum of the ranks' gradient buckets through host memory shared by the ranks of one
machine, instead of MPI's allreduce.

Ranks on one machine each own one region of a shared window (``MPI.Win.Allocate_shared``:
one mapping, every rank reads every region). For a bucket, every rank writes its
weighted gradients into its region; then rank r adds up the r-th of n slices of the
bucket over all regions and leaves the sum in its own region; then every rank reads the
n sums into its pinned host array for the copy back to the device. Each byte is copied
or added about five times in all, by numpy in threads that release the GIL, which
runs at the machine's memory bandwidth; MPICH's shared-memory allreduce between two
processes moves about 2 GB/s (docs/distributed.md).

Across machines the sums of slice r are added by the ranks with local rank r on each
machine (one MPI allreduce of 1/n of the bucket each, in parallel), which needs the
same number of ranks on every machine; ``SharedSum.usable`` says whether it applies.

Between the phases the ranks of a machine meet at a barrier (with ``Win.Sync``, MPI's
memory fence for shared windows): which slice a rank may read is fixed by where the
others are, so no flag or lock is needed. Why no other hazard remains: a rank writes
region r's part of bucket k only before the first barrier of k, and reads other regions
only between the barriers of the same bucket; in the next step it writes that part again
only after the barriers of every later bucket of this step, which every rank passes
after it has read bucket k. With one bucket there is no later one, and ``finish``
supplies the missing barrier.
"""
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Optional, Tuple

import numpy as np

__all__ = ["SharedSum", "slices", "chunks", "MIN_CHUNK"]

log = logging.getLogger(__name__)

MIN_CHUNK = 1 << 18  # elements (1 MiB) a thread takes at least: below, threads cost more
MAX_THREADS = 8  # per rank; memory bandwidth is spent well before more cores help


def slices(a: int, b: int, n: int) -> List[Tuple[int, int]]:
    """``[a, b)`` cut into ``n`` consecutive parts as even as they go."""
    bounds = [a + (b - a) * q // n for q in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def chunks(a: int, b: int, pieces: int) -> List[Tuple[int, int]]:
    """``[a, b)`` in at most ``pieces`` parts of at least ``MIN_CHUNK`` elements."""
    pieces = max(1, min(pieces, (b - a) // MIN_CHUNK))
    return slices(a, b, pieces)


class SharedSum:
    """Sums of buckets over the ranks of ``comm`` (an ``MPICommunicator``) through one
    shared window per machine; ``count`` float32 elements per rank.

    ``local``/``cross``: the mpi4py communicators of the ranks on this machine (default
    ``comm.local``) and of the ranks with this local rank on every machine (default: split
    from ``comm``); a test may pass others to play several machines on one."""

    def __init__(self, comm: Any, count: int, threads: Optional[int] = None,
                 local: Any = None, cross: Any = None) -> None:
        MPI, world = comm.MPI, comm.comm
        self.MPI = MPI
        self.local = comm.local if local is None else local
        self.rank, self.n = self.local.Get_rank(), self.local.Get_size()
        self.cross = cross if cross is not None else world.Split(self.rank, key=comm.rank)
        self.count = int(count)
        # every rank's region starts on a cache line of its own (64 bytes = 16 floats)
        padded = -(-max(self.count, 1) // 16) * 16
        self.win = MPI.Win.Allocate_shared(padded * 4, 4, comm=self.local)
        # one passive-target epoch for the window's life: Win.Sync (the fence) needs one
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.regions = []
        for q in range(self.n):
            memory, _ = self.win.Shared_query(q)
            self.regions.append(np.frombuffer(memory, np.float32, self.count))
        if threads is None:
            threads = min(MAX_THREADS, max(1, (os.cpu_count() or 1) // self.n))
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, "dlprim-sum") if threads > 1 else None

    @staticmethod
    def usable(comm: Any) -> bool:
        """Whether the sums can go through shared memory: an MPI job, several ranks on
        this machine, and as many on every machine (every rank must call it: it is
        collective)."""
        if not comm.uses_mpi:
            return False
        sizes = comm.allgather_object(comm.local_size)
        return sizes[0] > 1 and all(s == sizes[0] for s in sizes)

    def _parallel(self, work, a: int, b: int) -> None:
        parts = chunks(a, b, self.threads)
        if self._pool is None or len(parts) == 1:
            for lo, hi in parts:
                work(lo, hi)
            return
        for future in [self._pool.submit(work, lo, hi) for lo, hi in parts]:
            future.result()

    def _meet(self) -> None:
        """Every write to the window before this is seen by every rank after it."""
        self.win.Sync()
        self.local.Barrier()
        self.win.Sync()

    def sum(self, host: np.ndarray, a: int, b: int, weight: float) -> None:
        """Replace ``host`` (this rank's ``[a, b)`` of the arena, in its own array) with
        the sum over the ranks of ``weight * host`` (each rank's own weight)."""
        mine, regions, n = self.regions[self.rank], self.regions, self.n
        w = np.float32(weight)

        def put(lo, hi):
            if weight == 1.0:
                np.copyto(mine[lo:hi], host[lo - a:hi - a])
            else:
                np.multiply(host[lo - a:hi - a], w, out=mine[lo:hi])
        self._parallel(put, a, b)
        self._meet()

        def add(lo, hi):  # in rank order, whoever adds: the same bits on every rank
            if n == 2:
                np.add(regions[0][lo:hi], regions[1][lo:hi], out=mine[lo:hi])
                return
            total = np.add(regions[0][lo:hi], regions[1][lo:hi])
            for q in range(2, n):
                total += regions[q][lo:hi]
            mine[lo:hi] = total
        parts = slices(a, b, n)
        lo, hi = parts[self.rank]
        self._parallel(add, lo, hi)
        if self.cross.Get_size() > 1:
            self.cross.Allreduce(self.MPI.IN_PLACE, [mine[lo:hi], self.MPI.FLOAT],
                                 op=self.MPI.SUM)
        self._meet()

        def get(lo, hi):
            for q, (s, e) in enumerate(parts):
                s, e = max(s, lo), min(e, hi)
                if s < e:
                    np.copyto(host[s - a:e - a], regions[q][s:e])
        self._parallel(get, a, b)

    def finish(self, buckets: int) -> None:
        """After the last bucket of a step: with a single bucket, wait until every rank
        has read it before any writes the next step's (see the module's note)."""
        if buckets == 1:
            self.local.Barrier()

    def close(self) -> None:
        """Stop the threads. The window stays until MPI ends: freeing it is collective,
        which a rank tidying up alone (garbage collection, an error) cannot promise."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
