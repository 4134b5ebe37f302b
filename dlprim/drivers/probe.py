"""Can a device build and run a kernel? Asked once per device and driver, kept on disk.

A driver can list a device that cannot compile anything: pip's PoCL on a CPU newer than
its LLVM ("unknown target CPU 'generic'"), a broken install, a wrong environment. The
probe builds and runs one small kernel (local memory, a barrier, a math builtin) in a
child process, so that a driver which aborts while compiling cannot take the caller with
it, and keeps the answer in ``<cache>/device_probe.json`` under the platform, device,
driver version and the driver's environment variables. ``Context`` and
``dlprim-devices`` read it; ``advice`` turns a failure into the fix for that case.

Run as ``python -m dlprim.drivers.probe PLATFORM DEVICE DRIVER ORDINAL``.
"""
import json
import logging
import os
import subprocess
import sys
from typing import NamedTuple

from ..utils import atomic_write, cache_dir

__all__ = ["ProbeResult", "probe_device", "advice", "PROBE_TIMEOUT_S"]

log = logging.getLogger(__name__)

PROBE_VERSION = 1  # bump when the probe kernel changes: older answers are asked again
PROBE_TIMEOUT_S = 300  # a first PoCL build loads LLVM; a driver that hangs longer is broken
# environment variables that change what a driver compiles, part of an answer's key
_DRIVER_ENV_PREFIXES = ("POCL_", "CL_CONFIG_")

_SOURCE = r"""
__kernel void dlprim_probe(__global float *y, __global const float *x, __local float *tmp)
{
    int i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);
    tmp[l] = x[i] * 2.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    y[i] = tmp[n - 1 - l] + exp(0.0f);
}
"""
_N, _LOCAL = 64, 16


class ProbeResult(NamedTuple):
    ok: bool
    log: str  # the compiler's or runtime's message when not ok
    transient: bool = False  # a time-out, maybe a loaded machine: not kept on disk


def _identity(device):
    p = device.platform
    return [p.name.strip(), device.name.strip(), device.driver_version.strip()]


def _key(device):
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_DRIVER_ENV_PREFIXES))
    return " | ".join(_identity(device) + [device.platform.version.strip(),
                                           "probe %d" % PROBE_VERSION, json.dumps(env)])


def _cache_path():
    return os.path.join(cache_dir(), "device_probe.json")


def _read_cache():
    try:
        with open(_cache_path()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(key, result):
    data = _read_cache()
    data[key] = {"ok": result.ok, "log": result.log}
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        atomic_write(_cache_path(), lambda f: f.write(json.dumps(data, indent=1).encode()))
    except OSError as err:  # a read-only cache only costs a probe per process
        log.debug("cannot keep the device probe's answer: %s", err)


_memo = {}


def probe_device(device):
    """ProbeResult for a ``pyopencl.Device``: from this process's memo, the disk cache,
    or a child process that builds and runs the probe kernel."""
    key = _key(device)
    if key in _memo:
        return _memo[key]
    stored = _read_cache().get(key)
    if isinstance(stored, dict) and "ok" in stored:
        result = ProbeResult(bool(stored["ok"]), str(stored.get("log", "")))
    else:
        result = _run_child(device)
        if not result.transient:
            _store(key, result)
    _memo[key] = result
    return result


def _ordinal(device):
    """Which of the devices with this device's identity it is (identical GPUs)."""
    import pyopencl as cl
    same = [d for p in cl.get_platforms() for d in p.get_devices()
            if _identity(d) == _identity(device)]
    return next((i for i, d in enumerate(same) if d == device), 0)


def _run_child(device):
    args = [sys.executable, "-m", "dlprim.drivers.probe"] + _identity(device) + [
        str(_ordinal(device))]
    try:
        # pyopencl's binary cache off: a program built earlier says nothing of the compiler now
        out = subprocess.run(args, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, env=dict(os.environ, PYOPENCL_NO_CACHE="1"))
    except subprocess.TimeoutExpired:
        return ProbeResult(False, "building a one-line kernel did not finish in %d s"
                           % PROBE_TIMEOUT_S, transient=True)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
                return ProbeResult(bool(answer["ok"]), str(answer.get("log", "")))
            except (ValueError, KeyError):
                break
    how = ("killed by signal %d" % -out.returncode if out.returncode < 0
           else "exited with status %d" % out.returncode)
    return ProbeResult(False, "the driver's process %s while building a one-line kernel: %s"
                       % (how, (out.stderr or out.stdout).strip()[-2000:]))


def _probe_here(device):
    """Build and run the probe kernel in this process: ProbeResult."""
    import numpy as np
    import pyopencl as cl
    try:
        context = cl.Context([device])
        queue = cl.CommandQueue(context)
        program = cl.Program(context, _SOURCE).build()
        x = np.arange(_N, dtype=np.float32)
        mf = cl.mem_flags
        xb = cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
        yb = cl.Buffer(context, mf.WRITE_ONLY, x.nbytes)
        program.dlprim_probe(queue, (_N,), (_LOCAL,), yb, xb, cl.LocalMemory(4 * _LOCAL))
        y = np.empty_like(x)
        cl.enqueue_copy(queue, y, yb)
        queue.finish()
    except cl.Error as err:
        return ProbeResult(False, _compiler_message(err))
    mirrored = (x.reshape(-1, _LOCAL)[:, ::-1].reshape(-1)) * 2 + 1
    if not np.array_equal(y, mirrored):
        bad = int(np.sum(y != mirrored))
        return ProbeResult(False, "the probe kernel built but computed %d of %d values wrong"
                           % (bad, _N))
    return ProbeResult(True, "")


def _compiler_message(err):
    """The build log's lines without pyopencl's framing (device repr, build options)."""
    text = str(err)
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.startswith(("Build on <", "(options:"))]
    return "\n".join(lines[1:] if len(lines) > 1 else lines)[:2000]


def advice(platform, platform_version, device, message):
    """The concrete fix for a device whose probe failed, in a sentence or two."""
    from .pip_icd import pip_driver_libraries
    env = sorted(k for k in os.environ if k.startswith(_DRIVER_ENV_PREFIXES))
    intel_from_pip = "intel-opencl-rt" in pip_driver_libraries()
    registering = os.environ.get("DLPRIM_PIP_DRIVERS", "1").strip() != "0"
    other_cpu = ("Intel's CPU runtime from pip is installed and dlprim registers it: choose "
                 "it with Context('cpu') or its 'P:D' (`dlprim-devices` lists it)"
                 if intel_from_pip and registering else
                 "Intel's CPU runtime from pip is installed but DLPRIM_PIP_DRIVERS=0 keeps "
                 "dlprim from registering it: unset DLPRIM_PIP_DRIVERS"
                 if intel_from_pip else
                 "Install Intel's CPU runtime from pip, which dlprim registers itself: `pip "
                 "install \"dlprim[cpu]\"` (or `pip install intel-opencl-rt "
                 "intel-cmplr-lib-rt`)")
    if "portable computing" in platform.lower():
        text = ""
        if env:
            text = ("PoCL reads %s from the environment: unset %s if not meant for it. "
                    % (", ".join(env), "it" if len(env) == 1 else "them"))
        if "unknown target CPU" in message:
            llvm = platform_version.split("LLVM")[-1].split()[0] if "LLVM" in platform_version else "?"
            text += "This PoCL (LLVM %s) does not know this CPU. " % llvm.rstrip(",")
        return text + other_cpu + ("; or, with root, a newer PoCL: `apt install "
                                   "pocl-opencl-icd`.")
    if "intel" in platform.lower() and ("libimf" in message or "libsvml" in message):
        return "Intel's CPU runtime lacks its compiler libraries: pip install intel-cmplr-lib-rt."
    return ("Update or reinstall %s's OpenCL driver, or choose another device with "
            "Context('P:D') or DLPRIM_DEVICE (`dlprim-devices` shows which compile)."
            % platform)


def _main(argv):
    import pyopencl as cl
    platform, name, driver, ordinal = argv[0], argv[1], argv[2], int(argv[3])
    same = [d for p in cl.get_platforms() for d in p.get_devices()
            if _identity(d) == [platform, name, driver]]
    if len(same) <= ordinal:
        result = ProbeResult(False, "the device is not listed in a new process")
    else:
        result = _probe_here(same[ordinal])
    print(json.dumps({"ok": result.ok, "log": result.log}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
