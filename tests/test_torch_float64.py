"""dlprim.torch in float64 (devices with cl_khr_fp64): the operators whole models use
(convolutions plain and transposed, the normalisations, pooling, resampling, softmax,
embedding, attention, losses), forward and backward, against PyTorch's CPU in float64, and
a small network of plain modules. The tolerance is 1e-10: float32 arithmetic anywhere on
the way (a float accumulator, a float 1 / count, float statistics) misses it by 1e-7, so
these tests fail where float64 is not computed in double all the way."""
import copy

import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")

from dlprim.torch import device as ocl_device  # noqa: E402

F = torch.nn.functional
nn = torch.nn
DEV = "ocl"
D = torch.float64
TOL = 1e-10

pytestmark = pytest.mark.skipif(not ocl_device.context(0).facts.fp64,
                                reason="the device has no cl_khr_fp64")


@pytest.fixture(autouse=True)
def _no_cpu_fallback():
    """Everything runs on the device: an operator missing there fails here."""
    dt.allow_cpu_fallback(False)


def randn(*shape, seed=0):
    return torch.randn(shape, dtype=D, generator=torch.Generator().manual_seed(seed))


def relative(got, want):
    """The largest error relative to the largest value (a gradient that is 0 in exact
    arithmetic would make an elementwise one meaningless)."""
    scale = float(want.detach().abs().max()) or 1.0
    return float((got.detach().cpu() - want.detach()).abs().max()) / scale


def both(fn, *tensors, grads=True):
    """fn on float64 CPU tensors and on their ocl copies: the values, and the gradients of
    sum(out * cotangent) for every float input, within TOL."""
    cpu = [t.detach().clone().requires_grad_(grads and t.is_floating_point()) for t in tensors]
    ocl = [t.detach().to(DEV).requires_grad_(grads and t.is_floating_point()) for t in tensors]
    want, got = fn(*cpu), fn(*ocl)
    assert got.device.type == DEV and got.dtype == want.dtype == D
    assert got.shape == want.shape
    assert relative(got, want) < TOL
    if not grads:
        return
    cot = randn(*want.shape, seed=7)
    wanted = [t for t in cpu if t.requires_grad]
    gw = torch.autograd.grad((want * cot).sum(), wanted)
    gg = torch.autograd.grad((got * cot.to(DEV)).sum(), [t for t in ocl if t.requires_grad])
    for a, b in zip(gg, gw):
        assert a.dtype == D and float(b.abs().max()) > 0   # zeros would test nothing
        assert relative(a, b) < TOL


# ----- convolutions: the direct kernels, summing in double
CONVS = [
    ("conv1d", (2, 4, 65), (6, 4, 3), dict(stride=2, padding=1, dilation=2)),
    ("conv2d", (2, 4, 9, 11), (6, 2, 3, 5), dict(stride=(2, 1), padding=(1, 2), groups=2)),
    ("conv2d", (2, 4, 8, 8), (8, 1, 3, 3), dict(padding=1, groups=4)),
    ("conv2d", (3, 8, 8), (5, 3, 3, 3), dict(padding="same")),          # unbatched
    ("conv3d", (2, 3, 5, 6, 7), (4, 3, 3, 3, 3), dict(padding=1)),
    ("conv_transpose1d", (2, 4, 13), (4, 5, 4), dict(stride=3, padding=1, output_padding=2)),
    ("conv_transpose2d", (2, 4, 7, 8), (4, 3, 4, 3),
     dict(stride=2, padding=1, groups=2, output_padding=1)),
    ("conv_transpose3d", (1, 2, 3, 4, 5), (2, 3, 2, 3, 2), dict(stride=2, dilation=2)),
]


@pytest.mark.parametrize("name,x_shape,w_shape,kw", CONVS)
def test_convolution(name, x_shape, w_shape, kw):
    transposed = name.startswith("conv_transpose")
    bias = randn(w_shape[1] * kw.get("groups", 1) if transposed else w_shape[0], seed=2)
    both(lambda x, w, b: getattr(F, name)(x, w, b, **kw), randn(*x_shape), randn(*w_shape,
                                                                                   seed=1), bias)


def test_convolution_strided_input():
    both(lambda x, w: F.conv2d(x.transpose(2, 3), w, padding=1), randn(2, 4, 8, 7),
         randn(8, 4, 3, 3, seed=1))


# ----- normalisation: statistics, parameters and arithmetic in double
def _shifted(*shape):
    """Values far from 0 against their spread: float32 statistics lose them."""
    return randn(*shape) * 1e-3 + 100.0


@pytest.mark.parametrize("shape", [(3, 65), (2, 5, 13)])
def test_layer_norm(shape):
    k = shape[-1]
    both(lambda x, w, b: F.layer_norm(x, (k,), w, b, 1e-5), _shifted(*shape),
         randn(k, seed=1), randn(k, seed=2))
    both(lambda x: F.layer_norm(x, shape[1:], eps=1e-12), randn(*shape))


def test_group_norm():
    both(lambda x, w, b: F.group_norm(x, 4, w, b), _shifted(2, 8, 5, 13), randn(8, seed=1),
         randn(8, seed=2))
    both(lambda x: F.group_norm(x, 1), randn(2, 6, 65))


def test_instance_norm():
    both(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), _shifted(2, 3, 65),
         randn(3, seed=1), randn(3, seed=2))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(training):
    def bn(x, w, b):
        mean = torch.full((3,), 0.5, dtype=D, device=x.device)
        var = torch.full((3,), 2.0, dtype=D, device=x.device)
        return F.batch_norm(x, mean, var, w, b, training=training, eps=1e-12)
    both(bn, _shifted(5, 3, 13), randn(3, seed=1), randn(3, seed=2))
    both(lambda x: F.batch_norm(x, None, None, training=True), randn(65, 2))


def test_batch_norm_running_statistics():
    cpu = nn.BatchNorm2d(4).double()
    dev = copy.deepcopy(cpu).to(DEV)
    for seed in range(2):
        x = _shifted(3, 4, 5, 5) + seed
        cpu(x)
        dev(x.to(DEV))
    for name in ("running_mean", "running_var"):
        got, want = getattr(dev, name), getattr(cpu, name)
        assert got.dtype == D and relative(got, want) < TOL


# ----- pooling, resampling
@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True),
    lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
    lambda x: F.adaptive_max_pool2d(x, (3, 5)),
], ids=["max", "avg", "adaptive_avg", "adaptive_max"])
def test_pool2d(fn):
    both(fn, randn(2, 3, 13, 11))


def test_pool_1d_3d():
    both(lambda x: F.avg_pool1d(x, 3, 2, 1), randn(2, 3, 65))
    both(lambda x: F.max_pool3d(x, 2), randn(2, 3, 5, 6, 7))


@pytest.mark.parametrize("mode,shape,kw", [
    ("nearest", (2, 3, 5, 7), dict(scale_factor=2)),
    ("nearest", (2, 3, 65), dict(size=33)),
    ("linear", (2, 3, 65), dict(scale_factor=1.7, align_corners=False)),
    ("bilinear", (2, 3, 5, 7), dict(scale_factor=2, align_corners=False)),
    ("bilinear", (2, 3, 5, 7), dict(size=(4, 9), align_corners=True)),
    ("bicubic", (2, 3, 5, 7), dict(scale_factor=1.7, align_corners=False)),
    ("bilinear", (2, 3, 5, 7), dict(size=(4, 9), align_corners=False, antialias=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=2, align_corners=False)),
])
def test_interpolate(mode, shape, kw):
    both(lambda x: F.interpolate(x, mode=mode, **kw), randn(*shape))


# ----- softmax, embedding, attention, losses
def test_softmax():
    both(lambda x: F.softmax(x, -1), randn(3, 65))
    both(lambda x: F.log_softmax(x, 1), randn(3, 65, 4))


def test_embedding():
    idx = torch.tensor([[1, 2, 0], [4, 2, 2]])
    both(lambda w: F.embedding(idx.to(w.device), w, padding_idx=0), randn(5, 65))


def test_embedding_bag_forward():
    idx, offsets = torch.tensor([1, 2, 0, 4, 2, 2]), torch.tensor([0, 2])
    for mode in ("sum", "mean"):
        both(lambda w: F.embedding_bag(idx.to(w.device), w, offsets.to(w.device), mode=mode),
             randn(5, 65), grads=False)


@pytest.mark.parametrize("kw", [dict(), dict(is_causal=True), dict(scale=0.3)])
def test_attention(kw):
    both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), randn(2, 3, 17, 8),
         randn(2, 3, 17, 8, seed=1), randn(2, 3, 17, 8, seed=2))


def test_attention_masks():
    keep = torch.ones(17, 19, dtype=torch.bool).tril()
    both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                        attn_mask=keep.to(q.device)),
         randn(2, 3, 17, 8), randn(2, 3, 19, 8, seed=1), randn(2, 3, 19, 8, seed=2))
    both(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         randn(2, 3, 17, 8), randn(2, 3, 19, 8, seed=1), randn(2, 3, 19, 8, seed=2),
         randn(17, 19, seed=3))


def test_losses():
    target = torch.tensor([1, 0, 4, 2, 64, 3])
    weight = randn(65, seed=5).abs()
    both(lambda x: F.cross_entropy(x, target.to(x.device)), randn(6, 65))
    both(lambda x: F.cross_entropy(x, target.to(x.device), weight=weight.to(x.device),
                                   ignore_index=2, label_smoothing=0.1), randn(6, 65))
    both(lambda x, y: F.mse_loss(x, y), randn(6, 65), randn(6, 65, seed=1))
    both(lambda x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid()), randn(6, 65),
         randn(6, 65, seed=1))


# ----- a whole network of plain modules: every parameter's gradient
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.GELU(),
            nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1),
            nn.InstanceNorm2d(8, affine=True), nn.Upsample(scale_factor=2, mode="bilinear"),
            nn.AvgPool2d(2), nn.Upsample(scale_factor=2), nn.AdaptiveAvgPool2d(3))
        self.norm = nn.LayerNorm(8)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(72, 10)

    def forward(self, x):
        f = self.features(x)                      # (N, 8, 3, 3)
        t = self.norm(f.flatten(2).transpose(1, 2))   # (N, 9, 8)
        t = t + self.attention(t, t, t, need_weights=False)[0]
        return self.head(t.flatten(1))


def test_network():
    torch.manual_seed(0)
    cpu = _Net().double()
    dev = copy.deepcopy(cpu).to(DEV)
    x, target = randn(2, 3, 17, 17), torch.tensor([3, 7])
    want = F.cross_entropy(cpu(x), target)
    got = F.cross_entropy(dev(x.to(DEV)), target.to(DEV))
    assert got.dtype == D and relative(got, want) < TOL
    want.backward()
    got.backward()
    top = max(float(p.grad.abs().max()) for p in cpu.parameters())
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters()):
        assert p.grad.dtype == D, name
        # (the transposed convolution's bias feeds an instance norm: its gradient is 0
        # in exact arithmetic, rounding on both sides; measured against the largest)
        error = float((p.grad.cpu() - q.grad).abs().max())
        assert error < TOL * max(float(q.grad.abs().max()), 1e-4 * top), name


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_backward_sums_in_double(mode):
    """float64 embedding_bag's weight gradient sums in double (float32 would round the
    sums to about 1e-7)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(70, 3, dtype=torch.float64, generator=g, requires_grad=True)
    idx = torch.randint(0, 70, (65,), generator=g)
    off = torch.tensor([0, 20, 20, 41])
    wo = w.detach().to("ocl").requires_grad_()
    weights = torch.rand(65, dtype=torch.float64, generator=g) if mode == "sum" else None
    F.embedding_bag(idx, w, off, mode=mode, per_sample_weights=weights).pow(2).sum().backward()
    F.embedding_bag(idx.to("ocl"), wo, off.to("ocl"), mode=mode,
                    per_sample_weights=None if weights is None else weights.to("ocl")
                    ).pow(2).sum().backward()
    torch.testing.assert_close(wo.grad.cpu(), w.grad, rtol=1e-12, atol=1e-12)
