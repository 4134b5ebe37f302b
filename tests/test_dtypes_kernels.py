"""dlprim.dtypes and the kernels over every storage dtype, without PyTorch: the names,
the OpenCL C types, the cast rules, StridedCast between dtypes (strided, numpy as the
reference) and Fill."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import dtypes
from dlprim.core import copy as cp

STORED = ["float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


def test_names_types_and_compute_types():
    table = {"float64": ("double", "double", "double"), "int8": ("char", "char", "int8"),
             "int16": ("short", "short", "int16"), "bool": ("uchar", "uchar", "bool"),
             "bfloat16": ("bfloat16", "float", "bfloat16"), "float16": ("half", "float", "float16"),
             "uint8": ("uchar", "uchar", "uint8"), "int64": ("long", "long", "int64")}
    for name, (cl, compute, dlp) in table.items():
        assert (dtypes.cl_type(name), dtypes.compute_type(name), dtypes.dlp_name(name)) == \
            (cl, compute, dlp), name
        assert dtypes.as_dtype(dtypes.dlp_name(name)) == dtypes.as_dtype(name)  # names round trip
    assert dtypes.as_dtype("double") == np.float64 and dtypes.as_dtype("char") == np.int8
    assert dtypes.as_dtype(np.bool_) == np.bool_ and dtypes.is_float("float64")
    assert not dtypes.is_float("bool")
    with pytest.raises(TypeError, match="unsupported dtype"):
        dtypes.as_dtype(np.complex64)


def test_cast_expressions():
    assert dtypes.cl_cast("float32", "bool", "v") == "(uchar)((v) != 0)"
    assert dtypes.cl_cast("bool", "bool", "v") == "v"
    assert dtypes.cl_cast("float16", "bfloat16", "v") == "v"  # both compute in float
    assert dtypes.cl_cast("float32", "uint8", "v") == "(uchar)(long)(v)"
    assert dtypes.cl_cast("float64", "int32", "v") == "(int)(v)"
    assert dtypes.cl_cast("int64", "float64", "v") == "(double)(v)"


def _values(rng, dtype, n):
    raw = rng.choice([0.0, -0.0, 1.5, -1.5, 2.75, -7.25, 100.5, 127.0, -128.0, 42.0, -3.0], n)
    return raw.astype(dtype) if dtype != np.bool_ else raw != 0


def _numpy_cast(a, dst):
    """PyTorch's rules in numpy: != 0 to bool, truncation (through int64 into the narrow
    integers) otherwise."""
    if dst == np.bool_:
        return a != 0
    if a.dtype.kind == "f" and np.dtype(dst).kind in "iu" and np.dtype(dst).itemsize < 4:
        return np.trunc(a).astype(np.int64).astype(dst)
    return a.astype(dst)


@pytest.mark.parametrize("src", STORED)
def test_strided_cast_every_pair(ctx, rng, src):
    """src's every other column of a (5, 66) matrix, transposed, into each dtype."""
    if src == "float64" and not ctx.facts.fp64:
        pytest.skip("the device has no cl_khr_fp64")
    a = _values(rng, np.dtype(src).type, 5 * 66).reshape(5, 66)
    x = dp.Tensor.from_numpy(ctx, a)
    for dst in STORED:
        if dst == "float64" and not ctx.facts.fp64:
            continue
        op = cp.StridedCast(ctx, (33, 5), (2, 66), (5, 1), src, dst)
        y = dp.Tensor(ctx, (33, 5), dst)
        op(x, y)
        want = _numpy_cast(a[:, ::2].T, np.dtype(dst).type)
        np.testing.assert_array_equal(y.numpy(), want, err_msg="%s -> %s" % (src, dst))


def test_strided_cast_copies_values_only(ctx):
    op = cp.StridedCast(ctx, (3,), (1,), (1,), "int32", "float32")
    x, y = dp.Tensor(ctx, (3,), "int32"), dp.Tensor(ctx, (3,), "float32")
    with pytest.raises(ValueError, match="alpha 1, beta 0"):
        op(x, y, alpha=2.0)
    with pytest.raises(ValueError, match="StridedCast converts any pair"):
        cp.StridedCopy(ctx, (3,), (1,), (1,), "int32", "float32")


@pytest.mark.parametrize("dtype, value", [("int8", -100), ("int16", -30000), ("bool", True),
                                          ("int64", 2 ** 62 + 1), ("float64", 1 + 1e-12)])
def test_fill(ctx, dtype, value):
    if dtype == "float64" and not ctx.facts.fp64:
        pytest.skip("the device has no cl_khr_fp64")
    t = dp.Tensor(ctx, (65,), dtype)
    cp.fill(ctx, t, value)
    np.testing.assert_array_equal(t.numpy(), np.full(65, value, dtype))
