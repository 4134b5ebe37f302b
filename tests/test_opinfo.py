"""PyTorch's operator database (``op_db``) on ``ocl`` as a test: tests/opinfo_sweep.py run
in this process (one driver context, every kernel built once for all entries), one test
per dtype. Each asserts

- no ``wrong`` verdict at all (a result that differs from the CPU's silently: listed in the
  failure message), and
- a floor on the share of the entries that run (CPU samples exist) which pass; the floors
  sit just below what the sweep measures and only ever go up.

By default a quick tier runs: every QUICK_STRIDE-th entry (sorted by name, so the same
entries each time) with one sample each, which fits a CI budget. ``DLPRIM_OPINFO_FULL=1``
runs every entry with two samples (tests/opinfo_sweep.py's default; see docs/pytorch.md
for its numbers and time). float32 checks gradients too (a ``grad`` verdict does not
count as a pass). ``DLPRIM_OPINFO_JSON=<folder>`` keeps each dtype's verdicts there.
"""
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # op_db's module imports it
pytest.importorskip("dlprim.torch")

sys.path.insert(0, os.path.dirname(__file__))
import opinfo_sweep  # noqa: E402

FULL = os.environ.get("DLPRIM_OPINFO_FULL", "") not in ("", "0")
QUICK_STRIDE = 6
ENTRY_TIMEOUT = 60  # seconds: a hung entry is an error, the sweep goes on

# pass / ran (entries with CPU samples), per dtype: (quick tier, full sweep); measured on
# Intel's OpenCL CPU runtime (docs/pytorch.md has the counts)
FLOORS = {
    "float32": (0.86, 0.88),
    "float16": (0.94, 0.95),
    "int64": (0.91, 0.92),
    "bool": (0.91, 0.90),
    "int32": (0.91, 0.92),
    "uint8": (0.91, 0.91),
    "bfloat16": (0.95, 0.93),
    "float64": (0.80, 0.80),
}


@pytest.fixture(scope="module")
def chosen():
    ops = sorted(opinfo_sweep.entries(), key=opinfo_sweep.entry_key)
    return ops if FULL else ops[::QUICK_STRIDE]


def _on_ocl(dtype):
    from dlprim.torch.tensor import numpy_dtype
    try:
        numpy_dtype(dtype)
        return True
    except TypeError:
        return False


@pytest.mark.parametrize("dtype_name", list(FLOORS))
def test_opinfo_entries_match_the_cpu(dtype_name, chosen):
    if not _on_ocl(opinfo_sweep.DTYPES[dtype_name]):
        pytest.skip("%s is not stored on ocl devices yet" % dtype_name)
    results = opinfo_sweep.sweep(dtype_name, ops=chosen, samples=2 if FULL else 1,
                                 progress=False, timeout=ENTRY_TIMEOUT)
    counts, ran = opinfo_sweep.summary(results)
    if os.environ.get("DLPRIM_OPINFO_JSON"):  # a folder: the verdicts, to raise floors by
        with open(os.path.join(os.environ["DLPRIM_OPINFO_JSON"],
                               "%s-%s.json" % ("full" if FULL else "quick", dtype_name)),
                  "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    wrong = sorted("%s: %s" % (k, r["detail"]) for k, r in results.items()
                   if r["verdict"] == "wrong")
    assert not wrong, "%d entries give wrong results on ocl (%s):\n%s" % (
        len(wrong), dtype_name, "\n".join(wrong))
    rate = counts.get("pass", 0) / max(ran, 1)
    floor = FLOORS[dtype_name][1 if FULL else 0]
    assert rate >= floor, "%s: %d of %d entries pass (%.1f%%), the floor is %.1f%%; %s" % (
        dtype_name, counts.get("pass", 0), ran, 100 * rate, 100 * floor,
        ", ".join("%s %d" % kv for kv in sorted(counts.items())))
