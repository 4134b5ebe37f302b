"""Vendor GPU facts over the CPU device: ``--device-facts=amd|intel|nvidia`` (or
``DLPRIM_TEST_FACTS``) makes the session ``ctx`` report a vendor's GPU, so that the tile
and algorithm choices of that vendor's path (``core/tuning.py``, ``core/tuning_launch.py``,
the launchers' ``is_gpu`` branches) are taken while the kernels still run, and are
checked, on the device at hand (PoCL here). Only the session ``ctx`` is emulated: a
context a test makes itself keeps the real facts.

What each mode takes from the vendor (``VENDORS``): ``vendor``, ``vendor_id``, ``name``,
``type`` "GPU" (``is_gpu`` true, ``is_cpu`` false), ``compute_units``, ``local_mem`` and
``subgroup_sizes``; ``max_work_group``, ``max_parameter_size`` and ``max_float_vector``
are the vendor's where they are not above the real device's (no kernel may ask for more
than the device that runs it takes).

- amd: an Instinct MI210 (CDNA2): 104 compute units, wavefronts of 64, 64 KiB of local
  memory; the 'gpu' GEMM table, with NVIDIA.
- intel: an Arc A770 / Data Center GPU: 512 compute units (Xe vector engines), subgroups
  of 8, 16 and 32, 64 KiB of local memory; the 'intel' GEMM table.
- nvidia: an H100 / H200 as its OpenCL driver reports it: 132 compute units, warps of
  32, 48 KiB of local memory (what a work-group may have without opting in).

What stays the real device's: ``extensions`` and what follows from them (``fp16``,
``fp64``, ``float_atomics``, ``int64_atomics``: no kernel calls ``cl_intel_subgroups``
functions, float atomics or half arithmetic the device lacks), ``global_mem``,
``max_alloc``, ``host_unified_memory`` (host staging is decided when the context is made),
the driver and platform strings and OpenCL C version. The probes stay real too: the
tensor-core kernels (NVIDIA's mma.sync, cp.async, wgmma in inline PTX) are gated by a
self-test that builds them on the device, which a CPU compiler refuses, so NVIDIA mode
runs the float32 tiles exactly as an NVIDIA GPU without tensor cores would; Intel's
subgroup matrix products need ``cl_intel_subgroup_matrix_multiply_accumulate`` among
the real extensions, so they stay off.
"""
import argparse
import copy
import os

OPTION = "--device-facts"
ENV = "DLPRIM_TEST_FACTS"

VENDORS = {
    "amd": dict(vendor="Advanced Micro Devices, Inc.", vendor_id="amd",
                name="AMD Instinct MI210 (gfx90a)", compute_units=104, local_mem=64 << 10,
                subgroup_sizes=[64], max_work_group=1024, max_parameter_size=1024,
                max_float_vector=16),
    "intel": dict(vendor="Intel(R) Corporation", vendor_id="intel",
                  name="Intel(R) Arc(TM) A770 Graphics", compute_units=512,
                  local_mem=64 << 10, subgroup_sizes=[8, 16, 32], max_work_group=1024,
                  max_parameter_size=2048, max_float_vector=16),
    "nvidia": dict(vendor="NVIDIA Corporation", vendor_id="nvidia", name="NVIDIA H200",
                   compute_units=132, local_mem=48 << 10, subgroup_sizes=[32],
                   max_work_group=1024, max_parameter_size=4352, max_float_vector=16),
}
# facts a kernel's launch or build must not exceed on the device that runs it
_AT_MOST_REAL = ("local_mem", "max_work_group", "max_parameter_size", "max_float_vector")


def emulated(facts, mode):
    """A copy of ``facts`` that reports ``mode``'s GPU (``VENDORS``) where the kernels can
    still run on the real device; ``emulates`` names the mode."""
    if mode not in VENDORS:
        raise ValueError("%s: unknown vendor %r; known: %s" % (OPTION, mode, ", ".join(VENDORS)))
    out = copy.copy(facts)
    out.extensions = set(facts.extensions)
    for key, value in VENDORS[mode].items():
        if key in _AT_MOST_REAL:
            value = min(value, getattr(facts, key))
        setattr(out, key, list(value) if isinstance(value, list) else value)
    out.name = "%s (emulated on %s)" % (out.name, facts.name)
    out.type, out.is_gpu, out.is_cpu = "GPU", True, False
    out.emulates = mode
    return out


def _vendor(value):
    if value not in VENDORS:
        raise argparse.ArgumentTypeError("unknown vendor %r; known: %s"
                                         % (value, ", ".join(sorted(VENDORS))))
    return value


def add_option(parser):
    # argparse applies ``type`` to a string default too: a bad DLPRIM_TEST_FACTS stops the
    # run at once, as a bad option does
    parser.addoption(OPTION, type=_vendor, default=os.environ.get(ENV) or None,
                     metavar="{%s}" % ",".join(sorted(VENDORS)),
                     help="run on the CPU device with an AMD, Intel or NVIDIA GPU's device "
                          "facts driving the tile and algorithm choices (also %s)" % ENV)


def mode(config):
    """The vendor mode asked for, or None."""
    return config.getoption(OPTION)


def apply(ctx, config):
    """``ctx`` with its facts replaced by the emulated ones where a mode is asked for."""
    vendor = mode(config)
    if vendor:
        ctx.facts = emulated(ctx.facts, vendor)
    return ctx


def header(config):
    vendor = mode(config)
    return "device facts: %s GPU (emulated)" % vendor if vendor else None
