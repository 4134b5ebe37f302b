"""The activation table (dlprim.core.activation) holds together: every entry's code uses
only its own names, and the GEMM/convolution epilogue macros compute what the pointwise
forward computes. Its ONNX spellings: test_onnx_spelling.py."""
import os
import re

import numpy as np
import pyopencl as cl
import pytest
from mako.lookup import TemplateLookup
from mako.template import Template

from dlprim.core.activation import (ACTIVATIONS, ALIASES, FUSABLE, PARAMS, Y_ACTIVATIONS,
                                    OnnxNode, canonical, epilogue_macros, forward_code)
from dlprim.core.pointwise import PointwiseBroadcast
from dlprim.kernels import program
from dlprim.layers import create, run
from layer_check import place

# the OpenCL built-ins the fragments may call
BUILTINS = {"max", "min", "fmax", "fmin", "exp", "tanh", "erf", "log1p", "pow"}
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def names(expr):
    return set(_NAME.findall(expr)) - BUILTINS


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_entry_code_reads_only_its_own_names(name):
    act = ACTIVATIONS[name]
    params = set(act.params)
    assert "x" in names(act.forward) and names(act.forward) <= {"x"} | params
    var = "y" if act.from_y else "x"
    assert "dy" in names(act.backward) and names(act.backward) <= {var, "dy"} | params
    assert params <= names(act.forward), "a parameter the forward never reads"
    assert set(act.params.items()) <= set(PARAMS.items())
    if act.fusable:
        # the fused layers compute dy * act'(y) from their output
        assert act.from_y and names(act.epilogue) <= {"x"}


def test_derived_lists():
    assert FUSABLE == ("identity", "relu", "relu6", "sigmoid", "tanh")
    assert set(FUSABLE) <= set(Y_ACTIVATIONS)
    for alias, target in ALIASES.items():
        assert ACTIVATIONS[alias] is ACTIVATIONS[target]
    layer = create(None, "Activation", "a", {"activation": "elu"})
    assert layer.OPTIONS == dict({"activation": "identity"}, **PARAMS)
    assert "#define ACT_relu(x) ((x) <= 0.0f ? 0.0f : (x))" in epilogue_macros().splitlines()


# negatives, zeros of both signs, kinks, saturating and overflowing values, and NaN
# (which both forms must pass through)
VALUES = np.array([-np.inf, -1e30, -100, -20, -6.5, -6, -3, -1, -1e-3, -1e-30, -0.0, 0.0,
                   1e-30, 1e-3, 0.5, 1, 3, 5.99, 6, 6.5, 20, 88, 100, 1e30, np.inf, 7.25],
                  np.float32)
# a multiple of 4 for the float4 form
VALUES = np.concatenate([VALUES, -VALUES[:2], [np.nan] * 4]).astype(np.float32)

_KERNEL = """<%include file="common.h"/>
__kernel void apply(__global const float *x, ulong x_offset, __global float *y, ulong y_offset,
                    __global float *y4, ulong y4_offset)
{
    int i = get_global_id(0);
    x += x_offset;
    y += y_offset;
    y4 += y4_offset;
    y[i] = ACT_${NAME}(x[i]);
    if (i % 4 == 0)  // the GEMM epilogue applies it to float4 too
        vstore4(ACT_${NAME}(vload4(i / 4, x)), i / 4, y4);
}
"""


@pytest.mark.parametrize("name", FUSABLE)
def test_epilogue_macro_matches_pointwise_forward(ctx, name):
    n = VALUES.size
    source = Template(_KERNEL, lookup=TemplateLookup([program.KERNEL_DIR])).render(NAME=name)
    prog = cl.Program(ctx.cl_context, source).build()
    x, y, y4 = place(ctx, VALUES), place(ctx, np.zeros(n, np.float32)), place(ctx, np.zeros(n, np.float32))
    run([program.Launch(prog, "apply", (n,), None, [x, y, y4])], ctx.queue)
    op = PointwiseBroadcast(ctx, [((n,), np.float32)], [((n,), np.float32)],
                            forward_code(name, "x0", "y0") or "y0 = x0;", name="fwd_" + name)
    want = place(ctx, np.zeros(n, np.float32))
    run(op.launches([x], [want]), ctx.queue)
    want = want.numpy()
    np.testing.assert_array_equal(np.isnan(want), np.isnan(VALUES), err_msg=name)
    np.testing.assert_array_equal(y.numpy(), want, err_msg=name + " scalar")
    np.testing.assert_allclose(y4.numpy(), want, rtol=3e-7, atol=0, err_msg=name + " float4")


def test_operators_page_shows_the_table():
    """docs/operators.md's Activation table says what the table says."""
    page = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "operators.md")
    rows = {}
    for line in open(page).read().split("\n## Activation", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            rows[cells[0].split("`")[1]] = cells
    for name, act in canonical():
        assert name in rows, "%s: no row" % name
        _, _, grad, fused, spelled = rows[name]
        assert grad == ("y" if act.from_y else "x"), name
        assert fused == ("yes" if act.fusable else "no"), name
        ops = {t.op for sp in act.onnx for t in _nodes(sp.tree)}
        assert all(op in spelled for op in ops), (name, ops, spelled)


def _nodes(tree):
    yield tree
    for t in tree.inputs:
        if isinstance(t, OnnxNode):
            yield from _nodes(t)
