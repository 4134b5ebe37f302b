"""Images per second of dlprim's BatchLoader on a folder of full-size JPEGs with the usual
ImageNet training transforms (RandomResizedCrop(224), horizontal flip, normalise), for
several worker counts, beside torchvision's DataLoader(ImageFolder) with the same
transforms and workers when torchvision is installed. Prints a markdown table.

    python benchmarks/input_pipeline.py                          # 512 synthetic 1280x960 JPEGs
    python benchmarks/input_pipeline.py --folder ~/imagenet/train --workers 0 4 8 16
    python benchmarks/input_pipeline.py --worker-types process thread --workers 1 2 4

Without ``--folder``, N synthetic 1280x960 JPEGs (smooth gradients, shapes, a little
noise: roughly the size of a photo's file) are written to a temporary folder of class
sub-folders and removed afterwards. Each loader is timed over one epoch after its first
batch, which starts the workers and is not counted.
"""
import argparse
import os
import platform
import shutil
import tempfile
import time

import numpy as np

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _write_jpeg(args):
    """One synthetic photo-like JPEG: smooth colour waves (computed at 1/8 size and
    enlarged), filled ellipses, a little noise."""
    path, width, height, seed = args
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    h, w = max(1, height // 8), max(1, width // 8)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    f, phase = rng.uniform(1, 8, 3), rng.uniform(0, 6, 3)
    waves = np.stack([np.sin(xx / f[0] + phase[0]), np.cos(yy / f[1] + phase[1]),
                      np.sin((xx + yy) / f[2] + phase[2])], axis=-1)
    im = Image.fromarray((127.5 + 100 * waves).astype(np.uint8)).resize((width, height),
                                                                        Image.BILINEAR)
    draw = ImageDraw.Draw(im)
    for _ in range(12):
        x0, y0, size = rng.integers(0, width), rng.integers(0, height), rng.integers(20, 300)
        draw.ellipse([x0, y0, x0 + size, y0 + size],
                     fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    noisy = np.asarray(im, np.int16) + rng.integers(-5, 6, (height, width, 3), dtype=np.int16)
    Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(path, quality=90)


def synthetic_folder(root, count, width, height, classes, seed=0):
    """``count`` JPEGs of width x height in ``classes`` sub-folders of ``root``, written
    by as many processes as there are CPUs."""
    from concurrent.futures import ProcessPoolExecutor
    for c in range(classes):
        os.makedirs(os.path.join(root, "class%d" % c), exist_ok=True)
    jobs = [(os.path.join(root, "class%d" % (i % classes), "%05d.jpg" % i), width, height,
             [seed, i]) for i in range(count)]
    with ProcessPoolExecutor() as pool:
        list(pool.map(_write_jpeg, jobs, chunksize=8))


def _time(batches):
    """(images/s, ms per batch) over ``batches`` after its first batch."""
    it = iter(batches)
    next(it)  # warm-up: starts the workers
    images, count, start = 0, 0, time.perf_counter()
    for x, _ in it:
        images += len(x)
        count += 1
    seconds = time.perf_counter() - start
    if not count:
        return float("nan"), float("nan")
    return images / seconds, 1e3 * seconds / count


def time_dlprim(folder, batch_size, workers, worker_type, seed=0):
    from dlprim.data import (BatchLoader, FolderSource, HorizontalFlip, Normalize,
                             RandomResizedCrop)
    loader = BatchLoader(FolderSource(folder), batch_size=batch_size, shuffle=True, seed=seed,
                         num_workers=workers, worker_type=worker_type,
                         transforms=[RandomResizedCrop(224), HorizontalFlip(),
                                     Normalize(MEAN, STD)])
    try:
        return _time(loader)
    finally:
        loader.close()


def time_torchvision(folder, batch_size, workers):
    import torch
    from torchvision import datasets, transforms
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(datasets.ImageFolder(folder, transform=tf),
                                         batch_size=batch_size, num_workers=workers,
                                         shuffle=True)
    return _time(loader)


def torchvision_version():
    """torchvision's version, or None where it cannot be imported."""
    try:
        import torchvision
    except ImportError:
        return None
    return torchvision.__version__


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", help="an image folder (one sub-folder per class); default: "
                   "synthetic JPEGs in a temporary folder")
    p.add_argument("--images", type=int, default=512, help="synthetic images (default 512)")
    p.add_argument("--size", default="1280x960", help="synthetic image WIDTHxHEIGHT")
    p.add_argument("--classes", type=int, default=4, help="synthetic classes")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4],
                   help="worker counts to time (default 0 1 2 4)")
    p.add_argument("--worker-types", nargs="+", default=["process"],
                   choices=["process", "thread"], help="dlprim's kinds of worker to time")
    p.add_argument("--no-torchvision", action="store_true", help="time dlprim only")
    args = p.parse_args()

    folder, made = args.folder, None
    if folder is None:
        width, height = (int(v) for v in args.size.lower().split("x"))
        made = folder = tempfile.mkdtemp(prefix="dlprim-jpegs-")
        start = time.perf_counter()
        synthetic_folder(folder, args.images, width, height, args.classes)
        print("wrote %d synthetic %dx%d JPEGs (%.1f MB) in %.0fs\n" % (
            args.images, width, height,
            sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder)
                for f in fs) / 1e6, time.perf_counter() - start))
    try:
        tv = None if args.no_torchvision else torchvision_version()
        import PIL
        print("%s, %d CPUs, Python %s, Pillow %s%s; batch %d; %s\n" % (
            platform.processor() or platform.machine(), os.cpu_count(),
            platform.python_version(), PIL.__version__,
            ", torchvision %s" % tv if tv else " (torchvision not installed: dlprim only)",
            args.batch_size, folder if args.folder else "synthetic folder"))
        rows = []
        for workers in args.workers:
            for kind in args.worker_types:
                if workers == 0 and kind != args.worker_types[0]:
                    continue  # no workers: the kind does not matter
                label = "dlprim" + ("" if workers == 0 else
                                    ", " + {"process": "processes", "thread": "threads"}[kind])
                rows.append((label, workers) + time_dlprim(folder, args.batch_size, workers,
                                                           kind))
                print("  %s, %d workers: %.0f images/s" % (label, workers, rows[-1][2]),
                      flush=True)
            if tv:
                rows.append(("torchvision", workers) + time_torchvision(folder, args.batch_size,
                                                                        workers))
                print("  torchvision, %d workers: %.0f images/s" % (workers, rows[-1][2]),
                      flush=True)
        print("\n| loader | workers | images/s | ms per batch |\n|---|---|---|---|")
        for label, workers, rate, ms in rows:
            print("| %s | %d | %.0f | %.1f |" % (label, workers, rate, ms))
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
