"""Device choice never lands on a device that cannot compile: the probe, its cache, the
errors and their fixes, and pip's Intel CPU runtime registered without root.

pip's PoCL is made to fail as it does on a CPU its LLVM 14 does not know, by an invalid
option in POCL_EXTRA_BUILD_FLAGS (every build then fails), in child processes with a
cache folder of their own, so the rest of the run keeps its device."""
import json
import os
import re
import subprocess
import sys

import pytest

import dlprim as dp
from dlprim.drivers import pip_driver_libraries, probe_device
from dlprim.drivers.probe import advice

BROKEN_POCL = {"POCL_EXTRA_BUILD_FLAGS": "-mcpu=generic"}


def _pocl_entry():
    for entry in dp.list_devices():
        if "portable computing" in entry[2].name.lower():
            return entry
    pytest.skip("no PoCL platform here")


def _child(code, tmp_path, **env):
    full = dict(os.environ, DLPRIM_CACHE_DIR=str(tmp_path / "cache"), **env)
    full.pop("DLPRIM_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, timeout=300)
    return out.stdout + out.stderr


def test_probe_passes_on_the_test_device(ctx):
    result = probe_device(ctx.device)
    assert result.ok and result.log == ""


def test_probe_answer_is_kept_per_driver_environment(tmp_path):
    p, d, _, _ = _pocl_entry()
    code = ("import json, os, dlprim as dp\n"
            "from dlprim.drivers import probe_device\n"
            "e = [e for e in dp.list_devices() if e[:2] == (%d, %d)][0]\n"
            "print('RESULT', json.dumps(probe_device(e[3])))\n" % (p, d))
    good = _child(code, tmp_path)
    if "RESULT [false" in good and "unknown target CPU" in good:
        pytest.skip("this PoCL cannot build for this CPU at all (its LLVM does not know it)")
    bad = _child(code, tmp_path, **BROKEN_POCL)
    assert "RESULT [true" in good, good
    assert "RESULT [false" in bad and "-mcpu=generic" in bad, bad
    kept = json.load(open(tmp_path / "cache" / "device_probe.json"))
    answers = {v["ok"] for k, v in kept.items() if "Portable Computing Language" in k}
    assert answers == {True, False}, kept  # two keys: with and without the POCL_ variable


def test_named_device_that_cannot_compile_raises_with_the_fix(tmp_path):
    p, d, _, _ = _pocl_entry()
    code = ("import dlprim as dp\n"
            "try:\n    dp.Context('%d:%d')\nexcept dp.DeviceError as e:\n    print('ERR', e)\n"
            % (p, d))
    out = _child(code, tmp_path, **BROKEN_POCL)
    assert "ERR OpenCL device %d:%d" % (p, d) in out, out
    assert "cannot build a kernel" in out and "-mcpu=generic" in out
    assert "Fix:" in out and "POCL_EXTRA_BUILD_FLAGS" in out


@pytest.mark.parametrize("spec", [None, "cpu"])
def test_default_choice_skips_a_device_that_cannot_compile(tmp_path, spec):
    """The default (where there is no GPU: a GPU comes first and the CPUs are never
    probed) and "cpu" skip the broken PoCL for another CPU driver, or say why none is left."""
    _pocl_entry()
    if spec is None and any(e[3].type & dp.context.cl.device_type.GPU for e in dp.list_devices()):
        pytest.skip("a GPU is the default here")
    # PoCL asked first, so that it is probed and has to be skipped
    code = ("import dlprim as dp\n"
            "dp.context.CPU_DRIVER_PREFERENCE = ('pocl',) + dp.context.CPU_DRIVER_PREFERENCE\n"
            "try:\n    print('CHOSEN', dp.Context(%r).facts.vendor_id)\n"
            "except dp.DeviceError as e:\n    print('ERR', e)\n" % spec)
    out = _child(code, tmp_path, **BROKEN_POCL)
    others = [e for e in dp.list_devices() if "portable computing" not in e[2].name.lower()
              and e[3].type & dp.context.cl.device_type.CPU]
    if others:
        assert "CHOSEN" in out and "CHOSEN pocl" not in out, out
        assert "skipping OpenCL device" in out  # logged, with the reason
    else:
        assert "ERR no OpenCL device that compiles" in out and "Fix:" in out, out


def test_devices_cli_shows_which_compile(tmp_path):
    _pocl_entry()
    code = "from dlprim.cli import devices\nraise SystemExit(devices.main([]))\n"
    out = _child(code, tmp_path, **BROKEN_POCL)
    header = next(line for line in out.splitlines() if line.startswith("default"))
    assert header.split()[-1] == "compiles"
    pocl_rows = [line for line in out.splitlines() if "Portable Computing Language" in line
                 and re.match(r"[ *]\s+\d+:\d+\s", line)]
    assert pocl_rows and all(row.split()[-1] == "NO" for row in pocl_rows), out
    assert "cannot build a kernel" in out and "Fix:" in out


@pytest.mark.parametrize("platform,version,message,expect", [
    ("Portable Computing Language", "OpenCL 3.0 PoCL 3.0-rc2 LLVM 14.0.6, SLEEF",
     "error: unknown target CPU 'generic'", "LLVM 14"),
    ("Portable Computing Language", "OpenCL 3.0 PoCL 3.0", "x", "pocl-opencl-icd"),
    ("Intel(R) OpenCL", "OpenCL 3.0", "libimf.so: cannot open shared object file",
     "intel-cmplr-lib-rt"),
    ("NVIDIA CUDA", "OpenCL 3.0 CUDA", "x", "NVIDIA CUDA's OpenCL driver"),
])
def test_advice_names_the_fix_for_each_case(platform, version, message, expect):
    assert expect in advice(platform, version, "dev", message)


def test_pip_intel_runtime_registered_beside_the_loaders_files(tmp_path):
    """The vendors folder dlprim writes holds the files the loader would have read and
    one naming pip's libintelocl.so by absolute path; DLPRIM_PIP_DRIVERS=0 leaves it."""
    if "intel-opencl-rt" not in pip_driver_libraries():
        pytest.skip("Intel's CPU runtime is not installed from pip here")
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "other.icd").write_text("libother-opencl.so\n")
    code = ("import os\nfrom dlprim.drivers import register_pip_drivers\n"
            "register_pip_drivers()\nprint('VENDORS', os.environ['OCL_ICD_VENDORS'])\n")
    out = _child(code, tmp_path, OCL_ICD_VENDORS=str(vendors))
    folder = out.split("VENDORS ")[1].split()[0]
    assert folder != str(vendors) and folder.startswith(str(tmp_path / "cache")), out
    files = {f: open(os.path.join(folder, f)).read().strip() for f in os.listdir(folder)}
    assert files["other.icd"] == "libother-opencl.so"
    intel = files["dlprim-intel-opencl-rt.icd"]
    assert os.path.isabs(intel) and intel.endswith("libintelocl.so") and os.path.isfile(intel)
    off = _child(code, tmp_path, OCL_ICD_VENDORS=str(vendors), DLPRIM_PIP_DRIVERS="0")
    assert "VENDORS %s" % vendors in off, off


def test_a_probe_that_timed_out_is_not_kept(ctx, tmp_path, monkeypatch):
    """A time-out may be a loaded machine: the answer holds for this process only, while
    a build error is kept on disk."""
    from dlprim.drivers import probe
    monkeypatch.setenv("DLPRIM_CACHE_DIR", str(tmp_path))
    for transient in (True, False):
        monkeypatch.setattr(probe, "_memo", {})
        monkeypatch.setattr(probe, "_run_child",
                            lambda device: probe.ProbeResult(False, "x", transient=transient))
        assert not probe.probe_device(ctx.device).ok
        kept = (tmp_path / "device_probe.json").exists()
        assert kept == (not transient)
