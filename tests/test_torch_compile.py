"""torch.compile(model, backend="dlprim") of CPU models and dlprim.torch.compile of ocl
models: captured graphs run as dlprim Nets. Outputs, parameter gradients and BatchNorm
statistics against eager PyTorch on the CPU; a new batch size; eval mode; a training
loop; fallback (an operator with no ONNX form) and explain; export_net."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
nn = torch.nn

import dlprim.torch as dt  # noqa: E402
from dlprim.torch.compiler import reports  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


class Residual(nn.Module):
    """A ResNet basic block and a transformer encoder layer (LayerNorm, attention, MLP)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        tokens = y.flatten(2).transpose(1, 2).reshape(x.shape[0], -1, 16)
        return self.head(self.encoder(tokens).mean(1))


def twins(make, seed=0):
    torch.manual_seed(seed)
    ref = make()
    model = make()
    model.load_state_dict(ref.state_dict())
    return ref, model


def close(a, b, tol=1e-4):
    a, b = a.detach().cpu().numpy(), b.detach().cpu().numpy()
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max())))


def same_outputs_and_gradients(y, want, model, ref):
    """y (the compiled model's) and want (its eager twin's) agree, and so does every
    parameter's gradient of the sum of their squares (each parameter has one)."""
    close(y, want)
    y.square().sum().backward()
    want.square().sum().backward()
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert a.grad is not None, name
        close(a.grad, b.grad)


def compiled_on(model, where):
    """(the compiled model, a function putting inputs where it takes them): torch.compile
    of a CPU model, or dlprim.torch.compile of the model moved to ocl."""
    if where == "cpu":
        return torch.compile(model, backend=dt.backend), lambda t: t
    return dt.compile(model.to("ocl")), lambda t: t.to("ocl")


@pytest.mark.parametrize("where", ["cpu", "ocl"])
@pytest.mark.parametrize("make,shape", [(cnn, (4, 3, 12, 12)), (Residual, (2, 4, 4, 4))],
                         ids=["cnn", "resnet_block_and_encoder"])
def test_outputs_gradients_and_statistics_match_eager(make, shape, where):
    ref, model = twins(make)
    compiled, put = compiled_on(model, where)
    x = torch.randn(shape)
    y, want = compiled(put(x)), ref(x)
    close(y, want)
    g = torch.randn_like(want)
    (y * put(g)).sum().backward()
    (want * g).sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert p.grad is not None, name
        close(p.grad, q.grad, 1e-3)
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        close(b.float(), c.float())  # running statistics and num_batches_tracked
    assert reports()[-1].where == "dlprim", reports()[-1]
    x6 = torch.randn((6,) + shape[1:])  # another batch size
    close(compiled(put(x6)), ref(x6))
    model.eval()
    ref.eval()
    with torch.no_grad():
        close(compiled(put(x)), ref(x))
    if make is cnn:
        assert "BatchNorm" in reports()[-1].layers and "Convolution2D" in reports()[-1].layers


@pytest.mark.parametrize("where", ["cpu", "ocl"])
def test_a_compiled_training_loop_follows_eager(where):
    ref, model = twins(cnn, seed=1)
    compiled, put = compiled_on(model, where)
    rng = torch.Generator().manual_seed(2)
    x = torch.randn(32, 3, 8, 8, generator=rng)
    y = (x.mean((1, 2, 3)) > 0).long() + 2 * (x[:, 0].mean((1, 2)) > 0).long()
    losses = {}
    for name, net, fn, xs, ys in (("ref", ref, ref, x, y),
                                  ("dlprim", model, compiled, put(x), put(y))):
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        losses[name] = []
        for _ in range(30):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(fn(xs), ys)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    np.testing.assert_allclose(losses["dlprim"], losses["ref"], rtol=2e-3, atol=2e-3)
    assert losses["dlprim"][-1] < 0.6 * losses["dlprim"][0], losses["dlprim"]


class Unconvertible(nn.Module):
    """A running maximum: ONNX has no such operator, so PyTorch's exporter has no
    ``aten::cummax``, and PyTorch has no decomposition of it into operators it has."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return torch.cummax(self.fc(x), dim=1).values


def test_an_unconvertible_graph_runs_eagerly_and_is_reported():
    ref, model = twins(Unconvertible)
    x = torch.randn(3, 6)
    close(torch.compile(model, backend=dt.backend)(x), ref(x))
    report = reports()[-1]
    assert report.where == "eager" and "aten::cummax" in report.reason, report


class Breaks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()  # two graphs; the second needs h's gradient
        return self.b(h * 2)


def test_graph_breaks_are_explained_and_gradients_cross_them():
    ref, model = twins(Breaks)
    x = torch.randn(2, 4)
    found = dt.explain(model, x)
    assert len(found.breaks) == 1 and len(found.graphs) == 2
    assert all(g.where == "dlprim" for g in found.graphs), found
    text = str(found)
    assert "1 graph break" in text and "on dlprim" in text
    y = torch.compile(model, backend=dt.backend)(x)
    close(y, ref(x))
    y.sum().backward()
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad, q.grad)  # a's gradient passes through the input of the second Net


def test_export_net_leaves_pytorch(ctx, tmp_path):
    import dlprim as dp
    from dlprim.net import weights as dlp_weights
    torch.manual_seed(3)
    model = cnn().eval()
    x = torch.randn(2, 3, 12, 12)
    cfg, weights = dt.export_net(model, x, path=tmp_path / "cnn")
    assert set(weights) <= set(model.state_dict())
    assert "0.weight" in weights and "1.running_mean" in weights
    net = dp.Net(ctx, cfg, mode=dp.PREDICT)
    net.set_parameters(dlp_weights.load(str(tmp_path / "cnn.dlp")))
    out = net(**{cfg.inputs[0]["name"]: x.numpy()})
    close(torch.from_numpy(list(out.values())[0]), model(x))
    assert (tmp_path / "cnn.json").exists()
    with pytest.raises(ValueError, match="export_net"):
        dt.export_net(Unconvertible(), torch.randn(3, 6))


def test_backend_is_found_by_name():
    """The "dlprim" name is an entry point of the installed package (pip install)."""
    from importlib.metadata import entry_points
    if not [e for e in entry_points(group="torch_dynamo_backends") if e.name == "dlprim"]:
        pytest.skip("dlprim is not installed as a package here (only on the path)")
    import torch._dynamo
    assert "dlprim" in torch._dynamo.list_backends()
    ref, model = twins(Unconvertible)
    x = torch.randn(3, 6)
    close(torch.compile(model, backend="dlprim")(x), ref(x))


class ClassToken(nn.Module):
    """A parameter expanded over the batch and concatenated (the class token of a vision
    transformer): the exporter writes Expand(parameter, shape of the input)."""

    def __init__(self):
        super().__init__()
        self.token = nn.Parameter(torch.randn(1, 1, 6))
        self.position = nn.Parameter(torch.randn(1, 4, 6))
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        tokens = torch.cat([self.token.expand(x.shape[0], -1, -1), x], 1) + self.position
        return self.head(tokens).mean(1)


def test_a_parameter_expanded_over_the_batch_is_trained_in_the_net():
    ref, model = twins(ClassToken)
    compiled = dt.compile(model.to("ocl"))
    before = len(reports())
    x = torch.randn(5, 3, 6)
    y, want = compiled(x.to("ocl")), ref(x)
    assert [r.where for r in reports()[before:]] == ["dlprim"]
    same_outputs_and_gradients(y, want, model, ref)
    x2 = torch.randn(2, 3, 6)  # another batch: the expanded shape was fixed, a Net of its own
    close(compiled(x2.to("ocl")), ref(x2))


class BiasedAttention(nn.Module):
    """Self-attention with an additive bias on the scores of shape (1, H, L, L), as T5's:
    "embedding" looks up a trained table by the relative positions, "parameter" trains
    the bias itself, "constant" looks up a buffer (folded into a constant), "buffer" is a
    buffer itself (an initializer of the graph that is no parameter). ``keys``:
    "transpose" writes k^T as k.transpose(-2, -1), "split" as one permute of the heads'
    split (BERT's spelling, a Transpose (0, 2, 3, 1) in the graph)."""

    def __init__(self, bias, keys="transpose", length=5, heads=2, width=4):
        super().__init__()
        self.heads, self.width, self.keys = heads, width, keys
        self.qkv = nn.Linear(heads * width, 3 * heads * width)
        if bias == "embedding":
            self.table = nn.Embedding(2 * length - 1, heads)
        elif bias == "parameter":
            self.bias = nn.Parameter(torch.randn(1, heads, length, length))
        elif bias == "buffer":
            self.register_buffer("mask", torch.randn(1, heads, length, length))
        else:
            self.register_buffer("positions", torch.randn(2 * length - 1, heads))

    def forward(self, x):
        return self.attend(x, self.scores_bias(x))

    def attend(self, x, bias):
        n, length, _ = x.shape
        qkv = self.qkv(x).view(n, length, 3, self.heads, self.width)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        kt = qkv[:, :, 1].permute(0, 2, 3, 1) if self.keys == "split" else k.transpose(-2, -1)
        weights = (q @ kt + bias).softmax(-1)
        return (weights @ v).transpose(1, 2).reshape(n, length, -1)

    def scores_bias(self, x):
        if hasattr(self, "bias"):
            return self.bias
        if hasattr(self, "mask"):
            return self.mask
        at = torch.arange(x.shape[1], device=x.device)
        relative = at[None, :] - at[:, None] + x.shape[1] - 1
        table = self.table(relative) if hasattr(self, "table") else self.positions[relative]
        return table.permute(2, 0, 1).unsqueeze(0)


@pytest.mark.parametrize("bias,keys", [("embedding", "transpose"), ("parameter", "transpose"),
                                       ("constant", "transpose"), ("embedding", "split"),
                                       ("constant", "split"), ("buffer", "transpose")])
def test_an_attention_bias_that_trains_gets_its_gradient(bias, keys):
    """The fused attention gives its mask no gradient: a bias that trains keeps the
    attention unfused, a constant one (a buffer too: in a training graph, only the
    parameters train) is folded into it, however k^T is spelled."""
    ref, model = twins(lambda: BiasedAttention(bias, keys))
    compiled = dt.compile(model.to("ocl"))
    x = torch.randn(3, 5, 8)
    y, want = compiled(x.to("ocl")), ref(x)
    same_outputs_and_gradients(y, want, model, ref)
    types = [op.type for op in _net_of(compiled).graph.ops]
    assert ("ScaledDotProductAttention" in types) == (bias in ("constant", "buffer")), types


class BiasAfterBreak(BiasedAttention):
    """The trained bias reaches the attention's graph as an input that requires grad."""

    def forward(self, x):
        bias = self.scores_bias(x)
        torch._dynamo.graph_break()
        return self.attend(x, bias)


def test_an_attention_bias_given_as_an_input_after_a_break_gets_its_gradient():
    """The importer is not told which graph inputs require grad: a bias read from a
    float input keeps the attention unfused."""
    ref, model = twins(lambda: BiasAfterBreak("embedding"))
    compiled = torch.compile(model, backend=dt.backend)
    before = len(reports())
    x = torch.randn(3, 5, 8)
    y, want = compiled(x), ref(x)
    assert [r.where for r in reports()[before:]] == ["dlprim", "dlprim"]
    assert "ScaledDotProductAttention" not in reports()[-1].layers
    same_outputs_and_gradients(y, want, model, ref)


class CrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.att(x, x[:, :3], x[:, :3], need_weights=False)[0]  # other keys


def _net_of(compiled):
    return [r for rs in compiled._runners.values() for r in rs if r is not None][0].net


class Mlp(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(12, 40), act, nn.Linear(40, 6)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.mark.parametrize("act", [nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU()])
def test_gelu_and_silu_go_into_the_product_only_where_nothing_runs_backward(act):
    """Their gradients need the product's output before them, which an epilogue does
    not keep: folded into the InnerProduct under no_grad, their own operator where
    the Net trains (the same results either way)."""
    ref, model = twins(lambda: Mlp(act))
    x = torch.randn(70, 12)
    with torch.no_grad():  # (a model in train mode runs a train-mode Net: no fold)
        compiled = dt.compile(model.to("ocl").eval())
        close(compiled(x.to("ocl")), ref(x))
    linears = [op.options.get("activation", "identity") for op in _net_of(compiled).graph.ops
               if op.type == "InnerProduct"]
    assert linears[0] != "identity" and "Activation" not in \
        [op.type for op in _net_of(compiled).graph.ops], linears
    trained = dt.compile(model.train())
    same_outputs_and_gradients(trained(x.to("ocl")), ref(x), model, ref)
    assert "Activation" in [op.type for op in _net_of(trained).graph.ops]


@pytest.mark.parametrize("training", [True, False])
def test_self_attention_is_one_packed_attention_over_the_in_projection(training):
    ref, model = twins(lambda: nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0,
                                                          batch_first=True))
    ref.train(training), model.train(training)
    compiled = dt.compile(model.to("ocl"))
    x = torch.randn(3, 5, 16)
    y, want = compiled(x.to("ocl")), ref(x)
    same_outputs_and_gradients(y, want, model, ref)
    ops = _net_of(compiled).graph.ops
    types = [op.type for op in ops]
    assert "Transpose" not in types and "Slice" not in types, types
    sdpa = [op for op in ops if op.type == "ScaledDotProductAttention"]
    assert [op.options["layout"] for op in sdpa] == ["packed"]
    linears = [op for op in ops if op.type == "InnerProduct"]
    assert len(linears) == 4 and all(op.options["bias"] for op in linears)
    assert [op.options.get("activation") for op in linears].count("relu") == 1


def test_cross_attention_keeps_the_modules_own_forward():
    ref, model = twins(CrossAttention)
    compiled = dt.compile(model.to("ocl"))
    x = torch.randn(2, 5, 8)
    close(compiled(x.to("ocl")), ref(x))


def test_compiled_nets_follow_the_float32_matmul_precision():
    ref, model = twins(cnn)
    torch.set_float32_matmul_precision("high")
    try:
        compiled = dt.compile(model.to("ocl"))
        x = torch.randn(2, 3, 12, 12)
        close(compiled(x.to("ocl")), ref(x), 2e-3)
    finally:
        torch.set_float32_matmul_precision("highest")
    assert _net_of(compiled).precision == "tf32"
    fresh = dt.compile(twins(cnn)[1].to("ocl"))
    fresh(x.to("ocl"))
    assert _net_of(fresh).precision == "fp32"


class _ByTransposed(torch.nn.Module):
    """y = relu(x @ w + b) @ w2: weights stored (in, out), as GPT-2's Conv1D; the Net holds
    them transposed."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = torch.nn.Parameter(torch.randn(5, 7, generator=g))
        self.b = torch.nn.Parameter(torch.randn(7, generator=g))
        self.w2 = torch.nn.Parameter(torch.randn(7, 3, generator=g))

    def forward(self, x):
        return torch.relu(x @ self.w + self.b) @ self.w2


def test_weights_multiplied_as_stored_keep_one_gradient_tensor_that_accumulates():
    """x @ w with w a parameter [inputs, outputs]: the InnerProduct holds w as it is stored
    (weight_layout inputs_outputs), so the Net reads the parameter's memory and writes its
    gradient in place, no transposed copies either way. The gradient is one tensor that
    the next backward writes again (an optimizer's launches stay prepared over it), adds
    to when .grad was not reset, and keeps what was done to .grad in between."""
    cpu, ocl = _ByTransposed(), _ByTransposed().to("ocl")
    compiled = dt.compile(ocl)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(4))
    for step in range(2):
        for m in (cpu, ocl):
            m.zero_grad(set_to_none=True)
        cpu(x).square().sum().backward()
        compiled(x.to("ocl")).square().sum().backward()
        if step == 0:
            first = ocl.w.grad
            runners = [r for rs in compiled._runners.values() for r in rs if r is not None]
            assert {how for r in runners for _, how in r.sources.values()} == {"same"}
            layouts = [op.options.get("weight_layout") for r in runners
                       for op in r.net.graph.ops if op.type == "InnerProduct"]
            assert layouts == ["inputs_outputs"] * 2
        for a, b in ((cpu.w, ocl.w), (cpu.w2, ocl.w2), (cpu.b, ocl.b)):
            close(b.grad, a.grad)
    assert ocl.w.grad is first  # the same tensor every step
    with torch.no_grad():  # .grad changed in place, then a second backward adds
        cpu.w.grad.mul_(0.5)
        ocl.w.grad.mul_(0.5)
    cpu(x).square().sum().backward()
    compiled(x.to("ocl")).square().sum().backward()
    for a, b in ((cpu.w, ocl.w), (cpu.w2, ocl.w2), (cpu.b, ocl.b)):
        close(b.grad, a.grad)


class _Tied(torch.nn.Module):
    """An embedding whose table is also the output projection (GPT-2's tied head)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.emb = torch.nn.Embedding(11, 4)
        self.mix = torch.nn.Linear(4, 4)

    def forward(self, ids):
        return torch.tanh(self.mix(self.emb(ids))) @ self.emb.weight.t()


def test_a_tied_weight_sums_its_uses_into_one_gradient_tensor():
    cpu, ocl = _Tied(), _Tied().to("ocl")
    compiled = dt.compile(ocl)
    ids = torch.tensor([[1, 4, 4, 9], [0, 10, 3, 4]])
    for step in range(2):
        for m in (cpu, ocl):
            m.zero_grad(set_to_none=True)
        cpu(ids).square().mean().backward()
        compiled(ids.to("ocl")).square().mean().backward()
        if step == 0:
            first = ocl.emb.weight.grad
        close(ocl.emb.weight.grad, cpu.emb.weight.grad)
        close(ocl.mix.weight.grad, cpu.mix.weight.grad)
    assert ocl.emb.weight.grad is first
    cpu(ids).square().mean().backward()  # accumulated
    compiled(ids.to("ocl")).square().mean().backward()
    close(ocl.emb.weight.grad, cpu.emb.weight.grad)


def test_an_export_retried_with_a_decomposition_prints_nothing(capfd):
    """An aten operator the ONNX exporter lacks (torch.diff) fails the first export, which
    is retried with its decomposition; the exporter's log of the failed graph stays off."""
    from dlprim.torch import compiler

    class Diff(torch.nn.Module):
        def forward(self, x):
            return torch.diff(x, dim=1) * 2

    compiler._DECOMPOSED.discard("diff")
    torch._C._jit_set_onnx_log_enabled(True)  # as any export by PyTorch itself leaves it
    x = torch.randn(3, 6)
    got = dt.compile(Diff().to("ocl"))(x.to("ocl"))
    close(got, torch.diff(x, dim=1) * 2)
    out, err = capfd.readouterr()
    assert "diff" in compiler._DECOMPOSED
    assert "Torch IR graph" not in out + err


class Recurrent(nn.Module):
    """A stacked, bidirectional LSTM or GRU, batch first, its last step into a head."""

    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(nn, kind)(6, 9, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(18, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


@pytest.mark.parametrize("where", ["ocl"])  # (torch.compile's dynamo decomposes or skips them)
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layers_train_as_nets(kind, where):
    """The LSTM or GRU of a training graph is the Net's recurrent layer: PyTorch's exporter
    writes its weights as Slices of the trained parameters in ONNX's gate order, which the
    importer follows back to the parameters themselves (no fallback to eager); outputs
    and every gradient match eager, and an optimizer step reaches the Net."""
    ref, model = twins(lambda: Recurrent(kind))
    compiled, put = compiled_on(model, where)
    x = torch.randn(3, 5, 6)
    same_outputs_and_gradients(compiled(put(x)), ref(x), model, ref)
    assert reports()[-1].where == "dlprim", reports()[-1]
    assert kind in reports()[-1].layers
    # the gate-order Slices and Concats the layer does not read are not run either (the
    # one Slice left is the model's own, the last step)
    layers = reports()[-1].layers
    assert layers.count("Slice") <= 1 and "Concat" not in layers and \
        "Parameter" not in layers, layers
    for m in (model, ref):
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
    close(compiled(put(x)), ref(x))
