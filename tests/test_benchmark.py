"""dlprim-benchmark on tiny nets: every mode runs and reports what it promises."""
import json
import time

import numpy as np
import pytest

import dlprim as dp
from dlprim.cli import benchmark
from dlprim import models


def test_run_net_inference_and_training(ctx):
    graph = models.lenet(batch=2, train=True).to_dict()
    infer = benchmark.run_net(ctx, models.lenet(batch=2, train=False).to_dict(), warmup=1, iters=2)
    train = benchmark.run_net(ctx, graph, train=True, warmup=1, iters=2)
    for res in (infer, train):
        assert res["mean_ms"] > 0 and res["median_ms"] > 0
        assert res["launches"] > 0 and res["host_us_per_launch"] > 0
        assert res["memory"]["arena_bytes"] > 0
    assert train["launches"] > infer["launches"]
    # the start-up: the Net's construction to its first step's end, never a timed step
    assert all(res["first_step_s"] > 0 for res in (infer, train))


def test_token_ids_spread_over_the_embedding_table_and_labels_stay_valid(ctx):
    """Indices crowded into a few rows of a table would time the embedding gradient's
    contention, not the net; labels stay below 2, valid for any classifier."""
    graph = models.gpt(vocab=500, context=32, layers=1, heads=1, dim=8, batch=8).to_dict()
    net = dp.Net(ctx, graph, mode=dp.TRAIN)
    arrays = benchmark._inputs(net, np.random.default_rng(0), graph)
    assert 300 < arrays["tokens"].max() < 500 and arrays["targets"].max() == 1
    cls = models.lenet(batch=64).to_dict()
    arrays = benchmark._inputs(dp.Net(ctx, cls, mode=dp.TRAIN), np.random.default_rng(0), cls)
    assert set(arrays["label"].tolist()) == {0, 1}


def test_first_step_is_the_start_up_and_never_timed(ctx, monkeypatch):
    """The first step (where the kernels are built) is reported as the start-up, not in
    the timed steps, even with no warm-up asked for; a slow first step shows there."""
    from dlprim import net as net_module
    forward, calls = net_module.Net.forward, []

    def slow_first(self, *a, **k):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)
        return forward(self, *a, **k)
    monkeypatch.setattr(net_module.Net, "forward", slow_first)
    res = benchmark.run_net(ctx, models.mlp(batch=2, hidden=(8,), train=False).to_dict(),
                            warmup=0, iters=2)
    assert len(calls) == 3 and res["first_step_s"] >= 0.3 and res["mean_ms"] < 300


def test_startup_rows_and_cold_caches(tmp_path):
    """benchmarks/startup.py's rows are NET:MODE:PRECISION, and a cold run's caches are
    all inside its fresh folder."""
    import importlib.util
    import os
    spec = importlib.util.spec_from_file_location(
        "startup", os.path.join(os.path.dirname(__file__), "..", "benchmarks", "startup.py"))
    startup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(startup)
    assert startup.parse_row("resnet50:train:fp16") == ("resnet50", True, "fp16")
    assert startup.parse_row("a/b.json:infer:fp32") == ("a/b.json", False, "fp32")
    for bad in ("resnet50:fit:fp32", "resnet50:train", "resnet50"):
        with pytest.raises(ValueError, match="NET:MODE:PRECISION"):
            startup.parse_row(bad)
    env = startup.cold_environment(str(tmp_path))
    for name in startup.CACHE_VARIABLES:
        assert env[name].startswith(str(tmp_path)) and os.path.isdir(env[name])


def test_decode_steps_plot(tmp_path):
    """benchmarks/plot_decode_steps.py draws each model's measured steps from the docs'
    data file into an SVG written whole (nothing else left in the folder)."""
    pytest.importorskip("matplotlib")
    import importlib.util
    import json
    import os
    spec = importlib.util.spec_from_file_location(
        "plot_decode_steps", os.path.join(os.path.dirname(__file__), "..", "benchmarks",
                                          "plot_decode_steps.py"))
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    with open(plot.DATA) as f:
        data = json.load(f)
    fig = plot.figure(data)
    for ax, (key, _) in zip(fig.axes, plot.MODELS):
        measured = [s[key] for s in data["steps"] if key in s]
        assert list(ax.lines[0].get_ydata()) == measured
    out = tmp_path / "steps.svg"
    assert plot.main(["--out", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml") and os.listdir(tmp_path) == ["steps.svg"]


def test_profile_table_names_every_operator(ctx):
    pctx = dp.Context(ctx.device_string, profiling=True)
    graph = models.lenet(batch=2, train=True).to_dict()
    res = benchmark.run_net(pctx, graph, train=True, warmup=0, iters=1, profile=True)
    forward = [r for r in res["profile"] if r[0] == "forward"]
    assert [r[1] for r in forward] == [op["name"] for op in graph["operators"]]
    # backward: every operator with parameters or inputs to differentiate, in reverse
    # order, after the loss gradients' fills; then the same time by kernel
    backward = [r[1] for r in res["profile"] if r[0] == "backward"]
    assert backward[0] == "(loss gradients)"
    names = [op["name"] for op in graph["operators"]]
    assert backward[1:] == [n for n in reversed(names) if n in backward]
    assert {"conv1", "fc1", "loss"} <= set(backward)
    kernels = [r[3] for r in res["profile"] if r[0] == "bwd-kernel"]
    per_op = [r[3] for r in res["profile"] if r[0] == "backward"]
    assert kernels and sum(kernels) == pytest.approx(sum(per_op))
    assert all(r[3] >= 0 for r in res["profile"])


def test_cli_json_file_and_model_name(ctx, tmp_path, capsys):
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(models.mlp(batch=4, hidden=(8,), train=False).to_dict()))
    assert benchmark.main([str(path), "--batch", "3", "--warmup", "0", "--iters", "1",
                           "--device", ctx.device_string]) == 0
    out = capsys.readouterr().out
    assert "batch 3" in out and "time per batch" in out and "launches per iteration" in out
    assert benchmark.main(["mlp", "--batch", "2", "--train", "--iters", "1", "--warmup", "0",
                           "--device", ctx.device_string, "--profile"]) == 0
    assert "forward" in capsys.readouterr().out
    assert benchmark.main(["mlp", "--batch", "2", "--iters", "1", "--warmup", "0",
                           "--device", ctx.device_string, "--precision", "tf32"]) == 0
    assert "tf32" in capsys.readouterr().out
    assert benchmark.main(["mlp", "--batch", "2", "--train", "--iters", "1", "--warmup", "0",
                           "--device", ctx.device_string, "--precision", "fp16"]) == 0
    assert "train  fp16" in capsys.readouterr().out
    assert benchmark.main(["mlp", "--batch", "2", "--train", "--iters", "1", "--warmup", "0",
                           "--device", ctx.device_string, "--precision", "bf16"]) == 0
    assert "train  bf16" in capsys.readouterr().out


def test_cli_errors():
    with pytest.raises(SystemExit, match="neither a file nor a model"):
        benchmark.main(["no_such_net", "--iters", "1"])
    with pytest.raises(SystemExit):
        benchmark.main(["mlp", "--iters", "0"])


def test_transfer_micro_benchmark(ctx, capsys):
    """`dlprim-benchmark transfer` copies real batches (checked against the host's) through
    the plain write, to_device and the staging memory."""
    assert benchmark.main(["transfer", "--device", ctx.device_string, "--batches", "1",
                           "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 0.6 |" in out and "staged 8 threads" in out


def test_new_benchmark_shapes():
    """AlexNet's convolutions (its first layer padded by 2, not 5) and classifier GEMMs."""
    from dlprim.benchmarks import conv, gemm
    keys = [k for k, nets in conv.distinct_shapes() if "alexnet" in nets]
    assert conv.fmt_shape(keys[0]) == "3->64 k11 s4 224" and len(keys) == 5
    assert conv.geometry(keys[0]).out_h == 55 and conv.geometry(keys[1]).pad[0] == 2
    rows = gemm.classifier_gemms((16,))
    assert rows[:3] == [(16, 4096, 9216, False, True, "b16 fc6 forward"),
                        (16, 9216, 4096, False, False, "b16 fc6 data grad"),
                        (4096, 9216, 16, True, False, "b16 fc6 weight grad")]
