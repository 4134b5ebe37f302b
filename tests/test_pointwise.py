import itertools
import math

import numpy as np
import pytest

import dlprim as dp
from dlprim.core.pointwise import (PointwiseBroadcast, PointwiseBroadcastReduce, pointwise,
                                   pointwise_reduce)


def placed(ctx, array, offset=5, poison=np.nan):
    """A tensor holding ``array`` at a non-zero offset inside a poisoned buffer."""
    array = np.asarray(array)
    fill = poison if array.dtype.kind == "f" else 77
    whole = np.full(array.size + offset + 3, fill, array.dtype)
    whole[offset:offset + array.size] = array.ravel()
    return dp.Tensor.from_numpy(ctx, whole).view(array.shape, offset=offset)


def empty(ctx, shape, dtype=np.float32, offset=3):
    return placed(ctx, np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 99, dtype), offset)


BROADCASTS = [
    ((1,), (33,)),                         # scalar-like
    ((31, 1), (31, 65)),                   # column
    ((1, 65), (31, 65)),                   # row
    ((65,), (31, 65)),                     # lower rank
    ((1, 3, 1, 1), (2, 3, 5, 7)),          # per-channel vs NCHW
    ((2, 1, 5, 7), (2, 3, 5, 7)),
    ((32, 1, 1), (2, 32, 4, 1)),
    ((129,), (129,)),                      # same shape
    ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS + [(b, a) for a, b in BROADCASTS[:5]])
def test_broadcast_add_mul(ctx, rng, a_shape, b_shape):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out = np.broadcast_shapes(a_shape, b_shape)
    y0, y1 = empty(ctx, out), empty(ctx, out)
    pointwise(ctx, [placed(ctx, a), placed(ctx, b)], [y0, y1],
              "float t = x0 * w0; y0 = t + x1; y1 = x0 * x1 - w1;", [1.5, 0.25])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(y0.numpy(), a64 * 1.5 + b64, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y1.numpy(), a64 * b64 - 0.25, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 63, 64, 65, 127, 129, 1000])
def test_edges_and_build_reuse(ctx, rng, n):
    from dlprim.kernels import program
    a = rng.standard_normal((n, 3)).astype(np.float32)
    b = rng.standard_normal((1, 3)).astype(np.float32)
    builds = program.stats["builds"]
    op = PointwiseBroadcast(ctx, [((n, 3), "float"), ((1, 3), "float")], [((n, 3), "float")],
                            "y0 = max(x0, x1);")
    y = empty(ctx, (n, 3))
    op([placed(ctx, a), placed(ctx, b)], [y])
    np.testing.assert_array_equal(y.numpy(), np.maximum(a, b))
    if n > 31:  # a new batch size reuses the program built for n=31 (n=1 collapses to 1-D)
        assert program.stats["builds"] == builds


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_int_dtypes(ctx, rng, dtype):
    a = rng.integers(0, 100, (33, 7)).astype(dtype)
    b = rng.integers(1, 9, (7,)).astype(dtype)
    y = empty(ctx, (33, 7), dtype)
    pointwise(ctx, [placed(ctx, a), placed(ctx, b)], [y], "y0 = x0 / x1 + x0 % x1;")
    np.testing.assert_array_equal(y.numpy(), (a // b + a % b).astype(dtype))


def test_int_params_and_mixed_types(ctx, rng):
    a = rng.standard_normal((65,)).astype(np.float32)
    y = empty(ctx, (65,), np.int32)
    pointwise(ctx, [placed(ctx, a)], [y], "y0 = (x0 > 0) ? w0 : -1;", [np.int32(7)])
    np.testing.assert_array_equal(y.numpy(), np.where(a > 0, 7, -1))


def test_half_storage(ctx, rng):
    a = rng.standard_normal((5, 33)).astype(np.float16)
    b = rng.standard_normal((33,)).astype(np.float32)
    y = empty(ctx, (5, 33), np.float16)
    pointwise(ctx, [placed(ctx, a), placed(ctx, b)], [y], "y0 = x0 * 3.0f + x1;")
    ref = (a.astype(np.float64) * 3 + b).astype(np.float16)  # computed in float, rounded once
    np.testing.assert_array_equal(y.numpy(), ref)



@pytest.mark.parametrize("n", [1, 33, 1000])
def test_beta_zero_never_reads_y_and_one_accumulates(ctx, rng, n):
    from dlprim.kernels import program
    a = rng.standard_normal((n, 3)).astype(np.float32)
    b = rng.standard_normal((1, 3)).astype(np.float32)
    old = rng.standard_normal((n, 3)).astype(np.float32)
    op = PointwiseBroadcast(ctx, [((n, 3), "float"), ((1, 3), "float")], [((n, 3), "float")],
                            "y0 = x0 * w0 + x1;", ["float"])
    xs = [placed(ctx, a), placed(ctx, b)]
    ref = a.astype(np.float64) * 2.0 + b
    builds = program.stats["builds"]
    y = empty(ctx, (n, 3))  # NaN: any read of the old y would show
    op(xs, [y], [2.0], beta=0.0)
    assert np.all(np.isfinite(y.numpy()))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6, atol=1e-6)
    for beta in (1.0, 0.5):
        y = placed(ctx, old)
        op(xs, [y], [2.0], beta=beta)
        np.testing.assert_allclose(y.numpy(), ref + beta * old, rtol=1e-6, atol=1e-6)
    assert program.stats["builds"] == builds  # beta is an argument, not a new program


def test_beta_per_output_and_outputs_sharing_memory(ctx, rng):
    a = rng.standard_normal((65,)).astype(np.float32)
    old = rng.standard_normal((65,)).astype(np.float32)
    op = PointwiseBroadcast(ctx, [((65,), "float")], [((65,), "float")] * 2,
                            "y0 = x0 * 2.0f; y1 = x0 * 3.0f;")
    y0, y1 = empty(ctx, (65,)), placed(ctx, old)
    op([placed(ctx, a)], [y0, y1], beta=[0.0, 1.0])
    np.testing.assert_allclose(y0.numpy(), 2.0 * a, rtol=1e-6)
    np.testing.assert_allclose(y1.numpy(), 3.0 * a + old, rtol=1e-6)
    # the gradients of x op x land in one buffer: the first assigns, the second adds to it
    y = empty(ctx, (65,))
    op([placed(ctx, a)], [y, y], beta=[0.0, 1.0])
    np.testing.assert_allclose(y.numpy(), 5.0 * a, rtol=1e-6)
    with pytest.raises(ValueError, match="beta has 3 values for 2 outputs"):
        op.launches([placed(ctx, a)], [y0, y1], beta=[0.0, 1.0, 1.0])


def test_beta_int_and_half(ctx, rng):
    a = rng.integers(-50, 50, (33,)).astype(np.int32)
    old = rng.integers(-50, 50, (33,)).astype(np.int32)
    y = placed(ctx, old)
    pointwise(ctx, [placed(ctx, a)], [y], "y0 = x0 * 3;", beta=1.0)
    np.testing.assert_array_equal(y.numpy(), a * 3 + old)
    h = rng.standard_normal((33,)).astype(np.float16)
    hold = rng.standard_normal((33,)).astype(np.float16)
    yh = placed(ctx, hold)
    pointwise(ctx, [placed(ctx, h)], [yh], "y0 = x0;", beta=1.0)
    ref = (h.astype(np.float64) + hold).astype(np.float16)  # added in float, rounded once
    np.testing.assert_array_equal(yh.numpy(), ref)
    yh = empty(ctx, (33,), np.float16)
    pointwise(ctx, [placed(ctx, h)], [yh], "y0 = x0;", beta=0.0)
    np.testing.assert_array_equal(yh.numpy(), h)


# ----- reductions
FULL = (3, 5, 33, 4)
_reduce_ops = {}


def reduce_op(ctx, y_shape, code="y0 = x0 * x1;", x_shapes=(FULL, (1, 5, 1, 1)), **kw):
    key = (y_shape, code, x_shapes, tuple(sorted(kw.items())))
    if key not in _reduce_ops:
        _reduce_ops[key] = PointwiseBroadcastReduce(
            ctx, [(s, "float") for s in x_shapes], [(y_shape, "float")], code, **kw)
    return _reduce_ops[key]


@pytest.mark.parametrize("axes", [a for r in range(5) for a in itertools.combinations(range(4), r)])
def test_reduce_every_axis_subset(ctx, rng, axes):
    a = rng.standard_normal(FULL).astype(np.float32)
    w = rng.standard_normal((1, 5, 1, 1)).astype(np.float32)
    y_shape = tuple(1 if k in axes else n for k, n in enumerate(FULL))
    y = empty(ctx, y_shape)
    reduce_op(ctx, y_shape)([placed(ctx, a), placed(ctx, w)], [y])
    ref = (a.astype(np.float64) * w).sum(axis=axes, keepdims=True)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,y_shape", [
    ((4, 3, 65, 129), (1, 3, 1, 1)),   # BatchNorm sums: few outputs, two passes
    ((129, 2000), (129, 1)),           # trailing axis
    ((2000, 65), (1, 65)),             # bias gradient of a fully-connected layer
    ((70000,), (1,)),                  # everything into one value
    ((31, 127), (127,)),               # output of lower rank
])
def test_reduce_big_shapes(ctx, rng, shape, y_shape):
    a = rng.standard_normal(shape).astype(np.float32)
    y = empty(ctx, y_shape)
    op = reduce_op(ctx, y_shape, "y0 = x0;", (shape,))
    if shape[0] == 4 or shape == (70000,):
        assert op.chunks > 1, "expected the two-pass path"
    op([placed(ctx, a)], [y])
    full_y = (1,) * (len(shape) - len(y_shape)) + y_shape
    axes = tuple(k for k, (n, m) in enumerate(zip(shape, full_y)) if n != m)
    ref = a.astype(np.float64).sum(axis=axes, keepdims=True).reshape(y_shape)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-3)


def test_reduce_alpha_beta(ctx, rng):
    shape = (4, 3, 65, 129)
    a = rng.standard_normal(shape).astype(np.float32)
    prev = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    ref = a.astype(np.float64).sum(axis=(0, 2, 3), keepdims=True)
    for op in (reduce_op(ctx, (1, 3, 1, 1), "y0 = x0;", (shape,)),
               reduce_op(ctx, (1, 1, 1, 1), "y0 = x0;", ((1, 3, 1, 1),))):
        src = a if op.full_shape == shape else prev
        r = ref if op.full_shape == shape else prev.sum(keepdims=True)
        y = placed(ctx, prev if op.out_shape == prev.shape else prev[:, :1])
        op([placed(ctx, src)], [y], alpha=0.5, beta=1.0)
        np.testing.assert_allclose(y.numpy(), 0.5 * r + (prev if op.out_shape == prev.shape
                                                         else prev[:, :1]), rtol=1e-4, atol=1e-3)
        y = empty(ctx, op.out_shape)  # NaN garbage is ignored when beta == 0
        op([placed(ctx, src)], [y], alpha=2.0)
        np.testing.assert_allclose(y.numpy(), 2 * r, rtol=1e-4, atol=1e-3)


def test_reduce_max_and_two_outputs(ctx, rng):
    a = rng.standard_normal((7, 300)).astype(np.float32)
    ymax, ysq = empty(ctx, (7, 1)), empty(ctx, (7, 1))
    pointwise_reduce(ctx, [placed(ctx, a)], [ymax, ysq], "y0 = x0; y1 = x0 * x0;",
                     "reduce_y0 = -INFINITY; reduce_y1 = 0;",
                     "reduce_y0 = max(reduce_y0, y0); reduce_y1 += y1;")
    np.testing.assert_array_equal(ymax.numpy(), a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(ysq.numpy(), (a.astype(np.float64) ** 2).sum(1, keepdims=True),
                               rtol=1e-5)


def test_reduce_int_and_half(ctx, rng):
    a = rng.integers(-1000, 1000, (65, 33)).astype(np.int64)
    y = empty(ctx, (1, 33), np.int64)
    pointwise_reduce(ctx, [placed(ctx, a)], [y], "y0 = x0 * 3;", beta=0.0)
    np.testing.assert_array_equal(y.numpy(), (a * 3).sum(0, keepdims=True))
    h = rng.standard_normal((3, 129)).astype(np.float16)
    yh = empty(ctx, (3, 1), np.float16)
    pointwise_reduce(ctx, [placed(ctx, h)], [yh], "y0 = x0;")
    np.testing.assert_allclose(yh.numpy().astype(np.float64),
                               h.astype(np.float64).sum(1, keepdims=True), rtol=2e-3, atol=2e-3)


# ----- errors, all raised before anything is enqueued
def test_errors(ctx):
    f = "float"
    with pytest.raises(ValueError, match="do not broadcast"):
        PointwiseBroadcastReduce(ctx, [((3, 4), f), ((5, 4), f)], [((1, 4), f)], "y0 = x0;")
    with pytest.raises(ValueError, match="does not broadcast"):
        PointwiseBroadcast(ctx, [((3, 4), f)], [((3, 5), f)], "y0 = x0;")
    with pytest.raises(ValueError, match="y shapes differ"):
        PointwiseBroadcast(ctx, [((3, 4), f)], [((3, 4), f), ((1, 4), f)], "y0 = x0; y1 = x0;")
    with pytest.raises(ValueError, match="not a reduction"):
        PointwiseBroadcastReduce(ctx, [((3, 4), f)], [((3, 2), f)], "y0 = x0;")
    with pytest.raises(ValueError, match="not a reduction"):
        PointwiseBroadcastReduce(ctx, [((3, 4), f)], [((2, 3, 4), f)], "y0 = x0;")
    with pytest.raises(ValueError, match="x3 is unknown"):
        PointwiseBroadcast(ctx, [((3,), f), ((3,), f)], [((3,), f)], "y0 = x3;")
    with pytest.raises(ValueError, match="w0 is unknown"):
        PointwiseBroadcast(ctx, [((3,), f)], [((3,), f)], "y0 = x0 * w0;")
    with pytest.raises(ValueError, match="reduce_y1 is unknown"):
        PointwiseBroadcastReduce(ctx, [((3,), f)], [((1,), f)], "y0 = x0;",
                                 reduce="reduce_y1 += y0;")
    with pytest.raises(ValueError, match=r"'y0 = xx0;'"):  # misspelled: the build error quotes it
        PointwiseBroadcast(ctx, [((3,), f)], [((3,), f)], "y0 = xx0;")
    op = PointwiseBroadcast(ctx, [((3,), f)], [((3,), f)], "y0 = x0 * w0;", ["float"])
    x, y = dp.Tensor(ctx, (3,)), dp.Tensor(ctx, (3,))
    with pytest.raises(ValueError, match="xs has 2 tensors"):
        op.launches([x, x], [y], [1.0])
    with pytest.raises(ValueError, match="ys has 0 tensors"):
        op.launches([x], [], [1.0])
    with pytest.raises(ValueError, match="expected 1 params, got 0"):
        op.launches([x], [y])
    with pytest.raises(ValueError, match=r"xs\[0\] is \(4,\) float32"):
        op.launches([dp.Tensor(ctx, (4,))], [y], [1.0])
    with pytest.raises(ValueError, match=r"ys\[0\] is \(3,\) int32"):
        op.launches([x], [dp.Tensor(ctx, (3,), "int32")], [1.0])


def test_reduce_many_chunks(ctx, rng, monkeypatch):
    from dlprim.core import tuning_launch
    # force more chunks than the finish group (GPUs) / many short chunks (CPUs)
    monkeypatch.setattr(tuning_launch, "SPLIT_GROUPS_PER_CU", 1000)
    monkeypatch.setattr(tuning_launch, "POINTWISE_CPU_ITEMS_PER_CU", 1000)
    monkeypatch.setattr(tuning_launch, "POINTWISE_CPU_MIN_CHUNK", 16)
    a = rng.standard_normal((300001,)).astype(np.float32)
    op = PointwiseBroadcastReduce(ctx, [(a.shape, "float")], [((1,), "float"), ((1,), "float")],
                                  "y0 = x0; y1 = x0;", "reduce_y0 = 0; reduce_y1 = -INFINITY;",
                                  "reduce_y0 += y0; reduce_y1 = max(reduce_y1, y1);")
    assert op.chunks > 64
    s, m = empty(ctx, (1,)), empty(ctx, (1,))
    op([placed(ctx, a)], [s, m], alpha=1.0)
    np.testing.assert_allclose(s.numpy(), [a.astype(np.float64).sum()], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(m.numpy(), [a.max()])


def test_64bit_index_path(ctx, rng, monkeypatch):
    import dlprim.core.pointwise as pw
    monkeypatch.setattr(pw, "_UINT_LIMIT", 1)  # what tensors of 2^31+ elements get
    a = rng.standard_normal((3, 65, 33)).astype(np.float32)
    b = rng.standard_normal((65, 1)).astype(np.float32)
    op = PointwiseBroadcast(ctx, [(a.shape, "float"), (b.shape, "float")], [(a.shape, "float")],
                            "y0 = x0 - x1;")
    assert op._it is np.uint64
    y = empty(ctx, a.shape)
    op([placed(ctx, a), placed(ctx, b)], [y])
    np.testing.assert_array_equal(y.numpy(), a - b)
    r = empty(ctx, (1, 65, 1))
    pointwise_reduce(ctx, [placed(ctx, a), placed(ctx, b)], [r], "y0 = x0 * x1;")
    np.testing.assert_allclose(r.numpy(), (a.astype(np.float64) * b).sum(axis=(0, 2), keepdims=True),
                               rtol=1e-5, atol=1e-5)


def test_set_params_rebinds_prepared_launches(ctx):
    from dlprim.core.pointwise import PointwiseBroadcast
    x = dp.Tensor.from_numpy(ctx, np.arange(33, dtype=np.float32))
    y = dp.Tensor(ctx, (33,))
    op = PointwiseBroadcast(ctx, [((33,), "float")], [((33,), "float")], "y0 = x0 * w0 + w1;",
                            ["float", "float"])
    launches = op.launches([x], [y], [2.0, 1.0])
    for launch in launches:
        launch(ctx.queue)
    assert np.array_equal(y.numpy(), np.arange(33) * 2.0 + 1.0)
    op.set_params(launches, [-1.0, 0.5])
    for launch in launches:
        launch(ctx.queue)
    assert np.array_equal(y.numpy(), np.arange(33) * -1.0 + 0.5)
    with pytest.raises(ValueError, match="expected 2 params"):
        op.set_params(launches, [1.0])


def test_short_chunks_cross_rows_and_broadcasts(ctx, rng, monkeypatch):
    """Work-items whose chunks start and end inside rows (CPU path: a row of the innermost
    dimension at a time), with per-channel and per-column broadcasts, beta = 1, and a
    reduction whose rows are not a multiple of the partial results' count."""
    from dlprim.core import tuning_launch
    monkeypatch.setattr(tuning_launch, "POINTWISE_CPU_ITEMS_PER_CU", 1000)
    monkeypatch.setattr(tuning_launch, "POINTWISE_CPU_MIN_CHUNK", 64)
    monkeypatch.setattr(tuning_launch, "SPLIT_GROUPS_PER_CU", 1000)
    a = rng.standard_normal((5, 3, 131)).astype(np.float32)
    b = rng.standard_normal((3, 1)).astype(np.float32)
    c = rng.standard_normal((131,)).astype(np.float32)
    old = rng.standard_normal(a.shape).astype(np.float32)
    op = PointwiseBroadcast(ctx, [(a.shape, "float"), (b.shape, "float"), (c.shape, "float")],
                            [(a.shape, "float")], "y0 = x0 * x1 + x2;")
    y = placed(ctx, old)
    op([placed(ctx, a), placed(ctx, b), placed(ctx, c)], [y], beta=1.0)
    np.testing.assert_allclose(y.numpy(), a * b + c + old, rtol=1e-5, atol=1e-5)
    red = PointwiseBroadcastReduce(ctx, [(a.shape, "float"), (c.shape, "float")],
                                   [((1, 3, 1), "float")], "y0 = x0 * x1;")
    assert red.chunks > 1 or not ctx.facts.is_cpu  # GPUs split by their own rule
    s = empty(ctx, (1, 3, 1))
    red([placed(ctx, a), placed(ctx, c)], [s])
    ref = (a.astype(np.float64) * c).sum(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(s.numpy(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("vendor", ["intel", "pocl"])
def test_cpu_layout_follows_the_driver_and_the_math(ctx, rng, monkeypatch, vendor):
    """On a CPU, statements that call a transcendental function run one element per
    work-item on Intel's runtime (which vectorizes such calls only across work-items) and
    in chunks elsewhere; simple statements run in chunks everywhere. Both layouts give
    the reference values, over broadcasting and offsets."""
    from dlprim.core import tuning_launch
    monkeypatch.setattr(ctx.facts, "vendor_id", vendor)
    monkeypatch.setattr(ctx.facts, "is_cpu", True)
    exp_code, plain = "y0 = x0 * exp(-x1);", "y0 = x0 * x1;"
    assert tuning_launch.pointwise_cpu_items(ctx.facts, exp_code) == (vendor == "intel")
    assert not tuning_launch.pointwise_cpu_items(ctx.facts, plain)
    assert not tuning_launch.pointwise_cpu_items(ctx.facts, "y0 = x0 * expo;")  # not a call
    a, b = rng.standard_normal((31, 65)), rng.standard_normal((65,))
    for code, want in ((exp_code, a * np.exp(-b)), (plain, a * b)):
        x0, x1 = placed(ctx, a.astype(np.float32)), placed(ctx, b.astype(np.float32))
        y = empty(ctx, (31, 65))
        op = PointwiseBroadcast(ctx, [(x0.shape, np.float32), (x1.shape, np.float32)],
                                [(y.shape, np.float32)], code)
        op([x0, x1], [y])
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)


def test_vector_code_is_the_statement_on_vectors_or_refused():
    from dlprim.core.pointwise import vector_code
    assert vector_code("{ float x = x0; y0 = x * exp(-x * w0); }", 16) == \
        "{ float16 x = x0; y0 = x * exp(-x * w0); }"
    assert vector_code("y0 = fmax(erf(x0), 0.0f) + tanh(x1) / 2.0f;", 8) is not None
    for code in ("y0 = x0 > 0.0f ? exp(x0) : 0.0f;",   # select, comparison
                 "y0 = pow(x0, 2.0f);",                 # no scalar overload
                 "y0 = (float)exp(x0);",                # a cast
                 "y0 = dlp_lgamma_float(x0);",          # the library's own helpers
                 "{ int k = 2; y0 = exp(x0) * k; }",    # an integer local
                 "y0 = exp(x0) + x1[0];"):              # an index
        assert vector_code(code, 16) is None, code
    assert vector_code("y0 = exp(x0);", 1) is None
    # the operator library's casts of float operands are identities, dropped; a param's
    # only where the params are float
    assert vector_code("y0 = sqrt(((float)x0)) * ((float)w0);", 8, float_params=True) == \
        "y0 = sqrt((x0)) * (w0);"
    assert vector_code("y0 = sqrt(((float)x0)) * ((float)w0);", 8) is None
    assert vector_code("y0 = ((float)x0) + x1;", 8) == "y0 = (x0) + x1;"


def test_cpu_multi_tensor_statements_run_on_vectors(ctx):
    # AdamW's square root as the operator library writes it (casts and all)
    from dlprim.core import tuning
    from dlprim.core.multi_tensor import MultiTensorPointwise
    op = MultiTensorPointwise(ctx, ["float32"], ["float32"], "y0 = sqrt(((float)x0)) * "
                              "((float)w0);", params=["float32"])
    assert op._vw == (tuning.cpu_vector_width(ctx.facts) if ctx.facts.is_cpu else 0)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 1000, 65537])
def test_vector_layout_on_intel_cpus(ctx, rng, monkeypatch, n):
    """Intel's runtime, a transcendental statement over whole float32 tensors: a
    work-item computes a float16 vector, the last piece one value at a time; beta adds
    to y. Against float64 at lengths around the vector width."""
    monkeypatch.setattr(ctx.facts, "vendor_id", "intel")
    monkeypatch.setattr(ctx.facts, "is_cpu", True)
    code = "{ float x = x0; y0 = x1 * (1.0f / (1.0f + exp(-x))) + erf(x * w0); }"
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    x0, x1 = placed(ctx, a.astype(np.float32)), placed(ctx, b.astype(np.float32))
    y = placed(ctx, np.ones(n, np.float32))
    op = PointwiseBroadcast(ctx, [((n,), np.float32)] * 2, [((n,), np.float32)], code,
                            params=[np.float32(0.5)])
    assert op._vector > 1
    op([x0, x1], [y], [0.5], beta=1.0)
    erf = np.vectorize(math.erf)
    want = 1.0 + b / (1.0 + np.exp(-a)) + erf(0.5 * a)
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-6, atol=2e-6)
    # a broadcast input keeps the per-work-item layout
    half = PointwiseBroadcast(ctx, [((n,), np.float32), ((1,), np.float32)],
                              [((n,), np.float32)], "y0 = exp(x0) * x1;")
    assert half._vector == (op._vector if n == 1 else 0)


@pytest.mark.parametrize("shape,out", [((4096, 65), (1, 65)), ((300, 64), (1, 64)),
                                       ((5, 7, 130), (1, 1, 130)), ((9, 3, 70), (1, 3, 70)),
                                       ((2, 2), (1, 2))])
def test_cpu_column_sums_take_blocks_of_columns(ctx, rng, monkeypatch, shape, out):
    """On a CPU, a reduction that keeps the innermost dimension takes blocks of outputs
    side by side a work-item (REDUCE_CPU_COLUMNS), in chunks of the reduction where the
    outputs are few: two outputs (a sum and a max), a broadcast input, a kept dimension
    outside the block, tails shorter than a block; alpha and beta as always."""
    from dlprim.core import tuning_launch
    monkeypatch.setattr(ctx.facts, "is_cpu", True)
    a = rng.standard_normal(shape).astype(np.float32)
    col = rng.standard_normal(shape[:-1] + (1,)).astype(np.float32)
    x0, x1 = placed(ctx, a), placed(ctx, col)
    y0, y1 = placed(ctx, np.ones(out, np.float32)), placed(ctx, np.ones(out, np.float32))
    red = PointwiseBroadcastReduce(ctx, [(shape, np.float32), (col.shape, np.float32)],
                                   [(out, np.float32)] * 2, "y0 = x0 * x1; y1 = x0;",
                                   "reduce_y0 = 0; reduce_y1 = -INFINITY;",
                                   "reduce_y0 += y0; reduce_y1 = fmax(reduce_y1, y1);")
    assert red._cols == (tuning_launch.REDUCE_CPU_COLUMNS if shape[-1] > 1 else 0)
    red([x0, x1], [y0, y1], alpha=0.5, beta=(1.0))
    axes = tuple(k for k, n in enumerate(out) if n == 1 and shape[k] != 1)
    want_sum = 0.5 * (a.astype(np.float64) * col).sum(axis=axes, keepdims=True) + 1.0
    np.testing.assert_allclose(y0.numpy(), want_sum, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(y1.numpy(), 0.5 * a.max(axis=axes, keepdims=True) + 1.0,
                               rtol=1e-6, atol=1e-6)
