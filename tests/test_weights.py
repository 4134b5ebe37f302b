"""Parameter files: .dlp layout, HDF5, atomic writes, load errors; Net save/load."""
import json
import os
import struct
from collections import OrderedDict

import numpy as np
import pytest

import dlprim as dp
from dlprim.errors import FileFormatError, ParameterError
from dlprim.net import weights
from dlprim.utils import atomic_write

import net_test_layers  # noqa: F401  (registers the test layers)


def arrays(rng):
    return OrderedDict([("conv1.weight", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                        ("bn1.running_mean", rng.standard_normal(4).astype(np.float32)),
                        ("fc.bias", rng.standard_normal(1).astype(np.float32)),
                        ("empty", np.zeros((0,), np.float32))])


def test_dlp_layout_is_dlprimitives(tmp_path, rng):
    a = arrays(rng)
    path = tmp_path / "w.dlp"
    weights.save_dlp(path, a)
    data = path.read_bytes()
    assert data[:4] == b"DLPW"
    (length,) = struct.unpack(">I", data[4:8])
    header = json.loads(data[8:8 + length])
    assert list(header["tensors"]) == sorted(a)   # name order, as DLPrimitives' std::map
    start = 0
    for name, arr in sorted(a.items()):
        info = header["tensors"][name]
        assert info == {"dtype": "float", "shape": list(arr.shape), "size": arr.nbytes, "start": start}
        raw = data[8 + length + start: 8 + length + start + arr.nbytes]
        assert raw == arr.astype("<f4").tobytes()
        start += arr.nbytes
    assert len(data) == 8 + length + start


def test_dlp_round_trip_is_byte_exact(tmp_path, rng):
    a = arrays(rng)
    weights.save_dlp(tmp_path / "a.dlp", a)
    back = weights.load_dlp(tmp_path / "a.dlp")
    assert list(back) == sorted(a)
    for name in a:
        assert back[name].dtype == np.float32 and np.array_equal(back[name], a[name])
    weights.save_dlp(tmp_path / "b.dlp", back)
    assert (tmp_path / "a.dlp").read_bytes() == (tmp_path / "b.dlp").read_bytes()


def test_hdf5_round_trip(tmp_path, rng):
    pytest.importorskip("h5py")
    a = arrays(rng)
    weights.save_hdf5(tmp_path / "w.h5", a)
    back = weights.load(tmp_path / "w.h5")
    assert set(back) == set(a)
    for name in a:
        assert np.array_equal(back[name], a[name])


def test_atomic_write_keeps_the_old_file_when_the_writer_fails(tmp_path, rng):
    path = tmp_path / "w.dlp"
    weights.save_dlp(path, arrays(rng))
    before = path.read_bytes()

    def crash(f):
        f.write(b"DLPW partial")
        raise RuntimeError("disk full")
    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, crash)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["w.dlp"]  # no temporary file left behind


def test_bad_files_are_errors(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"nothing here")
    with pytest.raises(ValueError, match="not a .dlp"):
        weights.load(bad)
    trunc = tmp_path / "t.dlp"
    data = weights.dlp_bytes({"w": np.ones(10, np.float32)})
    trunc.write_bytes(data[:-8])
    with pytest.raises(FileFormatError, match="tensor 'w': bytes 0..40 run past the end"):
        weights.load(trunc)


NET = {"inputs": [{"name": "x", "shape": [5]}, {"name": "t", "shape": [5]}],
       "outputs": ["loss"],
       "operators": [
           {"name": "p", "type": "_TestParam", "inputs": [], "outputs": ["v"],
            "options": {"shape": [5]}, "params": ["bias"]},
           {"name": "s", "type": "_TestScale", "inputs": ["x"], "outputs": ["h"], "params": ["w"]},
           {"name": "add", "type": "_TestAdd", "inputs": ["h", "v"], "outputs": ["y"]},
           {"name": "loss", "type": "_TestSqLoss", "inputs": ["y", "t"], "outputs": ["loss"]}]}


@pytest.mark.parametrize("ext", [".dlp", ".h5"])
def test_net_save_load_gives_identical_outputs(ctx, tmp_path, rng, ext):
    if ext == ".h5":
        pytest.importorskip("h5py")
    x = rng.standard_normal(5).astype(np.float32)
    t = rng.standard_normal(5).astype(np.float32)
    a = dp.Net(ctx, NET, seed=7)
    path = str(tmp_path / ("w" + ext))
    (a.save_parameters if ext == ".dlp" else a.save_parameters_to_hdf5)(path)
    b = dp.Net(ctx, NET, seed=99)
    assert not np.array_equal(b(x=x, t=t)["loss"], a(x=x, t=t)["loss"])
    b.load_parameters(path)
    assert np.array_equal(b(x=x, t=t)["loss"], a(x=x, t=t)["loss"])
    assert np.array_equal(b.param_arena.to_host(), a.param_arena.to_host())


def test_net_load_errors_name_the_parameter(ctx, tmp_path):
    net = dp.Net(ctx, NET, seed=1)
    path = tmp_path / "partial.dlp"
    weights.save_dlp(path, {"w": np.ones(1, np.float32), "unrelated": np.ones(2, np.float32)})
    before = net.get_parameters()
    with pytest.raises(ParameterError, match=r"'bias' is missing; 'unrelated' is not") as err:
        net.load_parameters(str(path))
    assert isinstance(err.value, ValueError) and str(path) in str(err.value)
    assert all(np.array_equal(v, before[k]) for k, v in net.get_parameters().items())
    net.load_parameters(str(path), strict=False)
    assert net.param("w").to_host()[0] == 1
    assert np.array_equal(net.param("bias").to_host(), before["bias"])
    weights.save_dlp(path, {"w": np.ones(2, np.float32), "bias": np.ones(5, np.float32)})
    with pytest.raises(ParameterError, match=r"'w' has shape \(2,\), the net needs \(1,\)"):
        net.load_parameters(str(path))
