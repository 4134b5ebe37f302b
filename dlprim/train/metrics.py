"""Per-epoch metrics: a CSV (or JSONL) file rewritten atomically, and a PNG of the curves."""
import csv
import io
import json
import os

from ..utils import atomic_write

FIELDS = ["epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "seconds",
          "images_per_s"]


class MetricsLog:
    """The per-epoch rows of a run, rewritten to ``metrics.csv`` (or ``.jsonl``) after each."""
    def __init__(self, out_dir, kind="csv"):
        self.kind = kind
        self.path = os.path.join(out_dir, "metrics." + kind)
        self.rows = []

    def restore(self, rows):
        """Start from the rows of a checkpoint (when resuming)."""
        self.rows = [dict(r) for r in rows]

    def add(self, row):
        """Append one epoch's row (the FIELDS) and rewrite the file atomically."""
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
    """Loss and accuracy curves per epoch as a PNG (``dlprim.plot``); returns False (and
    writes nothing) without matplotlib (the ``plot`` extra)."""
    from ..plot import MISSING_MATPLOTLIB, save_training_curves
    try:
        save_training_curves(rows, path, x="epoch")
    except ImportError as err:
        if str(err) != MISSING_MATPLOTLIB:
            raise
        return False
    return True
