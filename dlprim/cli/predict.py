"""dlprim-predict: classify image files with a trained net.

    dlprim-predict --deploy runs/mnist/model-deploy.json digits/
    dlprim-predict --net net.json --weights model.dlp [--labels labels.txt] photo.jpg
    dlprim-predict --onnx model.onnx --size 224 --mean 0.485 0.456 0.406 \\
                   --std 0.229 0.224 0.226 photos/

Prints, per image, the K most probable classes with their probabilities. A deploy file
written by dlprim-train brings its weights, preprocessing and class names along. A training
net runs without its loss and labels (an ONNX model's loss nodes are left out, which is
said on stderr).
"""
import argparse
import contextlib
import csv
import json
import logging
import os
import sys

import numpy as np

from ..core.precision import PRECISIONS
from ..data.errors import DataError
from ..errors import Error, MissingFileError
from ..net.graph import GraphError, load_graph_file
from ..net.prediction import prediction_graph
from .images import Preprocess, image_files

__all__ = ["main", "parse_args", "load_model", "Classifier"]

FORMATS = ("text", "csv", "json")


def parse_args(argv):
    """The parsed command line of dlprim-predict."""
    p = argparse.ArgumentParser(prog="dlprim-predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--deploy", help="a deploy file of dlprim-train (model-deploy.json): "
                                        "net, weights, preprocessing and labels")
    model.add_argument("--net", help="a JSON net (a training net's loss is left out)")
    model.add_argument("--onnx", help="an ONNX model (needs the onnx extra)")
    p.add_argument("--weights", help="weights for --net (.dlp, .safetensors or .h5); with "
                                     "--deploy, instead of the ones it names")
    p.add_argument("--labels", help="class names, one per line (default: the deploy file's)")
    p.add_argument("--top", type=int, help="how many classes per image (default 5, at most "
                                           "the number of classes)")
    p.add_argument("--size", type=int, help="resize images to SIZE x SIZE (default: the net "
                                            "input's size)")
    p.add_argument("--mean", nargs="+", help="subtracted after scaling pixels to [0, 1]: one "
                                             "value or one per channel")
    p.add_argument("--std", nargs="+", help="divides after --mean: one value or one per channel")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.add_argument("--batch", type=int, default=16, help="images per batch (default 16)")
    p.add_argument("--device", help='OpenCL device: "cpu", "gpu", "P:D" or an index')
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 (default); tf32: TF32 products on tensor cores; fp16: half "
                        "activations, float32 parameters; bf16: bfloat16 activations "
                        "(docs/precision.md)")
    p.add_argument("images", nargs="*", metavar="IMAGE_OR_FOLDER",
                   help="image files, or folders scanned for them")
    args = p.parse_args(argv)
    for option in ("mean", "std"):  # "--std 0.3 digits/" leaves digits/ to the images
        if getattr(args, option) is not None:
            numbers, rest = _leading_numbers(getattr(args, option))
            if not numbers:
                p.error("--%s needs numbers, got %s" % (option, " ".join(rest)))
            setattr(args, option, numbers)
            args.images += rest
    if not args.images:
        p.error("give image files or folders")
    if args.net and not args.weights:
        p.error("--net needs --weights")
    if args.onnx and args.weights:
        p.error("--onnx models carry their weights; --weights goes with --net or --deploy")
    for option in ("top", "size", "batch"):
        value = getattr(args, option)
        if value is not None and value < 1:
            p.error("--%s must be at least 1, got %d" % (option, value))
    return args


def _leading_numbers(words):
    """(the numbers at the start of ``words``, the words after them); "0.5,0.4" counts as
    two numbers."""
    numbers = []
    for i, word in enumerate(words):
        try:
            numbers += [float(w) for w in word.split(",")]
        except ValueError:
            return numbers, list(words[i:])
    return numbers, []


def _batched(graph, batch):
    """The JSON net ``graph`` with every input's first dimension set to ``batch``."""
    for spec in graph["inputs"]:
        if spec["shape"]:
            spec["shape"] = [batch] + list(spec["shape"][1:])
    return graph


def load_model(args, ctx):
    """(Net set up in predict mode with its weights, the deploy ``meta`` or {}) for the
    options ``args``."""
    from ..net import PREDICT, Net
    if args.onnx:
        from .. import onnx as dox
        from ..onnx.model_reader import load_proto
        from ..onnx.ops_loss import without_losses
        if not os.path.isfile(args.onnx):
            raise MissingFileError("--onnx: %s: no such file" % args.onnx)
        model = without_losses(load_proto(args.onnx))
        cfg, weights = dox.to_netconfig(model, batch=args.batch)
        graph, meta = cfg.to_dict(), {}
    else:
        graph = load_graph_file(args.deploy or args.net).to_dict()
        meta = graph.pop("meta", {})
        weights = args.weights or _deploy_weights(args.deploy, meta)
        if not os.path.isfile(weights):
            raise MissingFileError("%s: no such weights file%s" % (
                weights, "" if args.weights else " (named by %s; give --weights)" % args.deploy))
    net = Net(ctx, mode=PREDICT, precision=getattr(args, "precision", "fp32"))
    net.load(_batched(graph, args.batch))
    net.setup()
    if isinstance(weights, dict):
        net.set_parameters(weights)
    else:
        net.load_parameters(weights)
    return net, meta


def _deploy_weights(path, meta):
    """The weights beside a deploy file: the one its meta names, else model-deploy.json's
    model.dlp (deploy files written before meta existed)."""
    name = meta.get("weights")
    if not name:
        stem = os.path.basename(path)
        for end in ("-deploy.json", ".json"):
            if stem.endswith(end):
                stem = stem[:-len(end)]
                break
        name = stem + ".dlp"
    return os.path.join(os.path.dirname(os.path.abspath(path)), name)


class Classifier:
    """A set-up ``net`` as an image classifier: its image input, the output read as
    class scores and how they become probabilities; ``meta`` may name the input and
    output (a deploy file's)."""

    def __init__(self, net, meta):
        self.net = net
        part = prediction_graph(net.graph)
        inputs = part.graph["inputs"]
        name = meta.get("input")
        images = [i for i in inputs if (name is None or i["name"] == name)
                  and len(i["shape"]) == 4 and i["dtype"].startswith("float")
                  and i["shape"][1] in (1, 3)]
        if len(inputs) != 1 or not images:
            raise GraphError("the model has no image input: dlprim-predict needs one input "
                             "(N, C, H, W) of floats with 1 (grey) or 3 (RGB) channels; its "
                             "inputs are %s" % ", ".join("'%s' (%s) %s" % (
                                 i["name"], ", ".join(["N"] + [str(d) for d in i["shape"][1:]]),
                                 i["dtype"]) for i in inputs))
        self.input = images[0]["name"]
        self.channels, self.size = images[0]["shape"][1], tuple(images[0]["shape"][2:])
        pick = part.outputs.index(meta["output"]) if meta.get("output") in part.outputs else 0
        self.output = part.outputs[pick]
        value = net.graph.values[part.output_values[pick]]
        self.classes = int(np.prod(value.shape[1:], dtype=np.int64))
        op = net.graph.ops[value.producer] if value.producer >= 0 else None
        is_softmax = op is not None and op.type == "Softmax"
        # a Softmax's output is already probabilities (its log option: log-probabilities)
        self.kind = "log" if is_softmax and op.options.get("log") else \
            "prob" if is_softmax else "logits"

    def probabilities(self, rows):
        """(N, classes) float64 probabilities for a batch of input rows."""
        y = self.net.predict(**{self.input: rows})[self.output]
        y = y.reshape(len(rows), -1).astype(np.float64)
        if self.kind == "prob":
            return y
        if self.kind == "log":
            return np.exp(y)
        y = np.exp(y - y.max(axis=1, keepdims=True))
        return y / y.sum(axis=1, keepdims=True)


def read_labels(path, classes):
    """Class names from a file, one per line, as many as the net has classes."""
    if not os.path.isfile(path):
        raise MissingFileError("--labels: %s: no such file" % path)
    with open(path, encoding="utf-8") as f:
        labels = f.read().splitlines()
    while labels and not labels[-1].strip():
        labels.pop()
    _check_labels(labels, classes, path)
    return labels


def _check_labels(labels, classes, where):
    if len(labels) != classes:
        raise DataError("%s: %d labels, the net has %d classes" % (where, len(labels), classes))


class Report:
    """Writes each image's top classes in ``fmt`` (text, csv, json) to ``out``."""

    def __init__(self, fmt, out, top, labels):
        self.fmt, self.out, self.top, self.labels = fmt, out, top, labels
        self.items = []
        if fmt == "csv":
            self.csv = csv.writer(out, lineterminator="\n")
            self.csv.writerow(["file"] + [key % (k + 1) for k in range(top)
                                          for key in ("index%d", "label%d", "probability%d")])

    def add(self, path, probs):
        """Report one image: its file and its probabilities (one per class)."""
        order = np.argsort(-probs, kind="stable")[:self.top]
        best = [(int(i), self.labels[i] if self.labels else None, float(probs[i])) for i in order]
        if self.fmt == "text":
            self.out.write("%s: %s\n" % (path, ", ".join(
                "%d%s %.4f" % (i, " " + label if label is not None else "", p)
                for i, label, p in best)))
        elif self.fmt == "csv":
            self.csv.writerow([path] + [v for i, label, p in best
                                        for v in (i, "" if label is None else label, "%.6g" % p)])
        else:
            self.items.append({"file": path, "top": [{"index": i, "label": label, "probability": p}
                                                     for i, label, p in best]})

    def close(self):
        """Finish the output (the JSON list is written here)."""
        if self.fmt == "json":
            json.dump(self.items, self.out, indent=1)
            self.out.write("\n")
        self.out.flush()


def _fail(err):
    print("dlprim-predict: %s" % err, file=sys.stderr)
    return 2


class _Notes(logging.Handler):
    """dlprim's log records (what was left out of a model, say) as lines on the current
    sys.stderr (looked up at each record), so the report on stdout stays clean."""

    def emit(self, record):
        try:
            sys.stderr.write("dlprim-predict: %s\n" % self.format(record))
        except Exception:  # a logging handler must not raise
            self.handleError(record)


@contextlib.contextmanager
def _notes_on_stderr():
    """While the program runs: dlprim's INFO records and above on stderr."""
    logger = logging.getLogger("dlprim")
    handler, level = _Notes(logging.INFO), logger.level
    logger.addHandler(handler)
    if level == logging.NOTSET or level > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv=None):
    """The dlprim-predict program; returns the exit status (0 done, 1 some images could not
    be read (the others are reported), 2 a bad option, model or file: nothing was run,
    130 interrupted)."""
    args = parse_args(argv)
    with _notes_on_stderr():
        return _run(args)


def _run(args):
    try:
        files = image_files(args.images)
        from ..context import Context  # opens OpenCL: not needed above
        net, meta = load_model(args, Context(args.device))
        model = Classifier(net, meta)
        top = min(5, model.classes) if args.top is None else args.top
        if top > model.classes:
            raise Error("--top %d is more than the %d classes of the net's output '%s'"
                        % (top, model.classes, model.output))
        labels = read_labels(args.labels, model.classes) if args.labels else meta.get("labels")
        if labels and not args.labels:
            _check_labels(labels, model.classes, "the deploy file's meta.labels")
        size = (args.size, args.size) if args.size else model.size
        prep = Preprocess(model.channels, size, args.mean, args.std, meta, bool(args.size))
    except (Error, OSError, ValueError, ImportError) as err:
        return _fail(err)
    except KeyboardInterrupt:
        print("dlprim-predict: interrupted", file=sys.stderr)
        return 130
    report = Report(args.format, sys.stdout, top, labels)
    unreadable = 0
    try:
        for start in range(0, len(files), args.batch):
            rows, names = [], []
            for path in files[start:start + args.batch]:
                try:
                    rows.append(prep(path))
                    names.append(path)
                except (Error, OSError, ValueError) as err:
                    print("dlprim-predict: %s" % err, file=sys.stderr)
                    unreadable += 1
            if rows:
                for path, probs in zip(names, model.probabilities(np.stack(rows))):
                    report.add(path, probs)
    except Error as err:  # a size the net cannot take, say
        return _fail(err)
    except KeyboardInterrupt:
        print("dlprim-predict: interrupted", file=sys.stderr)
        return 130
    finally:
        report.close()
    if unreadable:
        print("dlprim-predict: %d of %d images could not be read" % (unreadable, len(files)),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
