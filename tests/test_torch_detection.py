"""torchvision's detection operators on the ``ocl`` device: nms (ties, no boxes, every
box suppressed, an IoU equal to the threshold, 1000 random boxes, batched_nms),
roi_align and roi_pool forward and backward (aligned or not, sampling ratios 0, -1, 2,
rois across the borders, the batch column, float32 / float16 / float64), against
torchvision's CPU kernels where torchvision imports, else against float64 references
written here in plain PyTorch behind torchvision's own operator schemas."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
from dlprim.torch import device as ocl_device  # noqa: E402

DEV = "ocl"
FP64 = ocl_device.context(0).facts.fp64

try:
    import torchvision
    HAVE_TORCHVISION = True
except ImportError:  # (its wheel needs CUDA's libraries on some machines)
    torchvision, HAVE_TORCHVISION = None, False


# ----- float64 references, in torchvision's CPU kernels' order of operations
def nms_ref(dets, scores, iou_threshold):
    """torchvision's nms_kernel.cpp: the float IoU of the boxes' own dtype against the
    double threshold; boxes by descending score, ties by index."""
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.int64)
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = torch.sort(scores, stable=True, descending=True).indices
    suppressed = torch.zeros(len(dets), dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        ovr = inter / (areas[i] + areas - inter)
        suppressed |= ovr.double() > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _taps(y, x, height, width):
    """roi_align's bilinear taps at (y, x): [(h, w, weight)], none outside."""
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return [(y_low, x_low, hy * hx), (y_low, x_high, hy * lx), (y_high, x_low, ly * hx),
            (y_high, x_high, ly * lx)]


def align_weights(roi, scale, ph_n, pw_n, sampling_ratio, aligned, height, width):
    """The (PH * PW, H * W) float64 matrix of one roi's roi_align: bin = weights @ plane."""
    off = 0.5 if aligned else 0.0
    x0, y0, x1, y1 = (float(v) * scale - off for v in roi[1:])
    rw, rh = x1 - x0, y1 - y0
    if not aligned:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    bh, bw = rh / ph_n, rw / pw_n
    gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / ph_n)
    gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / pw_n)
    count = max(gh * gw, 1)
    m = np.zeros((ph_n * pw_n, height * width))
    for ph in range(ph_n):
        for pw in range(pw_n):
            for iy in range(gh):
                y = y0 + ph * bh + (iy + 0.5) * bh / gh
                for ix in range(gw):
                    x = x0 + pw * bw + (ix + 0.5) * bw / gw
                    for h, w, wt in _taps(y, x, height, width):
                        m[ph * pw_n + pw, h * width + w] += wt / count
    return torch.from_numpy(m)


def roi_align_ref(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                  aligned):
    n, c, h, w = x.shape
    out = [x[int(r[0])].reshape(c, h * w).double()
           @ align_weights(r.tolist(), spatial_scale, pooled_height, pooled_width,
                           sampling_ratio, aligned, h, w).T for r in rois]
    if not out:
        return x.new_zeros((0, c, pooled_height, pooled_width), dtype=torch.float64)
    return torch.stack(out).reshape(len(rois), c, pooled_height, pooled_width)


def roi_align_backward_ref(grad, rois, spatial_scale, pooled_height, pooled_width,
                           batch_size, channels, height, width, sampling_ratio, aligned):
    x = torch.zeros(batch_size, channels, height, width, dtype=torch.float64,
                    requires_grad=True)
    y = roi_align_ref(x, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                      aligned)
    return torch.autograd.grad(y, x, grad.double(), allow_unused=True)[0]


def roi_pool_ref(x, rois, spatial_scale, pooled_height, pooled_width):
    """torchvision's roi_pool_kernel.cpp: (max, flat h * W + w of the first max)."""
    n, c, height, width = x.shape
    y = torch.zeros(len(rois), c, pooled_height, pooled_width, dtype=x.dtype)
    arg = torch.full(y.shape, -1, dtype=torch.int32)
    for r, roi in enumerate(rois.tolist()):
        b = int(roi[0])
        x0, y0, x1, y1 = (int(round(v * spatial_scale)) for v in roi[1:])
        bh = max(y1 - y0 + 1, 1) / pooled_height
        bw = max(x1 - x0 + 1, 1) / pooled_width
        for ph in range(pooled_height):
            hs = min(max(math.floor(ph * bh) + y0, 0), height)
            he = min(max(math.ceil((ph + 1) * bh) + y0, 0), height)
            for pw in range(pooled_width):
                ws = min(max(math.floor(pw * bw) + x0, 0), width)
                we = min(max(math.ceil((pw + 1) * bw) + x0, 0), width)
                if he <= hs or we <= ws:
                    continue
                region = x[b, :, hs:he, ws:we].reshape(c, -1)
                best, at = region.max(1)
                y[r, :, ph, pw] = best
                arg[r, :, ph, pw] = ((hs + at // (we - ws)) * width + ws
                                     + at % (we - ws)).int()
    return y, arg


def roi_pool_backward_ref(grad, rois, argmax, spatial_scale, pooled_height, pooled_width,
                          batch_size, channels, height, width):
    dx = torch.zeros(batch_size, channels, height * width, dtype=grad.dtype)
    for r, roi in enumerate(rois.tolist()):
        for ch in range(channels):
            at = argmax[r, ch].reshape(-1).long()
            ok = at >= 0
            dx[int(roi[0]), ch].index_add_(0, at[ok], grad[r, ch].reshape(-1)[ok])
    return dx.reshape(batch_size, channels, height, width)


# ----- the operators: torchvision's, or its schemas with the references behind them
def _define_torchvision():
    lib = torch.library.Library("torchvision", "DEF")
    for schema in (
            "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
            "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor",
            "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt "
            "pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt "
            "height, SymInt width, int sampling_ratio, bool aligned) -> Tensor",
            "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
            "SymInt pooled_width) -> (Tensor, Tensor)",
            "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, "
            "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, "
            "SymInt height, SymInt width) -> Tensor",
            "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt "
            "pooled_height, SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)"):
        lib.define(schema)
    for name, fn in (("nms", nms_ref), ("roi_align", roi_align_ref),
                     ("_roi_align_backward", roi_align_backward_ref),
                     ("roi_pool", roi_pool_ref), ("_roi_pool_backward", roi_pool_backward_ref)):
        lib.impl(name, fn, "CPU")
    # autograd as torchvision's C++ kernels have it: the backward operators
    def align_setup(ctx, inputs, output):
        x, rois = inputs[:2]
        ctx.rois, ctx.args, ctx.shape = rois, inputs[2:], x.shape

    def align_backward(ctx, grad):
        scale, ph, pw, sr, aligned = ctx.args
        return (torch.ops.torchvision._roi_align_backward(grad, ctx.rois, scale, ph, pw,
                                                          *ctx.shape, sr, aligned),) \
            + (None,) * 6

    def pool_setup(ctx, inputs, output):
        ctx.rois, ctx.args, ctx.shape, ctx.argmax = inputs[1], inputs[2:], inputs[0].shape, \
            output[1]

    def pool_backward(ctx, grad, _):
        return (torch.ops.torchvision._roi_pool_backward(grad, ctx.rois, ctx.argmax,
                                                         *ctx.args, *ctx.shape),) \
            + (None,) * 4
    torch.library.register_autograd("torchvision::roi_align", align_backward,
                                    setup_context=align_setup, lib=lib)
    torch.library.register_autograd("torchvision::roi_pool", pool_backward,
                                    setup_context=pool_setup, lib=lib)
    return lib


_LIB = None if HAVE_TORCHVISION else _define_torchvision()
ops = torch.ops.torchvision


def batched_nms(boxes, scores, idxs, iou_threshold):
    if HAVE_TORCHVISION:
        return torchvision.ops.batched_nms(boxes, scores, idxs, iou_threshold)
    # torchvision's coordinate trick: each class's boxes offset past all others'
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64, device=boxes.device)
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return ops.nms(boxes + offsets[:, None], scores, iou_threshold)


# ----- nms
def _boxes(n, seed=0, size=30.0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size
    wh = torch.rand(n, 2, generator=g) * size / 4 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=g)


def _same_nms(boxes, scores, thr, dtype=torch.float32):
    boxes, scores = boxes.to(dtype), scores.to(dtype)
    ref_dtype = torch.float32 if dtype == torch.float16 else dtype  # (exact widening)
    want = ops.nms(boxes.to(ref_dtype), scores.to(ref_dtype), thr)
    got = ops.nms(boxes.to(DEV), scores.to(DEV), thr)
    assert got.device.type == DEV and got.dtype == torch.int64
    assert got.cpu().tolist() == want.tolist()
    return want


@pytest.mark.parametrize("n", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("thr", [0.0, 0.2, 0.45])
def test_nms_random(n, thr):
    boxes, scores = _boxes(n, seed=n)
    kept = _same_nms(boxes, scores, thr)
    if n > 1 and thr > 0:
        assert 1 < len(kept) < n  # some kept, some suppressed: a real test


def test_nms_thousand_boxes():
    boxes, scores = _boxes(1000, seed=7)
    kept = _same_nms(boxes, scores, 0.5)
    assert 100 < len(kept) < 1000


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_nms_dtypes(dtype):
    if dtype == torch.float64 and not FP64:
        pytest.skip("the device has no cl_khr_fp64")
    boxes, scores = _boxes(200, seed=3)
    _same_nms(boxes.round(), scores, 0.4, dtype)


def test_nms_ties_keep_index_order():
    boxes = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30],
                          [20, 20, 30, 30], [0, 0, 10, 10]], dtype=torch.float32)
    scores = torch.tensor([0.5, 0.9, 0.5, 0.5, 0.9])
    assert _same_nms(boxes, scores, 0.5).tolist() == [1, 2]  # the first of equal scores


def test_nms_no_boxes_and_all_suppressed():
    empty = ops.nms(torch.zeros(0, 4).to(DEV), torch.zeros(0).to(DEV), 0.5)
    assert empty.device.type == DEV and empty.dtype == torch.int64 and empty.shape == (0,)
    boxes = torch.tensor([[1.0, 2, 11, 12]]).repeat(70, 1)
    scores = torch.rand(70, generator=torch.Generator().manual_seed(1))
    assert _same_nms(boxes, scores, 0.5).tolist() == [int(scores.argmax())]


def test_nms_iou_equal_to_the_threshold_keeps():
    # IoU of these two is exactly 0.5: suppressed only above it; a double threshold just
    # under 0.5 (0.5 as a float) suppresses
    boxes = torch.tensor([[0.0, 0, 4, 1], [0, 0, 2, 1]])
    scores = torch.tensor([0.9, 0.8])
    assert _same_nms(boxes, scores, 0.5).tolist() == [0, 1]
    assert _same_nms(boxes, scores, 0.5 - 1e-12).tolist() == [0]


def test_batched_nms():
    boxes, scores = _boxes(90, seed=5)
    idxs = torch.randint(0, 3, (90,), generator=torch.Generator().manual_seed(2))
    want = batched_nms(boxes, scores, idxs, 0.3)
    got = batched_nms(boxes.to(DEV), scores.to(DEV), idxs.to(DEV), 0.3)
    assert got.cpu().tolist() == want.tolist()


def test_nms_errors():
    with pytest.raises(RuntimeError, match="4 elements"):
        ops.nms(torch.zeros(3, 5).to(DEV), torch.zeros(3).to(DEV), 0.5)
    with pytest.raises(RuntimeError, match="same number"):
        ops.nms(torch.zeros(3, 4).to(DEV), torch.zeros(2).to(DEV), 0.5)


# ----- roi_align / roi_pool
def _rois(n_batch, height, width, count=7, seed=0, scale=1.0):
    """Rois over the whole image and past its borders, in both batch entries."""
    g = torch.Generator().manual_seed(seed)
    lo = torch.rand(count, 2, generator=g) * torch.tensor([width, height]) * 1.2 - 2
    size = torch.rand(count, 2, generator=g) * torch.tensor([width, height]) * 0.9
    batch = torch.arange(count) % n_batch
    rois = torch.cat([batch[:, None].float(), lo, lo + size], 1) / torch.tensor(
        [1, scale, scale, scale, scale])
    rois[0, 1:] = torch.tensor([-3.0, -2, width + 2, height + 3]) / scale  # past every edge
    rois[1, 1:] = torch.tensor([2.0, 1, 2.3, 1.2]) / scale  # under a pixel
    return rois


ALIGN_CASES = [(aligned, sr, scale) for aligned in (True, False) for sr in (0, -1, 2)
               for scale in (1.0, 0.5)]


def _need(dtype):
    if dtype == torch.float64 and not FP64:
        pytest.skip("the device has no cl_khr_fp64")


def _tol(dtype):
    return {torch.float32: 2e-5, torch.float16: 1e-2, torch.float64: 1e-10}[dtype]


@pytest.mark.parametrize("aligned,sr,scale", ALIGN_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_roi_align_forward_backward(aligned, sr, scale, dtype):
    _need(dtype)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 5, 7, 9, generator=g).to(dtype)
    rois = _rois(2, 7, 9, scale=scale).to(dtype)
    args = (scale, 3, 3, sr, aligned)
    want = ops.roi_align(x.double(), rois.double(), *args)
    xo = x.to(DEV).requires_grad_()
    got = ops.roi_align(xo, rois.to(DEV), *args)
    assert got.dtype == dtype and got.shape == (7, 5, 3, 3)  # (315 outputs: past 256)
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=_tol(dtype),
                               atol=_tol(dtype))
    dy = torch.randn(got.shape, generator=g).to(dtype)
    dx_want = ops._roi_align_backward(dy.double(), rois.double(), scale, 3, 3, *x.shape,
                                      sr, aligned)
    assert float(dx_want.abs().sum()) > 0
    (dx,) = torch.autograd.grad(got, xo, dy.to(DEV))
    assert dx.dtype == dtype
    torch.testing.assert_close(dx.cpu().double(), dx_want, rtol=_tol(dtype) * 10,
                               atol=_tol(dtype) * 10)


def test_roi_align_reference_samples_a_ramp():
    """The reference's own check: on x[h, w] = w + 10 h (bilinear is exact on it), an
    aligned bin inside the image is its centre's value."""
    h, w = 6, 8
    x = (torch.arange(w)[None, :] + 10 * torch.arange(h)[:, None]).double()[None, None]
    rois = torch.tensor([[0.0, 1.5, 1.0, 5.5, 4.0]])
    y = roi_align_ref(x, rois, 1.0, 2, 2, 2, True)
    # bins of 2 x 1.5 pixels from (1.0, 0.5) in pixel-centre coordinates
    centres = [[10 * (0.5 + 0.75) + 1.0 + 1.0, 10 * 1.25 + 4.0],
               [10 * (0.5 + 2.25) + 2.0, 10 * 2.75 + 4.0]]
    torch.testing.assert_close(y[0, 0], torch.tensor(centres, dtype=torch.float64))
    got = ops.roi_align(x.float().to(DEV), rois.to(DEV), 1.0, 2, 2, 2, True)
    torch.testing.assert_close(got.cpu()[0, 0].double(), y[0, 0], rtol=1e-5, atol=1e-5)


def test_roi_align_reference_gradient_by_finite_differences():
    x = torch.randn(1, 2, 4, 5, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0.0, -0.5, 0.3, 3.7, 2.9]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: roi_align_ref(t, rois, 1.0, 2, 2, -1, False),
                                    (x,))


def test_roi_align_no_rois():
    x = torch.randn(1, 3, 5, 5).to(DEV)
    y = ops.roi_align(x, torch.zeros(0, 5).to(DEV), 1.0, 2, 2, -1, True)
    assert y.shape == (0, 3, 2, 2) and y.device.type == DEV


@pytest.mark.parametrize("scale", [1.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_roi_pool_forward_backward(scale, dtype):
    _need(dtype)
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 5, 7, 9, generator=g).to(dtype)
    rois = _rois(2, 7, 9, seed=1, scale=scale).to(dtype)
    want, want_arg = ops.roi_pool(x.double(), rois.double(), scale, 3, 3)
    xo = x.to(DEV).requires_grad_()
    got, arg = ops.roi_pool(xo, rois.to(DEV), scale, 3, 3)
    assert got.dtype == dtype and arg.dtype == torch.int32
    assert torch.equal(arg.cpu(), want_arg)
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=0)
    dy = torch.randn(got.shape, generator=g).to(dtype)
    dx_want = ops._roi_pool_backward(dy.double(), rois.double(), want_arg, scale, 3, 3,
                                     *x.shape)
    assert float(dx_want.abs().sum()) > 0
    (dx,) = torch.autograd.grad(got, xo, dy.to(DEV))
    torch.testing.assert_close(dx.cpu().double(), dx_want, rtol=_tol(dtype), atol=_tol(dtype))


def test_roi_pool_empty_bins():
    # a roi wholly left of the image: every bin empty, 0 with argmax -1
    x = torch.randn(1, 2, 4, 4)
    rois = torch.tensor([[0.0, -9, -9, -6, -6]])
    y, arg = ops.roi_pool(x.to(DEV), rois.to(DEV), 1.0, 2, 2)
    assert torch.equal(y.cpu(), torch.zeros(1, 2, 2, 2))
    assert torch.equal(arg.cpu(), torch.full((1, 2, 2, 2), -1, dtype=torch.int32))


def test_other_torchvision_operators_are_refused_by_name():
    x = torch.randn(1, 4, 5, 5).to(DEV)
    rois = torch.tensor([[0.0, 0, 0, 3, 3]]).to(DEV)
    with pytest.raises(NotImplementedError, match="torchvision.ps_roi_align"):
        ops.ps_roi_align(x, rois, 1.0, 2, 2, -1)


def test_rois_of_another_dtype_are_refused():
    with pytest.raises(RuntimeError, match="same type"):
        ops.roi_align(torch.randn(1, 1, 4, 4).to(DEV), torch.zeros(1, 5).double().to(DEV),
                      1.0, 2, 2, -1, True)
