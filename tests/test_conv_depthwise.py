"""The CPU depthwise kernels (kernels/conv_depthwise_cpu.cl) against the float64 references
of test_conv.py: every direction, beta 0 (outputs start as NaN: never read) and 1, at sizes
that reach the vector columns of both widths, the checked edge columns, rows narrower than
a vector, strides 1-3, kernel 5, dilation, a channel multiplier and asymmetric pads, with
work-items cut at every grain."""
import numpy as np
import pytest

from dlprim import Tensor
from dlprim.core import tuning_launch
from dlprim.core.conv import ConvBackwardData, ConvBackwardFilter, ConvForward, ConvGeometry
from layer_check import assert_close
from test_conv import ACT, conv_backward_ref, conv_ref

GEOMS = {
    "k3_odd_37": ConvGeometry(3, 3, (9, 37), (3, 3), pad=(1, 1, 1, 1), groups=3),
    "k3_s2_odd": ConvGeometry(3, 3, (11, 35), (3, 3), (2, 2), (1, 1, 1, 1), groups=3),
    "k3_s2_even": ConvGeometry(2, 2, (12, 40), (3, 3), (2, 2), (1, 1, 1, 1), groups=2),
    "narrow_5x3": ConvGeometry(4, 4, (5, 3), (3, 3), pad=(1, 1, 1, 1), groups=4),
    "k5": ConvGeometry(2, 2, (13, 45), (5, 5), pad=(2, 2, 2, 2), groups=2),
    "k5_s2": ConvGeometry(2, 2, (13, 45), (5, 5), (2, 2), (2, 2, 2, 2), groups=2),
    "mult2_d2_asym": ConvGeometry(3, 6, (10, 41), (3, 3), (2, 2), (1, 0, 0, 1), (2, 2), groups=3),
    "s3_rect": ConvGeometry(3, 3, (9, 40), (3, 5), (1, 3), (0, 2, 1, 2), (1, 2), groups=3),
    "pad3_k3": ConvGeometry(2, 2, (7, 30), (3, 3), pad=(3, 3, 3, 3), groups=2),
}

# (DEPTHWISE_CPU_ITEM_OUTPUTS, DEPTHWISE_CPU_ITEMS_PER_CU): the tables'; work-items of a
# few outputs (cut inside planes; backward-filter splits its rows); one work-item for all
# (backward-filter over every channel)
PLANS = {"table": None, "fine": (7, 64), "coarse": (10 ** 9, 0)}


def _tensor(ctx, array, offset=5):
    """``array`` inside a NaN-filled buffer, ``offset`` elements in."""
    flat = np.full(array.size + 2 * offset, np.nan, np.float32)
    flat[offset:offset + array.size] = array.ravel()
    return Tensor.from_numpy(ctx, flat).view(array.shape, offset=offset)


@pytest.fixture
def cpu_ctx(ctx, monkeypatch):
    """The context, its CPU kernels chosen whatever the device."""
    monkeypatch.setattr(ctx.facts, "is_gpu", False)
    monkeypatch.setattr(ctx.facts, "is_cpu", True)
    return ctx


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("name", sorted(GEOMS))
def test_cpu_depthwise(cpu_ctx, monkeypatch, name, plan):
    ctx, g = cpu_ctx, GEOMS[name]
    if PLANS[plan]:
        monkeypatch.setattr(tuning_launch, "DEPTHWISE_CPU_ITEM_OUTPUTS", PLANS[plan][0])
        monkeypatch.setattr(tuning_launch, "DEPTHWISE_CPU_ITEMS_PER_CU", PLANS[plan][1])
    batch, stride, dil = 3, (g.sh, g.sw), (g.dh, g.dw)
    rng = np.random.default_rng(sorted(GEOMS).index(name))
    x, dy = rng.standard_normal(g.in_shape(batch)), rng.standard_normal(g.out_shape(batch))
    w = rng.standard_normal(g.weight_shape)
    b_out, b_in = rng.standard_normal(g.out_c), rng.standard_normal(g.in_c)
    y0, dx0 = rng.standard_normal(g.out_shape(batch)), rng.standard_normal(g.in_shape(batch))
    dw0 = rng.standard_normal(g.weight_shape)
    fwd = ConvForward(ctx, g, bias=True, activation="relu6", algo="depthwise")
    data = ConvBackwardData(ctx, g, bias=True, activation="relu6", algo="depthwise")
    filt = ConvBackwardFilter(ctx, g, algo="depthwise")
    assert fwd.impl.cpu and data.impl.cpu and filt.impl.cpu
    if plan == "fine":
        assert filt.impl.chunk_plan(batch)[0] > 1 and filt.workspace_bytes(batch) > 0
    if plan == "coarse":
        assert filt.impl.cpu_plan(batch)[0] > 1 and filt.workspace_bytes(batch) == 0
    ws = Tensor(ctx, (max(1, filt.workspace_bytes(batch)),), "uint8")
    relu6 = ACT["relu6"][0]
    dx_ref, dw_ref = conv_backward_ref(x, w, dy, stride, g.pad, dil, g.groups)
    y_ref = conv_ref(x, w, stride, g.pad, dil, g.groups) + b_out[None, :, None, None]
    for beta in (0.0, 1.0):
        start = np.nan if beta == 0 else 1.0
        y, dx, dw = (_tensor(ctx, start * a) for a in (y0, dx0, dw0))
        fwd(_tensor(ctx, x), _tensor(ctx, w), y, _tensor(ctx, b_out), beta=beta)
        data(_tensor(ctx, dy), _tensor(ctx, w), dx, _tensor(ctx, b_in), beta=beta)
        filt(_tensor(ctx, x), _tensor(ctx, dy), dw, ws=ws, beta=beta)
        keep = 0.0 if beta == 0 else 1.0
        assert_close(y.numpy(), relu6(y_ref + keep * y0), what="%s y beta=%g" % (name, beta))
        assert_close(dx.numpy(), relu6(dx_ref + keep * dx0 + b_in[None, :, None, None]),
                     what="%s dx beta=%g" % (name, beta))
        assert_close(dw.numpy(), dw_ref + keep * dw0, rtol=1e-4, atol=1e-4,
                     what="%s dw beta=%g" % (name, beta))


def test_cpu_depthwise_launches(cpu_ctx, monkeypatch):
    """A handful of work-items of one work-item each; one launch for backward-filter when
    work-items hold whole channels (MobileNet-V2's 3x3 layers at batch 4 on two cores:
    the plan follows the core count, which the test fixes)."""
    ctx = cpu_ctx
    monkeypatch.setattr(ctx.facts, "compute_units", 2)
    g = ConvGeometry(144, 144, (56, 56), (3, 3), pad=(1, 1, 1, 1), groups=144)
    x, y = Tensor(ctx, g.in_shape(4)), Tensor(ctx, g.out_shape(4))
    w = Tensor(ctx, g.weight_shape)
    (fwd,) = ConvForward(ctx, g, algo="depthwise").launches(x, w, y)
    (data,) = ConvBackwardData(ctx, g, algo="depthwise").launches(y, w, x)
    (filt,) = ConvBackwardFilter(ctx, g, algo="depthwise").launches(x, y, w)
    for launch in (fwd, data, filt):
        assert launch.lsize == (1,) and launch.gsize[0] <= 4 * 144 * 56 * 56 // 1000
