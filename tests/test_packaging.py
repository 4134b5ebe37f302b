"""What a user installs: every package is listed, no published extra pulls PyTorch, the
cpu extra brings PoCL, the wheel carries the license, kernels, py.typed and the example
data, and `dlprim-train --example mnist` trains from the installed package."""
import configparser
import os
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    return cfg


def listed(cfg, section, key):
    return [v.strip() for v in cfg[section][key].strip().splitlines() if v.strip()]


def test_every_package_is_listed():
    from setuptools import find_packages
    found = set(find_packages(ROOT, include=["dlprim", "dlprim.*"]))
    assert found <= set(listed(setup_cfg(), "options", "packages"))


def test_no_published_extra_pulls_torch_and_cpu_brings_pocl():
    extras = setup_cfg()["options.extras_require"]
    for name in extras:
        deps = listed(setup_cfg(), "options.extras_require", name)
        assert not [d for d in deps if d.lower().startswith("torch")], (name, deps)
    assert any(d.startswith("pyopencl[pocl]") for d in listed(setup_cfg(), "options.extras_require", "cpu"))
    needs = listed(setup_cfg(), "options", "install_requires")
    assert "platformdirs>=2.2" in needs and "pyopencl>=2023.1" in needs


def test_the_wheel_carries_license_kernels_types_and_examples(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp_path), ROOT], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    wheel = next(p for p in os.listdir(tmp_path) if p.endswith(".whl"))
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    for want in ("dlprim/py.typed", "dlprim/kernels/gemm.cl", "dlprim/kernels/philox.h",
                 "dlprim/examples/mnist/config.json", "dlprim/examples/mnist/lenet.json",
                 "dlprim/examples/mnist/data/train-images-idx3-ubyte.gz",
                 "dlprim/examples/charlm/data/shakespeare.txt"):
        assert want in names, want
    assert any(n.endswith("LICENSE") for n in names)
    meta = [n for n in names if n.endswith("METADATA")][0]
    text = zipfile.ZipFile(tmp_path / wheel).read(meta).decode()
    assert "License-Expression: MIT" in text or "License: MIT" in text
    assert "torch" not in "".join(line for line in text.splitlines()
                                  if line.startswith("Requires-Dist"))
    # the README as a package index shows it: project links, and no link left relative
    assert "Project-URL: Source, https://" in text and "Project-URL: Documentation" in text
    description = text.split("\n\n", 1)[1]
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert len(targets) > 10 and "docs/getting-started.md" in "".join(targets)
    relative = [t for t in targets if not re.match(r"https?://|#", t)]
    assert not relative, relative


def test_train_the_packaged_mnist_example(ctx, tmp_path, monkeypatch, capsys):
    from dlprim.train.main import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLPRIM_DEVICE", ctx.device_string)
    assert main(["--example", "mnist", "--epochs", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "epoch 1: train loss" in out and "validation accuracy" in out
    assert os.path.isfile(tmp_path / "runs" / "mnist" / "model.dlp")
    acc = float(out.split("validation accuracy:")[1].split()[0])
    assert acc > 0.85  # one epoch; the README's 0.96 takes the config's five


def test_example_or_config_not_both(capsys):
    from dlprim.train.main import parse_args
    for argv in ([], ["x.json", "--example", "mnist"]):
        with pytest.raises(SystemExit):
            parse_args(argv)
    assert "give a config file or --example NAME" in capsys.readouterr().err
