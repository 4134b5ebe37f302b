"""The training config: defaults, relative paths, every problem listed by its field path."""
import json
import os

import numpy as np
import pytest

from dlprim.data import make_loader, write_idx
from dlprim.train.config import ConfigError, apply_overrides, load_config, validate_config

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "mnist", "config.json")
NET = {"inputs": [{"name": "data", "shape": [4, 1, 3, 3]},
                  {"name": "label", "shape": [4], "dtype": "int"}],
       "outputs": ["loss"],
       "operators": [{"name": "fc", "type": "InnerProduct", "inputs": ["data"],
                      "outputs": ["fc"], "options": {"outputs": 3}},
                     {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["fc", "label"],
                      "outputs": ["loss"]}]}


@pytest.fixture
def project(tmp_path):
    """A folder with a net file, an idx pair and an npz file; returns a config writer."""
    (tmp_path / "net.json").write_text(json.dumps(NET))
    (tmp_path / "data").mkdir()
    write_idx(str(tmp_path / "data" / "im.gz"), np.zeros((6, 3, 3), np.uint8))
    write_idx(str(tmp_path / "data" / "lb.gz"), np.arange(6, dtype=np.uint8) % 3)
    np.savez(str(tmp_path / "data" / "v.npz"), x=np.zeros((4, 3, 3)), y=np.arange(4) % 3)

    def write(cfg):
        path = tmp_path / "cfg.json"
        path.write_text(json.dumps(cfg))
        return str(path)
    return tmp_path, write


def _minimal():
    return {"net": {"path": "net.json"},
            "data": {"train": {"type": "mnist", "images": "data/im.gz", "labels": "data/lb.gz"}}}


def test_valid_config_gets_defaults_and_absolute_paths(project):
    root, write = project
    cfg = load_config(write(dict(_minimal(), _comment="ignored")))
    assert cfg["net"] == {"path": str(root / "net.json")}
    train = cfg["data"]["train"]
    assert train["images"] == str(root / "data" / "im.gz")
    assert train["transforms"] == [] and train["shuffle"] is True and train["drop_last"] is False
    assert cfg["data"]["val"] is None
    assert (cfg["epochs"], cfg["batch"], cfg["seed"], cfg["device"]) == (10, 64, 0, None)
    assert cfg["out"] == str(root / "runs") and cfg["resume"] is None
    assert cfg["checkpoint"] == {"every": 1, "keep": 2, "best": True}
    assert cfg["plot"] is True and cfg["metrics"] == "csv" and cfg["schedule"] is None
    assert cfg["solver"]["type"] == "adam" and cfg["solver"]["lr"] == 1e-3
    assert cfg["solver"]["beta2"] == 0.999 and "_comment" not in cfg


def test_solver_schedule_and_data_variants(project):
    root, write = project
    raw = _minimal()
    raw["data"]["val"] = {"type": "npz", "path": "data/v.npz", "num_classes": 3,
                          "transforms": [{"type": "normalize", "mean": [0.5], "std": [0.2]},
                                         {"type": "random_crop", "size": 3, "padding": 1}]}
    raw.update(solver={"type": "adamw", "lr": 0.01, "betas": [0.8, 0.99]},
               schedule={"type": "cosine"}, epochs=7, device="cpu")
    cfg = load_config(write(raw))
    assert cfg["solver"]["beta1"] == 0.8 and cfg["solver"]["weight_decay"] == 0.01
    assert "betas" not in cfg["solver"]
    assert cfg["schedule"]["T_max"] == 7 and cfg["schedule"]["eta_min"] == 0.0
    assert cfg["data"]["val"]["x"] == "x" and cfg["data"]["val"]["channels_last"] is False
    loader = make_loader(cfg["data"]["val"], 2, name="data.val", train=False)
    assert len(loader) == 2 and loader.num_classes == 3
    raw.update(schedule={"type": "onecycle", "max_lr": 0.1}, solver={"type": "sgd"})
    cfg = load_config(write(raw))
    assert "total_steps" not in cfg["schedule"] and cfg["schedule"]["pct_start"] == 0.3
    assert cfg["solver"]["momentum"] == 0.0 and cfg["solver"]["nesterov"] is False
    inline = dict(_minimal(), net={"graph": NET})
    assert validate_config(inline, str(root))["net"]["graph"] == NET


def test_every_problem_listed_by_path(project):
    root, write = project
    raw = {
        "net": {"path": "missing.json"},
        "data": {"train": {"type": "folder", "path": "no_such_dir",
                           "transforms": [{"type": "normalize", "mean": 0, "std": 0},
                                          {"type": "blur"}]},
                 "val": {"type": "mnist", "images": "data/im.gz"}},
        "solver": {"type": "sgd", "lr": -0.5, "momentun": 0.9},
        "schedule": {"type": "step"},
        "epochs": -1, "batch": "64", "seed": 1.5, "metrics": "xml", "plot": "yes",
        "checkpoint": {"every": 0}, "slover": {},
    }
    with pytest.raises(ConfigError) as info:
        load_config(write(raw))
    problems = info.value.problems
    paths = [p.split(": ")[0] for p in problems]
    # without Pillow, the image folder is a problem too (it needs the image extra)
    try:
        import PIL.Image  # noqa: F401
        no_pillow = []
    except ImportError:
        no_pillow = ["data.train.type"]
    assert sorted(paths) == sorted([
        "slover", "net.path", "data.train.path", "data.train.transforms[0].std",
        "data.train.transforms[1].type", "data.val.labels", "solver.momentun", "solver.lr",
        "schedule.step_size", "epochs", "batch", "seed", "metrics", "plot", "checkpoint.every"]
        + no_pillow)
    text = "\n".join(problems)
    assert "solver.lr: must be >= 0, got -0.5" in text
    assert "data.train.path: no such directory: %s" % (root / "no_such_dir") in text
    assert "epochs: must be a positive integer, got -1" in text
    assert "slover: unknown field (did you mean 'solver'?)" in text
    assert "schedule.step_size: required" in text
    assert str(info.value).startswith("%s: config has %d problems:" % (root / "cfg.json",
                                                                         len(problems)))


def test_net_and_value_checks(project):
    root, write = project
    (root / "broken.json").write_text("{not json")
    checks = [({"net": {"path": "broken.json"}}, "net.path: not valid JSON"),
              ({"net": {"path": "net.json", "graph": NET}}, "net: give exactly one of path, "
                                                             "graph, model (got path, graph)"),
              ({"net": {"graph": {"inputs": []}}}, "net.graph: the net needs a non-empty"),
              ({"net": {"model": {"name": "no_such_model"}}}, "net.model.name: "),
              ({"solver": {"type": "rmsprop"}}, 'solver.type: must be one of "sgd"'),
              ({"solver": {"type": "adam", "beta2": 1.0}}, "solver.beta2: must be < 1"),
              ({"solver": {"type": "sgd", "nesterov": True}}, "solver.nesterov: needs momentum"),
              ({"schedule": {"type": "step", "step_size": 0}}, "schedule.step_size: must be > 0"),
              ({"schedule": {"type": "warp"}}, "schedule.type: must be one of"),
              ({"device": [0]}, "device: must be"),
              ({"precision": "fp8"}, 'precision: must be one of "fp32", "tf32", "fp16", "bf16", got "fp8"'),
              ({"resume": "nothing_here"}, "resume: no such checkpoint"),
              ({"out": "net.json"}, "out: is a file, not a directory"),
              ({"data": {}}, "data.train: required")]
    for change, message in checks:
        raw = dict(_minimal(), **change)
        with pytest.raises(ConfigError) as info:
            validate_config(raw, str(root))
        assert any(p.startswith(message) for p in info.value.problems), (change, info.value)


def test_apply_overrides(project, monkeypatch, tmp_path):
    root, write = project
    cfg = load_config(write(dict(_minimal(), schedule={"type": "cosine"}, epochs=4)))
    monkeypatch.chdir(tmp_path)
    new = apply_overrides(cfg, device="0:0", epochs=9, batch=16, out="elsewhere")
    assert (new["device"], new["epochs"], new["batch"]) == ("0:0", 9, 16)
    assert new["out"] == str(tmp_path / "elsewhere")
    assert new["schedule"]["T_max"] == 9            # followed epochs: it was defaulted
    assert cfg["epochs"] == 4 and cfg["schedule"]["T_max"] == 4   # the original is untouched
    assert apply_overrides(cfg, resume=True)["resume"] is True
    assert cfg["precision"] == "fp32" and apply_overrides(cfg, precision="tf32")["precision"] == "tf32"
    assert apply_overrides(cfg) == cfg
    with pytest.raises(ConfigError) as info:
        apply_overrides(cfg, epochs=0, batch=-2, resume="nope", precision="fp8")
    assert [p.split(":")[0] for p in info.value.problems] == ["--epochs", "--batch",
                                                              "--precision", "--resume"]


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(str(tmp_path / "bad.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="config: must be an object"):
        load_config(str(tmp_path / "list.json"))


def test_bundled_example_config():
    cfg = load_config(EXAMPLE)
    assert cfg["solver"]["type"] == "adam" and cfg["solver"]["lr"] == 1e-3
    assert cfg["batch"] == 64 and os.path.isfile(cfg["net"]["path"])
    train = make_loader(cfg["data"]["train"], cfg["batch"], "data.train", seed=cfg["seed"])
    val = make_loader(cfg["data"]["val"], cfg["batch"], "data.val", train=False)
    assert (len(train.source), len(val.source)) == (4000, 1000)
    assert train.shape == (1, 28, 28) and train.num_classes == 10
    assert np.bincount(val.source.labels).tolist() == [100] * 10
    x, y = next(iter(val))
    assert x.shape == (64, 1, 28, 28) and abs(float(x.mean())) < 0.5   # normalised


def test_data_files_looked_into_before_any_work(project):
    root, write = project
    (root / "data" / "junk.gz").write_bytes(b"\x1f\x8b" + b"\0" * 8)
    write_idx(str(root / "data" / "lb5.gz"), np.zeros(5, np.uint8))
    (root / "empty").mkdir()
    raw = _minimal()
    raw["data"] = {"train": {"type": "mnist", "images": "data/lb.gz", "labels": "data/lb5.gz"},
                   "val": {"type": "npz", "path": "data/v.npz", "y": "labels"}}
    with pytest.raises(ConfigError) as info:
        load_config(write(raw))
    assert info.value.problems == [
        "data.train.images: %s: idx magic 0x00000801 has 1 dimensions, expected 3 "
        "(magic 0x00000803)" % (root / "data" / "lb.gz"),
        "data.val.y: no array 'labels' in %s (arrays: x, y)" % (root / "data" / "v.npz")]
    raw["data"] = {"train": {"type": "mnist", "images": "data/im.gz", "labels": "data/lb5.gz"},
                   "val": {"type": "mnist", "images": "data/junk.gz", "labels": "data/lb.gz"}}
    with pytest.raises(ConfigError) as info:
        load_config(write(raw))
    assert info.value.problems[0] == "data.train.labels: 5 labels for 6 images"
    assert info.value.problems[1].startswith("data.val.images: %s: corrupt gzip data"
                                             % (root / "data" / "junk.gz"))
    if _has_pillow():
        raw["data"] = {"train": {"type": "folder", "path": "empty"}}
        with pytest.raises(ConfigError, match="data.train.path: no class sub-folders in"):
            load_config(write(raw))


def _has_pillow():
    try:
        import PIL.Image  # noqa: F401
    except ImportError:
        return False
    return True
