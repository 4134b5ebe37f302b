""".dlp files as DLPrimitives writes and reads them: dlprim's writer against a Python
transcription of DLPrimitives' ``Net::save_parameters``, byte for byte; every dtype it
writes read back; scalars; values the Net's float32 parameters cannot take."""
import json
import struct

import numpy as np
import pytest

import dlprim as dp
from dlprim.errors import FileFormatError, ParameterError
from dlprim.net import weights


# ----- the reference: DLPrimitives' writer (src/net.cpp, src/json.cpp, definitions.hpp)

def dlprimitives_dtype_name(dtype):
    """data_type_to_string's switch (include/dlprim/definitions.hpp)."""
    if dtype.name == "bfloat16":
        return "bfloat16"
    return {"float64": "double", "int64": "int64", "uint64": "uint64", "float32": "float",
            "int32": "int32", "uint32": "uint32", "float16": "half", "bfloat16": "bfloat16",
            "int16": "int16", "uint16": "uint16", "int8": "int8",
            "uint8": "uint8"}.get(np.dtype(dtype).newbyteorder("=").name, "unknown")


def dlprimitives_json_string(text):
    """details::generic_append: byte by byte, '"' '\\' \\b \\f \\n \\r \\t escaped, other
    bytes up to 0x1F as \\u00xx, everything else (UTF-8 included) as it is."""
    named = {0x22: b'\\"', 0x5C: b"\\\\", 0x08: b"\\b", 0x0C: b"\\f", 0x0A: b"\\n",
             0x0D: b"\\r", 0x09: b"\\t"}
    out = bytearray(b'"')
    for c in text.encode("utf-8"):
        if c in named:
            out += named[c]
        elif c <= 0x1F:
            out += b"\\u00" + b"0123456789abcdef"[c >> 4:(c >> 4) + 1] \
                + b"0123456789abcdef"[c & 0xF:(c & 0xF) + 1]
        else:
            out.append(c)
    return bytes(out + b'"')


def dlprimitives_json_number(n):
    """A json number is a double, written with setprecision(digits10 + 1) = 16 digits."""
    return (b"%.16g" % float(n))


def dlprimitives_json_object(pairs):
    """A compact json::object: a std::map, so keys in (unsigned) byte order."""
    items = sorted(pairs, key=lambda kv: kv[0].encode("utf-8"))
    return b"{" + b",".join(dlprimitives_json_string(k) + b":" + v for k, v in items) + b"}"


def dlprimitives_save_parameters(params):
    """Net::save_parameters for {name: array}: parameters_ is a std::map, so names in byte
    order; a Shape of no dimensions has total_size 0 (no "shape" key is ever created by
    the loop over its dimensions, and memory_size is 0)."""
    entries, blobs, start = [], [], 0
    for name in sorted(params, key=lambda n: n.encode("utf-8")):
        a = np.asarray(params[name])
        mem = a.nbytes if a.ndim else 0
        spec = [("dtype", dlprimitives_json_string(dlprimitives_dtype_name(a.dtype))),
                ("size", dlprimitives_json_number(mem)), ("start", dlprimitives_json_number(start))]
        if a.ndim:
            spec.append(("shape", b"[" + b",".join(dlprimitives_json_number(d) for d in a.shape)
                         + b"]"))
        entries.append((name, dlprimitives_json_object(spec)))
        blobs.append(a.astype(a.dtype.newbyteorder("<")).tobytes()[:mem])   # host_data, LE
        start += mem
    header = dlprimitives_json_object([("tensors", dlprimitives_json_object(entries))])
    n = len(header)
    length = bytes((n >> (24 - i * 8)) & 0xFF for i in range(4))
    return b"DLPW" + length + header + b"".join(blobs)


def test_reference_writes_what_dlprimitives_documents():
    """The transcription itself, on a case worked by hand from the C++."""
    got = dlprimitives_save_parameters({"b": np.zeros(1, np.float32),
                                        "a\t": np.zeros((2, 1), np.int8)})
    header = (b'{"tensors":{"a\\t":{"dtype":"int8","shape":[2,1],"size":2,"start":0},'
              b'"b":{"dtype":"float","shape":[1],"size":4,"start":2}}}')
    assert got == b"DLPW" + struct.pack(">I", len(header)) + header + b"\0" * 6


# ----- dlprim's writer, byte for byte

def _rng_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def parameter_sets():
    rng = np.random.default_rng(5)
    f32 = np.float32
    yield "float32, unsorted", {
        "fc.weight": _rng_array(rng, (3, 4), f32), "conv1.bias": _rng_array(rng, 4, f32),
        "bn.running_var": _rng_array(rng, 2, f32), "Z": _rng_array(rng, (1, 1, 2), f32),
        "a": _rng_array(rng, 1, f32), "conv1.weight": _rng_array(rng, (2, 1, 3, 3), f32)}
    yield "every dtype", {
        dt: _rng_array(rng, (2, 3), dt) for dt in (
            "uint8", "float64", "int16", "float16", "int64", "uint64", "float32", "uint32",
            "int8", "int32", "uint16")}
    yield "non-ASCII and escaped names", {
        "poids.é": _rng_array(rng, 3, f32), "重み": _rng_array(rng, 2, np.float16),
        "вес": _rng_array(rng, (2, 2), np.int32), "emoji😀": _rng_array(rng, 1, f32),
        'q"uote\\back/slash': _rng_array(rng, 2, f32),
        "tab\tnew\nline\r": _rng_array(rng, 1, np.int8),
        "ctl\x01\x1f\x7f\b\f": _rng_array(rng, 1, np.uint8), "É": _rng_array(rng, 1, np.float64),
        "e": _rng_array(rng, 1, f32), "E": _rng_array(rng, 1, f32)}
    yield "empty tensors and a big-endian array", {
        "none": np.zeros((0,), np.float32), "holes": np.zeros((2, 0, 3), np.int64),
        "be": _rng_array(rng, (2, 3), np.float32).astype(">f4"),
        "be_int": _rng_array(rng, 3, np.int16).astype(">i2")}
    yield "no parameters", {}


@pytest.mark.parametrize("case, params", list(parameter_sets()),
                         ids=[c for c, _ in parameter_sets()])
def test_dlp_bytes_are_dlprimitives_bytes(tmp_path, case, params):
    want = dlprimitives_save_parameters(params)
    assert weights.dlp_bytes(params) == want
    weights.save_dlp(tmp_path / "w.dlp", params)
    assert (tmp_path / "w.dlp").read_bytes() == want
    back = weights.load_dlp(tmp_path / "w.dlp")
    assert sorted(back) == sorted(params)
    for name, a in params.items():
        assert back[name].dtype == a.dtype.newbyteorder("=") and back[name].shape == a.shape
        assert np.array_equal(back[name], a), name
    assert weights.dlp_bytes(back) == want


def test_bfloat16_is_written_and_read_back_as_float32():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.0, -2.5, 3.140625, 65280.0, 0.0078125], np.float32)
    params = {"w": values.astype(ml_dtypes.bfloat16), "b": values}
    want = dlprimitives_save_parameters(params)
    assert weights.dlp_bytes(params) == want and b'"dtype":"bfloat16"' in want


def test_bfloat16_from_a_header_is_float32(tmp_path):
    # bfloat16 bits are the top 16 bits of the float32 of the same value
    bits = (np.array([1.0, -2.5, 3.140625], np.float32).view(np.uint32) >> 16).astype("<u2")
    header = json.dumps({"tensors": {"w": {"dtype": "bfloat16", "shape": [3], "size": 6,
                                           "start": 0}}}).encode()
    path = tmp_path / "bf.dlp"
    path.write_bytes(b"DLPW" + struct.pack(">I", len(header)) + header + bits.tobytes())
    got = weights.load_dlp(path)["w"]
    assert got.dtype == np.float32 and np.array_equal(got, [1.0, -2.5, 3.140625])


@pytest.mark.parametrize("spelling, dtype", [("float32", np.float32), ("float16", np.float16),
                                             ("int", np.int32), ("half", np.float16),
                                             ("double", np.float64), ("uint32", np.uint32)])
def test_every_dlprimitives_spelling_reads(tmp_path, spelling, dtype):
    a = np.arange(3).astype(dtype)
    header = json.dumps({"tensors": {"w": {"dtype": spelling, "shape": [3], "size": a.nbytes,
                                           "start": 0}}}).encode()
    path = tmp_path / "w.dlp"
    path.write_bytes(b"DLPW" + struct.pack(">I", len(header)) + header + a.astype(
        a.dtype.newbyteorder("<")).tobytes())
    got = weights.load_dlp(path)["w"]
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, a)


def test_a_dtype_dlp_cannot_hold_names_the_parameter():
    with pytest.raises(ParameterError, match="parameter 'mask' has dtype bool"):
        weights.dlp_bytes({"w": np.ones(2, np.float32), "mask": np.ones(2, bool)})
    with pytest.raises(ParameterError, match="parameter name 3 is not a string"):
        weights.dlp_bytes({3: np.ones(2, np.float32)})


def test_unknown_dtype_in_a_header_names_the_tensor(tmp_path):
    header = json.dumps({"tensors": {"w": {"dtype": "unknown", "shape": [1], "size": 4,
                                           "start": 0}}}).encode()
    path = tmp_path / "w.dlp"
    path.write_bytes(b"DLPW" + struct.pack(">I", len(header)) + header + b"\0" * 4)
    with pytest.raises(FileFormatError, match=r"tensor 'w': dtype 'unknown' is not one a .dlp "
                                              r"file holds \(bfloat16, double"):
        weights.load_dlp(path)


# ----- scalars

def scalar_net(ctx):
    cfg = dp.NetConfig()
    cfg.add("Parameter", name="p", inputs=[], outputs="p",
            options={"shape": [], "is_trainable": False})
    cfg.set_outputs(["p"])
    return dp.Net(ctx, cfg)


def test_a_scalar_parameter_round_trips(ctx, tmp_path):
    net = scalar_net(ctx)
    net.set_parameters({"p.0": np.float32(2.5)})
    path = tmp_path / "s.dlp"
    net.save_parameters(path)
    data = path.read_bytes()
    (length,) = struct.unpack(">I", data[4:8])
    # as DLPrimitives writes a 0-d shape: no "shape" key; but with its one value
    assert json.loads(data[8:8 + length]) == {"tensors": {"p.0": {"dtype": "float", "size": 4,
                                                                  "start": 0}}}
    assert data[8 + length:] == np.float32(2.5).tobytes()
    again = scalar_net(ctx)
    again.load_parameters(path)
    assert again.get_parameters()["p.0"].shape == () and again(**{})["p"] == 2.5
    loaded = weights.load_dlp(path)["p.0"]
    assert loaded.shape == () and loaded == 2.5
    assert weights.dlp_bytes({"p.0": loaded}) == data


def test_dlprimitives_empty_0d_tensor_is_refused_with_the_reason(tmp_path):
    want = dlprimitives_save_parameters({"p.0": np.float32(2.5)})  # size 0, no value
    path = tmp_path / "dlprimitives.dlp"
    path.write_bytes(want)
    with pytest.raises(FileFormatError, match=r"tensor 'p.0': size 0 bytes, but shape \(\) of "
                                              r"float needs 4 \(no shape is a 0-d tensor"):
        weights.load_dlp(path)


# ----- what the Net's float32 parameters take

NET = {"inputs": [{"shape": [2, 3]}], "outputs": ["y"],
       "operators": [{"name": "fc", "type": "InnerProduct", "inputs": ["data"],
                      "outputs": ["y"], "options": {"outputs": 2}}]}


@pytest.mark.parametrize("dtype", ["float64", "float16", "int8", "uint16", "int64", "bfloat16"])
def test_net_loads_other_dtypes_as_float32(ctx, tmp_path, dtype):
    w = np.array([[1, -2, 3], [4, 5, -6]], np.float32)
    if dtype.startswith("u"):
        w = np.abs(w)
    b = np.array([7, 8], np.float32)
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    arrays = {"fc.0": w.astype(dtype), "fc.1": b.astype(dtype)}
    weights.save_dlp(tmp_path / "w.dlp", arrays)
    net = dp.Net(ctx, NET, mode="predict")
    net.load_parameters(tmp_path / "w.dlp")
    got = net.get_parameters()
    assert np.array_equal(got["fc.0"], w) and np.array_equal(got["fc.1"], b)


@pytest.mark.parametrize("value, match", [
    (np.array([1, 2 ** 24 + 1], np.int64), r"'fc.1' has int64 value 16777217 at \(1,\), which "
                                           r"float32 cannot hold exactly"),
    (np.array([2 ** 64 - 1, 0], np.uint64),
     r"'fc.1' has uint64 value 18446744073709551615 at \(0,\)"),
    (np.array([1.0, 1e300], np.float64), r"'fc.1' has float64 value 1e\+300 at \(1,\), too large "
                                         r"for float32"),
])
def test_values_float32_cannot_hold_are_refused_by_name(ctx, tmp_path, value, match):
    net = dp.Net(ctx, NET, mode="predict")
    weights.save_dlp(tmp_path / "w.dlp", {"fc.0": np.zeros((2, 3)), "fc.1": value})
    with pytest.raises(ParameterError, match=match):
        net.load_parameters(tmp_path / "w.dlp")
    # large integers that float32 holds exactly, infinities and NaN load as they are
    net.set_parameters({"fc.0": np.zeros((2, 3)), "fc.1": np.array([2 ** 30, 2 ** 62], np.int64)})
    net.set_parameters({"fc.0": np.zeros((2, 3)), "fc.1": np.array([np.inf, np.nan])})
    assert np.isinf(net.get_parameters()["fc.1"][0])
