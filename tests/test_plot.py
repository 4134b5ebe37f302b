"""dlprim.plot: metrics files in, matplotlib figures and PNGs out; a clear error without
matplotlib; the trainer's plot goes through it."""
import builtins
import os

import pytest

from dlprim import plot
from dlprim.train import metrics

ROWS = [{"epoch": 1, "train_loss": 1.5, "train_acc": 0.5, "val_loss": 1.2, "val_acc": 0.6},
        {"epoch": 2, "train_loss": 0.9, "train_acc": 0.7, "val_loss": None, "val_acc": None},
        {"epoch": 3, "train_loss": 0.5, "train_acc": 0.85, "val_loss": 0.6, "val_acc": 0.8}]


@pytest.fixture
def no_matplotlib(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named %r" % name)
        return real_import(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_read_metrics_round_trips_the_trainer_files(tmp_path):
    for kind in ("csv", "jsonl"):
        log = metrics.MetricsLog(str(tmp_path), kind)
        for r in ROWS:
            log.add(r)
        rows = plot.read_metrics(log.path)
        assert [r["epoch"] for r in rows] == [1, 2, 3]
        assert isinstance(rows[0]["epoch"], int)
        assert rows[1]["val_acc"] is None and rows[2]["val_acc"] == pytest.approx(0.8)
        assert rows[0]["train_loss"] == pytest.approx(1.5)


def test_training_curves_draws_what_the_rows_hold(tmp_path):
    pytest.importorskip("matplotlib")
    fig = plot.training_curves(ROWS)
    loss, acc = fig.axes
    assert loss.get_xlabel() == "epoch" and acc.get_ylabel() == "accuracy"
    train, val = loss.get_lines()
    assert list(train.get_xdata()) == [1, 2, 3] and list(train.get_ydata()) == [1.5, 0.9, 0.5]
    assert list(val.get_xdata()) == [1, 3]  # the empty validation cell is skipped
    assert all(float(t).is_integer() for t in loss.get_xticks())  # whole epochs only
    # steps by default when logged; a loss-only log gets one panel
    steps = [{"step": i, "train_loss": 1.0 / (i + 1)} for i in range(50)]
    fig = plot.training_curves(steps)
    assert len(fig.axes) == 1 and fig.axes[0].get_xlabel() == "step"
    assert len(fig.axes[0].get_lines()[0].get_xdata()) == 50
    # from a file, and saved as a PNG
    log = metrics.MetricsLog(str(tmp_path))
    for r in ROWS:
        log.add(r)
    out = plot.save_training_curves(log.path, str(tmp_path / "c.png"), title="run")
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_training_curves_errors_name_the_problem():
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="no rows"):
        plot.training_curves([])
    with pytest.raises(ValueError, match="'step'.*columns: epoch, train_loss"):
        plot.training_curves([{"epoch": 1, "train_loss": 1.0}], x="step")
    with pytest.raises(ValueError, match="none of the columns"):
        plot.training_curves([{"epoch": 1, "lr": 0.1}])


def test_without_matplotlib_the_error_names_the_extra(no_matplotlib, tmp_path):
    with pytest.raises(ImportError, match=r"dlprim\[plot\]"):
        plot.training_curves(ROWS)
    path = str(tmp_path / "curves.png")
    assert metrics.plot(ROWS, path) is False and not os.path.exists(path)


def test_trainer_plot_is_the_same_figure(tmp_path):
    pytest.importorskip("matplotlib")
    path = str(tmp_path / "curves.png")
    assert metrics.plot(ROWS, path) is True
    assert os.path.getsize(path) > 1000
