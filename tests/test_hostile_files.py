"""Damaged, foreign and hostile inputs: parameter files, ONNX models and their external
data, device memory requests, image folders. Each case asserts the dlprim error class, the
built-in it also is, and that the message names the culprit."""
import gc
import json
import os
import socket
import struct
import threading
import time
from collections import OrderedDict

import numpy as np
import pyopencl as cl
import pytest

import dlprim as dp
from dlprim.errors import DeviceMemoryError, FileFormatError, ParameterError
from dlprim.net import weights


def finishes(fn, seconds=30):
    """``fn()``'s result (or exception), failing if it blocks (a FIFO opened for reading)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller below
            box["error"] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked for %d s" % seconds
    if "error" in box:
        raise box["error"]
    return box.get("value")


def raises(cls, builtin, fn, *names):
    """Run ``fn`` expecting ``cls`` (a dlprim.Error and a ``builtin``) whose message
    contains every string of ``names``; returns the message."""
    with pytest.raises(cls) as info:
        finishes(fn)
    err = info.value
    assert isinstance(err, dp.Error) and isinstance(err, builtin), type(err).__mro__
    text = str(err)
    for name in names:
        assert str(name) in text, (name, text)
    return text


# ----- .dlp files

def dlp(path, tensors, data=b"", length=None, header=None):
    """Write a .dlp file with the given header entries (or raw header bytes) and data."""
    if header is None:
        header = json.dumps({"tensors": tensors}).encode()
    path.write_bytes(b"DLPW" + struct.pack(">I", len(header) if length is None else length)
                     + header + data)
    return path


def entry(shape, start=0, dtype="float", size=None):
    n = int(np.prod(shape)) * (4 if dtype == "float" else 8)
    return {"dtype": dtype, "shape": shape, "size": n if size is None else size, "start": start}


DATA = np.arange(16, dtype="<f4").tobytes()
DLP_CASES = {
    # id: (header entries, raw header or None, header length or None, data, expected words)
    "empty": (None, b"", None, b"", ["not a .dlp"]),
    "wrong magic": ({}, None, None, DATA, ["not a .dlp"]),
    "header past end": ({"w": entry([4])}, None, 10 ** 6, DATA, ["header length 1000000",
                                                                  "past the end"]),
    "header not utf-8": (None, b"\xff\xfe{", None, DATA, ["not JSON"]),
    "header not json": (None, b"{tensors: 1}", None, DATA, ["not JSON"]),
    "header a list": (None, b"[1, 2]", None, DATA, ['no "tensors"']),
    "tensors not object": (None, b'{"tensors": [1]}', None, DATA, ['no "tensors"']),
    "entry not object": ({"w": [4]}, None, None, DATA, ["tensor 'w'", "not an object"]),
    "unknown dtype": ({"w": entry([4], dtype="complex64")}, None, None, DATA,
                      ["tensor 'w'", "complex64"]),
    "negative dim": ({"w": entry([-4], size=16)}, None, None, DATA,
                     ["tensor 'w'", "shape [-4]"]),
    "float dim": ({"w": entry([4.0], size=16)}, None, None, DATA, ["tensor 'w'", "shape [4.0]"]),
    "bool dim": ({"w": entry([True], size=4)}, None, None, DATA, ["tensor 'w'", "shape [True]"]),
    "size mismatch": ({"w": entry([4], size=12)}, None, None, DATA,
                      ["tensor 'w'", "size 12 bytes", "needs 16"]),
    "size as text": ({"w": entry([4], size="16")}, None, None, DATA, ["tensor 'w'", "size '16'"]),
    "negative start": ({"w": entry([4], start=-4)}, None, None, DATA, ["tensor 'w'", "start -4"]),
    "start past data": ({"w": entry([4], start=60)}, None, None, DATA,
                        ["tensor 'w'", "bytes 60..76", "data section (64 bytes"]),
    "huge shape": ({"w": entry([2 ** 40, 2 ** 20])}, None, None, DATA, ["tensor 'w'", "past"]),
    "truncated data": ({"w": entry([4]), "b": entry([16], start=16)}, None, None, DATA[:40],
                       ["tensor 'b'", "truncated"]),
    "overlap": ({"w": entry([8]), "b": entry([4], start=16)}, None, None, DATA,
                ["tensor 'b' overlaps tensor 'w'"]),
    "duplicate name": (None, b'{"tensors": {"w": {"dtype": "float", "shape": [1], "size": 4, '
                             b'"start": 0}, "w": {"dtype": "float", "shape": [1], "size": 4, '
                             b'"start": 4}}}', None, DATA, ["'w' appears twice"]),
}


@pytest.mark.parametrize("case", list(DLP_CASES))
def test_damaged_dlp_header_is_a_file_format_error(tmp_path, case):
    tensors, header, length, data, words = DLP_CASES[case]
    path = tmp_path / "net.dlp"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "wrong magic":
        path.write_bytes(b"DLPX" + struct.pack(">I", 2) + b"{}" + data)
    else:
        dlp(path, tensors, data, length, header)
    raises(FileFormatError, ValueError, lambda: weights.load_dlp(path), str(path), *words)


def test_a_valid_dlp_reads_the_bytes_its_header_names(tmp_path):
    # gaps between tensors are allowed; each tensor reads exactly its own bytes
    path = dlp(tmp_path / "gap.dlp", {"b": entry([2], start=32), "w": entry([4], start=4)}, DATA)
    got = weights.load_dlp(path)
    assert list(got) == ["b", "w"]
    np.testing.assert_array_equal(got["b"], [8, 9])
    np.testing.assert_array_equal(got["w"], [1, 2, 3, 4])


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_parameter_file_that_is_not_a_regular_file(tmp_path, kind):
    path = tmp_path / "w.dlp"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    raises(FileFormatError, ValueError, lambda: weights.load(path), str(path), "regular file")


def test_foreign_file_is_neither_dlp_nor_hdf5(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"PK\x03\x04 a zip, not weights")
    raises(FileFormatError, ValueError, lambda: weights.load(path), str(path), "neither",
           "PK")


# ----- HDF5 files

def h5_case(tmp_path, case):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "w.h5"
    if case == "garbage":
        path.write_bytes(b"not hdf5 at all" * 10)
    elif case == "truncated":
        weights.save_hdf5(path, {"w": np.ones((64, 64), np.float32)})
        path.write_bytes(path.read_bytes()[:1500])
    else:
        with h5py.File(path, "w") as f:
            f.create_dataset("names", data=np.array([b"conv", b"fc"]))
    return path


@pytest.mark.parametrize("case, words", [("garbage", ["not a readable HDF5"]),
                                         ("truncated", ["not a readable HDF5"]),
                                         ("strings", ["dataset 'names'", "not numbers"])])
def test_damaged_hdf5_is_a_file_format_error(tmp_path, case, words):
    path = h5_case(tmp_path, case)
    raises(FileFormatError, ValueError, lambda: weights.load(path), str(path), *words)


# ----- set_parameters / load_parameters

def small_net(ctx):
    cfg = dp.NetConfig()
    cfg.add_input("data", [2, 4, 3, 3])
    cfg.add("BatchNorm", name="bn1", params=["bn1.running_mean", "bn1.running_var",
                                             "bn1.weight", "bn1.bias"])
    cfg.add("InnerProduct", name="fc", params=["fc.weight", "fc.bias"], options={"outputs": 3})
    cfg.set_outputs(["fc"])
    return dp.Net(ctx, cfg, mode="predict", seed=3)


def state(net):
    return OrderedDict((k, v + 1) for k, v in net.get_parameters().items())


PARAM_CASES = {
    # id: (edit of a full state dict, strict, words the message must have, words it must not)
    "wrong shape": (lambda s: s.update({"fc.weight": np.ones((3, 35), np.float32)}), True,
                    ["'fc.weight' has shape (3, 35), the net needs (3, 36)"], []),
    "shape before names": (lambda s: (s.pop("bn1.bias"), s.update(
        {"extra": np.ones(1), "fc.bias": np.ones(4)})), True,
        ["'fc.bias' has shape (4,)"], ["missing", "extra"]),
    "missing": (lambda s: s.pop("bn1.weight"), True, ["'bn1.weight' is missing"], []),
    "unexpected": (lambda s: s.update({"head.weight": np.ones(2)}), True,
                   ["'head.weight' is not"], []),
    "both": (lambda s: (s.pop("fc.bias"), s.update({"fc.b": np.ones(3)})), True,
             ["'fc.bias' is missing", "'fc.b' is not", "strict=False"], []),
    "strings": (lambda s: s.update({"fc.bias": np.array(["a", "b", "c"])}), True,
                ["'fc.bias' has dtype <U1, not numbers"], []),
    "complex": (lambda s: s.update({"fc.bias": np.ones(3, np.complex64)}), False,
                ["'fc.bias' has dtype complex64"], []),
    "ragged": (lambda s: s.update({"fc.bias": [[1.0], [2.0, 3.0]]}), True,
               ["'fc.bias' is not an array"], []),
    "nothing shared": (lambda s: [s.update({"x." + k: s.pop(k)}) for k in list(s)], False,
                       ["none of its 6 names", "bn1.running_mean"], []),
}


@pytest.mark.parametrize("case", list(PARAM_CASES))
def test_parameters_that_do_not_fit_are_refused_whole(ctx, case):
    net = small_net(ctx)
    before = net.get_parameters()
    arrays = state(net)
    edit, strict, words, absent = PARAM_CASES[case]
    edit(arrays)
    text = raises(ParameterError, ValueError, lambda: net.set_parameters(arrays, strict=strict),
                  "set_parameters", *words)
    assert not any(w in text for w in absent), text
    after = net.get_parameters()
    assert all(np.array_equal(after[k], before[k]) for k in before), "partly written"


def test_load_parameters_names_the_file_and_the_parameters(ctx, tmp_path):
    net = small_net(ctx)
    path = tmp_path / "other.dlp"
    arrays = state(net)
    arrays["fc.weight"] = np.ones((3, 36), np.float32)
    del arrays["bn1.bias"]
    arrays["classifier.weight"] = np.ones(2, np.float32)
    weights.save_dlp(path, arrays)
    raises(ParameterError, ValueError, lambda: net.load_parameters(str(path)), str(path),
           "'bn1.bias' is missing", "'classifier.weight' is not")
    net.load_parameters(str(path), strict=False)
    np.testing.assert_array_equal(net.get_parameters()["fc.weight"], arrays["fc.weight"])


def test_what_loads_pytorch_counters_nan_and_integers(ctx):
    net = small_net(ctx)
    arrays = state(net)
    arrays["bn1.num_batches_tracked"] = np.array(7)  # PyTorch's; dlprim keeps no counter
    arrays["fc.bias"] = np.array([np.nan, np.inf, 1.0], np.float64)  # values are not judged
    arrays["bn1.weight"] = np.array([1, 2, 3, 4], np.int64)
    net.set_parameters(arrays)
    got = net.get_parameters()
    assert np.isnan(got["fc.bias"][0]) and np.isinf(got["fc.bias"][1])
    np.testing.assert_array_equal(got["bn1.weight"], [1, 2, 3, 4])
    arrays["fc.num_batches_tracked"] = np.array(7)  # no running statistics under 'fc'
    raises(ParameterError, ValueError, lambda: net.set_parameters(arrays),
           "'fc.num_batches_tracked' is not")


# ----- ONNX models and their external data

def onnx_model(tmp_path, location=None, length=None, offset=None, write=True, dims=(2, 3)):
    """model.onnx in tmp_path/m computing y = x + w; with ``location`` w's data sits in
    that external file (written, inside the folder, when ``write``)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    if location is not None:
        if write:
            (folder / location).write_bytes(b"\0" * 8 + w.raw_data)
        w.ClearField("raw_data")
        del w.dims[:]
        w.dims.extend(dims)
        w.data_location = TensorProto.EXTERNAL
        fields = {"location": location, "offset": "8" if offset is None else offset}
        if length is not None:
            fields["length"] = length
        for key, value in fields.items():
            w.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())  # onnx.save would write the external file
    assert onnx.load(str(path), load_external_data=False).graph.initializer[0].name == "w"
    return path


def test_external_data_inside_the_folder_loads(tmp_path):
    import dlprim.onnx as dox
    path = onnx_model(tmp_path, "w.bin")
    _, params = dox.to_netconfig(path)
    np.testing.assert_array_equal(list(params.values())[0].ravel(), np.arange(6))


def outside(tmp_path):
    (tmp_path / "secret.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    return "secret.bin"


ONNX_CASES = {
    # id: (model builder, words the message must have)
    "truncated": (lambda t: _cut(onnx_model(t), 30), ["model.onnx"]),
    "empty": (lambda t: _cut(onnx_model(t), 0), ["model.onnx", "not an ONNX model"]),
    "text": (lambda t: _write(onnx_model(t), b"hello, I am a text file\n"), ["model.onnx"]),
    "dot-dot": (lambda t: onnx_model(t, "../" + outside(t), write=False, offset="0"),
                ["tensor 'w'", "'../secret.bin' lies outside", "refused"]),
    "absolute": (lambda t: onnx_model(t, str(t / outside(t)), write=False, offset="0"),
                 ["tensor 'w'", "lies outside"]),
    "symlink out": (lambda t: _link_out(t), ["tensor 'w'", "'w.bin' lies outside"]),
    "missing file": (lambda t: onnx_model(t, "gone.bin", write=False),
                     ["tensor 'w'", "'gone.bin' does not exist"]),
    "a folder": (lambda t: _folder_data(t), ["tensor 'w'", "'sub' is not a regular file"]),
    "past the end": (lambda t: onnx_model(t, "w.bin", offset="20"),
                     ["tensor 'w'", "bytes 20..44", "has 32"]),
    "length mismatch": (lambda t: onnx_model(t, "w.bin", length="20"),
                        ["tensor 'w'", "length 20 bytes", "needs 24"]),
    "huge shape": (lambda t: onnx_model(t, "w.bin", dims=(2 ** 30, 2 ** 30)),
                   ["tensor 'w'", "bytes 8.."]),
    "offset not a number": (lambda t: onnx_model(t, "w.bin", offset="-8"),
                            ["tensor 'w'", "offset '-8'"]),
}


def _cut(path, size):
    path.write_bytes(path.read_bytes()[:size])
    return path


def _write(path, data):
    path.write_bytes(data)
    return path


def _link_out(tmp_path):
    path = onnx_model(tmp_path, "w.bin", write=False, offset="0")
    os.symlink(tmp_path / outside(tmp_path), path.parent / "w.bin")
    return path


def _folder_data(tmp_path):
    path = onnx_model(tmp_path, "sub", write=False)
    (path.parent / "sub").mkdir()
    return path


@pytest.mark.parametrize("case", list(ONNX_CASES))
def test_damaged_or_hostile_onnx_is_an_onnx_import_error(tmp_path, case):
    import dlprim.onnx as dox
    build, words = ONNX_CASES[case]
    path = build(tmp_path)
    raises(dox.OnnxImportError, ValueError, lambda: dox.to_netconfig(path), str(path), *words)


def test_onnx_bytes_with_external_data_and_fifo_models(tmp_path):
    import dlprim.onnx as dox
    path = onnx_model(tmp_path, "w.bin")
    raises(dox.OnnxImportError, ValueError, lambda: dox.to_netconfig(path.read_bytes()),
           "external files", "pass the model's path")
    fifo = tmp_path / "fifo.onnx"
    os.mkfifo(fifo)
    raises(dox.OnnxImportError, ValueError, lambda: dox.to_netconfig(fifo), str(fifo),
           "not a regular file")


# ----- device memory

@pytest.fixture
def limits(ctx):
    return ctx.facts.max_alloc, ctx.facts.global_mem


def huge_tensor(ctx):
    return dp.Tensor(ctx, (ctx.facts.max_alloc + 1,), "uint8", name="the test's buffer")


def huge_arena(ctx):
    cfg = {"inputs": [{"name": "data", "shape": [ctx.facts.max_alloc // 2048 + 1, 1]}],
           "outputs": ["y"],
           "operators": [{"name": "fc", "type": "InnerProduct", "inputs": ["data"],
                          "outputs": ["y"], "options": {"outputs": 512}}]}
    return dp.Net(ctx, cfg, mode="predict")


def huge_params(ctx):
    # 64 input features keep the output count under the GEMM's 2^31 limit on devices
    # whose largest buffer is tens of GiB, while the weights still exceed that buffer
    cfg = {"inputs": [{"name": "data", "shape": [1, 64]}], "outputs": ["y"],
           "operators": [{"name": "fc", "type": "InnerProduct", "inputs": ["data"],
                          "outputs": ["y"],
                          "options": {"outputs": ctx.facts.max_alloc // (4 * 64) + 1}}]}
    return dp.Net(ctx, cfg, mode="predict")


def huge_input(ctx):
    cfg = {"inputs": [{"name": "data", "shape": [ctx.facts.max_alloc // 4 + 1, 1]}],
           "outputs": ["y"], "operators": [{"name": "id", "type": "Activation", "inputs": [
               "data"], "outputs": ["y"], "options": {"activation": "relu"}}]}
    return dp.Net(ctx, cfg, mode="predict")


@pytest.mark.parametrize("make, words", [
    (huge_tensor, ["the test's buffer"]),
    (huge_arena, ["predict-mode arena", "data (%d, 1)", "smaller batch"]),
    (huge_params, ["parameter arena"]),
    (huge_input, ["net input 'data'"])])
def test_beyond_the_largest_buffer_fails_fast_naming_it(ctx, limits, make, words):
    held = ctx.memory.bytes_in_use
    start = time.perf_counter()
    words = [w % (ctx.facts.max_alloc // 2048 + 1) if "%d" in w else w for w in words]
    raises(DeviceMemoryError, MemoryError, lambda: make(ctx), "%d bytes" % limits[0],
           "largest buffer", ctx.facts.name, *words)
    assert time.perf_counter() - start < 20  # nothing was allocated or computed
    assert ctx.memory.bytes_in_use - held < 64 << 20  # at most the small net input


def test_beyond_global_memory_counting_what_is_held(ctx, monkeypatch):
    small = type(ctx.facts)(ctx.device)
    # earlier tests' garbage, collected between reading the count and allocating, would
    # release bytes and let the request fit; collect it first and hold the collector off
    gc.collect()
    gc.disable()
    try:
        small.global_mem = ctx.memory.bytes_in_use + 1000
        monkeypatch.setattr(ctx.memory, "_facts", small)
        raises(DeviceMemoryError, MemoryError, lambda: dp.Tensor(ctx, (2000,), "uint8"),
               "a tensor uint8 (2000,)", "2000 bytes", "global memory",
               "%d bytes" % small.global_mem)
    finally:
        gc.enable()


class RefusingPool:
    def __init__(self, error):
        self.error = error

    def allocate(self, nbytes):
        raise self.error


def cl_error(cls, code):
    return cls(cl._cl._ErrorRecord("clCreateBuffer", code, "refused"))


@pytest.mark.parametrize("error", [
    cl_error(cl.MemoryError, cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE),
    cl_error(cl.RuntimeError, cl.status_code.OUT_OF_RESOURCES),
    cl_error(cl.LogicError, cl.status_code.INVALID_BUFFER_SIZE),
    MemoryError("host")], ids=["allocation failure", "out of resources", "buffer size", "host"])
def test_driver_refusals_become_device_memory_errors(ctx, monkeypatch, error):
    monkeypatch.setattr(ctx.memory, "_pool", RefusingPool(error))
    raises(DeviceMemoryError, MemoryError, lambda: dp.Tensor.zeros(ctx, (3, 5), name="w"),
           "w, float32 (3, 5)", "60 bytes", "refused", "smaller batch")


def test_other_driver_errors_pass_through(ctx, monkeypatch):
    error = cl_error(cl.LogicError, cl.status_code.INVALID_CONTEXT)
    monkeypatch.setattr(ctx.memory, "_pool", RefusingPool(error))
    with pytest.raises(cl.LogicError):
        dp.Tensor(ctx, (4,))


# ----- image folders

def image_folder(tmp_path, sizes=((8, 8),)):
    Image = pytest.importorskip("PIL.Image")
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i, (h, w) in enumerate(sizes):
            pixels = np.full((h, w, 3), 40 * i, np.uint8)
            Image.fromarray(pixels).save(tmp_path / cls / ("%d.png" % i))
    return tmp_path


@pytest.mark.parametrize("kind", ["fifo", "socket", "device link", "dangling link"])
def test_files_that_are_not_regular_are_skipped(tmp_path, kind):
    from dlprim.data import FolderSource
    pytest.importorskip("PIL")
    folder = image_folder(tmp_path)
    odd = folder / "cat" / "odd.png"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(odd))
        except OSError:
            pytest.skip("no unix sockets here")
        sock.close()
    else:
        os.symlink("/dev/zero" if kind == "device link" else str(tmp_path / "none"), odd)
    src = finishes(lambda: FolderSource(str(folder)))
    assert [os.path.basename(f) for f in src.files] == ["0.png", "0.png"]
    assert finishes(lambda: src[1])[1] == 1


def test_an_image_replaced_by_a_fifo_is_an_error_not_a_hang(tmp_path):
    from dlprim.data import DataError, FolderSource
    pytest.importorskip("PIL")
    src = FolderSource(str(image_folder(tmp_path)), name="data.train")
    path = src.files[1]
    os.remove(path)
    os.mkfifo(path)
    raises(DataError, ValueError, lambda: src[1], "data.train", path, "not a regular file")


@pytest.mark.parametrize("limit", [50, 100], ids=["pillow error", "pillow warning"])
def test_an_image_too_large_to_decode_safely_is_a_data_error(tmp_path, monkeypatch, limit):
    # 12x12 = 144 pixels: above twice 50 Pillow refuses, above 100 it only warns
    Image = pytest.importorskip("PIL.Image")
    from dlprim.data import DataError, FolderSource
    src = FolderSource(str(image_folder(tmp_path, sizes=((6, 6), (12, 12)))), name="data.val")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    path = src.files[1]
    raises(DataError, ValueError, lambda: src[1], "data.val", path, "too large to decode safely",
           "144 pixels")
    assert src[0][0].shape == (3, 6, 6)  # 36 pixels: below either limit


@pytest.mark.parametrize("kind", ["weights", "net", "onnx"])
def test_a_missing_file_is_named(tmp_path, kind):
    from dlprim.errors import MissingFileError
    path = str(tmp_path / ("nope." + {"weights": "dlp", "net": "json", "onnx": "onnx"}[kind]))
    if kind == "weights":
        fn = lambda: weights.load(path)  # noqa: E731
    elif kind == "net":
        fn = lambda: dp.Net(None).load_from_json_file(path)  # noqa: E731
    else:
        pytest.importorskip("onnx")
        import dlprim.onnx as dox
        fn = lambda: dox.to_netconfig(path)  # noqa: E731
    raises(MissingFileError, FileNotFoundError, fn, path)
