"""safetensors parameter files: dlprim writes what the safetensors package reads (names,
dtypes, values), reads what it writes, detects the format by content, maps it into
memory, and refuses a damaged file with its name and the tensor at fault."""
import json
import struct

import numpy as np
import pytest

import dlprim as dp
from dlprim.errors import FileFormatError
from dlprim.net import weights
from dlprim.net.safetensors import load_safetensors, save_safetensors

st = pytest.importorskip("safetensors.numpy")


def arrays(rng):
    return {"features.0.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "features.0.bias": rng.standard_normal(4).astype(np.float32),
            "steps": np.array([7], np.int64), "half": np.arange(5, dtype=np.float16),
            "empty": np.zeros((0, 3), np.float32)}


def test_written_by_dlprim_read_by_safetensors(tmp_path, rng):
    a = arrays(rng)
    save_safetensors(tmp_path / "w.safetensors", a)
    back = st.load_file(str(tmp_path / "w.safetensors"))
    assert set(back) == set(a)
    for k in a:
        assert back[k].dtype == a[k].dtype and back[k].shape == a[k].shape
        np.testing.assert_array_equal(back[k], a[k])


def test_written_by_safetensors_read_by_dlprim(tmp_path, rng):
    a = arrays(rng)
    st.save_file(a, str(tmp_path / "x.bin"))  # any name: the content tells the format
    back = weights.load(tmp_path / "x.bin")
    assert set(back) == set(a)
    for k in a:
        np.testing.assert_array_equal(back[k], a[k])
    assert isinstance(load_safetensors(tmp_path / "x.bin")["features.0.weight"].base,
                      np.memmap)  # memory-mapped, read when used


def test_a_net_saves_and_loads_safetensors(ctx, tmp_path):
    cfg = dp.models.lenet(batch=2, train=False)
    net = dp.Net(ctx, cfg, mode=dp.PREDICT, seed=1)
    net.save_parameters(tmp_path / "lenet.safetensors")
    theirs = st.load_file(str(tmp_path / "lenet.safetensors"))
    mine = net.get_parameters()
    assert set(theirs) == set(mine)
    other = dp.Net(ctx, cfg, mode=dp.PREDICT, seed=2)
    other.load_parameters(tmp_path / "lenet.safetensors")
    for k, v in other.get_parameters().items():
        np.testing.assert_array_equal(v, mine[k])


def _file(tmp_path, header, data=b""):
    text = json.dumps(header).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


@pytest.mark.parametrize("header,data,message", [
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4,
     r"tensor 'w': data_offsets \[0, 8\] are not inside the 4 data bytes"),
    ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8,
     "tensor 'w': 8 bytes for shape"),
    ({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8,
     "dtype 'C64' is not one dlprim reads"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "overlap"),
    ({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 4]}}, b"\0" * 4,
     "shape '2' is not a list")])
def test_damaged_files_are_refused_with_names(tmp_path, header, data, message):
    path = _file(tmp_path, header, data)
    with pytest.raises(FileFormatError, match=message):
        weights.load(path)


def test_a_lying_header_length_is_refused(tmp_path):
    path = tmp_path / "short.safetensors"
    path.write_bytes(struct.pack("<Q", 10 ** 6) + b"{}")
    with pytest.raises(FileFormatError, match="not a .dlp"):
        weights.load(path)  # not even taken for safetensors
    with pytest.raises(FileFormatError, match="header claims 1000000 bytes"):
        load_safetensors(path)
