"""Per-epoch metrics: a CSV (or JSONL) file rewritten atomically, and a PNG of the curves."""
import csv
import io
import json
import os

from ..utils import atomic_write

FIELDS = ["epoch", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "seconds",
          "images_per_s"]


class MetricsLog:
    """The per-epoch rows of a run, rewritten to ``metrics.csv`` (or ``.jsonl``) after each;
    with ``tensorboard``, also written as TensorBoard scalars (tensorboardX) under
    ``tensorboard/`` (each field against the epoch). With ``out_dir`` None the rows are
    only kept (``path`` is None)."""
    def __init__(self, out_dir, kind="csv", tensorboard=False):
        self.kind = kind
        self.path = os.path.join(out_dir, "metrics." + kind) if out_dir is not None else None
        self.rows = []
        self.events = (os.path.join(out_dir, "tensorboard") if tensorboard and out_dir is not None
                       else None)

    def restore(self, rows):
        """Start from the rows of a checkpoint (when resuming)."""
        self.rows = [dict(r) for r in rows]

    def add(self, row):
        """Append one epoch's row (the FIELDS) and rewrite the file atomically."""
        self.rows.append({k: row.get(k) for k in FIELDS})
        if self.path is not None:
            self._write()
        if self.events:
            self._scalars(self.rows[-1])

    def _scalars(self, row):
        # a file per epoch, closed at once: tensorboardX writes from a thread, and only
        # close() waits for it, so an epoch's scalars are on disk when this returns
        from tensorboardX import SummaryWriter
        epoch = int(row["epoch"])
        writer = SummaryWriter(self.events, filename_suffix=".epoch%d" % epoch)
        try:
            for key in FIELDS[1:]:
                if row.get(key) is not None:
                    writer.add_scalar(key, float(row[key]), epoch)
        finally:
            writer.close()

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
