"""Tiny PyTorch versions of the CNN families the ONNX importer is validated on.

Each builder gives an ``nn.Module`` for 3x32x32 images and 10 classes, with the family's
characteristic blocks (and nothing more): residual basic and bottleneck blocks, grouped
and wide convolutions, dense concatenation, fire modules with ceil-mode pooling,
multi-branch inception modules, inverted residuals with ReLU6 / hardswish / SiLU and
squeeze-excite, channel shuffle. Widths are small so that a whole family builds and runs
in seconds on a CPU OpenCL driver.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

IMAGE = (3, 32, 32)
CLASSES = 10


def conv_bn(cin, cout, k=3, stride=1, groups=1, act=nn.ReLU, pad=None):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2 if pad is None else pad, groups=groups,
                        bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def alexnet():
    return nn.Sequential(
        nn.Conv2d(3, 8, 5, 2, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(3), nn.Flatten(), nn.Dropout(0.5),
        nn.Linear(16 * 9, 32), nn.ReLU(inplace=True), nn.Linear(32, CLASSES))


def vgg():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(16 * 8 * 8, 32), nn.ReLU(),
        nn.Linear(32, CLASSES))


class Basic(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride)
        self.b = conv_bn(cout, cout, 3, act=None)
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.b(self.a(x)) + s)


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride=1, groups=1, expansion=4):
        super().__init__()
        cout = width * expansion
        self.a = conv_bn(cin, width, 1)
        self.b = conv_bn(width, width, 3, stride, groups=groups)
        self.c = conv_bn(width, cout, 1, act=None)
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.c(self.b(self.a(x))) + s)


class Classifier(nn.Module):
    """Global average pool, flatten, linear."""

    def __init__(self, cin):
        super().__init__()
        self.fc = nn.Linear(cin, CLASSES)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _resnet_stem(cout=8):
    return [conv_bn(3, cout, 7, 2), nn.MaxPool2d(3, 2, 1)]


def resnet_basic():
    return nn.Sequential(*_resnet_stem(), Basic(8, 8), Basic(8, 16, 2), Classifier(16))


def resnet_bottleneck():
    return nn.Sequential(*_resnet_stem(), Bottleneck(8, 4), Bottleneck(16, 8, 2), Classifier(32))


def resnext():
    return nn.Sequential(*_resnet_stem(), Bottleneck(8, 8, groups=4, expansion=2),
                         Bottleneck(16, 16, 2, groups=4, expansion=2), Classifier(32))


def wide_resnet():
    # the 3x3 as wide as the block's output (ResNet's is a quarter of it)
    return nn.Sequential(*_resnet_stem(), Bottleneck(8, 16, expansion=1),
                         Bottleneck(16, 32, 2, expansion=1), Classifier(32))


class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 2 * growth, 1, bias=False),
                                  nn.BatchNorm2d(2 * growth), nn.ReLU(),
                                  nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


def densenet():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1, bias=False), DenseLayer(8, 4), DenseLayer(12, 4),
        nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 8, 1, bias=False), nn.AvgPool2d(2, 2),
        DenseLayer(8, 4), nn.BatchNorm2d(12), nn.ReLU(), Classifier(12))


class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU(inplace=True))
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x):
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


def squeezenet():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
        Fire(16, 4, 8), Fire(16, 4, 8), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(16, 8, 16),
        nn.Dropout(0.5), nn.Conv2d(32, CLASSES, 1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten())


class Inception(nn.Module):
    """GoogLeNet's four branches, with an Inception-v3 style 1x3 / 3x1 pair in the third."""

    def __init__(self, cin, c1, c3r, c3, c5r, c5, cp):
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1)
        self.b2 = nn.Sequential(conv_bn(cin, c3r, 1), conv_bn(c3r, c3, 3))
        self.b3 = nn.Sequential(conv_bn(cin, c5r, 1), conv_bn(c5r, c5, (1, 3), pad=(0, 1)),
                                conv_bn(c5, c5, (3, 1), pad=(1, 0)))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


def googlenet():
    return nn.Sequential(conv_bn(3, 8, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
                         Inception(8, 4, 4, 8, 2, 4, 4), nn.MaxPool2d(3, 2, ceil_mode=True),
                         Inception(20, 8, 4, 8, 2, 4, 4), Classifier(24))


class SqueezeExcite(nn.Module):
    def __init__(self, c, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class InvertedResidual(nn.Module):
    """MobileNet v2/v3, MnasNet and EfficientNet's block: expand 1x1, depthwise kxk,
    optional squeeze-excite, project 1x1, residual when shapes allow."""

    def __init__(self, cin, cout, expand, k=3, stride=1, act=nn.ReLU6, se=None):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=act)]
        layers.append(conv_bn(hidden, hidden, k, stride, groups=hidden, act=act))
        if se is not None:
            layers.append(se(hidden))
        layers.append(conv_bn(hidden, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


def mobilenet_v2():
    return nn.Sequential(conv_bn(3, 8, 3, 2, act=nn.ReLU6), InvertedResidual(8, 8, 1),
                         InvertedResidual(8, 12, 4, stride=2), InvertedResidual(12, 12, 4),
                         conv_bn(12, 32, 1, act=nn.ReLU6), Classifier(32))


def mobilenet_v3():
    se = lambda c: SqueezeExcite(c, max(c // 4, 2), nn.ReLU, nn.Hardsigmoid)  # noqa: E731
    return nn.Sequential(
        conv_bn(3, 8, 3, 2, act=nn.Hardswish), InvertedResidual(8, 8, 1, act=nn.ReLU, se=se),
        InvertedResidual(8, 12, 3, 5, 2, act=nn.Hardswish, se=se),
        InvertedResidual(12, 12, 3, 5, act=nn.Hardswish, se=se),
        conv_bn(12, 24, 1, act=nn.Hardswish), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(24, 32), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, CLASSES))


def channel_shuffle(x, groups):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.left = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None),
                                      conv_bn(cin, half, 1))
        src = cin if stride > 1 else half
        self.right = nn.Sequential(conv_bn(src, half, 1), conv_bn(half, half, 3, stride, groups=half, act=None),
                                   conv_bn(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.right(b)], 1)
        else:
            out = torch.cat([self.left(x), self.right(x)], 1)
        return channel_shuffle(out, 2)


def shufflenet():
    return nn.Sequential(conv_bn(3, 8, 3, 2), nn.MaxPool2d(3, 2, 1), ShuffleUnit(8, 16, 2),
                         ShuffleUnit(16, 16, 1), conv_bn(16, 32, 1), Classifier(32))


def mnasnet():
    return nn.Sequential(conv_bn(3, 8, 3, 2), conv_bn(8, 8, 3, groups=8), conv_bn(8, 8, 1, act=None),
                         InvertedResidual(8, 12, 3, 5, 2, act=nn.ReLU),
                         InvertedResidual(12, 12, 3, 5, act=nn.ReLU),
                         conv_bn(12, 32, 1), Classifier(32))


def efficientnet():
    se = lambda c: SqueezeExcite(c, max(c // 4, 2), nn.SiLU, nn.Sigmoid)  # noqa: E731
    return nn.Sequential(conv_bn(3, 8, 3, 2, act=nn.SiLU),
                         InvertedResidual(8, 8, 1, act=nn.SiLU, se=se),
                         InvertedResidual(8, 12, 4, 3, 2, act=nn.SiLU, se=se),
                         InvertedResidual(12, 12, 4, 5, act=nn.SiLU, se=se),
                         conv_bn(12, 32, 1, act=nn.SiLU), Classifier(32))


class RegNetBlock(nn.Module):
    """RegNet-Y: 1x1, 3x3 grouped (group width 4), squeeze-excite, 1x1, residual."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 1), conv_bn(cout, cout, 3, stride, groups=cout // 4),
                                  SqueezeExcite(cout, max(cin // 4, 2)), conv_bn(cout, cout, 1, act=None))
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None

    def forward(self, x):
        s = x if self.down is None else self.down(x)
        return F.relu(self.body(x) + s)


def regnet():
    return nn.Sequential(conv_bn(3, 8, 3, 2), RegNetBlock(8, 16, 2), RegNetBlock(16, 16, 1), Classifier(16))


class UNet(nn.Module):
    """An encoder-decoder (beyond the classification families): strided conv with GELU,
    transposed convolution, nearest and bilinear upsampling, skip concatenation, LeakyReLU,
    a global mean broadcast back, per-pixel logits."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, 2, 1)
        self.up = nn.ConvTranspose2d(8, 4, 2, 2)
        self.mix = nn.Conv2d(7, 6, 3, padding=1)
        self.head = nn.Conv2d(6, CLASSES, 1)

    def forward(self, x):
        a = F.gelu(self.down(x))
        near = F.interpolate(a, scale_factor=2, mode="nearest")
        lin = F.interpolate(a, size=x.shape[2:], mode="bilinear", align_corners=False)
        y = self.mix(torch.cat([self.up(a), x], 1)) + lin[:, :6] + near[:, 2:]
        y = F.leaky_relu(y, 0.1)
        return self.head(y - y.mean((2, 3), keepdim=True))


FAMILIES = {"alexnet": alexnet, "vgg": vgg, "resnet_basic": resnet_basic,
            "resnet_bottleneck": resnet_bottleneck, "resnext": resnext, "wide_resnet": wide_resnet,
            "densenet": densenet, "squeezenet": squeezenet, "googlenet": googlenet,
            "mobilenet_v2": mobilenet_v2, "mobilenet_v3": mobilenet_v3, "shufflenet": shufflenet,
            "mnasnet": mnasnet, "efficientnet": efficientnet, "regnet": regnet, "unet": UNet}


def randomize_batchnorm(model, seed=0):
    """Non-trivial running statistics and affine values, so BatchNorm is really tested."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(c, generator=g) - 0.5)
    return model


def build(name, seed=0):
    torch.manual_seed(seed)
    return randomize_batchnorm(FAMILIES[name](), seed).eval()
