"""ONNX's own backend node tests, run through ``dlprim.onnx.load``.

The cases are the ones the ``onnx`` package defines (``onnx/backend/test/case/node``):
each a one-operator model (or its function expansion, ``*_expanded``), inputs and the
outputs onnx's numpy reference gives. Wheels do not ship the generated files, so they
are generated once with onnx's own case collector into a cache folder
(``$DLPRIM_ONNX_NODE_DIR``, default ``~/.cache/dlprim/onnx-node/<onnx version>``) in the
layout of ``onnx/backend/test/data/node``: ``<case>/model.onnx`` and
``<case>/test_data_set_0/{input,output}_<i>.pb``.

Every case ends as one of

- ``pass``: imported, ran, every output has the expected shape and dtype and agrees as
  onnx's backend runner checks (rtol 1e-3, atol 1e-7; exact for integer and bool);
- ``refused``: a documented dlprim error (``OnnxImportError``/``UnsupportedModelError``
  at import, another ``dlprim.Error`` later) said what is not supported;
- ``wrong``: it ran and an output differs (value, shape or dtype): the worst outcome;
- ``crash``: any other exception.

    python -m tests.onnx_node_cases                       # summary
    python -m tests.onnx_node_cases -k resize --verbose   # cases whose name has 'resize'
    python -m tests.onnx_node_cases --table docs/onnx.md  # write the table per operator
"""
import argparse
import collections
import os
import re
import sys
import time

import numpy as np

RTOL, ATOL = 1e-3, 1e-7
STATUSES = ("pass", "refused", "wrong", "crash")
TABLE_BEGIN = "<!-- onnx-node-table begin -->"
TABLE_END = "<!-- onnx-node-table end -->"

# the operators that CNN, transformer and recurrent exports (torch.onnx, tf2onnx, HF
# optimum, timm) write: the pass rate over these is reported beside the overall one
COMMON_OPS = frozenset("""
Abs Add And ArgMax AveragePool BatchNormalization Cast Clip Concat Constant
ConstantOfShape Conv ConvTranspose CumSum Div Dropout Einsum Elu Equal Erf Exp Expand
Flatten Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalMaxPool Greater
GreaterOrEqual GroupNormalization GRU HardSigmoid HardSwish Identity InstanceNormalization
IsInf IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LSTM MatMul Max
MaxPool Mean Min Mish Mod Mul Neg Not Or Pad Pow PRelu Range Reciprocal ReduceL2 ReduceMax
ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape Resize RNN ScatterElements ScatterND
Shape Sigmoid Sign Sin Cos Size Slice Softmax Softplus Split Sqrt Squeeze Sub Sum Tanh Tile
TopK Transpose Trilu Unsqueeze Upsample Where Xor
""".split())

Result = collections.namedtuple("Result", "name op status detail seconds")


# ----- the cases on disk
def cases_dir():
    """The folder of generated cases: onnx's own when the package ships them, else the
    cache (generated on first use)."""
    import onnx
    shipped = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(shipped) and os.listdir(shipped):
        return shipped
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.environ.get("DLPRIM_ONNX_NODE_DIR") or os.path.join(
        cache, "dlprim", "onnx-node", onnx.__version__)
    if not os.path.exists(os.path.join(path, "COMPLETE")):
        generate(path)
    return path


def generate(path):
    """Write every node case onnx defines under ``path`` (onnx's data layout)."""
    import shutil
    import tempfile
    import warnings
    import onnx.backend.test.case.node as node_cases
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".onnx-node-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference computations' own overflow notes
        cases = node_cases.collect_testcases()
    for case in cases:
        _write_case(os.path.join(tmp, case.name), case)
    open(os.path.join(tmp, "COMPLETE"), "w").close()
    if os.path.exists(path):
        shutil.rmtree(path)
    os.replace(tmp, path)


def _write_case(folder, case):
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    inputs, outputs = case.data_sets[0]
    graph = case.model.graph
    for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
        for j, (value, info) in enumerate(zip(values, infos)):
            with open(os.path.join(folder, "test_data_set_0", "%s_%d.pb" % (kind, j)), "wb") as f:
                f.write(_to_proto(value, info).SerializeToString())


def collect(modules):
    """{case name: (model bytes, inputs, expected, operator)} of onnx's case modules
    ``modules`` (``onnx/backend/test/case/node/<module>.py``), made in memory: a few
    seconds, where every case takes onnx's reference about 20 s (its pooling above all)."""
    import importlib
    import warnings
    import onnx.backend.test.case.node as node_cases
    start = len(node_cases._NodeTestCases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in modules:
            importlib.import_module("onnx.backend.test.case.node." + m)
    cases = {}
    for case in node_cases._NodeTestCases[start:]:
        g = case.model.graph
        inputs, outputs = case.data_sets[0]
        cases[case.name] = (case.model.SerializeToString(),
                            {vi.name: _value(v) for vi, v in zip(g.input, inputs)},
                            {vi.name: _value(v) for vi, v in zip(g.output, outputs)},
                            g.node[0].op_type if len(g.node) == 1 else None)
    for name, (data, ins, outs, op) in cases.items():
        if op is None:  # an expansion counts under the operator it expands
            base = cases.get(re.sub(r"_expanded(_ver\d+)?$", "", name))
            cases[name] = (data, ins, outs, base[3] if base else "?")
    return cases


def _value(v):
    from onnx import TensorProto, numpy_helper
    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    return np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else v


def _to_proto(value, info):
    from onnx import TensorProto, numpy_helper
    if info.type.HasField("sequence_type"):
        return numpy_helper.from_list(value, info.name)
    if info.type.HasField("optional_type"):
        return numpy_helper.from_optional(value, info.name)
    if info.type.HasField("map_type"):
        return numpy_helper.from_dict(value, info.name)
    if isinstance(value, TensorProto):
        return value
    return numpy_helper.from_array(np.asarray(value), info.name)


def _read_value(path, info):
    """A tensor as numpy; a sequence, optional or map as onnx's Python value."""
    import onnx
    from onnx import numpy_helper
    with open(path, "rb") as f:
        data = f.read()
    for field, proto, to_value in (("sequence_type", onnx.SequenceProto, numpy_helper.to_list),
                                   ("optional_type", onnx.OptionalProto, numpy_helper.to_optional),
                                   ("map_type", onnx.MapProto, numpy_helper.to_dict)):
        if info.type.HasField(field):
            p = proto()
            p.ParseFromString(data)
            return to_value(p)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def load_case(folder):
    """(model bytes, {input name: value}, {output name: expected value})."""
    import onnx
    with open(os.path.join(folder, "model.onnx"), "rb") as f:
        data = f.read()
    graph = onnx.load_model_from_string(data).graph
    d = os.path.join(folder, "test_data_set_0")
    inputs = {vi.name: _read_value(os.path.join(d, "input_%d.pb" % i), vi)
              for i, vi in enumerate(graph.input)
              if os.path.exists(os.path.join(d, "input_%d.pb" % i))}
    outputs = {vi.name: _read_value(os.path.join(d, "output_%d.pb" % i), vi)
               for i, vi in enumerate(graph.output)}
    return data, inputs, outputs


def case_names(folder):
    return sorted(n for n in os.listdir(folder)
                  if os.path.exists(os.path.join(folder, n, "model.onnx")))


def operator_of(folder, name):
    """The operator a case tests: its node's type; an ``*_expanded`` case counts under
    the operator whose function it expands."""
    import onnx
    base = re.sub(r"_expanded(_ver\d+)?$", "", name)
    path = os.path.join(folder, base if base != name and os.path.isdir(
        os.path.join(folder, base)) else name, "model.onnx")
    nodes = onnx.load(path).graph.node
    return nodes[0].op_type if len(nodes) == 1 else nodes[-1].op_type


# ----- one case
def run_case(ctx, folder, name, op=None, case=None):
    """The ``Result`` of one case on ``ctx``.

    dlprim reads shapes, axes, sizes and the like only from constants (as exporters
    write them), while a node case passes every input as a graph input: a case refused
    only for that is run again with those inputs as initializers (its detail says
    which), as long as one input stays a runtime input (a graph of constants alone is
    evaluated by onnx's reference at import, which would test nothing of dlprim)."""
    import onnx
    op = op or operator_of(folder, name)
    start = time.perf_counter()
    try:
        data, inputs, expected = case or load_case(os.path.join(folder, name))
        model, consts = onnx.load_model_from_string(data), {}
        while True:
            status, detail, err = _attempt(ctx, model, inputs, consts, expected)
            more = _wanted_constants(err, inputs, consts)
            if not more:
                break
            consts.update((n, inputs[n]) for n in more)
            model = _with_initializers(onnx.load_model_from_string(data), consts)
        if consts:
            detail = ("[%s as initializers] %s" % (", ".join(consts), detail)).strip()
    except Exception as err:  # noqa: BLE001 (a crash is what this classifies)
        status, detail = "crash", "%s: %s" % (type(err).__name__, _first_line(err))
    return Result(name, op, status, detail, time.perf_counter() - start)


def _attempt(ctx, model, inputs, consts, expected):
    """(status, detail, the dlprim error or None) of one import and run."""
    import dlprim
    import dlprim.onnx as dox
    try:
        net = dox.load(model, ctx)
        got = net(**{k: _dlprim_array(v) for k, v in inputs.items() if k not in consts})
    except dlprim.Error as err:
        return "refused", "%s: %s" % (type(err).__name__, _first_line(err)), err
    return compare(got, expected) + (None,)


def _wanted_constants(err, inputs, consts):
    """Graph inputs the refusal ``err`` asks to be constants, if that is all it asks and
    a runtime input remains."""
    problems = getattr(err, "problems", None)
    if not problems:
        return []
    names = []
    for _, _, reason in problems:
        m = re.search(r"'([^']+)' must be a constant", reason)
        if not m or m.group(1) not in inputs or m.group(1) in consts:
            return []
        names.append(m.group(1))
    runtime = [n for n in inputs if n not in consts and n not in names]
    return sorted(set(names)) if runtime else []


def _with_initializers(model, consts):
    from onnx import numpy_helper
    g = model.graph
    keep = [vi for vi in g.input if vi.name not in consts]
    del g.input[:]
    g.input.extend(keep)
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items())
    return model


def _first_line(err):
    text = str(err).strip().splitlines()
    # an UnsupportedModelError lists its problems after a summary line
    return text[-1].strip() if len(text) > 1 else (text[0] if text else "")


def compare(got, expected):
    """("pass", "") or ("wrong", what differs), as onnx's backend runner compares."""
    for name, ref in expected.items():
        if name not in got:
            return "wrong", "output '%s' missing" % name
        out = got[name]
        if not isinstance(ref, np.ndarray):
            return "wrong", "output '%s' is a %s, dlprim gave a tensor" % (name, type(ref).__name__)
        out = _standard(np.asarray(out), ref)
        if out.shape != ref.shape:
            return "wrong", "output '%s' shape %s, expected %s" % (name, out.shape, ref.shape)
        if out.dtype != ref.dtype:
            return "wrong", "output '%s' dtype %s, expected %s" % (name, out.dtype, ref.dtype)
        if ref.dtype.kind in "biuUSO":
            if not np.array_equal(out, ref):
                return "wrong", "output '%s': %d of %d values differ" % (
                    name, int(np.sum(out != ref)), ref.size)
            continue
        o, r = out.astype(np.float64), ref.astype(np.float64)
        rtol = max(RTOL, 2 ** -6) if ref.dtype.name == "bfloat16" else RTOL
        close = np.isclose(o, r, rtol=rtol, atol=ATOL, equal_nan=True)
        if not close.all():
            err = np.abs(o - r)[~close]
            return "wrong", "output '%s': %d of %d values differ, max error %.3g" % (
                name, int((~close).sum()), ref.size, float(np.nanmax(err)) if err.size else 0.0)
    return "pass", ""


def _dlprim_array(a):
    """onnx's bfloat16 (ml_dtypes') as the float32 values a bfloat16 net input takes
    (exact: every bfloat16 is a float32)."""
    if isinstance(a, np.ndarray) and a.dtype.name == "bfloat16":
        return a.astype(np.float32)
    return a


def _standard(out, ref):
    """dlprim's bfloat16 (a structured uint16 dtype) viewed as onnx's (ml_dtypes'): the
    same bits."""
    from dlprim.dtypes import bfloat16
    if out.dtype == bfloat16 and ref.dtype.name == "bfloat16":
        return out.view(np.uint16).view(ref.dtype)
    return out


# ----- many cases
def run(ctx, names=None, pattern=None, log=None):
    """Results of the cases ``names`` (default all) whose name contains ``pattern``."""
    folder = cases_dir()
    names = case_names(folder) if names is None else list(names)
    if pattern:
        names = [n for n in names if re.search(pattern, n)]
    results = []
    for n in names:
        r = run_case(ctx, folder, n)
        results.append(r)
        if log:
            log(r)
    return results


def run_collected(ctx, cases, log=None):
    """Results of cases from ``collect``."""
    results = []
    for name in sorted(cases):
        data, inputs, expected, op = cases[name]
        r = run_case(ctx, None, name, op, (data, inputs, expected))
        results.append(r)
        if log:
            log(r)
    return results


def counts(results):
    c = collections.Counter(r.status for r in results)
    return {s: c.get(s, 0) for s in STATUSES}


def summary(results):
    c, total = counts(results), len(results)
    common = [r for r in results if r.op in COMMON_OPS]
    cc = counts(common)
    return ("%d cases: %d pass (%.1f%%), %d refused, %d wrong, %d crash; operators of "
            "CNN/transformer/RNN exports: %d of %d pass (%.1f%%)" % (
                total, c["pass"], 100.0 * c["pass"] / max(total, 1), c["refused"], c["wrong"],
                c["crash"], cc["pass"], len(common), 100.0 * cc["pass"] / max(len(common), 1)))


def table(results):
    """The Markdown table per operator, with the summary line above it."""
    by_op = collections.OrderedDict()
    for r in sorted(results, key=lambda r: r.op):
        by_op.setdefault(r.op, []).append(r)
    lines = [summary(results) + ".", "",
             "| operator | cases | pass | refused | wrong | crash |", "|---|---|---|---|---|---|"]
    for op, rs in by_op.items():
        c = counts(rs)
        mark = " *" if op in COMMON_OPS else ""
        lines.append("| %s%s | %d | %d | %d | %d | %d |" % (
            op, mark, len(rs), c["pass"], c["refused"], c["wrong"], c["crash"]))
    return "\n".join(lines)


def write_table(path, results):
    """Replace the text between the table markers in ``path``."""
    with open(path) as f:
        text = f.read()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise SystemExit("%s has no %s ... %s markers" % (path, TABLE_BEGIN, TABLE_END))
    head, rest = text.split(TABLE_BEGIN, 1)
    tail = rest.split(TABLE_END, 1)[1]
    with open(path, "w") as f:
        f.write(head + TABLE_BEGIN + "\n" + table(results) + "\n" + TABLE_END + tail)


def main(argv=None):
    import dlprim as dp
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    p.add_argument("--table", metavar="MARKDOWN", help="write the table per operator there")
    p.add_argument("--verbose", action="store_true", help="one line per case")
    p.add_argument("--show", default="wrong,crash",
                   help="statuses listed with their reason (default wrong,crash)")
    p.add_argument("--device", default=os.environ.get("DLPRIM_TEST_DEVICE"))
    args = p.parse_args(argv)
    ctx = dp.Context(args.device or None)
    show = set(args.show.split(","))

    def log(r):
        if args.verbose or r.status in show:
            print("%-8s %-60s %-22s %5.2fs %s" % (r.status, r.name, r.op, r.seconds, r.detail),
                  flush=True)

    start = time.perf_counter()
    results = run(ctx, pattern=args.pattern, log=log)
    print(summary(results))
    print("%.1f s" % (time.perf_counter() - start))
    if args.table:
        write_table(args.table, results)
    return 1 if any(r.status in ("wrong", "crash") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
