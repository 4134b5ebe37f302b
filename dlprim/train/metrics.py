"""Per-epoch metrics: a CSV (or JSONL) file rewritten atomically, and a PNG of the curves."""
import csv
import io
import json
import os

from ..weights import atomic_write

FIELDS = ["epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "seconds",
          "images_per_s"]


class MetricsLog:
    def __init__(self, out_dir, kind="csv"):
        self.kind = kind
        self.path = os.path.join(out_dir, "metrics." + kind)
        self.rows = []

    def restore(self, rows):
        self.rows = [dict(r) for r in rows]

    def add(self, row):
        self.rows.append({k: row.get(k) for k in FIELDS})
        self._write()

    def _write(self):
        buf = io.StringIO()
        if self.kind == "csv":
            w = csv.DictWriter(buf, FIELDS)
            w.writeheader()
            for r in self.rows:
                w.writerow({k: ("" if v is None else ("%.6g" % v if isinstance(v, float) else v))
                            for k, v in r.items()})
        else:
            for r in self.rows:
                buf.write(json.dumps(r) + "\n")
        atomic_write(self.path, lambda f: f.write(buf.getvalue().encode()))


def plot(rows, path):
    """Loss and accuracy curves as a PNG; returns False (and writes nothing) without
    matplotlib (the ``plot`` extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    epochs = [r["epoch"] for r in rows]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label, ax in (("train_loss", "train", ax_loss), ("val_loss", "validation", ax_loss),
                           ("train_acc", "train", ax_acc), ("val_acc", "validation", ax_acc)):
        pts = [(e, r[key]) for e, r in zip(epochs, rows) if r.get(key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return True
