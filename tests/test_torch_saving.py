"""dlprim.torch: shared parameters stay shared through module conversions, and ocl tensors
save and load (torch.save / torch.load with map_location, pickle, copy.deepcopy,
safetensors) as CUDA tensors do."""
import copy
import io
import os
import pickle

import pytest

torch = pytest.importorskip("torch")
dt = pytest.importorskip("dlprim.torch")
nn = torch.nn


class Tied(nn.Module):
    """A language model's shape in small: the output layer's weight is the embedding's."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.mid = nn.Linear(6, 6)
        self.out = nn.Linear(6, 11, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(torch.tanh(self.mid(self.emb(ids))))


def tied(seed=0):
    torch.manual_seed(seed)
    return Tied()


def test_tied_weight_stays_one_parameter_through_conversions():
    m = tied()
    weight = m.emb.weight
    assert len(list(m.parameters())) == 3
    for convert in (lambda m: m.to("ocl"), lambda m: m.half(), lambda m: m.to(torch.bfloat16),
                    lambda m: m.float(), lambda m: m.cpu(), lambda m: m.to("ocl:0")):
        convert(m)
        assert m.out.weight is m.emb.weight
        assert m.emb.weight is weight  # the same object, as a conversion on CUDA keeps it
        assert len(list(m.parameters())) == 3
        assert isinstance(m.emb.weight, nn.Parameter)
    assert m.emb.weight.device.type == "ocl"
    # conversions without ocl are PyTorch's own (the swap switch is not left on)
    assert not torch.__future__.get_swap_module_params_on_conversion()


def test_tied_weight_trains_as_on_the_cpu():
    ids = torch.tensor([[1, 4, 9, 2], [0, 10, 3, 3]])
    results = []
    for device in ("cpu", "ocl"):
        m = tied().to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(ids.to(device)).flatten(0, 1),
                                               ids.flatten().to(device))
            loss.backward()
            grad = m.emb.weight.grad.cpu().clone()
            opt.step()
        results.append((grad, m.emb.weight.detach().cpu()))
    (g_cpu, w_cpu), (g_ocl, w_ocl) = results
    torch.testing.assert_close(g_ocl, g_cpu, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w_ocl, w_cpu, rtol=1e-4, atol=1e-5)


def test_load_state_dict_into_an_ocl_model_keeps_the_tie():
    src, dst = tied(1), tied(2).to("ocl")
    dst.load_state_dict(src.state_dict())
    assert dst.out.weight is dst.emb.weight
    torch.testing.assert_close(dst.emb.weight.cpu(), src.emb.weight, rtol=0, atol=0)


def roundtrip(obj, **load):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load), len(buf.getvalue())


def test_save_from_the_device_and_load_back():
    m = tied().to("ocl")
    sd = m.state_dict()
    back, size = roundtrip(sd)  # weights_only, PyTorch's default
    assert {k: v.device.type for k, v in back.items()} == {k: "ocl" for k in sd}
    for k in sd:
        torch.testing.assert_close(back[k].cpu(), sd[k].cpu(), rtol=0, atol=0)
    # the tied weight is written once, as for CUDA tensors sharing a storage
    _, untied_size = roundtrip({k: v.clone() for k, v in sd.items()})
    assert size < untied_size - 11 * 6 * 4 // 2
    on_cpu, _ = roundtrip(sd, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu.values())
    torch.testing.assert_close(on_cpu["emb.weight"], sd["emb.weight"].cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("where", ["ocl", "ocl:0", torch.device("ocl", 0), {"cpu": "ocl:0"}],
                         ids=["str", "indexed", "device", "dict"])
def test_cpu_file_loads_onto_the_device(where):
    base = torch.arange(12.0)
    data = {"a": base, "b": base[3:].view(3, 3).t(), "i": torch.arange(5) * (2 ** 40),
            "m": torch.tensor([True, False, True]), "h": torch.linspace(-1, 1, 7).half(),
            "z": torch.randn(3).bfloat16()}
    back, _ = roundtrip(data, map_location=where)
    for k, v in data.items():
        assert back[k].device.type == "ocl"
        assert back[k].dtype == v.dtype and back[k].stride() == v.stride()
        torch.testing.assert_close(back[k].cpu(), v, rtol=0, atol=0)
    back["a"].add_(1)  # views of one storage in the file share it on the device
    torch.testing.assert_close(back["b"].cpu(), (base + 1)[3:].view(3, 3).t())


def test_pickle_and_whole_module_save():
    w = tied().to("ocl").emb.weight
    p = pickle.loads(pickle.dumps(w))
    assert isinstance(p, nn.Parameter) and p.device.type == "ocl" and p.requires_grad
    torch.testing.assert_close(p.cpu(), w.cpu(), rtol=0, atol=0)
    m, _ = roundtrip(tied().to("ocl"), weights_only=False)
    assert m.out.weight is m.emb.weight and m.emb.weight.device.type == "ocl"


def test_deepcopy_keeps_layout_values_ties_and_grads():
    x = torch.arange(20.0).to("ocl")[3:19].view(4, 4).t()
    y = copy.deepcopy(x)
    torch.testing.assert_close(y.cpu(), x.cpu(), rtol=0, atol=0)
    m = tied().to("ocl")
    m(torch.tensor([[1, 2]]).to("ocl")).sum().backward()
    c = copy.deepcopy(m)
    assert c.out.weight is c.emb.weight and c.emb.weight is not m.emb.weight
    torch.testing.assert_close(c.emb.weight.grad.cpu(), m.emb.weight.grad.cpu(), rtol=0, atol=0)
    c.emb.weight.data.mul_(0)  # the copy is its own memory
    assert m.emb.weight.abs().sum().item() > 0


def test_storage_identity_as_libraries_read_it():
    a = torch.zeros(10).to("ocl")
    b = torch.zeros(10).to("ocl")
    v = a[4:]
    assert v.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert v.data_ptr() == a.data_ptr() + 16
    assert a.untyped_storage().nbytes() == 40
    assert a.untyped_storage().device == a.device
    lo, hi = sorted((a.data_ptr(), b.data_ptr()))
    assert hi - lo >= 40


def test_safetensors_from_the_device(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    t = {"w": torch.randn(4, 3).to("ocl"), "i": torch.arange(5).to("ocl"),
         "h": torch.randn(3).to(torch.bfloat16).to("ocl")}
    path = os.fspath(tmp_path / "t.safetensors")
    st.save_file(t, path)
    back = st.load_file(path)
    for k in t:
        torch.testing.assert_close(back[k], t[k].cpu(), rtol=0, atol=0)
    m = tied().to("ocl")
    with pytest.raises(RuntimeError, match="share memory"):  # as for CPU tensors
        st.save_file(m.state_dict(), os.fspath(tmp_path / "shared.safetensors"))
    st.save_model(m, os.fspath(tmp_path / "m.safetensors"))
    n = tied(5).to("ocl")
    st.load_model(n, os.fspath(tmp_path / "m.safetensors"))
    assert n.out.weight is n.emb.weight
    torch.testing.assert_close(n.emb.weight.cpu(), m.emb.weight.cpu(), rtol=0, atol=0)


def test_set_over_another_tensor_and_empty():
    a = torch.arange(10.0).to("ocl")
    t = torch.empty(0).to("ocl")
    t.set_(a[2:8].view(2, 3))
    assert t.shape == (2, 3) and t.storage_offset() == 2
    t.fill_(-1)
    assert a.cpu().tolist() == [0, 1, -1, -1, -1, -1, -1, -1, 8, 9]
    t.set_()
    assert t.shape == (0,)
    with pytest.raises(NotImplementedError, match="torch.load did not make"):
        torch.empty(0).to("ocl").set_(a.untyped_storage())


def test_weight_norm_modules_convert_keeping_ties_and_train_as_on_the_cpu():
    """nn.utils.weight_norm keeps a weight computed from its parameters (so PyTorch cannot
    swap them in place): the conversion makes new parameters and puts the sharing back."""
    from torch.nn.utils import weight_norm

    def make():
        torch.manual_seed(3)
        m = nn.Sequential(weight_norm(nn.Conv1d(4, 6, 3), dim=2), nn.Tanh(),
                          weight_norm(nn.Conv1d(6, 6, 3)), nn.Conv1d(6, 6, 1), nn.Conv1d(6, 6, 1))
        m[4].weight = m[3].weight
        return m
    cpu, ocl = make(), make().to("ocl")
    assert ocl[4].weight is ocl[3].weight
    assert len(list(ocl.parameters())) == len(list(cpu.parameters()))
    x = torch.randn(2, 4, 11, generator=torch.Generator().manual_seed(0))
    cpu(x).square().sum().backward()
    ocl(x.to("ocl")).square().sum().backward()
    for (name, p), q in zip(ocl.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)
