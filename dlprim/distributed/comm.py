"""Who this process is in a data-parallel job, and the few collectives training needs.

``init()`` returns a ``Communicator``: ``rank``, ``size``, ``local_rank`` (its place
among the ranks on the same host, from MPI's shared-memory split) and ``device`` (the
OpenCL device this rank should use). Under an MPI launcher (``mpiexec``, ``mpirun``,
``srun`` with PMI) it wraps mpi4py's ``COMM_WORLD``; otherwise it is a single process of
size 1 whose collectives return at once, so the same script runs with and without MPI.

The launcher is recognised by the variables it sets in every rank's environment, so
that a job started by ``mpiexec`` without mpi4py installed fails at once with the
package to install, instead of running N unaware copies of a single-process training.
"""
import os
import sys
import time
from typing import Any, List, Optional, Sequence

import numpy as np

from ..errors import Error

__all__ = ["Communicator", "MPICommunicator", "DistributedError", "init", "launcher_variable",
           "LAUNCHER_VARIABLES", "INSTALL_HINT"]

# set in each rank's environment by: MPICH/Intel MPI (Hydra: PMI_*; MPI_LOCALRANKID),
# Open MPI (OMPI_COMM_WORLD_*), PMIx launchers (PMIX_RANK), Slurm's srun with PMI2
LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "HYDRA_CONTROL_FD")
INSTALL_HINT = 'pip install "dlprim[mpi]"'


class DistributedError(Error, RuntimeError):
    """A data-parallel job that cannot run as asked (an MPI launcher without mpi4py, a
    rank that failed); names what to install or which rank failed."""


def launcher_variable(environ: Optional[dict] = None) -> Optional[str]:
    """The first MPI launcher variable set in ``environ`` (default: this process's), or
    None when the process was not started by an MPI launcher."""
    environ = os.environ if environ is None else environ
    return next((name for name in LAUNCHER_VARIABLES if name in environ), None)


class Communicator:
    """One process, no MPI: rank 0 of 1. The collectives keep their meaning (a sum over
    one rank is the value itself) and cost nothing, so code written for N ranks runs."""

    rank, size, local_rank, local_size = 0, 1, 0, 1
    uses_mpi = False

    @property
    def device(self) -> str:
        """The OpenCL device string for this rank: ``DLPRIM_DEVICE`` when set (every rank
        then takes it), else the GPUs of every platform dealt out round-robin by
        ``local_rank``, else ``"cpu"`` (the ranks share the CPU device)."""
        chosen = os.environ.get("DLPRIM_DEVICE")
        if chosen:
            return chosen
        gpus = _gpu_device_strings()
        return gpus[self.local_rank % len(gpus)] if gpus else "cpu"

    def __repr__(self):
        return "%s(rank %d of %d, local rank %d of %d)" % (
            type(self).__name__, self.rank, self.size, self.local_rank, self.local_size)

    # ----- collectives: arrays are float32/float64 numpy arrays, changed in place
    def allreduce(self, array: np.ndarray) -> None:
        """Sum ``array`` over the ranks, in place; returns when done."""

    def iallreduce(self, array: np.ndarray) -> Any:
        """Start summing ``array`` over the ranks in place; returns a request whose
        ``Wait()`` finishes it. ``array`` must not be touched before then."""
        return _Done()

    def bcast(self, array: np.ndarray, root: int = 0) -> None:
        """Overwrite ``array`` with rank ``root``'s, in place."""

    def bcast_object(self, value: Any, root: int = 0) -> Any:
        """Rank ``root``'s ``value`` (any picklable object) on every rank."""
        return value

    def allgather_object(self, value: Any) -> List[Any]:
        """Every rank's ``value`` (picklable), in rank order, on every rank."""
        return [value]

    def sum_values(self, values: Sequence[float]) -> List[float]:
        """The sums over the ranks of a few numbers (metrics, counts, flags)."""
        return [float(v) for v in values]

    def barrier(self) -> None:
        """Return once every rank has called it."""

    def progress(self, requests: Sequence[Any]) -> None:
        """Let outstanding non-blocking operations advance (MPI libraries without a
        progress thread move them only inside MPI calls)."""

    def abort(self, status: int = 1) -> None:
        """End every rank of the job now with ``status`` (a single process just exits)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _gpu_device_strings():
    """``"P:D"`` of every GPU, platform by platform (opens OpenCL: only when asked)."""
    import pyopencl as cl
    from ..context import list_devices
    return ["%d:%d" % (p, d) for p, d, _, device in list_devices()
            if device.type & cl.device_type.GPU]


class _Done:
    """The request of an operation that was complete when it started."""

    def Wait(self):  # noqa: N802 -- mpi4py's spelling, so both requests read alike
        return None


class MPICommunicator(Communicator):
    """The ranks of an mpi4py communicator (``MPI.COMM_WORLD`` by default)."""

    uses_mpi = True

    def __init__(self, comm: Any = None) -> None:
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        # the ranks that share this host's memory: they share its GPUs too (and the
        # gradient sums' shared window, SharedSum)
        self.local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = self.local.Get_rank(), self.local.Get_size()

    def _buffer(self, array):
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous
                and array.dtype in (np.float32, np.float64)):
            raise TypeError("collectives take C-contiguous float32 or float64 numpy arrays, "
                            "got %s" % (getattr(array, "dtype", type(array).__name__),))
        return [array, self.MPI.FLOAT if array.dtype == np.float32 else self.MPI.DOUBLE]

    def allreduce(self, array):
        self.comm.Allreduce(self.MPI.IN_PLACE, self._buffer(array), op=self.MPI.SUM)

    def iallreduce(self, array):
        return self.comm.Iallreduce(self.MPI.IN_PLACE, self._buffer(array), op=self.MPI.SUM)

    def bcast(self, array, root=0):
        self.comm.Bcast(self._buffer(array), root=root)

    def bcast_object(self, value, root=0):
        return self.comm.bcast(value, root=root)

    def allgather_object(self, value):
        return self.comm.allgather(value)

    def sum_values(self, values):
        array = np.array(values, dtype=np.float64)
        self.allreduce(array)
        return array.tolist()

    def barrier(self):
        self.comm.Barrier()

    def progress(self, requests):
        if requests:
            self.MPI.Request.Testall(list(requests))

    def abort(self, status=1):
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(status)


_WORLD = None
# seconds a failing rank waits, after writing its error, before it aborts the job
_FORWARD_S = 1.0


def launched_size(environ: Optional[dict] = None) -> Optional[int]:
    """The job size the launcher announced (``PMI_SIZE`` of MPICH's, ``OMPI_COMM_WORLD_SIZE``
    of Open MPI's), or None where it announces none."""
    environ = os.environ if environ is None else environ
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        try:
            return int(environ[name])
        except (KeyError, ValueError):
            continue
    return None


def init(mpi: Optional[bool] = None) -> Communicator:
    """The communicator of this process (made once; later calls return the same one).

    ``mpi`` None: use MPI when an MPI launcher started the process (its environment
    variables, ``LAUNCHER_VARIABLES``), else run alone with size 1 without importing
    mpi4py. True: use MPI in any case (a process started alone is then a job of one);
    False: never. Under a launcher without mpi4py, a ``DistributedError`` says to
    ``pip install "dlprim[mpi]"``.

    With MPI, an exception that nothing catches ends the whole job (``sys.excepthook``
    prints it, then aborts every rank): the other ranks would otherwise wait for this one
    at their next collective forever.
    """
    global _WORLD
    if _WORLD is not None and mpi in (None, _WORLD.uses_mpi):
        return _WORLD
    variable = launcher_variable()
    if mpi is None:
        mpi = variable is not None
    if not mpi:  # asked for alone: the MPI job, if one was made, stays the one kept
        alone = Communicator()
        _WORLD = _WORLD or alone
        return alone
    try:
        import mpi4py.MPI  # noqa: F401 -- initialises MPI
    except ImportError as err:
        started = ("this process was started by an MPI launcher (%s is set)" % variable
                   if variable else "MPI was asked for")
        raise DistributedError("%s, but mpi4py cannot be imported (%s): %s, which brings "
                               "mpi4py and an MPI library (MPICH)"
                               % (started, err, INSTALL_HINT)) from None
    world = MPICommunicator()
    launched = launched_size()
    if launched is not None and launched != world.size:
        # each rank would train alone (and on the same device) without a word
        raise DistributedError(
            "the launcher started %d ranks but MPI sees a job of %d: mpi4py loaded another "
            "MPI library than the launcher's (an MPICH mpiexec with Open MPI's library, or "
            "the other way round). Launch with the mpiexec of the MPI that mpi4py uses, or "
            "point mpi4py at the launcher's library: MPI4PY_LIBMPI=/path/to/libmpi.so.12 "
            "(MPICH) and MPI4PY_MPIABI=mpich" % (launched, world.size))
    _WORLD = world
    if _WORLD.size > 1:
        _abort_on_uncaught(_WORLD)
    return _WORLD


def _abort_on_uncaught(comm):
    previous = sys.excepthook

    def hook(kind, value, traceback):
        previous(kind, value, traceback)
        sys.stderr.write("rank %d of %d failed; aborting the job so the other ranks do not "
                         "wait for it\n" % (comm.rank, comm.size))
        sys.stderr.flush()
        # the launcher forwards a rank's output asynchronously and drops what it has not
        # forwarded when the abort tears the job down: give it the error first
        time.sleep(_FORWARD_S)
        comm.abort(1)
    sys.excepthook = hook
