"""Whole nets against PyTorch CPU: same weights -> same outputs, loss, parameter gradients
and BatchNorm running statistics, in train and predict mode."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from dlprim.layers import REGISTRY

torch = pytest.importorskip("torch")
nn = torch.nn


def needs(*types):
    missing = sorted(set(types) - set(REGISTRY))
    if missing:
        pytest.skip("layer types not available yet: %s" % ", ".join(missing))


def bn(c):
    return nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)


class SmallNet(nn.Module):
    """conv-BN-ReLU(in place)-maxpool-conv+ReLU-global pooling-flatten, as small_config."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), bn(8)
        self.conv2 = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        h = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2, 2)
        return torch.relu(self.conv2(h)).mean((2, 3))


def small_config(batch):
    cfg = dp.NetConfig()
    cfg.add_input("data", [batch, 3, 12, 12])
    cfg.add_input("label", [batch], dtype="int")
    cfg.add("Convolution2D", name="conv1", params=["conv1.weight"],
            options={"channels_out": 8, "kernel": 3, "pad": 1, "bias": False})
    cfg.add("BatchNorm", name="bn1", params=["bn1.running_mean", "bn1.running_var", "bn1.weight",
                                             "bn1.bias"])
    cfg.add("Activation", name="relu", options={"activation": "relu"}, inplace=True)
    cfg.add("Pooling2D", name="pool", options={"kernel": 2, "stride": 2, "mode": "max"})
    cfg.add("Convolution2D", name="conv2", params=["conv2.weight", "conv2.bias"],
            options={"channels_out": 5, "kernel": 1, "bias": True, "activation": "relu"})
    cfg.add("GlobalPooling", name="gp", options={"mode": "avg"})
    cfg.add("Flatten", name="flat")
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["flat", "label"])
    cfg.set_outputs(["loss"])
    return cfg


class BasicBlock(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False), bn(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, 1, 1, bias=False), bn(width)
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), bn(width))

    def forward(self, x):
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 structure and state-dict names."""

    def __init__(self, classes):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), bn(64)
        cin = 64
        for stage, width in enumerate([64, 128, 256, 512]):
            stride = 1 if stage == 0 else 2
            setattr(self, "layer%d" % (stage + 1),
                    nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width, 1)))
            cin = width
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x.mean((2, 3)))


def conv_bn_relu6(cin, cout, k, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         bn(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        hidden = cin * t
        layers = [conv_bn_relu6(cin, hidden, 1)] if t != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), bn(cout)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's mobilenet_v2 structure and state-dict names (dropout left out)."""

    def __init__(self, classes):
        super().__init__()
        feats, cin = [conv_bn_relu6(3, 32, 3, 2)], 32
        for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
            for i in range(n):
                feats.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        feats.append(conv_bn_relu6(320, 1280, 1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Identity(), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def randomize(module, seed):
    """Non-trivial weights and BatchNorm statistics, so every parameter matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if t.dtype != torch.float32:
                continue
            if name.endswith("running_var"):
                t.copy_(0.5 + torch.rand(t.shape, generator=g))
            elif name.endswith(("running_mean", ".bias")):
                t.copy_(0.1 * torch.randn(t.shape, generator=g))
            elif t.ndim == 1:  # BatchNorm weight
                t.copy_(0.8 + 0.4 * torch.rand(t.shape, generator=g))


def close(a, b, what, tol=1e-4):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.abs(b).max(), 1e-6)
    err = np.abs(a - b).max() / scale
    assert err < tol, "%s: max error %.3g relative to max %.3g" % (what, err, scale)


def close_gradient(a, b, what, tol=1e-2, floor=1e-6):
    """Gradients of deep nets in float32: the two sides round differently (forward values
    differ by ~1e-5 relative), and a pre-activation within that of a ReLU/ReLU6 kink (a few
    per net have |x| ~ 1e-6) takes the other branch, so a few gradient elements differ
    outright and the difference travels down the net. Hold the whole tensor to ``tol`` in
    norm and every element to 5 tol of the largest; a wrong formula or a lost
    contribution misses both by far (errors of order 1). ``floor``: gradients that are zero
    in exact arithmetic (a bias right before a BatchNorm) are rounding noise on both sides."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    norm = max(np.linalg.norm(b), floor)
    assert np.linalg.norm(a - b) / norm < tol, "%s: error %.3g in norm" % (
        what, np.linalg.norm(a - b) / norm)
    assert np.abs(a - b).max() < 5 * tol * max(np.abs(b).max(), floor), what


def check_against_torch(ctx, model, cfg, x, labels, grad_tol=1e-2, start=dp.TRAIN):
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    net = dp.Net(ctx, cfg, mode=start)
    net.set_parameters(state)
    net.mode = dp.TRAIN
    # train: loss, every parameter gradient, updated running statistics
    out = net(data=x, label=labels)
    net.backward()
    model.train()
    logits = model(torch.tensor(x))
    loss = nn.functional.cross_entropy(logits, torch.tensor(labels).long())
    loss.backward()
    close(out["loss"].reshape(()), loss.item(), "loss", 1e-4)
    floor = 1e-4 * max(float(p.grad.norm()) for p in model.parameters())
    for name, p in model.named_parameters():
        close_gradient(net.param_diff(name).to_host(), p.grad.numpy(), "gradient of " + name,
                       grad_tol, floor)
    for name, t in model.state_dict().items():
        if "running" in name:
            close(net.param(name).to_host(), t.numpy(), name, 1e-4)
    # predict: the same outputs with running statistics
    net.mode = dp.PREDICT
    model.eval()
    with torch.no_grad():
        expected = model(torch.tensor(x))
    got = net(data=x, label=labels)
    close(got["loss"].reshape(()), nn.functional.cross_entropy(
        expected, torch.tensor(labels).long()).item(), "predict loss", 1e-4)
    return net


@pytest.mark.parametrize("start", [dp.TRAIN, dp.PREDICT])
def test_small_conv_bn_net_matches_torch(ctx, rng, start):
    needs("Convolution2D", "BatchNorm", "Activation", "Pooling2D", "GlobalPooling", "Flatten",
          "SoftmaxWithLoss")
    torch.manual_seed(0)
    model = SmallNet()
    randomize(model, 1)
    x = rng.standard_normal((4, 3, 12, 12)).astype(np.float32)
    labels = rng.integers(0, 5, 4).astype(np.int32)
    # set up in either mode first: switching to train must size backward workspaces anew
    net = check_against_torch(ctx, model, small_config(4), x, labels, start=start)
    # BatchNorm reads its input in backward, so the in-place ReLU after it shares memory
    # only when predicting
    assert net.plan.autograd.inplace_ops == ["relu"]
    net.mode = dp.TRAIN
    assert net.plan.autograd.inplace_ops == ["relu"]  # BN keeps its input, not its output
    rows = {line.split()[0]: line for line in net.summary().splitlines()}
    assert rows["relu"].endswith("in place")
    # conv1: 2 * N*H*W * C_out * C_in*k*k multiply-adds, from the launches' own counts
    assert "%.1f" % (2 * 4 * 12 * 12 * 8 * 3 * 9 / 1e6) in rows["conv1"].split()


@pytest.mark.parametrize("name, builder, module, grad_tol", [
    ("resnet18", models.resnet18, ResNet18, 1e-2),
    # 35 ReLU6 over BatchNorm in train mode: three pre-activations of this input sit within
    # rounding of a kink (measured against float64), which moves early gradients ~3% in norm
    ("mobilenet_v2", models.mobilenet_v2, MobileNetV2, 6e-2)])
def test_model_builders_match_torch(ctx, rng, name, builder, module, grad_tol):
    needs("Convolution2D", "BatchNorm", "Activation", "Pooling2D", "GlobalPooling", "Elementwise",
          "InnerProduct", "SoftmaxWithLoss")
    torch.manual_seed(0)
    model = module(10)
    randomize(model, 2)
    # 64x64 keeps at least 2x2 values per channel in the last stage: BatchNorm over only the
    # batch of 2 would amplify float32 rounding without bound
    x = rng.standard_normal((2, 3, 64, 64)).astype(np.float32)
    labels = np.array([3, 7], np.int32)
    check_against_torch(ctx, model, builder(batch=2, image_size=64, classes=10, train=True),
                        x, labels, grad_tol)
