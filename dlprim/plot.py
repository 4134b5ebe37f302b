"""Training curves: loss and accuracy against epoch (or step), from rows or a metrics file.

Rows are dicts as ``dlprim-train`` writes them to ``metrics.csv`` / ``metrics.jsonl``
(``epoch, train_loss, train_acc, val_loss, val_acc, ...``); a loop of your own may log
``step`` instead of (or beside) ``epoch``. Missing or empty values are skipped, so a
validation column filled only at the end of each epoch plots as its own points.

    >>> fig = dlprim.plot.training_curves("runs/mnist/metrics.csv")   # a matplotlib Figure
    >>> dlprim.plot.save_training_curves(rows, "curves.png")

matplotlib is optional (the ``plot`` extra); without it these functions raise an
ImportError that says how to install it. Figures are made without pyplot, so nothing
here changes matplotlib's backend or global state; in IPython they display as images.
"""
import csv
import io
import json
import os
import sys

__all__ = ["read_metrics", "training_curves", "save_training_curves", "MISSING_MATPLOTLIB"]

MISSING_MATPLOTLIB = ("dlprim.plot needs matplotlib, which is not installed: "
                      "pip install 'dlprim[plot]' (or pip install matplotlib)")

# (column, legend label) per panel
_PANELS = (("loss", (("train_loss", "train"), ("val_loss", "validation"))),
           ("accuracy", (("train_acc", "train"), ("val_acc", "validation"))))


def _number(text):
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text else value


def read_metrics(path):
    """The rows of a ``metrics.csv`` or ``metrics.jsonl`` file as a list of dicts
    (numbers parsed; empty cells become None)."""
    path = os.fspath(path)
    with open(path) as f:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(MISSING_MATPLOTLIB) from None
    _show_inline_in_ipython(Figure)
    return Figure


def _show_inline_in_ipython(figure_class):
    """Let a notebook show our figures as images. IPython renders a matplotlib Figure as
    text unless a PNG formatter is registered for it, which only loading pyplot does."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    png = shell.display_formatter.formatters["image/png"]
    try:
        png.lookup_by_type(figure_class)
    except KeyError:
        from IPython.core.pylabtools import print_figure
        png.for_type(figure_class, lambda fig: print_figure(fig, "png"))


def training_curves(rows, x=None, title=None, figsize=(10, 4)):
    """A matplotlib Figure with two panels, loss and accuracy, against ``x``.

    ``rows``: a list of dicts or the path of a metrics file. ``x``: the column for the
    horizontal axis; by default ``"step"`` when the rows have it, else ``"epoch"``.
    A panel whose columns are all empty is left out.
    """
    if isinstance(rows, (str, os.PathLike)):
        rows = read_metrics(rows)
    rows = [dict(r) for r in rows]
    if not rows:
        raise ValueError("training_curves: no rows to plot")
    if x is None:
        x = "step" if any(r.get("step") is not None for r in rows) else "epoch"
    if all(r.get(x) is None for r in rows):
        keys = sorted({k for r in rows for k in r})
        raise ValueError("training_curves: no row has the column %r for the x axis; columns: %s"
                         % (x, ", ".join(keys)))
    panels = [(name, curves) for name, curves in _PANELS
              if any(r.get(key) is not None for key, _ in curves for r in rows)]
    if not panels:
        raise ValueError("training_curves: the rows have none of the columns %s"
                         % ", ".join(key for _, curves in _PANELS for key, _ in curves))
    fig = _figure_class()(figsize=figsize)
    from matplotlib.ticker import MaxNLocator
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, curves) in zip(axes, panels):
        for key, label in curves:
            pts = [(r[x], r[key]) for r in rows if r.get(x) is not None and r.get(key) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label,
                        marker="o" if len(pts) <= 30 else None)
        ax.set(xlabel=x, ylabel=name, title=name)
        if all(isinstance(r.get(x), int) for r in rows if r.get(x) is not None):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 1.5
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def save_training_curves(rows, path, x=None, title=None, dpi=90):
    """``training_curves(rows, x, title)`` written as a PNG to ``path`` (atomically);
    returns the path."""
    from .utils import atomic_write
    fig = training_curves(rows, x=x, title=title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return path
