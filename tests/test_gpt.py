"""The GPT-style decoder of dlprim.models against the same network in PyTorch (nanoGPT's
layout and parameter names): loss and every parameter's gradient, then a few Adam steps
that learn a sequence."""
import numpy as np
import pytest

import dlprim as dp
from dlprim import models
from layer_check import assert_loss_and_grads_match_torch

torch = pytest.importorskip("torch")
from gpt_twin import GptTwin  # noqa: E402 (needs torch)

V, L, LAYERS, HEADS, D, B = 11, 8, 2, 2, 16, 3


@pytest.fixture
def net_and_twin(ctx):
    net = dp.Net(ctx, models.gpt(V, L, LAYERS, HEADS, D, B).to_dict(), mode=dp.TRAIN, seed=1)
    rng = np.random.default_rng(2)
    arrays = net.get_parameters()
    arrays["transformer.wpe.weight"] = (0.1 * rng.standard_normal((L, D))).astype(np.float32)
    net.set_parameters(arrays)
    twin = GptTwin(V, L, LAYERS, HEADS, D)
    twin.load_state_dict({k: torch.tensor(v) for k, v in arrays.items()})
    return net, twin


def test_loss_and_gradients_match_pytorch(ctx, net_and_twin):
    net, twin = net_and_twin
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, V, (B, L))
    targets = np.roll(tokens, -1, axis=1)
    loss = net(tokens=tokens, targets=targets)["loss"]
    assert_loss_and_grads_match_torch(net, loss, twin, twin(torch.tensor(tokens)), targets)


def test_a_few_adam_steps_learn_a_sequence(ctx, net_and_twin):
    net, _ = net_and_twin
    seq = np.arange(L + 1) % V
    tokens = np.stack([np.roll(seq[:L], i) for i in range(B)])
    targets = np.stack([np.roll(seq[1:], i) for i in range(B)])
    solver = dp.solvers.Adam(net, lr=3e-3)
    first = None
    for _ in range(40):
        solver.zero_grad(net)
        out = net(tokens=tokens, targets=targets)
        first = out["loss"].item() if first is None else first
        net.backward()
        solver.apply(net)
    last = net(tokens=tokens, targets=targets)["loss"].item()
    assert last < 0.5 * first, (first, last)
