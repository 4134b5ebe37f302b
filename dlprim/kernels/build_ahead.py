"""Programs built ahead of their first use, several at once, in worker processes.

NVIDIA's OpenCL driver compiles one program at a time in a process (sixteen programs on
eight threads took as long as on one), so a Net whose layers need many programs waits
for them in a row: resnet50's fp16 training builds 75 convolution programs, about 42 s
of a cold start of about 54. While a Net sets its layers up, they ask ahead for the
programs they will launch (``program.prefetch``). Inside ``program.building_ahead(ctx)``
each request goes to one of a few worker processes (``build_worker.py``), which builds
it and so leaves it in PyOpenCL's binary cache and the driver's. The Net's own build of
it (``program.get``) waits for that worker, then takes the warm path. Closing the pool
waits for every request and stops the workers, so their contexts are gone before the Net
allocates its memory.

A warm start needs no workers (each build takes the caches' path in tens of
milliseconds, less than a worker takes to start): every program a worker builds
leaves a mark (an empty file named by a hash of its source, options and driver, under
dlprim's cache folder), and a program with a mark is built in this process at once.

Off on CPUs (the workers would take the cores the builds use already), where PyOpenCL
keeps no cache (``PYOPENCL_NO_CACHE``: a worker's build would be lost), and with
``DLPRIM_BUILD_WORKERS=0``. That variable sets the number of workers; by default up to
8, one fewer than the cores.
"""
import hashlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading

import pyopencl as cl

from ..utils import cache_dir
from . import build_worker

__all__ = ["AheadBuilds", "open_for", "worker_count"]

log = logging.getLogger(__name__)
WORKER = os.path.abspath(build_worker.__file__)
MAX_WORKERS = 8


def worker_count(facts):
    """How many workers build ahead on a device of ``facts`` (0: none)."""
    asked = os.environ.get("DLPRIM_BUILD_WORKERS", "").strip()
    if asked:
        try:
            return max(0, int(asked))
        except ValueError:
            raise ValueError("DLPRIM_BUILD_WORKERS=%r: a number of worker processes (0: "
                             "build every program in this process)" % asked) from None
    if not facts.is_gpu or os.environ.get("PYOPENCL_NO_CACHE"):
        return 0
    return max(0, min(MAX_WORKERS, (os.cpu_count() or 1) - 1))


def open_for(ctx):
    """An AheadBuilds for ``ctx``'s device, or None where nothing is built ahead."""
    workers = worker_count(ctx.facts)
    if workers < 1:
        return None
    return AheadBuilds(ctx.cl_context, workers)


class AheadBuilds:
    """Up to ``workers`` worker processes building sources for the device of
    ``cl_context``, one thread each feeding it; started as requests come."""

    def __init__(self, cl_context, workers):
        device = cl_context.devices[0]
        self.address = build_worker.device_address(device)
        # what the caches' keys depend on besides the source (PyOpenCL's: its version, the
        # platform's and the device's names and versions)
        self._driver = repr((cl.VERSION, sys.version_info[:2], device.platform.name,
                             device.platform.version, device.name, device.version,
                             device.driver_version))
        self._marks = os.path.join(cache_dir(), "built")
        self.workers = workers
        self.counts = {"built": 0, "failed": 0}
        self._jobs = queue.Queue()
        self._pending = {}  # key -> (source, threading.Event set once its worker is done)
        self._threads = []
        self._lock = threading.Lock()

    def submit(self, key, source, options):
        """Build ``source`` ahead under ``key`` (once: a key asked again is ignored)."""
        if key in self._pending:
            return
        done = threading.Event()
        self._pending[key] = (source, done)
        self._jobs.put((source, list(options), done))
        if len(self._threads) < self.workers:  # a worker more for each request, up to the count
            thread = threading.Thread(target=self._feed, name="dlprim-build-ahead", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _mark(self, source, options):
        digest = hashlib.sha256("\0".join([self._driver, " ".join(options), source])
                                .encode()).hexdigest()
        return os.path.join(self._marks, digest)

    def built_before(self, source, options):
        """Whether a worker built a program of this source before (its mark)."""
        return os.path.exists(self._mark(source, options))

    def _remember(self, source, options):
        """Mark this source as built (a later start finds it in the caches)."""
        try:
            os.makedirs(self._marks, exist_ok=True)
            open(self._mark(source, options), "a").close()
        except OSError as err:  # (a read-only cache folder: the next start uses workers)
            log.debug("no mark of a built program: %s", err)

    def source(self, key):
        """The source submitted under ``key`` after its worker is done with it (built or
        not: the caller builds it again, through the caches), or None if never submitted."""
        entry = self._pending.get(key)
        if entry is None:
            return None
        entry[1].wait()
        return entry[0]

    def close(self):
        """Wait for every request, then stop the workers."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []
        log.debug("built ahead: %d programs (%d failed, built again in this process)",
                  self.counts["built"], self.counts["failed"])

    def _feed(self):
        """One worker's thread: send it requests until a None. A worker that cannot start
        or dies leaves its requests undone (marked done: the process builds them)."""
        worker = None
        try:
            worker = subprocess.Popen(
                [sys.executable, WORKER, str(self.address[0]), str(self.address[1])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True)
        except OSError as err:
            log.debug("a build worker did not start: %s", err)
        while True:
            job = self._jobs.get()
            if job is None:
                break
            source, options, done = job
            ok = False
            if worker is not None:
                try:
                    worker.stdin.write(json.dumps({"source": source, "options": options}) + "\n")
                    worker.stdin.flush()
                    reply = worker.stdout.readline()
                    if not reply:
                        raise OSError("it ended (exit status %s)" % worker.wait())
                    ok = json.loads(reply)["ok"]
                except (OSError, ValueError) as err:
                    # the requests it would take are built in this process instead
                    log.debug("a build worker failed: %s", err)
                    worker.kill()
                    worker.wait()
                    worker = None
            if ok:  # marked now: the Net may build it again only after the block
                self._remember(source, options)
            with self._lock:
                self.counts["built" if ok else "failed"] += 1
            done.set()
        if worker is not None:
            worker.stdin.close()
            worker.wait()
