"""torch.compile used as PyTorch users write it: models on ocl through
``torch.compile(backend="dlprim")``, the default backend's refusal, keyword arguments and
output objects through ``dlprim.torch.compile``, integer and boolean inputs, a parameter
the Net holds transposed, the warning a graph that stays eager gives, operators the
exporter lacks, constants computed from buffers, a model returning its loss, and new
sequence lengths."""
import dataclasses
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
nn = torch.nn

import dlprim.torch as dt  # noqa: E402
from dlprim.torch.compiler import reports  # noqa: E402
from test_torch_compile import twins  # noqa: E402  (a model and its copy, same weights)

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def close(a, b, tol=1e-4):
    a, b = a.detach().cpu().numpy(), b.detach().cpu().numpy()
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max())))


def compiled_by(how, model):
    """``model`` (on ocl) compiled the way ``how`` names."""
    return torch.compile(model, backend="dlprim") if how == "torch.compile" else \
        dt.compile(model)


def cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 3))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_torch_compile_of_a_model_on_ocl_runs_as_a_net():
    ref, model = twins(cnn)
    compiled = torch.compile(model.to("ocl"), backend="dlprim")
    x = torch.randn(2, 3, 6, 6)
    y = compiled(x.to("ocl"))
    want = ref(x)
    assert y.device.type == "ocl"
    close(y, want)
    assert reports()[-1].where == "dlprim", reports()[-1]
    y.sum().backward()
    want.sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        close(p.grad, q.grad, 1e-3)
    close(model[1].running_mean, ref[1].running_mean)


def test_the_default_backend_on_ocl_says_what_to_use():
    model = nn.Linear(4, 2).to("ocl")
    with pytest.raises(Exception, match="backend='dlprim'"):
        torch.compile(model)(torch.randn(2, 4).to("ocl"))


class RunningMax(nn.Module):
    """A graph break, then an operator with no ONNX form (a running maximum: PyTorch's
    exporter has no aten::cummax, and PyTorch no decomposition of it)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 5)

    def forward(self, x):
        h = self.a(x)
        torch._dynamo.graph_break()
        return torch.cummax(h, dim=1).values


def test_a_graph_that_stays_eager_warns_once_and_runs_on_ocl():
    ref, model = twins(RunningMax)
    compiled = torch.compile(model.to("ocl"), backend="dlprim")
    x = torch.randn(3, 4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y = compiled(x.to("ocl"))
        compiled(torch.randn(3, 4).to("ocl"))
    fallbacks = [w for w in seen if issubclass(w.category, dt.CompileFallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in seen]
    text = str(fallbacks[0].message)
    assert "aten::cummax" in text and "ocl:0" in text, text
    assert y.device.type == "ocl"
    close(y, ref(x))
    assert [r.where for r in reports()[-2:]] == ["dlprim", "eager"], reports()


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    extra: object = None
    parts: dict = None


class Keywords(nn.Module):
    """Keyword arguments with a default, a non-tensor argument, an output object with a
    None field, a dict and a tuple inside."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)

    def forward(self, x, *, mask=None, scale=1.0):
        y = self.a(x) * scale
        if mask is not None:
            y = y * mask
        return Out(logits=y, parts={"relu": (torch.relu(y), 7)})


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("where", ["cpu", "ocl"])
def test_compile_takes_keywords_and_returns_what_the_model_returns(where):
    import torch.utils._pytree as pytree
    pytree.register_dataclass(Out) if Out not in pytree.SUPPORTED_NODES else None
    ref, model = twins(Keywords)
    compiled = dt.compile(model.to(where))
    x, mask = torch.randn(2, 4), (torch.randn(2, 3) > 0).float()
    got = compiled(x.to(where), mask=mask.to(where), scale=2.0)
    want = ref(x, mask=mask, scale=2.0)
    assert reports()[-1].where == "dlprim", reports()[-1]
    assert type(got) is Out and got.extra is None and set(got.parts) == {"relu"}
    assert got.parts["relu"][1] == 7
    close(got.logits, want.logits)
    close(got.parts["relu"][0], want.parts["relu"][0])
    close(compiled(x.to(where)).logits, ref(x).logits)  # another structure: converted again


class Tokens(nn.Module):
    """int64 token ids and a boolean mask in, float logits and an int64 argmax out."""

    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(11, 6), nn.Linear(6, 4)

    def forward(self, ids, keep):
        h = self.emb(ids) * keep.unsqueeze(-1).float()
        logits = self.head(h)
        return logits, ids + 1


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("how", ["torch.compile", "dlprim.torch.compile"])
def test_integer_and_boolean_inputs_reach_the_net(how):
    ref, model = twins(Tokens)
    compiled = torch.compile(model, backend="dlprim") if how == "torch.compile" else \
        dt.compile(model.to("ocl"))
    put = (lambda t: t) if how == "torch.compile" else (lambda t: t.to("ocl"))
    ids = torch.randint(0, 11, (2, 5))
    keep = torch.rand(2, 5) > 0.3
    logits, shifted = compiled(put(ids), put(keep))
    want, want_shifted = ref(ids, keep)
    assert reports()[-1].where == "dlprim", reports()[-1]
    close(logits, want)
    assert shifted.dtype == torch.int64 and torch.equal(shifted.cpu(), want_shifted)
    logits.sum().backward()
    want.sum().backward()
    close(model.emb.weight.grad, ref.emb.weight.grad)


class Conv1D(nn.Module):
    """GPT-2's Conv1D: x @ W + b with W of shape (in, out), which the Net holds transposed
    under the parameter's own name."""

    def __init__(self):
        super().__init__()
        self.w, self.b = nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(3))

    def forward(self, x):
        return torch.addmm(self.b, x, self.w)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_parameter_the_net_holds_transposed_follows_optimizer_steps():
    ref, model = twins(Conv1D)
    compiled = torch.compile(model, backend="dlprim")
    x = torch.randn(2, 4)
    for net, fn in ((ref, ref), (model, compiled)):
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        for _ in range(2):
            opt.zero_grad()
            fn(x).square().sum().backward()
            opt.step()
    close(compiled(x), ref(x))
    assert reports()[-1].where == "dlprim", reports()[-1]


class Positions(nn.Module):
    """A tensor made in the graph on the input's device (a position index)."""

    def forward(self, x):
        return x + torch.arange(x.shape[1], device=x.device, dtype=x.dtype)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_tensors_a_graph_makes_on_ocl_are_exported():
    x = torch.randn(2, 5)
    y = torch.compile(Positions(), backend="dlprim")(x.to("ocl"))
    assert reports()[-1].where == "dlprim", reports()[-1]
    close(y, Positions()(x))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("how", ["dlprim.torch.compile", "torch.compile on ocl"])
def test_gpt2_with_a_mask_is_one_net_returning_its_output_object(how):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50,
                                     n_positions=16, use_cache=False,
                                     attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 50, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
        if how == "dlprim.torch.compile":
            got = dt.compile(model)(input_ids=ids, attention_mask=mask)
        else:
            compiled = torch.compile(model.to("ocl"), backend="dlprim")
            got = compiled(input_ids=ids.to("ocl"), attention_mask=mask.to("ocl"))
    assert type(got) is type(want) and list(got.keys()) == list(want.keys())
    assert reports()[-1].where == "dlprim", reports()[-1]
    close(got.logits, want.logits)


class Differences(nn.Module):
    """torch.diff, which PyTorch's ONNX exporter lacks (transformers' mask code calls it):
    exported as its decomposition (narrow, sub)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 5)

    def forward(self, x):
        h = self.a(x)
        return torch.diff(h, dim=1) + h.diff(dim=1, prepend=h[:, :1])[:, 1:]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("how", ["torch.compile", "dlprim.torch.compile"])
def test_an_operator_the_exporter_lacks_is_exported_as_its_decomposition(how):
    ref, model = twins(Differences)
    model = model.to("ocl")
    compiled = compiled_by(how, model)
    x = torch.randn(3, 4)
    y, want = compiled(x.to("ocl")), ref(x)
    assert reports()[-1].where == "dlprim", reports()[-1]
    close(y, want)
    y.square().sum().backward()
    want.square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad, q.grad)


class Rotary(nn.Module):
    """Tables computed from a buffer (a rotary embedding's cos and sin from inv_freq):
    the importer folds them into constants of the Net."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.5]), persistent=False)

    def forward(self, x):
        angles = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)[:, None] * self.inv_freq
        table = torch.cat([angles.cos(), angles.sin()], -1)
        return self.a(x) * table


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_constants_computed_from_a_buffer_follow_the_buffer():
    ref, model = twins(Rotary)
    model = model.to("ocl")
    compiled = torch.compile(model, backend="dlprim")
    x = torch.randn(2, 3, 4)
    close(compiled(x.to("ocl")), ref(x))
    assert reports()[-1].where == "dlprim", reports()[-1]
    n = len(reports())
    close(compiled(x.to("ocl")), ref(x))
    assert len(reports()) == n  # unchanged buffer: the same Net
    with torch.no_grad():
        model.inv_freq.mul_(3)
        ref.inv_freq.mul_(3)
    close(compiled(x.to("ocl")), ref(x))  # the Net's constants are stale: converted again
    assert [r.where for r in reports()[n:]] == ["dlprim"], reports()[n:]


class Scored(nn.Module):
    """A model returning its own loss, a 0-d tensor (as HuggingFace models given labels)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)

    def forward(self, x, target):
        return nn.functional.cross_entropy(self.a(x), target)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("how", ["torch.compile", "dlprim.torch.compile"])
def test_a_model_returning_its_loss_trains_as_a_net(how):
    ref, model = twins(Scored)
    model = model.to("ocl")
    compiled = compiled_by(how, model)
    x, target = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0])
    loss, want = compiled(x.to("ocl"), target.to("ocl")), ref(x, target)
    assert reports()[-1].where == "dlprim", reports()[-1]
    assert loss.dim() == 0
    close(loss, want)
    loss.backward()
    want.backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad, q.grad)


class Positioned(nn.Module):
    """Position embeddings of the sequence length: the export fixes that length."""

    def __init__(self):
        super().__init__()
        self.emb, self.pos, self.head = nn.Embedding(9, 4), nn.Embedding(16, 4), nn.Linear(4, 3)

    def forward(self, ids):
        return self.head(self.emb(ids) + self.pos(torch.arange(ids.shape[1])))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sequence_lengths_build_no_kernels_and_keep_their_nets():
    from dlprim.kernels import program
    ref, model = twins(Positioned)
    compiled = dt.compile(model.to("ocl"))
    lengths = [5, 7, 5, 7]
    runs = []
    for s in lengths:
        ids = torch.randint(0, 9, (2, s))
        builds, n = program.stats["builds"], len(reports())
        close(compiled(ids.to("ocl")), ref(ids))
        runs.append((program.stats["builds"] - builds, len(reports()) - n))
    assert runs[1] == (0, 1), runs  # a new length: a new Net, its kernels built already
    assert runs[2:] == [(0, 0), (0, 0)], runs  # a length seen: its Net as it was
    runners = [r for rs in compiled._runners.values() for r in rs]
    assert sorted(r.net.tensor(r.data_names[0]).shape[1] for r in runners) == [5, 7]



@pytest.mark.filterwarnings("ignore::UserWarning")
def test_dynamo_compiles_a_graph_once_for_every_sequence_length():
    """After dynamo's second length its graph has a symbolic size; the backend reads that
    size's value without a guard on it, so further lengths are new Nets from the same
    graph: dynamo does not trace and compile the model again for each."""
    from torch._dynamo.utils import counters
    model = Positions()
    compiled = torch.compile(model, backend="dlprim")
    graphs = []
    for s in (5, 7, 9, 11, 9):
        x = torch.randn(2, s)
        close(compiled(x.to("ocl")), model(x))
        assert reports()[-1].where == "dlprim", reports()[-1]
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[2:] == [graphs[1]] * 3, graphs  # 9, 11 and 9 again: no new graph


class Dropped(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.drop = nn.Linear(6, 64), nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.a(x))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("how", ["torch.compile", "dlprim.torch.compile"])
def test_dropout_in_training_drops_in_the_net(how):
    ref, model = twins(Dropped)
    model = model.to("ocl").train()
    compiled = compiled_by(how, model)
    x = torch.randn(8, 6)
    y = compiled(x.to("ocl"))
    assert reports()[-1].where == "dlprim", reports()[-1]
    kept = (y != 0).cpu()
    assert 0.35 < kept.float().mean() < 0.65, kept.float().mean()
    full = ref.a(x)
    close(y.cpu()[kept], 2 * full[kept])  # kept elements scaled by 1 / (1 - p)
    g = torch.randn(8, 64)
    (y * g.to("ocl")).sum().backward()
    (full * g * kept * 2).sum().backward()
    close(model.a.weight.grad, ref.a.weight.grad)
    assert not torch.equal(kept, (compiled(x.to("ocl")) != 0).cpu())  # a new mask each step


def test_backend_name_is_known_without_the_installed_entry_point():
    """A source tree on the path (no torch_dynamo_backends entry point): backend="dlprim"
    is registered when dynamo is imported, also by torch.compile's own import."""
    import subprocess
    import sys
    code = """
import importlib.metadata as md
found = md.entry_points
def without_dlprim(**kw):
    eps = found(**kw)
    if kw.get("group") == "torch_dynamo_backends":
        return md.EntryPoints([e for e in eps if e.name != "dlprim"])
    return eps
md.entry_points = without_dlprim
import torch, dlprim.torch
m = torch.nn.Linear(4, 3).to("ocl")
print(tuple(torch.compile(m, backend="dlprim")(torch.randn(2, 4).to("ocl")).shape))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "(2, 3)" in out.stdout, out.stderr[-2000:]


def test_training_on_a_queue_ring_matches_one_queue():
    """The queue ring (NVIDIA GPUs by default; DLPRIM_QUEUE_RING forces it here, 3 queues
    turning every 5 launches, on runtimes that run queues side by side): a compiled model's
    forward and backward, eager operators and AdamW's multi-tensor launches keep one
    queue's order, so the losses and weights are bit for bit those of one queue."""
    import os
    import subprocess
    import sys
    code = """
import torch, dlprim.torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                            torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 5)).to("ocl")
compiled = dlprim.torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 16).to("ocl"), (torch.arange(32) % 5).to("ocl")
for _ in range(4):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(compiled(x) * 1.5 + 0.25, y)
    loss.backward()
    opt.step()
    print(loss.item().hex())
print([p.detach().cpu().double().sum().item().hex() for p in model.parameters()])
"""
    outs = []
    for ring in ("1", "3,5"):
        env = dict(os.environ, DLPRIM_QUEUE_RING=ring)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        outs.append(out.stdout)
    assert outs[0] == outs[1] and outs[0].count("\n") == 5, outs
