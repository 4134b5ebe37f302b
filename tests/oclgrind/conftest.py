"""Kernels under oclgrind (``make oclgrind``, ``tools/oclgrind-check.sh``).

Collected only when ``DLPRIM_OCLGRIND=1``: the simulator is slow, and ``make test`` runs
on the usual device. The ``ctx`` here is oclgrind's device (asserted, so that the checks
cannot pass with the simulator absent), its buffers allocated at their exact size (the
memory pool rounds sizes up, which would hide a read or write just past a tensor), and
every test fails when oclgrind reported anything while it ran (its log and the API
checker's messages on stderr).
"""
import os
import re

import pyopencl as cl
import pytest

import dlprim as dp

PLATFORM = "Oclgrind"
if os.environ.get("DLPRIM_OCLGRIND") == "1":
    # oclgrind writes its reports here (OCLGRIND_LOG); the script sets it, else this default
    LOG = os.environ.setdefault("OCLGRIND_LOG", os.path.abspath("oclgrind.log"))
    os.environ.setdefault("OCLGRIND_MAX_ERRORS", "1000000")  # never go quiet part-way
else:
    collect_ignore_glob = ["*"]

# pyopencl's own C++ layer asks each device for properties a 1.2 device may not know and
# takes the CL_INVALID_VALUE in stride; with OCLGRIND_CHECK_API each one is reported
_BENIGN = re.compile(r"Oclgrind - OpenCL runtime error detected\n\tFunction: clGetDeviceInfo\n"
                     r"\tError: +CL_INVALID_VALUE\n\tFor argument 'param_name'\n")


def oclgrind_device():
    """The ``"P:D"`` of oclgrind's device: DLPRIM_TEST_DEVICE, else oclgrind's platform."""
    spec = os.environ.get("DLPRIM_TEST_DEVICE")
    if spec:
        return spec
    for p, platform in enumerate(cl.get_platforms()):
        if platform.name.strip() == PLATFORM:
            return "%d:0" % p
    pytest.fail("no OpenCL platform named %r: list liboclgrind-rt-icd.so in an .icd file of "
                "the folder OCL_ICD_VENDORS names (tools/oclgrind-check.sh does)" % PLATFORM)


class _ExactBuffers:
    """Stands for the context's memory pool: a buffer of exactly the bytes asked for, so
    that oclgrind sees the end of every tensor."""

    def __init__(self, ctx):
        self.cl_context = ctx.cl_context

    def allocate(self, nbytes):
        return cl.Buffer(self.cl_context, cl.mem_flags.READ_WRITE, nbytes)


@pytest.fixture(scope="session")
def ctx():
    ctx = dp.Context(oclgrind_device())
    assert ctx.platform.name.strip() == PLATFORM, \
        "the device under test is %s, not oclgrind's" % ctx.name
    ctx.memory._pool = _ExactBuffers(ctx)
    return ctx


def _log_text():
    try:
        with open(LOG, "rb") as f:
            return f.read().replace(b"\0", b"").decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


@pytest.fixture(params=["cpu", "gpu"])
def facts(request, ctx, monkeypatch):
    """oclgrind's device says it is both a CPU and a GPU; each test runs as one and as the
    other, so that both devices' kernel choices (tiles, work-item mappings) are checked."""
    monkeypatch.setattr(ctx.facts, "is_cpu", request.param == "cpu")
    monkeypatch.setattr(ctx.facts, "is_gpu", request.param == "gpu")
    return request.param


def _without_cross_group_races(log, kernels):
    """``log`` without oclgrind's data-race reports in ``kernels`` whose two work items are
    in different work-groups: a kernel whose last work-group reads what the others wrote
    (after a device-wide fence and a count, where it runs) orders them outside OpenCL
    1.2's memory model, which oclgrind reports; races within a work-group still fail."""
    kept = []
    for report in re.split(r"\n(?=\S)", log):
        groups = re.findall(r"entity: +Global\([^)]*\) Local\([^)]*\) (Group\([^)]*\))", report)
        kernel = re.search(r"\tKernel: (\w+)", report)
        if "data race" in report and kernel and kernel.group(1) in kernels and \
                len(groups) == 2 and groups[0] != groups[1]:
            continue
        kept.append(report)
    return "\n".join(kept)


@pytest.fixture(autouse=True)
def no_oclgrind_reports(ctx, capfd, request):
    """Fails the test when oclgrind reported anything while it ran: kernels' reports go
    to its log, the API checker's to stderr. A test marked ``cross_group_reads(kernel,
    ...)`` lets those kernels' races between work-groups pass (``_without_cross_group_races``)."""
    ctx.finish()
    before = _log_text()
    yield
    ctx.finish()
    after = _log_text()
    log = after[len(before):] if after.startswith(before) else after
    log = _BENIGN.sub("", log).strip()  # everything in the log is oclgrind's
    marker = request.node.get_closest_marker("cross_group_reads")
    if marker is not None:
        log = _without_cross_group_races(log, marker.args).strip()
    err = _BENIGN.sub("", capfd.readouterr().err).strip()
    if "Oclgrind" not in err and "Kernel:" not in err:
        err = ""  # stderr carries Python's warnings too
    assert not (log or err), "oclgrind reported:\n" + (log + "\n" + err).strip()[:20000]
