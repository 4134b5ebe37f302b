"""OpenCL context: device choice, one in-order queue, a memory pool, device facts.

Device strings follow DLPrimitives: ``"P:D"`` (platform index : device index), plus
``"cpu"``, ``"gpu"`` and a plain index over every device of every platform. With no
string, ``DLPRIM_DEVICE`` decides, else the first GPU, else the first CPU.
"""
import logging
import os
import re
from typing import Optional, Union

import pyopencl as cl
import pyopencl.tools

from .drivers import advice, icd_files, loader_vendors, probe_device, register_pip_drivers
from .errors import DeviceMemoryError, Error
from .staging import HostStaging
from .utils import BoundedCache

# how many memoized ops and recorded launches a context keeps (least recently used go
# first); a training step of a large model uses a few thousand
OPS_KEPT = 16384

__all__ = ["Context", "ExecutionContext", "DeviceError", "list_devices", "DeviceFacts",
           "compile_problem", "CPU_DRIVER_PREFERENCE"]


log = logging.getLogger(__name__)

# Among CPU drivers that both compile, the one chosen by default: the faster on the
# measured rows of docs/benchmarks.md ("CPU drivers").
CPU_DRIVER_PREFERENCE = ("intel", "pocl")


class DeviceError(Error, RuntimeError):
    """No OpenCL platform, a device string that names no device, or a device that cannot
    build a kernel (the compiler's message and the fix for that case)."""


def _platforms():
    register_pip_drivers()  # before the loader's first look: pip's drivers join the list
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    if not platforms:
        vendor_dir = loader_vendors()
        files = icd_files(vendor_dir)
        found = ", ".join(files) if files else "no .icd files"
        raise DeviceError(
            "no OpenCL platform found (the ICD loader looked in %s and found: %s). "
            "Install an OpenCL driver: for CPUs the drivers from pip (`pip install "
            "\"dlprim[cpu]\"`: PoCL and Intel's CPU runtime, no root needed), "
            "for GPUs the vendor's driver (NVIDIA, AMD ROCm, Intel compute-runtime)."
            % (vendor_dir, found))
    return platforms


def list_devices():
    """Every device as ``(p_index, d_index, platform, device)``, platform by platform."""
    out = []
    for p_index, platform in enumerate(_platforms()):
        try:
            devices = platform.get_devices()
        except cl.Error:
            devices = []
        for d_index, device in enumerate(devices):
            out.append((p_index, d_index, platform, device))
    return out


def _describe(devices):
    return "; ".join("%d:%d %s (%s)" % (p, d, dev.name.strip(), _type_name(dev.type))
                     for p, d, _, dev in devices)


def default_device_string():
    """What ``Context(None)`` picks, as a ``"P:D"`` string."""
    env = os.environ.get("DLPRIM_DEVICE")
    if env:
        p, d, _, _ = _select(env)
        return "%d:%d" % (p, d)
    p, d, _, _ = _select(None)
    return "%d:%d" % (p, d)


def _platform_kind(platform):
    return "pocl" if "portable computing" in platform.name.lower() else platform.vendor.lower()


def _preference(entry):
    """Sort key of the default choice: GPUs, then CPUs by CPU_DRIVER_PREFERENCE, then the
    rest, each in list order."""
    _, _, platform, device = entry
    if device.type & cl.device_type.GPU:
        return (0, 0)
    if device.type & cl.device_type.CPU:
        kind = _platform_kind(platform)
        rank = next((i for i, k in enumerate(CPU_DRIVER_PREFERENCE) if k in kind),
                    len(CPU_DRIVER_PREFERENCE))
        return (1, rank)
    return (2, 0)


def compile_problem(entry):
    """None when the device builds and runs the probe kernel; else the DeviceError text:
    the device, the compiler's message and the fix."""
    p, d, platform, device = entry
    result = probe_device(device)
    if result.ok:
        return None
    return ("OpenCL device %d:%d %s on %s cannot build a kernel: %s\nFix: %s"
            % (p, d, device.name.strip(), platform.name.strip(), result.log.strip(),
               advice(platform.name, platform.version, device.name, result.log)))


_warned = set()  # devices whose skipping was logged in this process


def _first_that_compiles(candidates, what):
    problems = []
    for entry in sorted(candidates, key=_preference):
        problem = compile_problem(entry)
        if problem is None:
            return entry
        if problem not in _warned:
            _warned.add(problem)
            log.warning("skipping %s", problem)
        problems.append(problem)
    raise DeviceError("no OpenCL device that compiles for %s:\n%s" % (what, "\n".join(problems)))


def _explicit(entry):
    problem = compile_problem(entry)
    if problem is not None:
        raise DeviceError(problem)
    return entry


def _select(spec):
    """The device ``spec`` names, as ``(p_index, d_index, platform, device)``. A device
    that cannot build a kernel is skipped by the default and "cpu"/"gpu" choices (and
    logged), and refused with DeviceError when named by index."""
    devices = list_devices()
    if not devices:
        raise DeviceError("OpenCL platforms exist but expose no devices")
    if spec is None:
        spec = os.environ.get("DLPRIM_DEVICE") or None
    if spec is None:
        return _first_that_compiles(devices, "the default choice (GPUs, then CPUs)")
    text = str(spec).strip().lower()
    if text in ("cpu", "gpu", "accelerator"):
        want = {"cpu": cl.device_type.CPU, "gpu": cl.device_type.GPU,
                "accelerator": cl.device_type.ACCELERATOR}[text]
        of_kind = [entry for entry in devices if entry[3].type & want]
        if of_kind:
            return _first_that_compiles(of_kind, repr(spec))
    elif re.fullmatch(r"\d+:\d+", text):
        p, d = (int(v) for v in text.split(":"))
        for entry in devices:
            if entry[0] == p and entry[1] == d:
                return _explicit(entry)
    elif re.fullmatch(r"\d+", text):
        index = int(text)
        if index < len(devices):
            return _explicit(devices[index])
    raise DeviceError("no OpenCL device %r; valid: 'cpu', 'gpu', an index 0..%d, or P:D "
                      "among: %s" % (spec, len(devices) - 1, _describe(devices)))


def _type_name(t):
    for flag, name in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                       (cl.device_type.ACCELERATOR, "ACCELERATOR")):
        if t & flag:
            return name
    return cl.device_type.to_string(t)


class DeviceFacts:
    """What kernels and launchers need to know about a device, read once."""

    def __init__(self, device):
        d = device
        ext = set(d.extensions.split())
        self.name = d.name.strip()
        self.vendor = d.vendor.strip()
        self.driver_version = d.driver_version.strip()
        self.platform = d.platform.name.strip()
        self.type = _type_name(d.type)
        self.is_gpu = bool(d.type & cl.device_type.GPU)
        self.is_cpu = bool(d.type & cl.device_type.CPU)
        self.compute_units = d.max_compute_units
        # GPUs sharing the host's memory (integrated ones): no transfer to stage
        self.host_unified_memory = self._host_unified_memory(d)
        self.global_mem = d.global_mem_size
        self.max_alloc = d.max_mem_alloc_size
        self.local_mem = d.local_mem_size
        self.max_work_group = d.max_work_group_size
        self.max_parameter_size = d.max_parameter_size  # bytes of kernel arguments
        self.opencl_c_version = d.opencl_c_version.strip()
        self.version = d.version.strip()
        self.extensions = ext
        self.fp16 = "cl_khr_fp16" in ext
        self.fp64 = "cl_khr_fp64" in ext or "cl_amd_fp64" in ext
        # float atomic add in global memory; otherwise kernels emulate it with atomic_cmpxchg
        self.float_atomics = "cl_ext_float_atomics" in ext
        self.int64_atomics = "cl_khr_int64_base_atomics" in ext
        self.vendor_id = self._vendor_id()
        self.subgroup_sizes = self._subgroup_sizes(d, ext)
        # PoCL built on LLVM 14 (pip's PoCL 3.0) aborts the whole process while compiling
        # float16 vector arithmetic ("Do not know how to scalarize this operator's
        # operand"); its kernels stay at float8
        llvm = re.search(r"LLVM (\d+)", d.platform.version or "")
        old_pocl = self.vendor_id == "pocl" and llvm is not None and int(llvm.group(1)) < 15
        self.max_float_vector = 8 if old_pocl else 16
        # floats in one of the device's native vectors: 16 on CPUs with AVX-512, 8 with
        # AVX2 (the CPU GEMM's register blocks follow it, core/tuning.py)
        try:
            self.float_lanes = int(d.native_vector_width_float) or 1
        except (cl.Error, AttributeError):
            self.float_lanes = 1

    @staticmethod
    def _host_unified_memory(d):
        try:
            return bool(d.host_unified_memory)
        except (cl.Error, AttributeError):  # a query OpenCL 2.0 deprecates: assume discrete
            return False

    def _vendor_id(self):
        if "portable computing" in self.platform.lower():
            return "pocl"
        v = self.vendor.lower()
        for key in ("nvidia", "amd", "intel", "apple", "arm"):
            if key in v or (key == "amd" and "advanced micro" in v):
                return key
        return "other"

    def _subgroup_sizes(self, d, ext):
        if "cl_intel_subgroups" in ext:
            try:
                return list(d.get_info(0x4108))  # CL_DEVICE_SUB_GROUP_SIZES_INTEL
            except cl.Error:
                return [8, 16, 32]
        if "cl_nv_device_attribute_query" in ext:
            try:
                return [d.warp_size_nv]
            except (cl.Error, AttributeError):
                return [32]
        if "cl_amd_device_attribute_query" in ext:
            try:
                return [d.wavefront_width_amd]
            except (cl.Error, AttributeError):
                return [64]
        return []

    def as_dict(self):
        """The facts as a plain dict (extensions left out), e.g. for reports."""
        return {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(self).items()
                if k != "extensions"}


# OpenCL's answers to an allocation the device cannot hold; anything else is a bug
_OUT_OF_MEMORY = {cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE, cl.status_code.OUT_OF_RESOURCES,
                  cl.status_code.OUT_OF_HOST_MEMORY, cl.status_code.INVALID_BUFFER_SIZE}


class _TrackingAllocator:
    """Counts the bytes the pool hands out, so users can see use and peak, and turns a
    request the device cannot hold into a DeviceMemoryError naming it."""

    def __init__(self, ctx):
        self._pool = cl.tools.MemoryPool(cl.tools.ImmediateAllocator(ctx.queue))
        self._facts = ctx.facts
        self.bytes_in_use = 0
        self.peak_bytes = 0

    def allocate(self, nbytes, what="a buffer"):
        """A pool buffer of ``nbytes``; ``what`` (a string, or a function that makes it
        only when needed) names it if the device refuses."""
        nbytes = max(int(nbytes), 1)
        facts = self._facts
        # checked before asking, so a request that cannot succeed never reaches the driver
        # (some allocate lazily and would fail only at the buffer's first use)
        if nbytes > facts.max_alloc:
            raise self._error(what, nbytes, "above the largest buffer the device allows")
        if self.bytes_in_use + nbytes > facts.global_mem:
            raise self._error(what, nbytes, "beyond the device's global memory, counting "
                              "what dlprim holds already")
        try:
            buf = self._pool.allocate(nbytes)
        except cl.Error as err:
            if getattr(err, "code", None) not in _OUT_OF_MEMORY:
                raise
            raise self._error(what, nbytes, "refused by the driver (%s)" % err) from None
        except MemoryError as err:
            raise self._error(what, nbytes, "refused: out of memory (%s)" % err) from None
        self.bytes_in_use += nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes_in_use)
        return buf

    def _error(self, what, nbytes, why):
        what = what() if callable(what) else what
        f = self._facts
        return DeviceMemoryError(
            "cannot allocate %s: %s, %s. %s allows at most %s in one buffer and has %s of "
            "global memory, %s of it held by dlprim now. Use a smaller batch or smaller "
            "inputs (activations grow with both), or a smaller model."
            % (what, _size(nbytes), why, f.name, _size(f.max_alloc), _size(f.global_mem),
               _size(self.bytes_in_use)))

    def release(self, nbytes):
        self.bytes_in_use -= max(int(nbytes), 1)

    def free_held(self):
        self._pool.free_held()


def _size(nbytes):
    """``12345678 bytes (11.8 MiB)``: exact for comparing, rounded for reading."""
    value, unit = float(nbytes), "bytes"
    for name in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, name
    return "%d bytes" % nbytes if unit == "bytes" else "%d bytes (%.1f %s)" % (nbytes, value, unit)


class ExecutionContext:
    """DLPrimitives' handle for 'where work is enqueued'; here the context's queue."""

    def __init__(self, ctx):
        self.ctx = ctx

    @property
    def queue(self):
        """The context's queue now (``Context.run`` may move on to the next of its ring)."""
        return self.ctx.queue

    def finish(self):
        """Wait until everything enqueued on the queue has run."""
        self.queue.finish()


# NVIDIA's driver blocks the host once about 340 commands are pending on a queue (the
# 341st enqueue behind a 200 ms kernel waited for it, in-order or out-of-order). A Net's
# pass enqueues more (BERT-base's backward: 900), so the host could run at most ~10 ms of
# work ahead of the device, and the time it then spent on the optimizer's launches left
# the device idle (20.8 of BERT's 66.3 ms step on an H200). Long runs of launches
# therefore go round a ring of QUEUE_RING in-order queues, QUEUE_TURN launches on each:
# a queue hands over with a marker that the next one's first command (a barrier) waits
# for, so the order is the one queue's. H200 probe, 3000 launches behind a 200 ms
# kernel: the first blocking enqueue was the 340th on one queue, the 1107th on a ring of
# 4 and the 2131st on a ring of 8, results unchanged. Other devices keep one queue.
# DLPRIM_QUEUE_RING="SIZE" or "SIZE,TURN" sets both for every device (1: one queue).
QUEUE_RING = {"nvidia": 8}
QUEUE_TURN = 256


def _queue_ring(facts):
    """(queues in the ring, launches a queue takes before the next takes over: never for
    one queue) for a device: DLPRIM_QUEUE_RING where set, else QUEUE_RING's (GPUs) and
    QUEUE_TURN."""
    env = os.environ.get("DLPRIM_QUEUE_RING", "").strip()
    if not env:
        size = QUEUE_RING.get(facts.vendor_id, 1) if facts.is_gpu else 1
        return size, QUEUE_TURN if size > 1 else float("inf")
    try:
        values = [int(v) for v in env.split(",")]
        if len(values) not in (1, 2) or min(values) < 1:
            raise ValueError
    except ValueError:
        raise ValueError("DLPRIM_QUEUE_RING must be SIZE or SIZE,TURN (positive integers: "
                         "queues in the ring, launches on each before the next), got %r"
                         % env) from None
    turn = values[1] if len(values) == 2 else QUEUE_TURN
    return values[0], turn if values[0] > 1 else float("inf")


class Context:
    """An OpenCL device with an in-order queue (on NVIDIA GPUs, the current one of a ring
    that runs as one: ``run``) and a memory pool.

    >>> ctx = Context("cpu")          # or "gpu", "0:1", 2, None
    >>> ctx.name
    """

    def __init__(self, device: Optional[Union[str, int]] = None, profiling: bool = False) -> None:
        self.p_index, self.d_index, self.platform, self.device = _select(device)
        self.cl_context = cl.Context([self.device])
        props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
        self.queue = cl.CommandQueue(self.cl_context, self.device, properties=props)
        self.profiling = profiling
        self.facts = DeviceFacts(self.device)
        # the queue ring (QUEUE_RING): its queues, made as the ring turns onto them, and
        # the launches run on the current one since it took over
        self._ring = [self.queue]
        self._ring_size, self._turn_every = _queue_ring(self.facts)
        self._on_queue = 0
        self.memory = _TrackingAllocator(self)
        self.staging = HostStaging(self)  # large host-to-device copies (dlprim/staging.py)
        self.programs = {}  # filled by dlprim.kernels.program.get
        # ops made for immediate use, by what fixes them (core.pointwise.memo), and the
        # ocl device's recorded launches: the most recently used OPS_KEPT of them
        self.ops = BoundedCache(OPS_KEPT)

    @property
    def name(self):
        """The device and platform names, as one readable string."""
        return "%s on %s" % (self.facts.name, self.platform.name.strip())

    @property
    def device_string(self):
        """The ``"P:D"`` string that selects this device again."""
        return "%d:%d" % (self.p_index, self.d_index)

    @property
    def is_cpu_context(self):
        """True for a CPU device (PoCL, Intel's or AMD's CPU runtimes)."""
        return self.facts.is_cpu

    @property
    def is_opencl_context(self):
        """Always True: DLPrimitives also has a host-only context; every dlprim context is
        an OpenCL device (a CPU one through PoCL or a vendor CPU runtime)."""
        return True

    def finish(self):
        """Wait until everything enqueued on the context's queue has run."""
        self.queue.finish()

    # ----- the queue ring (QUEUE_RING)
    def run(self, launches):
        """Enqueue ``launches`` (callables taking a queue) in order on the context's queue,
        moving on to the next queue of the ring every QUEUE_TURN launches (``_turn_every``). The caller
        holds no queue of its own: after the call ``queue`` may be another one."""
        queue, count, turn = self.queue, self._on_queue, self._turn_every
        for launch in launches:
            if count >= turn:
                queue, count = self._turn(), 0
            launch(queue)
            count += 1
        self._on_queue = count

    def enqueued(self, count):
        """Note ``count`` commands just enqueued on ``queue`` by a caller that holds no
        queue of its own; the ring turns once QUEUE_TURN have run on the current one."""
        self._on_queue += count
        if self._on_queue >= self._turn_every:
            self._turn()
            self._on_queue = 0

    def _turn(self):
        """The next queue of the ring, made current after everything enqueued so far: its
        first command waits for a marker behind the current queue's last."""
        marker = cl.enqueue_marker(self.queue)
        self.queue.flush()  # the commands so far reach the device while the host goes on
        at = (self._ring.index(self.queue) + 1) % self._ring_size
        if at == len(self._ring):
            self._ring.append(cl.CommandQueue(self.cl_context, self.device,
                                              properties=self._ring[0].properties))
        self.queue = self._ring[at]
        cl.enqueue_barrier(self.queue, wait_for=[marker])
        return self.queue

    def make_execution_context(self, properties: int = 0) -> "ExecutionContext":
        """The DLPrimitives-style ``ExecutionContext`` over this context's queue.

        ``properties`` are DLPrimitives' OpenCL queue properties: dlprim has one in-order
        queue per context, so only those that queue has are accepted (profiling needs
        ``Context(..., profiling=True)``)."""
        extra = int(properties or 0) & ~int(self.queue.properties)
        if extra:
            raise ValueError("make_execution_context: queue properties 0x%x are not those of "
                             "this context's one queue (0x%x); profiling comes from "
                             "Context(device, profiling=True)"
                             % (int(properties), int(self.queue.properties)))
        return ExecutionContext(self)

    def __repr__(self):
        return "Context(%r: %s)" % (self.device_string, self.name)
