"""dlprim.models.convnext against the same network in PyTorch, laid out and named as
torchvision's ConvNeXt (CNBlock's block.0..6 and layer_scale, LayerNorm2d, the classifier
0..2): loss and every parameter's gradient."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from layer_check import assert_loss_and_grads_match_torch

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

STAGES, IMAGE, CLASSES, B = ((8, 1), (16, 2)), 32, 5, 2


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims)


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim),
                                   Permute([0, 2, 3, 1]), nn.LayerNorm(dim, eps=1e-6),
                                   nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim),
                                   Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 0.5))

    def forward(self, x):
        return self.layer_scale * self.block(x) + x


class ConvNeXt(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Sequential(nn.Conv2d(3, STAGES[0][0], 4, 4),
                                LayerNorm2d(STAGES[0][0], eps=1e-6))]
        for i, (width, blocks) in enumerate(STAGES):
            layers.append(nn.Sequential(*[CNBlock(width) for _ in range(blocks)]))
            if i + 1 < len(STAGES):
                layers.append(nn.Sequential(LayerNorm2d(width, eps=1e-6),
                                            nn.Conv2d(width, STAGES[i + 1][0], 2, 2)))
        self.features = nn.Sequential(*layers)
        width = STAGES[-1][0]
        self.classifier = nn.Sequential(LayerNorm2d(width, eps=1e-6), nn.Flatten(1),
                                        nn.Linear(width, CLASSES))

    def forward(self, x):
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1))


def test_convnext_matches_pytorch(ctx):
    cfg = models.convnext(STAGES, batch=B, image_size=IMAGE, classes=CLASSES)
    net = dp.Net(ctx, cfg.to_dict(), mode=dp.TRAIN, seed=1)
    rng = np.random.default_rng(2)
    arrays = net.get_parameters()
    for name in arrays:
        if name.endswith("layer_scale"):  # not zeros: let the blocks matter
            arrays[name] = rng.uniform(0.3, 1.0, arrays[name].shape).astype(np.float32)
    net.set_parameters(arrays)
    twin = ConvNeXt()
    twin.load_state_dict({k: torch.tensor(v) for k, v in arrays.items()})
    x = rng.standard_normal((B, 3, IMAGE, IMAGE)).astype(np.float32)
    label = np.array([1, 4], np.int32)
    loss = net(data=x, label=label)["loss"]
    assert_loss_and_grads_match_torch(net, loss, twin, twin(torch.tensor(x)), label,
                                      grad_rtol=2e-3)


def test_convnext_tiny_names_follow_torchvision():
    ops = models.convnext_tiny(batch=1).to_dict()["operators"]
    names = {n for op in ops for n in op.get("params", [])}
    for expected in ("features.0.0.weight", "features.0.1.bias", "features.1.2.block.0.weight",
                     "features.5.8.block.5.bias", "features.5.8.layer_scale",
                     "features.6.0.weight", "features.6.1.weight", "classifier.0.weight",
                     "classifier.2.bias"):
        assert expected in names, expected
    # the stem 4, 18 blocks of 9, 3 downsamplings of 4, the classifier 4: as torchvision's
    assert len(names) == 4 + 18 * 9 + 3 * 4 + 4
