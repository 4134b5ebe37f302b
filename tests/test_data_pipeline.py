"""The input pipeline: geometry on 8-bit pixels before the conversion to float, JPEGs
decoded at a reduced size, worker processes and threads (same batches, exact resume,
errors that name the file, clean shutdown), RandomResizedCrop, ColorJitter and
RandomRotation, and PyTorch's argument names."""
import colorsys
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dlprim.data import (ArraySource, BatchLoader, CenterCrop, ColorJitter, Compose, DataError,
                         FolderSource, HorizontalFlip, Normalize, RandomCrop, RandomResizedCrop,
                         RandomRotation, Resize, Transform, WorkerError, make_loader)
from dlprim.data.transforms import split_stages
from dlprim.train.config import ConfigError, load_config
from test_train_config import _minimal, project  # noqa: F401 -- a fixture

Image = pytest.importorskip("PIL.Image")

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _photo(rng, h, w):
    """Smooth colour waves and a little noise: what JPEG is made for."""
    yy, xx = np.mgrid[0:h, 0:w]
    waves = np.stack([np.sin(xx / 9.0), np.cos(yy / 7.0), np.sin((xx + yy) / 13.0)], axis=-1)
    return (127 + 100 * waves + rng.normal(0, 3, waves.shape)).clip(0, 255).astype(np.uint8)


def _folder(root, sizes, ext, seed=0):
    """Images of ``sizes`` (h, w) alternating between class folders a and b."""
    rng = np.random.default_rng(seed)
    for c in "ab":
        (root / c).mkdir(exist_ok=True)
    for i, (h, w) in enumerate(sizes):
        Image.fromarray(_photo(rng, h, w)).save(str(root / "ab"[i % 2] / ("%02d.%s" % (i, ext))))
    return str(root)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """18 small JPEGs of a few sizes."""
    return FolderSource(_folder(tmp_path_factory.mktemp("jpegs"),
                                [(40 + 3 * (i % 4), 50 + 5 * (i % 3)) for i in range(18)], "jpg"))


def _same(batches, expected):
    assert len(batches) == len(expected)
    for (x, y), (ex, ey) in zip(batches, expected):
        np.testing.assert_array_equal(x, ex)
        np.testing.assert_array_equal(y, ey)


# ---- 8-bit geometry, float last

def test_geometry_on_8_bit_pixels_matches_the_float_path(tmp_path):
    src = FolderSource(_folder(tmp_path, [(37, 53), (48, 40), (50, 50), (21, 64)], "png"))
    tf = [Resize(20), CenterCrop([22, 18]), RandomCrop(16, padding=3), HorizontalFlip()]
    norm = Normalize(MEAN, STD)
    assert split_stages(Compose(tf + [norm])) == (tf, [norm])
    loader = BatchLoader(src, batch_size=4, shuffle=False, seed=9, transforms=tf, prefetch=0)
    x, _ = next(iter(loader))
    # converted after resizing: whole levels of 1/255, where the float path's are not
    np.testing.assert_allclose(x * 255, np.round(x * 255), atol=1e-3)
    rng = np.random.default_rng([9, 0, 0])  # batch 0 of epoch 0: the same draws, in order
    ref = np.stack([Compose(tf)(src[i][0], rng) for i in range(4)])
    assert np.abs(ref * 255 - np.round(ref * 255)).max() > 0.1
    np.testing.assert_allclose(x, ref, atol=1 / 255)  # the 8-bit rounding, under a level
    normed = BatchLoader(src, batch_size=4, shuffle=False, seed=9, prefetch=0,
                         transforms=tf + [norm])
    mean, std = np.reshape(MEAN, (3, 1, 1)), np.reshape(STD, (3, 1, 1))
    np.testing.assert_allclose(next(iter(normed))[0], (x - mean) / std, rtol=1e-5, atol=1e-5)


def test_a_float_transform_first_keeps_everything_in_float(tmp_path):
    src = FolderSource(_folder(tmp_path, [(30, 40)] * 2, "png"))
    tf = [Normalize(0.5, 0.25), Resize(10)]
    assert split_stages(Compose(tf)) == ([], tf)
    x, _ = BatchLoader(src, 2, shuffle=False, transforms=tf, prefetch=0).batch_at(0, 0)
    np.testing.assert_allclose(x[0], Resize(10)((src[0][0] - 0.5) / 0.25), rtol=1e-6)


def test_a_large_jpeg_decodes_at_a_reduced_size_for_a_small_target(tmp_path):
    src = FolderSource(_folder(tmp_path, [(960, 1280)], "jpg"))
    im, _ = src.sample(0)
    small = Resize(64)(im, None)
    # asked for at least 2 x 85x64, the decoder gives 1/4 of 1280x960, then the resize
    assert im.size == (320, 240) and small.size == (85, 64)
    full = Resize(64)(src[0][0])  # decoded at full size, resized in float
    diff = np.abs(src.as_array(small) - full) * 255
    assert diff.mean() < 1.0 and diff.max() < 12, (diff.mean(), diff.max())
    im, _ = src.sample(0)
    Resize(600)(im, None)
    assert im.size == (1280, 960)  # a target that is not much smaller: decoded whole
    # a crop is reduced only as far as it stays twice the output: a 157x157 crop to 32x32
    # decodes at 1/2, a 78x78 one at full size
    for area, size in [(0.02, (640, 480)), (0.005, (1280, 960))]:
        im, _ = src.sample(0)
        t = RandomResizedCrop(32, scale=(area, area), ratio=(1.0, 1.0))
        assert t(im, np.random.default_rng(0)).size == (32, 32) and im.size == size


# ---- workers

TRAIN = [RandomResizedCrop(24, scale=(0.3, 1.0)), HorizontalFlip(),
         ColorJitter(0.3, 0.3, 0.3, 0.05), RandomRotation(15), Normalize(MEAN, STD)]


def _epochs(loader, n=2):
    return [list(loader) for _ in range(n)]


def test_workers_give_the_same_batches_and_resume_exactly(jpegs):
    ref = _epochs(BatchLoader(jpegs, batch_size=4, seed=5, transforms=TRAIN, prefetch=0))
    assert [len(e) for e in ref] == [5, 5] and not np.array_equal(ref[0][0][0], ref[1][0][0])
    for workers, kind in [(1, "process"), (3, "process"), (3, "thread")]:
        loader = BatchLoader(jpegs, batch_size=4, seed=5, transforms=TRAIN, num_workers=workers,
                             worker_type=kind)
        for got, want in zip(_epochs(loader), ref):
            _same(got, want)
        if workers == 1:
            loader.close()
            continue
        # stop after 2 batches of epoch 1: the loader goes on from there, and so does a
        # fresh one given its state
        loader.set_epoch(1)
        head = []
        for batch in loader:
            head.append(batch)
            if len(head) == 2:
                break
        state = loader.state_dict()
        assert state == {"epoch": 1, "position": 2, "seed": 5}
        fresh = BatchLoader(jpegs, batch_size=4, seed=5, transforms=TRAIN, num_workers=workers,
                            worker_type=kind)
        fresh.load_state_dict(state)
        _same(head + list(loader), ref[1])
        _same(list(fresh), ref[1][2:])
        loader.close()
        fresh.close()


class _Refuses(Transform):
    """Raises a KeyError on images wider than ``width``."""

    def __init__(self, width):
        self.width = width

    def __call__(self, x, rng):
        if x.shape[2] > self.width:
            raise KeyError("too wide: %d" % x.shape[2])
        return x


def test_worker_errors_reach_the_caller_naming_the_file(tmp_path):
    folder = _folder(tmp_path, [(30, 40)] * 6 + [(30, 60)] * 2, "jpg")
    broken = os.path.join(folder, "b", "05.jpg")  # sample 6: a/00 a/02 a/04 a/06 b/01 ...
    data = open(broken, "rb").read()
    open(broken, "wb").write(data[:len(data) // 3])
    src = FolderSource(folder, name="data.train")
    for kind in ("process", "thread"):
        loader = BatchLoader(src, batch_size=2, shuffle=False, num_workers=2, worker_type=kind,
                             transforms=[Resize([30, 40])])
        with pytest.raises(DataError, match="data.train: cannot read image .*05.jpg: "):
            list(loader)
        assert loader.position == 3  # the batches before it were handed out
        loader.close()
    os.remove(broken)
    loader = BatchLoader(FolderSource(folder), batch_size=3, shuffle=False, num_workers=2,
                         transforms=[_Refuses(50)])
    with pytest.raises(KeyError, match="too wide: 60") as info:
        list(loader)
    if sys.version_info >= (3, 11):
        assert "raised in a loader worker process" in "".join(info.value.__notes__)
    loader.close()


def _loader_processes():
    return [p for p in multiprocessing.active_children() if p.name.startswith("dlprim-loader")]


def test_a_killed_worker_is_an_error_not_a_hang(jpegs):
    loader = BatchLoader(jpegs, batch_size=2, num_workers=2, prefetch=1, transforms=TRAIN)
    it = iter(loader)
    next(it)
    workers = _loader_processes()
    assert len(workers) == 2
    for p in workers:
        os.kill(p.pid, signal.SIGKILL)
    start = time.perf_counter()
    with pytest.raises(WorkerError, match="loader worker dlprim-loader-. stopped unexpectedly"):
        list(it)
    assert time.perf_counter() - start < 10


def test_workers_stop_when_the_loader_goes(jpegs):
    loader = BatchLoader(jpegs, batch_size=2, num_workers=2, transforms=TRAIN)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    workers = _loader_processes()
    assert len(workers) == 2 and all(p.is_alive() for p in workers)
    del loader
    gc.collect()
    assert not any(p.is_alive() for p in workers) and not _loader_processes()


def test_too_little_shared_memory_is_said_before_starting(jpegs, monkeypatch):
    from dlprim.data import workers
    small = type("Stat", (), {"f_bavail": 100, "f_frsize": 4096})  # 410 kB free
    monkeypatch.setattr(workers.os, "statvfs", lambda folder: small)
    # 2 workers x 2 batches of 64 x 3x24x24 float32: 1.8 MB
    with pytest.raises(WorkerError, match=r"the workers' 4 batches in flight need 2 MB of "
                                          r"shared memory and /dev/shm has 0 MB free"):
        next(iter(BatchLoader(jpegs, batch_size=64, num_workers=2, transforms=TRAIN)))
    fits = BatchLoader(jpegs, batch_size=4, num_workers=2, transforms=TRAIN)  # 111 kB
    assert next(iter(fits))[0].shape == (4, 3, 24, 24)
    fits.close()


def test_the_interpreter_exits_with_workers_running(jpegs):
    script = textwrap.dedent("""
        from dlprim.data import BatchLoader, FolderSource, Resize
        loader = BatchLoader(FolderSource(%r), batch_size=2, num_workers=2,
                             transforms=[Resize([8, 8])])
        batches = iter(loader)
        print(next(batches)[0].shape)
    """ % jpegs.path)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(2, 3, 8, 8)"
    assert "Traceback" not in done.stderr and "leaked" not in done.stderr, done.stderr


# ---- RandomResizedCrop

def test_random_resized_crop_regions_and_output(rng):
    t = RandomResizedCrop([12, 10], scale=(0.2, 0.6), ratio=(0.5, 2.0))
    for seed in range(200):
        top, left, h, w = t.region(60, 80, np.random.default_rng(seed))
        assert 0 <= top and top + h <= 60 and 0 <= left and left + w <= 80
        assert 0.18 <= h * w / 4800 <= 0.62 and 0.45 <= w / h <= 2.2
    # nothing fits a ratio of 2..3 at full area: the whole height, cut to ratio 2, centred
    assert RandomResizedCrop(8, scale=(1, 1), ratio=(2, 3)).region(60, 80, rng) == (10, 0, 40, 80)
    x = rng.random((3, 30, 40)).astype(np.float32)
    whole = RandomResizedCrop([15, 20], scale=(1, 1), ratio=(4 / 3, 4 / 3))
    np.testing.assert_allclose(whole(x, rng), Resize([15, 20])(x), atol=1e-6)
    a = t(x, np.random.default_rng(1))
    assert a.shape == (3, 12, 10) and a.dtype == np.float32
    np.testing.assert_array_equal(a, t(x, np.random.default_rng(1)))
    assert not np.array_equal(a, t(x, np.random.default_rng(2)))
    # the same crop on 8-bit pixels, within the rounding
    u8 = np.round(x * 255).astype(np.uint8)
    im = t(Image.fromarray(u8.transpose(1, 2, 0)), np.random.default_rng(1))
    assert im.size == (10, 12)
    np.testing.assert_allclose(np.asarray(im).transpose(2, 0, 1) / 255,
                               t(u8 / np.float32(255), np.random.default_rng(1)), atol=1 / 255)


@pytest.mark.parametrize("options, message", [
    ({"scale": (0.5, 0.1)}, "scale: min 0.5 is above max 0.1"),
    ({"scale": (0, 0)}, "scale: the largest fraction of the area must be > 0"),
    ({"scale": (0.1, 1.5)}, r"scale: must be in \[0, 1\], got 1.5"),
    ({"ratio": (0, 1)}, "ratio: width/height ratios must be > 0"),
    ({"ratio": 1.0}, r"ratio: must be \[min, max\], got 1.0"),
    ({"size": 0}, "size: must be > 0"),
])
def test_random_resized_crop_checks_its_options(options, message):
    with pytest.raises(ValueError, match=message):
        RandomResizedCrop(**dict({"size": 8}, **options))


# ---- ColorJitter

def _draw(seed, lo, hi):
    """The factor ColorJitter with one adjustment draws from default_rng(seed)."""
    r = np.random.default_rng(seed)
    r.permutation(1)
    return r.uniform(lo, hi)


def test_color_jitter_against_formulas(rng):
    x = rng.random((3, 5, 7)).astype(np.float32)
    grey = 0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2]
    f = _draw(3, 0.5, 1.5)
    np.testing.assert_allclose(ColorJitter(brightness=0.5)(x, np.random.default_rng(3)),
                               np.clip(f * x, 0, 1), atol=1e-6)
    np.testing.assert_allclose(ColorJitter(contrast=0.5)(x, np.random.default_rng(3)),
                               np.clip(f * x + (1 - f) * grey.mean(), 0, 1), atol=1e-6)
    np.testing.assert_allclose(ColorJitter(saturation=0.5)(x, np.random.default_rng(3)),
                               np.clip(f * x + (1 - f) * grey, 0, 1), atol=1e-6)
    shift = _draw(3, -0.2, 0.2)
    want = np.empty_like(x)
    for i in range(5):
        for j in range(7):
            h, s, v = colorsys.rgb_to_hsv(*x[:, i, j])
            want[:, i, j] = colorsys.hsv_to_rgb((h + shift) % 1.0, s, v)
    np.testing.assert_allclose(ColorJitter(hue=0.2)(x, np.random.default_rng(3)), want,
                               atol=1e-5)
    # one channel: brightness applies, saturation and hue do not
    g = x[:1]
    np.testing.assert_array_equal(ColorJitter(saturation=0.9, hue=0.4)(g, rng), g)


def test_color_jitter_ranges_seeds_and_8_bit_pixels(rng):
    t = ColorJitter(0.8, 0.8, 0.8, 0.5)
    x = rng.random((3, 6, 6)).astype(np.float32)
    outs = [t(x, np.random.default_rng(s)) for s in range(20)]
    assert all(o.min() >= 0 and o.max() <= 1 and o.shape == x.shape for o in outs)
    np.testing.assert_array_equal(outs[4], t(x, np.random.default_rng(4)))
    assert len({o.tobytes() for o in outs}) == 20
    u8 = np.round(x * 255).astype(np.uint8)
    im = t(Image.fromarray(u8.transpose(1, 2, 0)), np.random.default_rng(7))
    assert im.mode == "RGB" and im.size == (6, 6)
    np.testing.assert_allclose(np.asarray(im).transpose(2, 0, 1) / 255,
                               t(u8 / np.float32(255), np.random.default_rng(7)),
                               atol=0.51 / 255)
    assert ColorJitter()(x, rng) is x  # nothing to change


@pytest.mark.parametrize("options, message", [
    ({"brightness": -0.1}, r"brightness: must be in \[0, inf\], got -0.1"),
    ({"contrast": (1.5, 0.5)}, "contrast: min 1.5 is above max 0.5"),
    ({"saturation": "a"}, "saturation: must be a finite number, got 'a'"),
    ({"hue": 0.6}, r"hue: must be in \[0, 0.5\], got 0.6"),
    ({"hue": (-0.7, 0.1)}, r"hue: must be in \[-0.5, 0.5\], got -0.7"),
])
def test_color_jitter_checks_its_options(options, message):
    with pytest.raises(ValueError, match=message):
        ColorJitter(**options)


# ---- RandomRotation

def test_random_rotation(rng):
    x = rng.random((2, 6, 6)).astype(np.float32)
    quarter = RandomRotation([90, 90])
    np.testing.assert_allclose(quarter(x, rng), np.rot90(x, 1, axes=(1, 2)), atol=1e-6)
    u8 = rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)
    np.testing.assert_array_equal(np.asarray(quarter(Image.fromarray(u8), rng)),
                                  np.rot90(u8, 1, axes=(0, 1)))
    np.testing.assert_array_equal(RandomRotation(0)(x, rng), x)
    filled = RandomRotation([45, 45], fill=-1.0)
    assert not filled.on_pixels and RandomRotation(10).on_pixels
    corners = filled(x, rng)[:, [0, 0, -1, -1], [0, -1, 0, -1]]
    np.testing.assert_array_equal(corners, -1.0)
    t = RandomRotation(30)
    np.testing.assert_array_equal(t(x, np.random.default_rng(5)), t(x, np.random.default_rng(5)))
    assert not np.array_equal(t(x, np.random.default_rng(5)), t(x, np.random.default_rng(6)))
    for options, message in [({"degrees": -1}, r"degrees: must be in \[0, 360\]"),
                             ({"degrees": [20, 10]}, "degrees: min 20 is above max 10"),
                             ({"degrees": 5, "fill": float("nan")}, "fill: must be a finite")]:
        with pytest.raises(ValueError, match=message):
            RandomRotation(**options)


def test_random_transforms_differ_between_samples_and_batches():
    same = ArraySource(np.tile(np.linspace(0, 1, 48, dtype=np.float32).reshape(1, 3, 4, 4),
                               (8, 1, 1, 1)), np.zeros(8, int))
    tf = [RandomResizedCrop(4), ColorJitter(0.5, 0.5, 0.5, 0.1), RandomRotation(20)]
    a = BatchLoader(same, batch_size=4, seed=1, transforms=tf, prefetch=0)
    b0, b1 = list(a)
    assert len({s.tobytes() for s in np.concatenate([b0[0], b1[0]])}) == 8
    _same([a.batch_at(0, 0), a.batch_at(0, 1)], [b0, b1])


# ---- PyTorch's names

def test_batch_size_and_num_workers_arguments():
    src = ArraySource(np.arange(40, dtype=np.float32).reshape(10, 1, 2, 2), np.arange(10) % 2)
    a = BatchLoader(src, batch_size=4, shuffle=False)
    assert a.batch == a.batch_size == 4 and a.num_workers == 0
    _same(list(a), list(BatchLoader(src, 4, shuffle=False)))
    assert "2 thread workers" in repr(BatchLoader(src, batch_size=4, num_workers=2,
                                                  worker_type="thread"))
    for kwargs, message in [({"batch": 4, "batch_size": 4}, "give batch or batch_size, not both"),
                            ({}, "the batch size is missing"),
                            ({"batch_size": 0}, "batch_size must be a positive integer"),
                            ({"batch_size": 2, "num_workers": -1},
                             "num_workers must be an integer >= 0"),
                            ({"batch_size": 2, "worker_type": "fork"},
                             "worker_type must be one of process, thread, got 'fork'")]:
        with pytest.raises(ValueError, match=message):
            BatchLoader(src, **kwargs)


def test_config_batch_size_num_workers_and_new_transforms(project):  # noqa: F811
    root, write = project
    raw = dict(_minimal(), batch_size=16)
    raw["data"]["train"]["num_workers"] = 2
    cfg = load_config(write(raw))
    assert cfg["batch"] == 16 and "batch_size" not in cfg
    assert cfg["data"]["train"]["num_workers"] == 2
    loader = make_loader(cfg["data"]["train"], cfg["batch"], "data.train")
    assert loader.num_workers == 2 and loader.batch_size == 16
    raw = dict(_minimal(), batch=8, batch_size=8)
    raw["data"]["train"].update(num_workers=-1, transforms=[
        {"type": "random_resized_crop", "size": 3, "scale": [0.5, 0.1]},
        {"type": "color_jitter", "brightness": 0.2, "hue": 0.9},
        {"type": "random_rotation"}])
    with pytest.raises(ConfigError) as info:
        load_config(write(raw))
    assert sorted(info.value.problems) == [
        "batch_size: give batch or batch_size, not both",
        "data.train.num_workers: must be an integer >= 0, got -1",
        "data.train.transforms[0].scale: min 0.5 is above max 0.1",
        "data.train.transforms[1].hue: must be in [0, 0.5], got 0.9",
        "data.train.transforms[2].degrees: required"]
    with pytest.raises(ConfigError, match="batch_size: must be a positive integer, got 0"):
        load_config(write(dict(_minimal(), batch_size=0)))
