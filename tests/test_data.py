"""Data sources, transforms and the batch loader, on small files generated here."""
import gzip
import sys
import threading

import numpy as np
import pytest

from dlprim.data import (ArraySource, BatchLoader, CenterCrop, Compose, DataError, FolderSource,
                         HorizontalFlip, MissingDataError, MnistSource, Normalize, NpzSource,
                         RandomCrop, Resize, Source, ToFloat, make_loader, make_transforms,
                         read_idx, write_idx)

try:
    from PIL import Image
except ImportError:
    Image = None
needs_pillow = pytest.mark.skipif(Image is None, reason="Pillow is not installed "
                                  "(pip install 'dlprim[image]'): image-folder tests skipped")


def _digits(rng, n=37, classes=10):
    images = rng.integers(0, 256, (n, 5, 7), dtype=np.uint8)
    labels = (np.arange(n) % classes).astype(np.uint8)
    return images, labels


def _mnist_files(tmp_path, images, labels, gz):
    ext = ".gz" if gz else ""
    ip, lp = tmp_path / ("img" + ext), tmp_path / ("lab" + ext)
    write_idx(str(ip), images)
    write_idx(str(lp), labels)
    return str(ip), str(lp)


# ---- idx files and the MNIST source

@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_plain_and_gz(tmp_path, rng, gz):
    images, labels = _digits(rng)
    ip, lp = _mnist_files(tmp_path, images, labels, gz)
    raw = open(ip, "rb").read()
    if gz:
        assert raw[:2] == b"\x1f\x8b"
        raw = gzip.decompress(raw)
    # the official header: magic 0x00000803, then big-endian count, rows, cols
    assert raw[:16] == bytes([0, 0, 8, 3, 0, 0, 0, 37, 0, 0, 0, 5, 0, 0, 0, 7])
    src = MnistSource(ip, lp)
    assert len(src) == 37 and src.num_classes == 10 and src.shape == (1, 5, 7)
    x, y = src[12]
    assert x.dtype == np.float32 and x.shape == (1, 5, 7) and y == 2
    np.testing.assert_allclose(x[0], images[12] / 255.0, rtol=1e-6)


def test_idx_round_trip_other_dtypes(tmp_path):
    for dtype in (np.int16, np.int32, np.float32, np.float64):
        a = np.arange(24, dtype=dtype).reshape(2, 3, 4) - 5
        write_idx(str(tmp_path / "a"), a)
        b = read_idx(str(tmp_path / "a"))
        assert b.dtype == dtype and np.array_equal(a, b)


def test_idx_wrong_magic_names_file(tmp_path, rng):
    images, labels = _digits(rng)
    ip, lp = _mnist_files(tmp_path, images, labels, gz=True)
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(b"\x12\x34\x56\x78" + b"\0" * 40))
    with pytest.raises(DataError, match=r"bad.gz: not an idx file \(magic 0x12345678, "
                                        r"expected 0x00000803\)"):
        MnistSource(str(bad), lp)
    # images and labels swapped: a 1-dimensional file where 3 dimensions are expected
    with pytest.raises(DataError, match=r"lab.gz: idx magic 0x00000801 has 1 dimensions, "
                                        r"expected 3 \(magic 0x00000803\)"):
        MnistSource(lp, ip)


def test_idx_truncated_and_missing(tmp_path, rng):
    images, labels = _digits(rng)
    ip, lp = _mnist_files(tmp_path, images, labels, gz=False)
    with open(ip, "r+b") as f:
        f.truncate(16 + 100)
    with pytest.raises(DataError, match=r"img: idx header says shape 37x5x7 \(1295 bytes of "
                                        r"data\), file has 100"):
        MnistSource(ip, lp)
    with pytest.raises(MissingDataError, match=r"nothere.gz: no such file") as info:
        MnistSource(str(tmp_path / "nothere.gz"), lp)
    assert isinstance(info.value, FileNotFoundError)


def test_label_out_of_range_names_index(tmp_path):
    images = np.zeros((400, 4, 4), np.uint8)
    labels = (np.arange(400) % 10).astype(np.uint8)
    labels[345] = 12
    ip, lp = _mnist_files(tmp_path, images, labels, gz=True)
    with pytest.raises(DataError) as info:
        MnistSource(ip, lp, name="data.train")
    assert str(info.value) == "data.train: label 12 at index 345 outside 0..9"
    with pytest.raises(DataError, match=r"img.gz: label 5 at index 5 outside 0..4"):
        MnistSource(ip, lp, num_classes=5)


def test_image_label_count_mismatch(tmp_path, rng):
    images, labels = _digits(rng)
    ip, lp = _mnist_files(tmp_path, images, labels[:-1], gz=False)
    with pytest.raises(DataError, match="37 images but 36 labels"):
        MnistSource(ip, lp)


# ---- npz

def test_npz_keys_layout_and_errors(tmp_path, rng):
    x = rng.standard_normal((9, 3, 4, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1, 2, 0, 1, 3])
    path = str(tmp_path / "d.npz")
    np.savez(path, x=x, y=y, images=x.transpose(0, 2, 3, 1), targets=y.astype(np.float64))
    src = NpzSource(path)
    assert src.num_classes == 4 and src.shape == (3, 4, 5) and len(src) == 9
    np.testing.assert_array_equal(src[4][0], x[4])          # float data passes unscaled
    last = NpzSource(path, x="images", y="targets", channels_last=True, num_classes=6)
    assert last.shape == (3, 4, 5) and last.num_classes == 6 and last[8][1] == 3
    np.testing.assert_array_equal(last[2][0], x[2])
    with pytest.raises(DataError, match=r"d.npz: no array 'labels' \(arrays: x, y, images, "
                                        r"targets\)"):
        NpzSource(path, y="labels")
    np.savez(path, x=x, y=y + 0.5)
    with pytest.raises(DataError, match="label 0.5 at index 0 is not a whole number"):
        NpzSource(path)
    with pytest.raises(MissingDataError, match="none.npz: no such file"):
        NpzSource(str(tmp_path / "none.npz"))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="junk.npz: cannot read as .npz"):
        NpzSource(str(tmp_path / "junk.npz"))


# ---- image folders

def _png(path, array):
    Image.fromarray(array).save(str(path))


@needs_pillow
def test_folder_source(tmp_path, rng):
    pics = {}
    for cls in ("zebra", "ant", "cat"):            # sorted names give the indices
        (tmp_path / cls).mkdir()
        for i in range(2):
            pics[cls, i] = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
            _png(tmp_path / cls / ("%d.png" % i), pics[cls, i])
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    src = FolderSource(str(tmp_path))
    assert src.classes == ["ant", "cat", "zebra"] and len(src) == 6 and src.shape == (3, 6, 8)
    x, y = src[5]
    assert y == 2
    np.testing.assert_allclose(x, pics["zebra", 1].transpose(2, 0, 1) / 255.0, rtol=1e-6)
    gray = FolderSource(str(tmp_path), mode="L")
    assert gray.shape == (1, 6, 8) and gray[0][1] == 0
    with pytest.raises(MissingDataError, match="nodir: no such directory"):
        FolderSource(str(tmp_path / "nodir"))


@needs_pillow
def test_folder_wrong_image_size_names_file(tmp_path, rng):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        _png(tmp_path / cls / "0.png", rng.integers(0, 256, (6, 6), dtype=np.uint8))
    _png(tmp_path / "b" / "1.png", rng.integers(0, 256, (5, 6), dtype=np.uint8))
    src = FolderSource(str(tmp_path), mode="L", name="data.train")
    loader = BatchLoader(src, 2, shuffle=False, prefetch=0)
    with pytest.raises(DataError, match=r"data.train: image at index 2 \(.*b/1.png\) is 1x5x6, "
                                        r"expected 1x6x6"):
        list(loader)
    # a resize transform evens the sizes out
    fixed = BatchLoader(src, 2, shuffle=False, transforms=[Resize([6, 6])])
    assert [x.shape for x, _ in fixed] == [(2, 1, 6, 6), (1, 1, 6, 6)]


def test_pillow_missing_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(DataError, match=r"needs Pillow.*pip install 'dlprim\[image\]'"):
        FolderSource(str(tmp_path))
    with pytest.raises(DataError, match=r"resize transform needs Pillow"):
        Resize(4)


# ---- transforms against numpy

def test_to_float_and_normalize(rng):
    u8 = rng.integers(0, 256, (3, 4, 5), dtype=np.uint8)
    np.testing.assert_allclose(ToFloat()(u8), u8 / 255.0, rtol=1e-6)
    f = rng.standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(ToFloat()(f), f)
    np.testing.assert_allclose(ToFloat(0.5)(f), f * 0.5, rtol=1e-6)
    mean, std = [0.1, -0.2, 0.3], [0.5, 2.0, 4.0]
    want = (f.astype(np.float64) - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    np.testing.assert_allclose(Normalize(mean, std)(f), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(Normalize(0.5, 2.0)(f), (f - 0.5) / 2.0, rtol=1e-6)
    with pytest.raises(DataError, match="mean has 2 values, the image has 3 channels"):
        Normalize([0, 1], 1)(f)
    with pytest.raises(ValueError, match="std: must be > 0"):
        Normalize(0, [1, 0])


def test_random_crop_matches_numpy_and_varies(rng):
    x = rng.standard_normal((2, 6, 7)).astype(np.float32)
    seen = set()
    for seed in range(40):
        got = RandomCrop([5, 4], padding=2, fill=-1.0)(x, np.random.default_rng(seed))
        ref_rng = np.random.default_rng(seed)
        padded = np.pad(x, ((0, 0), (2, 2), (2, 2)), constant_values=-1.0)
        top, left = ref_rng.integers(0, 6), ref_rng.integers(0, 8)
        np.testing.assert_array_equal(got, padded[:, top:top + 5, left:left + 4])
        seen.add((top, left))
    assert len(seen) > 10
    with pytest.raises(DataError, match="crop 9x9 larger than the padded image 6x7"):
        RandomCrop(9)(x, rng)


def test_flip(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(HorizontalFlip(1.0)(x, rng), x[:, :, ::-1])
    np.testing.assert_array_equal(HorizontalFlip(0.0)(x, rng), x)
    flips = sum(HorizontalFlip()(x, rng)[0, 0, 0] == x[0, 0, -1] for _ in range(400))
    assert 150 < flips < 250


def _bilinear(x, h, w):
    """Half-pixel-centre bilinear upsampling with edge clamping (Pillow's for upscaling)."""
    H, W = x.shape[-2:]
    ys = np.clip((np.arange(h) + 0.5) * H / h - 0.5, 0, H - 1)
    xs = np.clip((np.arange(w) + 0.5) * W / w - 0.5, 0, W - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, H - 1), np.minimum(x0 + 1, W - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    top = x[..., y0, :][..., x0] * (1 - fx) + x[..., y0, :][..., x1] * fx
    bot = x[..., y1, :][..., x0] * (1 - fx) + x[..., y1, :][..., x1] * fx
    return top * (1 - fy) + bot * fy


@needs_pillow
def test_resize_against_numpy_bilinear(rng):
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    got = Resize([8, 10])(x)
    assert got.shape == (2, 8, 10) and got.dtype == np.float32
    np.testing.assert_allclose(got, _bilinear(x.astype(np.float64), 8, 10), atol=1e-5)
    # an int sets the shorter side and keeps the aspect ratio
    assert Resize(8)(x).shape == (2, 8, 10)
    assert Resize(10)(x.transpose(0, 2, 1)).shape == (2, 12, 10)
    flat = np.full((1, 9, 13), 0.25, np.float32)
    np.testing.assert_allclose(Resize([4, 5])(flat), 0.25, rtol=1e-6)


def test_center_crop(rng):
    x = rng.standard_normal((1, 7, 8)).astype(np.float32)
    np.testing.assert_array_equal(CenterCrop([3, 4])(x), x[:, 2:5, 2:6])
    padded = CenterCrop(10)(x)
    assert padded.shape == (1, 10, 10)
    np.testing.assert_array_equal(padded[:, 1:8, 1:9], x)
    assert padded[:, 0].sum() == 0 and padded[:, :, 9].sum() == 0


def test_transforms_from_config():
    t = make_transforms([{"type": "random_crop", "size": 4, "padding": 1},
                         {"type": "flip", "p": 1.0}, {"type": "normalize", "mean": 1, "std": 2}])
    assert isinstance(t, Compose) and [type(s) for s in t.transforms] == [
        RandomCrop, HorizontalFlip, Normalize]
    with pytest.raises(ValueError, match=r"\[1\].type: unknown transform 'blur'"):
        make_transforms([{"type": "flip"}, {"type": "blur"}])
    with pytest.raises(ValueError, match=r"\[0\].std: must be > 0"):
        make_transforms([{"type": "normalize", "mean": 0, "std": -1}])
    with pytest.raises(ValueError, match=r"\[0\].size: required by center_crop"):
        make_transforms([{"type": "center_crop"}])


# ---- the loader

def _arrays(n=23, classes=5):
    images = np.arange(n * 6, dtype=np.float32).reshape(n, 1, 2, 3)
    return ArraySource(images, np.arange(n) % classes)


def _ids(x):
    return (x[:, 0, 0, 0] / 6).astype(int).tolist()


def test_loader_batches_partial_and_drop_last():
    src = _arrays()
    loader = BatchLoader(src, 5, shuffle=False)
    batches = list(loader)
    assert len(loader) == 5 and [len(y) for _, y in batches] == [5, 5, 5, 5, 3]
    x, y = batches[-1]
    assert x.dtype == np.float32 and y.dtype == np.int32 and x.flags.c_contiguous
    assert _ids(x) == [20, 21, 22] and y.tolist() == [0, 1, 2]
    dropped = BatchLoader(src, 5, drop_last=True)
    assert len(dropped) == 4 and [len(y) for _, y in dropped] == [5] * 4


def test_shuffle_reproducible_per_epoch():
    src = _arrays()
    a, b = BatchLoader(src, 4, seed=7), BatchLoader(src, 4, seed=7, prefetch=0)
    epochs_a = [[_ids(x) for x, _ in a] for _ in range(3)]
    epochs_b = [[_ids(x) for x, _ in b] for _ in range(3)]
    assert epochs_a == epochs_b and a.epoch == 3
    for epoch in epochs_a:
        assert sorted(sum(epoch, [])) == list(range(23))     # each sample once
    assert epochs_a[0] != epochs_a[1] and sum(epochs_a[0], []) != list(range(23))
    assert [_ids(x) for x, _ in BatchLoader(src, 4, seed=8)] != epochs_a[0]
    b.set_epoch(1)
    assert [_ids(x) for x, _ in b] == epochs_a[1]


def test_random_transforms_reproducible_and_resumable():
    src = _arrays(n=30)
    tf = [RandomCrop(2, padding=1), HorizontalFlip()]
    full = [x for x, _ in BatchLoader(src, 4, seed=3, transforms=tf)]
    again = [x for x, _ in BatchLoader(src, 4, seed=3, transforms=tf, prefetch=0)]
    assert all(np.array_equal(p, q) for p, q in zip(full, again))
    assert not all(np.array_equal(p, src.fetch(range(4))[0][:, :, :2, :2]) for p in full[:1])
    # interrupt after 3 batches, resume in a fresh loader from the saved state
    first = BatchLoader(src, 4, seed=3, transforms=tf)
    head = []
    for x, _ in first:
        head.append(x)
        if len(head) == 3:
            break
    state = first.state_dict()
    assert state == {"epoch": 0, "position": 3, "seed": 3}
    resumed = BatchLoader(src, 4, seed=3, transforms=tf)
    resumed.load_state_dict(state)
    rest = [x for x, _ in resumed]
    assert len(head) + len(rest) == len(full)
    assert all(np.array_equal(p, q) for p, q in zip(head + rest, full))
    assert resumed.state_dict() == {"epoch": 1, "position": 0, "seed": 3}


class _Failing(Source):
    name = "failing"
    num_classes, shape = 2, (1, 1, 1)

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 7:
            raise RuntimeError("sample 7 is broken")
        return np.zeros((1, 1, 1), np.float32), 0


def test_prefetch_error_reraised_in_caller():
    before = threading.active_count()
    loader = BatchLoader(_Failing(), 3, shuffle=False, prefetch=2)
    got = []
    with pytest.raises(RuntimeError, match="sample 7 is broken"):
        for x, _ in loader:
            got.append(x)
    assert len(got) == 2 and loader.position == 2
    assert threading.active_count() == before


def test_prefetch_thread_stops_on_break():
    before = threading.active_count()
    loader = BatchLoader(_arrays(n=200), 2, prefetch=3)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert threading.active_count() == before and loader.position == 2


def test_loader_arguments():
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        BatchLoader(_arrays(), 0)
    with pytest.raises(DataError, match="empty: no samples"):
        BatchLoader(ArraySource(np.zeros((0, 2, 2)), np.zeros(0, int), name="empty"), 2)


def test_make_loader_from_config_entry(tmp_path, rng):
    images, labels = _digits(rng, n=20)
    ip, lp = _mnist_files(tmp_path, images, labels, gz=True)
    entry = {"type": "mnist", "images": ip, "labels": lp, "num_classes": 10,
             "transforms": [{"type": "normalize", "mean": 0.5, "std": 0.25}]}
    loader = make_loader(entry, 8, name="data.val", train=False)
    x, y = next(iter(loader))
    np.testing.assert_allclose(x[:, 0], (images[:8] / 255.0 - 0.5) / 0.25, rtol=1e-5, atol=1e-6)
    assert y.tolist() == labels[:8].tolist() and loader.shape == (1, 5, 7)
    entry["transforms"] = [{"type": "normalize", "mean": 0}]
    with pytest.raises(DataError, match=r"data.val.transforms\[0\].std: required"):
        make_loader(entry, 8, name="data.val")
