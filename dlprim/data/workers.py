"""Worker processes or threads that build a loader's batches, a bounded number ahead.

The pool is given tasks (the generator's seed key and the sample indices of a batch)
and yields the batches in task order, whatever order the workers finish them in: since
a batch is a function of its task alone, the batches are the same for any number of
workers. At most ``depth`` tasks are out at once, each with a slot of its own; a
process writes its batch into the slot, a block of shared memory that the consumer
copies out of, so that a batch does not travel through a pipe. Tasks of an iteration
that stopped early are skipped by the workers, and their slots come back before reuse.

Processes live as long as the pool (started once, not per epoch); ``close()``, the
loader being garbage-collected, or the interpreter exiting stops them: each is asked to
finish, and terminated if it has not within SHUTDOWN_S. They are started by the
"forkserver" method where there is one ("spawn" elsewhere), never by forking the
training process with its device threads, so a script that uses worker processes
must guard its entry point with ``if __name__ == "__main__":`` as with PyTorch.
"""
import collections
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import traceback
import weakref
from typing import Any, Iterable, Iterator, Sequence, Tuple

import numpy as np

from .errors import WorkerError

__all__ = ["WorkerPool", "WORKER_TYPES"]

log = logging.getLogger(__name__)

WORKER_TYPES = ("process", "thread")
POLL_S = 0.5      # how often a waiting side looks whether the other is still there
SHUTDOWN_S = 5.0  # how long close() waits for workers to finish before terminating them


class _Flag:
    """The number of the iteration running now, as threads share it (processes share a
    multiprocessing.RawValue with the same ``value`` attribute)."""
    value = 0


def _start_method():
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


class WorkerPool:
    """``count`` workers of ``kind`` ("process" or "thread") running ``builder.build``.

    ``slot_shape`` (the largest batch) and ``dtype`` size the shared-memory slots of
    processes; ``name`` is the data's, for messages."""

    def __init__(self, builder: Any, count: int, kind: str, depth: int,
                 slot_shape: Sequence[int], dtype: Any, name: str = "data") -> None:
        self.count, self.kind, self.depth, self.name = count, kind, depth, name
        self.dtype = np.dtype(dtype)
        self._run = 0
        self._free = list(range(depth))
        self._slots = []
        if kind == "process":
            from multiprocessing import shared_memory
            nbytes = max(1, int(np.prod(slot_shape)) * self.dtype.itemsize)
            _check_shared_memory(name, depth, nbytes)
            try:
                for _ in range(depth):
                    self._slots.append(shared_memory.SharedMemory(create=True, size=nbytes))
            except BaseException:
                _shutdown([], None, None, self._slots)
                raise
            mp = multiprocessing.get_context(_start_method())
            self._tasks, self._results = mp.Queue(), mp.Queue()
            self._current = mp.RawValue("q", 0)
            args = (builder, self._tasks, self._results, self._current,
                    [s.name for s in self._slots], self.dtype.str)
            self._workers = [mp.Process(target=_process_main, args=args, daemon=True,
                                        name="dlprim-loader-%d" % i) for i in range(count)]
        else:
            self._tasks, self._results = queue.Queue(), queue.Queue()
            self._current = _Flag()
            args = (builder, self._tasks, self._results, self._current, None, None)
            self._workers = [threading.Thread(target=_serve, args=args, daemon=True,
                                              name="dlprim-loader-%d" % i) for i in range(count)]
        try:
            for w in self._workers:
                w.start()
        finally:
            self._closer = weakref.finalize(self, _shutdown, self._workers, self._tasks,
                                            self._results, self._slots)

    @property
    def closed(self) -> bool:
        """True once the workers were stopped."""
        return not self._closer.alive

    def close(self) -> None:
        """Stop the workers and free the shared memory (also done when garbage-collected
        or at exit)."""
        self._closer()

    def run(self, tasks: Iterable[Tuple[Any, Any]]) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """Yield ``(x, labels)`` for each ``(seed key, indices)`` of ``tasks``, in order."""
        if self.closed:
            raise ValueError("%s: the loader's workers were closed" % self.name)
        self._run += 1
        run = self._run
        self._current.value = run
        tasks = iter(tasks)
        pending, done = collections.deque(), {}
        state = {"exhausted": False, "seq": 0}

        def fill():
            while not state["exhausted"] and self._free and len(pending) < self.depth:
                task = next(tasks, None)
                if task is None:
                    state["exhausted"] = True
                    return
                seq, slot = state["seq"], self._free.pop()
                self._tasks.put((run, seq, task[0], np.asarray(task[1]), slot))
                pending.append(seq)
                state["seq"] += 1

        try:
            while True:
                fill()
                if not pending:
                    if state["exhausted"]:
                        return
                    self._absorb(self._receive(), run, done)  # frees an older run's slot
                    continue
                while pending[0] not in done:
                    self._absorb(self._receive(), run, done)
                slot, payload = done.pop(pending.popleft())
                try:
                    if payload[0] == "error":
                        raise payload[1]
                    batch = self._take(slot, payload)
                finally:
                    self._free.append(slot)
                fill()  # the workers go on while the batch is used
                yield batch
        finally:
            # what is still queued for this run is skipped; slots return as it comes back
            self._run += 1
            self._current.value = self._run
            for slot, _ in done.values():
                self._free.append(slot)

    def _absorb(self, message, run, done):
        r, seq, slot, payload = message
        if r == run:
            done[seq] = (slot, payload)
        else:
            self._free.append(slot)

    def _take(self, slot, payload):
        _, x, labels = payload
        if self.kind == "process":  # x is the batch's shape; its values are in the slot
            count = int(np.prod(x))
            x = np.frombuffer(self._slots[slot].buf, self.dtype, count).reshape(x).copy()
        return x, labels

    def _receive(self):
        while True:
            try:
                return self._results.get(timeout=POLL_S)
            except queue.Empty:
                dead = [w for w in self._workers if not w.is_alive()]
                if dead:
                    self.close()
                    w = dead[0]
                    raise WorkerError(
                        "%s: loader worker %s stopped unexpectedly%s; its batch is lost "
                        "(too little memory for %d workers?)"
                        % (self.name, w.name, " (exit code %s)" % w.exitcode
                           if self.kind == "process" else "", self.count)) from None


def _check_shared_memory(name, depth, nbytes, folder="/dev/shm"):
    """A WorkerError where ``depth`` slots of ``nbytes`` do not fit the free shared memory
    (a container's /dev/shm is often 64 MB): writing past it would kill the workers."""
    try:
        st = os.statvfs(folder)
    except (AttributeError, OSError):  # not Linux: no such folder to ask
        return
    free = st.f_bavail * st.f_frsize
    if depth * nbytes > free:
        raise WorkerError(
            "%s: the workers' %d batches in flight need %.0f MB of shared memory and %s has "
            "%.0f MB free: lower num_workers or prefetch or the batch size, give the machine "
            "more shared memory (docker run --shm-size), or use worker_type='thread'"
            % (name, depth, depth * nbytes / 1e6, folder, free / 1e6))


def _process_main(builder, tasks, results, current, slot_names, dtype):
    """A worker process: attach the slots, serve until told to stop or orphaned."""
    # Ctrl-C in a terminal reaches every process of the group; the training process
    # decides what happens, and stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from multiprocessing import shared_memory
    slots = [shared_memory.SharedMemory(name=n) for n in slot_names]
    try:
        _serve(builder, tasks, results, current, [s.buf for s in slots], np.dtype(dtype),
               multiprocessing.parent_process())
    finally:
        for s in slots:
            try:
                s.close()
            except BufferError:  # an array over it still lives: the exit unmaps it
                pass


def _serve(builder, tasks, results, current, buffers, dtype, parent=None):
    """Build the batches of the tasks of the running iteration; skip the others."""
    while True:
        try:
            task = tasks.get(timeout=POLL_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return  # the loader's process is gone
            continue
        if task is None:
            return
        run, seq, key, indices, slot = task
        if current.value != run:
            results.put((run, seq, slot, ("skipped",)))
            continue
        try:
            out = None
            if buffers is not None:
                count = len(indices) * int(np.prod(builder.shape))
                out = np.frombuffer(buffers[slot], dtype, count).reshape(
                    (len(indices),) + tuple(builder.shape))
            x, labels = builder.build(indices, np.random.default_rng(key), out)
            payload = ("ok", x.shape if buffers is not None else x, labels)
        except BaseException as e:  # noqa: B036 -- carried to the consumer, raised there
            payload = ("error", e if buffers is None else _portable(e))
        results.put((run, seq, slot, payload))


def _portable(error):
    """``error`` as it can cross to the consumer's process, with the worker's traceback
    attached as a note (Python 3.11+), or a WorkerError saying what it was."""
    where = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    error.__traceback__ = None  # its frames hold arrays over the shared memory
    if hasattr(error, "add_note"):
        error.add_note("raised in a loader worker process:\n" + where.rstrip())
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return WorkerError("%s: %s (in a loader worker process)\n%s"
                           % (type(error).__name__, error, where.rstrip()))


def _shutdown(workers, tasks, results, slots):
    """Ask every worker to stop, wait up to SHUTDOWN_S, terminate those still running,
    then free the shared memory."""
    for _ in workers:
        try:
            tasks.put(None)
        except (ValueError, OSError):  # at exit, multiprocessing may have closed it
            break
    processes = [w for w in workers if hasattr(w, "terminate")]
    for q in (tasks, results):
        if hasattr(q, "cancel_join_thread"):
            q.cancel_join_thread()  # exiting must not wait for a pipe nobody reads
    for w in workers:
        if w.ident is not None:
            w.join(SHUTDOWN_S / max(1, len(workers)))
    for w in processes:
        if w.is_alive():
            log.warning("loader worker %s did not stop within %gs: terminated", w.name,
                        SHUTDOWN_S)
            w.terminate()
            w.join(1.0)
    for s in slots:
        s.close()
        try:
            s.unlink()
        except FileNotFoundError:
            pass
