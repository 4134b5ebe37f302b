"""nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell on ocl (PyTorch's fused cells per time
step, dlprim/torch/ops_rnn_cells.py) against the CPU: outputs, final states and every
gradient, over layers, directions, batch-first input, given initial states and sequence
lengths that are not multiples of the kernels' work-group."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import dlprim.torch  # noqa: E402,F401


def _same(got, want, what, tol=2e-5):
    np.testing.assert_allclose(got.detach().cpu().numpy(), want.detach().numpy(), rtol=tol,
                               atol=tol, err_msg=what)


def _compare(make, inputs, reduce):
    """make() -> module on the CPU; ``inputs``: CPU tensors (requires_grad as wanted);
    ``reduce(outputs)`` -> a scalar loss."""
    torch.manual_seed(0)
    ref = make()
    mine = make()
    mine.load_state_dict(ref.state_dict())
    mine = mine.to("ocl")
    xs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    on = [x.detach().to("ocl").requires_grad_(x.requires_grad) for x in inputs]
    want, got = ref(*xs), mine(*on)
    reduce(want).backward()
    reduce(got).backward()
    flat = lambda o: [t for t in (o if isinstance(o, tuple) else (o,)) for t in
                      (t if isinstance(t, tuple) else (t,))]
    for k, (g, w) in enumerate(zip(flat(got), flat(want))):
        _same(g, w, "output %d" % k)
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        _same(q.grad, p.grad, "grad of " + name)
    for k, (x, y) in enumerate(zip(xs, on)):
        if x.requires_grad:
            _same(y.grad, x.grad, "grad of input %d" % k)


def _loss(out):
    y, state = out
    parts = [y] + list(state if isinstance(state, tuple) else (state,))
    return sum((t * torch.linspace(-1, 1, t.numel()).reshape(t.shape).to(t.device)).sum()
               for t in parts)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidirectional,batch_first,bias", [
    (1, False, False, True), (2, True, True, True), (2, False, False, False)])
def test_recurrent_layers_match_cpu(kind, layers, bidirectional, batch_first, bias):
    n, length, features, hidden = 3, 5, 7, 67  # 67 units: past one 64-wide work-group
    g = torch.Generator().manual_seed(1)
    shape = (n, length, features) if batch_first else (length, n, features)
    x = torch.randn(shape, generator=g).requires_grad_()
    dirs = 2 if bidirectional else 1
    h0 = torch.randn(layers * dirs, n, hidden, generator=g).requires_grad_()
    make = lambda: getattr(torch.nn, kind)(features, hidden, num_layers=layers, bias=bias,
                                           batch_first=batch_first, bidirectional=bidirectional)
    if kind == "LSTM":
        c0 = torch.randn(layers * dirs, n, hidden, generator=g).requires_grad_()
        _compare(lambda: _Pair(make()), [x, h0, c0], _loss)
    else:
        _compare(lambda: _Single(make()), [x, h0], _loss)
    _compare(make, [x.detach()], _loss)  # no initial state: zeros


class _Pair(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0, c0):
        return self.rnn(x, (h0, c0))


class _Single(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0):
        return self.rnn(x, h0)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_cells_match_cpu_and_take_only_some_gradients(kind):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, generator=g).requires_grad_()
    h = torch.randn(4, 9, generator=g).requires_grad_()
    make = lambda: getattr(torch.nn, kind)(6, 9)
    if kind == "LSTMCell":
        c = torch.randn(4, 9, generator=g).requires_grad_()
        _compare(lambda: _CellPair(make()), [x, h, c], lambda o: (o[0] * 3).sum())  # cy unused
        _compare(lambda: _CellPair(make()), [x, h, c], lambda o: (o[1] * 2).sum())  # hy unused
    else:
        _compare(lambda: _Single(make()), [x, h], lambda o: (o * o).sum())


class _CellPair(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x, h, c):
        return self.cell(x, (h, c))


def test_half_gates_compute_in_float32():
    torch.manual_seed(3)
    ref = torch.nn.LSTM(5, 8)
    mine = torch.nn.LSTM(5, 8)
    mine.load_state_dict(ref.state_dict())
    mine = mine.half().to("ocl")
    x = torch.randn(4, 2, 5)
    y, _ = mine(x.half().to("ocl"))
    want, _ = ref(x.half().float())
    assert y.dtype == torch.float16
    np.testing.assert_allclose(y.detach().float().cpu().numpy(), want.detach().numpy(), atol=3e-3)
