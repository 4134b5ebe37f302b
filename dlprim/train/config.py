"""The training config (JSON): load, validate everything before any work, fill defaults.

Every problem found is collected with its field path ("solver.lr: must be > 0",
"data.train.path: no such directory", "slover: unknown field") and all of them are
raised together as one ``ConfigError``. Relative paths are taken from the config file's
directory and returned absolute. Keys starting with "_" are comments and are dropped.
docs/train.md describes every field.
"""
import copy
import inspect
import json
import os

from ..errors import Error
from ..utils import is_int
from .callbacks import EarlyStopping, metric_problem
from ..core.precision import PRECISIONS
from .config_check import Checker
from .config_data import DATA_TYPES, check_data, sample_count

__all__ = ["ConfigError", "load_config", "validate_config", "apply_overrides", "DEFAULTS"]

DEFAULTS = {"epochs": 10, "batch": 64, "device": None, "seed": 0, "precision": "fp32",
            "out": "runs",
            "resume": None, "force": False, "plot": True, "progress": True, "metrics": "csv",
            "tensorboard": False,
            "stop_on_nonfinite": True, "checkpoint": {"every": 1, "keep": 2, "best": True},
            "schedule": None, "early_stopping": None, "best_metric": None,
            "distributed": {"global_batch": None, "bucket_mb": 25}}
_TOP = ["net", "data", "solver", "batch_size"] + list(DEFAULTS)


class ConfigError(Error, ValueError):
    """A config with problems; ``.problems`` lists them, each "field.path: what is wrong"."""

    def __init__(self, problems, source=None):
        self.problems, self.source = list(problems), source
        head = "%s: " % source if source else ""
        super().__init__("%sconfig has %d problem%s:\n  %s" % (
            head, len(self.problems), "" if len(self.problems) == 1 else "s",
            "\n  ".join(self.problems)))


def _net(c, value):
    net = c.fields("net", value, ["path", "graph", "model"])
    given = [k for k in ("path", "graph", "model") if net.get(k) is not None]
    if len(given) != 1:
        c.bad("net", "give exactly one of path, graph, model%s"
              % (" (got %s)" % ", ".join(given) if given else ""))
    if net.get("path") is not None:
        net["path"] = c.path("net.path", net["path"], "file")
        if os.path.isfile(net["path"]):
            try:
                with open(net["path"]) as f:
                    _graph(c, "net.path", json.load(f))
            except (ValueError, UnicodeDecodeError) as e:
                c.bad("net.path", "not valid JSON: %s" % e)
    if net.get("graph") is not None:
        _graph(c, "net.graph", net["graph"])
    if net.get("model") is not None:
        model = c.fields("net.model", net["model"], ["name", "args"], required=["name"])
        model.setdefault("args", {})
        if not isinstance(model["args"], dict):
            c.bad("net.model.args", "must be an object of keyword arguments")
        if isinstance(model.get("name"), str):
            _model_name(c, model["name"])
        net["model"] = model
    return net


def _graph(c, path, graph):
    if not isinstance(graph, dict):
        c.bad(path, "a net must be a JSON object with inputs, outputs and operators")
        return
    for key in ("inputs", "operators"):
        if not isinstance(graph.get(key), list) or not graph.get(key):
            c.bad(path, "the net needs a non-empty %r list" % key)


def _model_name(c, name):
    try:
        from .. import models
    except ImportError as e:
        c.bad("net.model.name", "dlprim.models cannot be imported (%s)" % e)
        return
    if not callable(getattr(models, name, None)) or name.startswith("_"):
        known = [n for n in getattr(models, "__all__", []) if callable(getattr(models, n, None))]
        c.bad("net.model.name", "no model %r in dlprim.models%s"
              % (name, " (known: %s)" % ", ".join(known) if known else ""))


_SOLVER_EXTRA = {"no_decay_1d": False, "clip_norm": None, "clip_value": None}


def _solver(c, value):
    """Fields and defaults are the solver classes' own (dlprim.solvers); PyTorch's
    ``betas: [b1, b2]`` is accepted for beta1/beta2."""
    from ..solvers import _SOLVERS
    kind = value.get("type", "adam") if isinstance(value, dict) else "adam"
    if kind not in _SOLVERS:
        c.choice("solver.type", kind, list(_SOLVERS))
        return value
    hyper = dict(_SOLVERS[kind].HYPER, **_SOLVER_EXTRA)
    adam = "beta1" in hyper
    solver = c.fields("solver", value, ["type"] + list(hyper) + (["betas"] if adam else []))
    betas = solver.pop("betas", None)
    if betas is not None:
        if isinstance(betas, list) and len(betas) == 2:
            solver.setdefault("beta1", betas[0])
            solver.setdefault("beta2", betas[1])
        else:
            c.bad("solver.betas", "must be [beta1, beta2], got %s" % json.dumps(betas))
    solver = dict(hyper, **solver)
    solver["type"] = kind
    c.boolean("solver.no_decay_1d", solver["no_decay_1d"])
    checked = {k: v for k, v in solver.items() if k not in ("type", "no_decay_1d")}
    for name, message in _SOLVERS[kind].problems(checked):
        c.bad("solver." + name, message)
    return solver


def _schedule(c, value, epochs):
    if value is None:
        return None
    from .. import lr_schedules as schedules
    kinds = schedules._SCHEDULES
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in kinds:
        c.choice("schedule.type", kind, sorted(kinds))
        return value
    params = list(inspect.signature(kinds[kind].__init__).parameters.values())[2:]
    names = [p.name for p in params]
    sched = c.fields("schedule", value, ["type"] + names,
                     required=[p.name for p in params if p.default is p.empty
                               and p.name not in ("T_max", "total_steps")])
    for p in params:
        if p.default is not p.empty:
            sched.setdefault(p.name, p.default)
    if kind == "cosine":
        sched.setdefault("T_max", epochs if is_int(epochs) and epochs > 0 else None)
    if any(sched.get(n) is None for n in names if n != "total_steps"):
        return sched
    trial = {k: v for k, v in sched.items() if k != "type"}
    if "total_steps" in names:
        trial.setdefault("total_steps", 1000)  # the trainer sets it from the batches per epoch

    class Probe:  # a stand-in solver: schedules only set lr and momentum/beta1
        lr, momentum = 0.1, 0.9
    try:
        kinds[kind](Probe(), **trial)
    except (ValueError, TypeError) as e:  # "gamma must be ..." -> "schedule.gamma: must be ..."
        name, _, problem = str(e).partition(" ")
        if name.split("[")[0] in names and problem:
            c.bad("schedule." + name, problem)
        else:
            c.bad("schedule", str(e))
    return sched


def _useless(c, cfg, batch_label="batch"):
    """Values that are each fine alone but leave nothing to train on or step by: data
    without samples, ``drop_last`` with fewer samples than one batch (the counts are read
    cheaply, see config_data.sample_count), a plateau schedule without validation data."""
    data = cfg.get("data") or {}
    for split in ("train", "val"):
        entry = data.get(split)
        if not isinstance(entry, dict) or entry.get("type") not in DATA_TYPES:
            continue
        count = sample_count(entry)
        if count == 0:
            c.bad("data." + split, "no samples in %s" % (entry.get("path") or entry.get("images")))
        elif (split == "train" and count is not None and entry.get("drop_last") is True
              and is_int(cfg["batch"]) and count < cfg["batch"]):
            c.bad("data.train.drop_last", "the %d training samples are fewer than one batch of "
                  "%d (%s), so every epoch would be empty; lower %s or set drop_last false"
                  % (count, cfg["batch"], batch_label, batch_label))
    sched = cfg.get("schedule")
    if isinstance(sched, dict) and sched.get("type") == "plateau" and data.get("val") is None:
        c.bad("schedule.type", '"plateau" steps on the validation loss, and there is no data.val')


def _checkpoint(c, value):
    ckpt = c.fields("checkpoint", value, list(DEFAULTS["checkpoint"]))
    ckpt = dict(DEFAULTS["checkpoint"], **ckpt)
    c.integer("checkpoint.every", ckpt["every"])
    c.integer("checkpoint.keep", ckpt["keep"])
    c.boolean("checkpoint.best", ckpt["best"])
    return ckpt


def _followed(c, path, metric, data):
    """A metric to follow (early stopping, the best model): a known name, and one that
    this run computes (``val_*`` need data.val)."""
    problem = metric_problem(metric)
    if problem:
        c.bad(path, problem)
    elif metric.startswith("val_") and isinstance(data, dict) and data.get("val") is None:
        c.bad(path, "%r needs validation data (data.val); follow %r or add data.val"
              % (metric, metric[4:]))


def _distributed(c, value, top):
    """{global_batch, bucket_mb}: how ``mpiexec -n N dlprim-train`` splits the work.
    ``global_batch`` (null: ``batch`` per rank, N times ``batch`` in all) fixes the batch
    of a step over all ranks instead, and is then also one process's batch."""
    fields = c.fields("distributed", value, list(DEFAULTS["distributed"]))
    dist = dict(DEFAULTS["distributed"], **fields)
    if dist["global_batch"] is not None:
        c.integer("distributed.global_batch", dist["global_batch"])
        if "batch" in top:
            c.bad("distributed.global_batch", "give batch (per rank) or "
                  "distributed.global_batch (over all ranks), not both")
    c.number("distributed.bucket_mb", dist["bucket_mb"], low=0)
    return dist


def _early_stopping(c, value, data):
    """null (off) or {monitor, patience, min_delta, mode}: the options of
    ``dlprim.train.EarlyStopping`` with its defaults and rules."""
    if value is None:
        return None
    early = dict(EarlyStopping.OPTIONS, **c.fields("early_stopping", value,
                                                    list(EarlyStopping.OPTIONS)))
    for name, message in EarlyStopping.problems(early):
        if name != "monitor":
            c.bad("early_stopping." + name, message)
    _followed(c, "early_stopping.monitor", early["monitor"], data)
    return early


def _scalars(c, cfg, names, prefix=""):
    """Check the top-level scalar fields in ``names``; ``prefix`` "--" names CLI flags."""
    label = (lambda n: "%s%s" % (prefix, n)) if prefix else (lambda n: n)
    if "epochs" in names:
        c.integer(label("epochs"), cfg["epochs"])
    if "batch" in names:
        c.integer(label("batch"), cfg["batch"])
    if "seed" in names:
        c.integer(label("seed"), cfg["seed"], low=0)
    if "precision" in names:
        c.choice(label("precision"), cfg["precision"], list(PRECISIONS))
    if "device" in names and cfg["device"] is not None:
        if not (isinstance(cfg["device"], str) or (is_int(cfg["device"]) and cfg["device"] >= 0)):
            c.bad(label("device"), 'must be "cpu", "gpu", "P:D" or a device index')
        cfg["device"] = str(cfg["device"])
    if "out" in names:
        cfg["out"] = c.path(label("out"), cfg["out"])
        if isinstance(cfg["out"], str) and os.path.isfile(cfg["out"]):
            c.bad(label("out"), "is a file, not a directory: %s" % cfg["out"])
    if "force" in names:
        c.boolean(label("force"), cfg["force"])
    if "resume" in names and cfg["resume"] not in (None, False, True):
        cfg["resume"] = c.path(label("resume"), cfg["resume"])
        if isinstance(cfg["resume"], str) and not os.path.exists(cfg["resume"]):
            c.bad(label("resume"), "no such checkpoint: %s" % cfg["resume"])
    if ({"force", "resume"} & set(names) and cfg["force"] is True
            and cfg["resume"] not in (None, False)):
        c.bad(label("force" if "force" in names else "resume"),
              "force starts afresh and resume continues the run: give one of them")


def _batch_size(c, top):
    """``top`` with PyTorch's ``batch_size`` taken as ``batch`` (one of the two)."""
    if "batch_size" not in top:
        return top
    top = dict(top)
    size = top.pop("batch_size")
    if "batch" in top:
        c.bad("batch_size", "give batch or batch_size, not both")
    elif is_int(size) and size > 0:
        top["batch"] = size
    else:
        c.integer("batch_size", size)  # records what is wrong with it
    return top


def validate_config(raw, base_dir=".", source=None):
    """The checked config with defaults filled in, or ConfigError listing every problem."""
    c = Checker(os.path.abspath(base_dir))
    top = _batch_size(c, c.fields("", raw, _TOP, required=["net", "data"]))
    cfg = dict(copy.deepcopy(DEFAULTS), **top)
    cfg["net"] = _net(c, top["net"]) if top.get("net") is not None else None
    cfg["data"] = check_data(c, top["data"]) if top.get("data") is not None else None
    cfg["solver"] = _solver(c, top.get("solver", {}))
    _scalars(c, cfg, ("epochs", "batch", "seed", "precision", "device", "out", "resume",
                      "force"))
    cfg["checkpoint"] = _checkpoint(c, cfg["checkpoint"])
    cfg["distributed"] = _distributed(c, cfg["distributed"], top)
    if is_int(cfg["distributed"]["global_batch"]):
        cfg["batch"] = cfg["distributed"]["global_batch"]  # one process's batch
    for key in ("plot", "progress", "stop_on_nonfinite", "tensorboard"):
        c.boolean(key, cfg[key])
    if cfg["tensorboard"] is True:
        try:
            import tensorboardX  # noqa: F401
        except ImportError:
            c.bad("tensorboard", "TensorBoard event files need tensorboardX, which is not "
                  "installed: pip install 'dlprim[tensorboard]'")
    c.choice("metrics", cfg["metrics"], ["csv", "jsonl"])
    cfg["schedule"] = _schedule(c, cfg["schedule"], cfg["epochs"])
    cfg["early_stopping"] = _early_stopping(c, cfg["early_stopping"], top.get("data"))
    if cfg["best_metric"] is not None:
        _followed(c, "best_metric", cfg["best_metric"], top.get("data"))
    _useless(c, cfg)
    if c.problems:
        raise ConfigError(c.problems, source)
    return cfg


def load_config(path):
    """Read and validate the JSON config at ``path`` (relative paths from its folder)."""
    if not os.path.isfile(path):
        raise ConfigError(["%s: no such file" % path])
    try:
        with open(path) as f:
            raw = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(["not valid JSON: %s" % e], path) from None
    return validate_config(raw, os.path.dirname(os.path.abspath(path)), source=path)


def apply_overrides(config, device=None, epochs=None, batch=None, out=None, resume=None,
                    force=None, precision=None):
    """A copy of a validated ``config`` with the command-line values that are not None;
    paths given here are relative to the current directory."""
    cfg = copy.deepcopy(config)
    given = {k: v for k, v in dict(device=device, epochs=epochs, batch=batch, out=out,
                                   resume=resume, force=force,
                                   precision=precision).items() if v is not None}
    cfg.update(given)
    c = Checker(os.getcwd())
    if "batch" in given and (cfg.get("distributed") or {}).get("global_batch") is not None:
        c.bad("--batch", "the config fixes the batch over all ranks (distributed.global_batch "
              "%s): change that instead" % cfg["distributed"]["global_batch"])
    _scalars(c, cfg, list(given), prefix="--")
    if "batch" in given and not c.problems:
        _useless(c, cfg, "--batch")
    if "epochs" in given and (cfg.get("schedule") or {}).get("type") == "cosine" \
            and not c.problems and (config.get("schedule") or {}).get("T_max") == config["epochs"]:
        cfg["schedule"]["T_max"] = cfg["epochs"]
    if c.problems:
        raise ConfigError(c.problems, "command line")
    return cfg
