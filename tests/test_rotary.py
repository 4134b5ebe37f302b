"""The Rotary layer against a float64 reference of HF's rotary embedding (rotate_half),
heads-major and sequence-first inputs, per-sample and shared tables, 16-bit storage, at
sizes around the work-group's edges."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.layers.base import LayerError
from dlprim.net.netconfig import NetConfig


def reference(x, cos, sin, seq_first):
    """x (N, H, T, D) (or (N, T, H, D)) rotated by HF's formula, with unsigned tables."""
    x = np.asarray(x, np.float64)
    if seq_first:
        x = x.transpose(0, 2, 1, 3)
    half = x.shape[-1] // 2
    rotate_half = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None] + rotate_half * sin[:, None]


def _tables(rng, rows, t, d):
    angles = rng.uniform(0, 6.3, (rows, t, d // 2))
    angles = np.concatenate([angles, angles], -1)
    return np.cos(angles), np.sin(angles)


@pytest.mark.parametrize("shape,rows,seq_first", [((1, 1, 1, 2), 1, False),
                                                  ((2, 3, 5, 64), 2, True),
                                                  ((2, 4, 7, 18), 1, False),
                                                  ((3, 2, 43, 128), 3, True)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rotary_matches_the_reference(ctx, rng, shape, rows, seq_first, dtype):
    n, h, t, d = shape
    x = rng.normal(size=(n, t, h, d) if seq_first else shape)
    cos, sin = _tables(rng, rows, t, d)
    signed = sin.copy()
    signed[..., :d // 2] *= -1  # the layer's table: the sine's first half negated
    cfg = NetConfig()
    cfg.add_input("x", list(x.shape), dtype="float")
    cfg.add_input("cos", [rows, t, d], dtype="float")
    cfg.add_input("sin", [rows, 1, t, d], dtype="float")
    cfg.add("Rotary", name="rope", inputs=["x", "cos", "sin"], outputs=["y"],
            options={"seq_first": seq_first})
    cfg.set_outputs(["y"])
    precision = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype]
    net = dp.Net(ctx, cfg, mode="predict", precision=precision)
    y = net(x=x, cos=cos, sin=signed[:, None])["y"]
    y = dp.dtypes.bfloat16_values(y) if y.dtype == dp.dtypes.bfloat16 else y
    tol = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}[dtype]
    np.testing.assert_allclose(y, reference(x, cos, sin, seq_first), rtol=tol, atol=tol)


def test_rotary_refuses_what_it_cannot_take(ctx):
    from dlprim.layers import create
    from dlprim.layers.base import TensorSpec
    layer = create(ctx, "Rotary", options={})
    f = np.float32
    with pytest.raises(LayerError, match="even"):
        layer.setup([TensorSpec((1, 2, 3, 5), f), TensorSpec((1, 3, 5), f),
                     TensorSpec((1, 3, 5), f)])
    with pytest.raises(LayerError, match="input cos"):
        layer.setup([TensorSpec((2, 2, 3, 4), f), TensorSpec((3, 3, 4), f),
                     TensorSpec((3, 3, 4), f)])
