"""DLPrimitives' own operator test cases (its tests/test_case_*.json, generated here from
PyTorch by tests/dlprim_cases) against dlprim's layers, by test_from_template's rules.

``DLPRIM_CASES`` picks how much runs (tests/README.md): unset, every test of every file
with at most QUICK_CASES cases each, tensors up to QUICK_LIMIT elements (the suite's
run); a number, every case whose tensors stay within that many elements; ``full``,
DLPrimitives' sizes.
"""
import json
import os

import pytest

from dlprim.core.tuning import WINOGRAD_MIN_CHANNELS
from dlprim.layers import LayerError

from dlprim_cases.case_builder import Sizes
from dlprim_cases.generate import FILES, write
from dlprim_cases.runner import Mismatch, run_test

QUICK_LIMIT = 2048
QUICK_CASES = 3
# F(4x4,3x3) Winograd, kept on 64+ channels for its speed, exceeds DLPrimitives' eps by
# 2-5x there (core/tuning.py, winograd_tile); more than this is an error of another kind
F4_MAX_RATIO = 8.0


def profile():
    """The Sizes that DLPRIM_CASES asks for."""
    value = os.environ.get("DLPRIM_CASES", "")
    if not value:
        return Sizes(QUICK_LIMIT, QUICK_CASES)
    if value == "full":
        return Sizes()
    if value.isdigit():
        return Sizes(int(value))
    raise ValueError("DLPRIM_CASES must be unset, a number of elements or 'full', got %r"
                     % value)


def winograd_f4(layer, case, err):
    """The reason a mismatch is known, or None: a pass of a convolution that ran
    F(4x4,3x3) Winograd (its output, dx or dw: not the bias), off by at most F4_MAX_RATIO
    eps."""
    if err.ratio is None or err.ratio > F4_MAX_RATIO or err.tensors != (0,) or \
            not hasattr(layer, "_forward_op"):
        return None
    passes = {"forward output": layer._forward_op,
              "input gradient": lambda: layer._backward_ops()[0],
              "parameter gradient": lambda: layer._backward_ops()[1]}
    if err.what not in passes:
        return None
    impl = passes[err.what]().impl
    tiles = getattr(getattr(impl, "plan", impl), "t", None)  # Winograd's tiles
    if tiles is None or tiles.m != 4:
        return None
    return "Winograd F(4x4) %s at %.2f eps" % (err.what, err.ratio)


def winograd_can_serve(options):
    """Whether a convolution test's layer is one Winograd serves (3x3, stride 1,
    undilated, ungrouped)."""
    return all(options.get(key, 1) in (value, [value, value]) for key, value in
               (("kernel", 3), ("stride", 1), ("dilate", 1), ("groups", 1)))


@pytest.fixture(scope="module")
def case_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dlprim_cases")


@pytest.mark.parametrize("name", sorted(FILES))
def test_case_file(ctx, case_dir, name):
    run_file(ctx, case_dir, name)


@pytest.mark.parametrize("name", ["conv2d", "tr_conv2d"])
def test_gpu_choice(ctx, case_dir, monkeypatch, name):
    """The convolutions a GPU runs on Winograd (3x3 stride 1, 64+ channels), with the
    algorithms, tiles and kernels this device would get as a GPU; CPUs take Winograd only
    from 28x28 on. (GPU kernels take PoCL minutes to build, so only these.)"""
    monkeypatch.setattr(ctx.facts, "is_gpu", True)
    monkeypatch.setattr(ctx.facts, "is_cpu", False)
    run_file(ctx, case_dir, name, lambda test: winograd_can_serve(test["options"]) and max(
        test["options"].get("channels_in", 0),
        test["options"].get("channels_out", 0)) >= WINOGRAD_MIN_CHANNELS)


def run_file(ctx, case_dir, name, select=None):
    """Every test of file ``name`` (those ``select`` keeps); fails listing the tests that
    failed, xfails listing the known deviations."""
    path = os.path.join(str(case_dir), "test_case_%s.json" % name)
    if not os.path.exists(path):
        write(name, str(case_dir), profile())
    with open(path) as f:
        report = json.load(f)
    failures, known = [], []
    for i, test in enumerate(report["tests"]):
        if select is not None and not select(test):
            continue
        try:
            _, deviations = run_test(ctx, report["operator"], test, seed=i, known=winograd_f4)
        except (Mismatch, LayerError) as err:
            failures.append("test %d %s: %s" % (i, test["options"], err))
            continue
        known += ["test %d case %s: %s" % (i, test["cases"][c]["in_shapes"], reason)
                  for c, reason in deviations]
    assert not failures, "%s: %d of %d tests failed:\n%s" % (
        name, len(failures), len(report["tests"]), "\n".join(failures))
    if known:
        pytest.xfail("known deviations:\n" + "\n".join(known))
