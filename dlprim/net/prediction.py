"""What ``Net.predict`` runs: the part of a net that makes its predictions, in predict mode,
over the net's own parameters, any number of rows at a time.

* ``prediction_graph`` keeps the operators that the net's predictions need. A loss is an
  output whose operator compares its first input (the prediction) with others (the
  targets); labels are the net inputs the targets come from (directly or through other
  operators) and the predictions do not. The predictions are the outputs that are not
  losses and need no labels; when every output is a loss (a training net), they are
  what each loss operator reads first: the logits of a ``SoftmaxWithLoss``, the
  log-probabilities of an ``NLLLoss``, the estimates of an ``MSELoss``, under their own
  names. No softmax is added: it fits only one of those losses, and dlprim-train's
  deploy graph is these same operators plus a ``Softmax`` called ``prob``, so
  ``softmax(predict(...)[logits])`` is its output.
* ``SharedParams`` gives the kept operators the training net's parameter tensors (views
  of its one arena, nothing copied), so the predict-mode net always sees the current
  weights and BatchNorm statistics and never writes them.
* ``predict_rows`` runs arrays of any number of rows through that net: at most the
  planned batch at once (fewer re-plans it for them; more are run in batches of that
  size, the last one filled up by repeating its last row). At inference a row's result
  depends on that row alone, so the batches change nothing but the memory used.

Graph logic is pure Python; the rest needs only a Net's public calls.
"""
from collections import namedtuple

import numpy as np

from ..errors import InputError
from .graph import GraphError

__all__ = ["PredictionGraph", "prediction_graph", "SharedParams", "predict_rows",
           "producer"]

PredictionGraph = namedtuple("PredictionGraph", "graph ops outputs output_values from_loss")
PredictionGraph.__doc__ = """The part of a net that predicts: ``graph`` (a JSON dict),
``ops`` (indices of the kept operators in the full graph), ``outputs`` (names),
``output_values`` (their value ids in the full graph) and ``from_loss`` (True when the
outputs are what the losses read, the net having no other output)."""


def prediction_graph(graph, shapes=None):
    """The operators of ``graph`` (a ``Graph``) that its predictions need, as a
    ``PredictionGraph``; ``shapes`` ({input name: shape}) replaces the inputs' shapes
    (a set-up net's current ones). GraphError when nothing can be predicted without labels.
    """
    values, ops = graph.values, graph.ops
    sources = [set() for _ in values]  # the net inputs each value is computed from
    for name, vid in graph.input_values.items():
        sources[vid] = {name}
    for op in ops:
        came_from = set().union(*(sources[v] for v in op.in_values))
        for v in op.out_values:
            sources[v] = came_from
    # a loss compares a prediction (its first input) with targets; a loss-weighted output
    # of one input compares nothing: a penalty beside a loss, or, with no loss at all, the
    # prediction itself (DLPrimitives' benchmark nets call their logits "loss")
    producers = [values[graph.latest[n]].producer for n in graph.loss_weights]
    loss_ops = [ops[p] for p in producers if p >= 0 and len(ops[p].in_values) >= 2]
    predicted = set().union(*(sources[op.in_values[0]] for op in loss_ops))
    labels = set().union(*(sources[v] for op in loss_ops for v in op.in_values[1:])) - predicted
    losses = set(graph.loss_weights) if loss_ops else set()

    wanted = [graph.latest[n] for n in graph.outputs
              if n not in losses and not sources[graph.latest[n]] & labels]
    from_loss = not wanted
    if from_loss:
        for op in loss_ops:
            if not sources[op.in_values[0]] & labels and op.in_values[0] not in wanted:
                wanted.append(op.in_values[0])
    if not graph.outputs:
        raise GraphError("predict: the net lists no outputs")
    if not wanted:
        raise GraphError("predict: every output of the net is a loss or needs its labels (%s),"
                         " and no loss reads a prediction" % (", ".join(sorted(labels)) or "none"))

    needed, kept = set(wanted), []
    for op in reversed(ops):
        if any(v in needed for v in op.out_values):
            kept.append(op.index)
            needed.update(op.in_values)
    kept.reverse()
    inputs = [n for n, vid in graph.input_values.items() if vid in needed]
    _check_names(graph, kept, inputs, wanted)

    shapes = shapes or {}
    d = {"inputs": [{"name": n, "shape": list(shapes.get(n, graph.inputs[n][0])),
                     "dtype": graph.inputs[n][1]} for n in inputs],
         "outputs": [values[v].name for v in wanted],
         "operators": [ops[i].to_dict() for i in kept]}
    return PredictionGraph(d, kept, d["outputs"], wanted, from_loss)


def _check_names(graph, kept, inputs, wanted):
    """Each wanted value is still the latest of its name once the rest is left out (an
    operator kept for one output could write another's name in place later)."""
    latest = {n: graph.input_values[n] for n in inputs}
    for i in kept:
        for name, v in zip(graph.ops[i].outputs, graph.ops[i].out_values):
            latest[name] = v
    for v in wanted:
        name = graph.values[v].name
        if latest[name] != v:
            raise GraphError("predict: '%s' is written again in place (by operator '%s') after "
                             "the value to predict; give that value a name of its own"
                             % (name, graph.ops[graph.values[latest[name]].producer].name))


def producer(graph, name):
    """The operator (``OpDef``) that writes the latest value of ``name``; None for a net
    input."""
    p = graph.values[graph.latest[name]].producer
    return graph.ops[p] if p >= 0 else None


class SharedParams:
    """The parameter store of a predict-mode net over some operators of another net: for
    each kept operator (``ops``: their indices in ``source``'s graph), the tensors of
    ``source`` (a ParamStore). Everything else (layout, arenas, names) is ``source``'s."""

    def __init__(self, source, ops):
        self.source = source
        self.ops = list(ops)
        self.op_params = [source.op_params[i] for i in self.ops]
        self.op_trains = [source.op_trains[i] for i in self.ops]
        self.op_param_names = [source.op_param_names[i] for i in self.ops]

    def checked(self, ops, specs):
        """Itself, once the layers' parameter specs (``specs``, one list per operator of
        the predict graph ``ops``) agree with the tensors they get."""
        for op, want, have in zip(ops, specs, self.op_params):
            shapes = [tuple(s.shape) for s in want]
            if shapes != [t.shape for t in have]:
                raise GraphError("predict: operator '%s' has parameters %s, the net %s"
                                 % (op.name, shapes, [t.shape for t in have]))
        return self

    def __getattr__(self, name):
        return getattr(self.source, name)


def predict_rows(net, inputs, known, batch):
    """{output name: array} of the predict-mode ``net`` (a Net) over ``inputs`` (arrays
    with one row per sample), ``batch`` rows at a time. ``known``: the names callers may
    give (the full net's inputs; those ``net`` does not read, such as labels, are ignored).
    """
    for name in inputs:
        if name not in known:
            raise InputError("predict(...): '%s' is not a net input; inputs: %s"
                             % (name, ", ".join(known)))
    missing = [n for n in net.input_names if n not in inputs]
    if missing:
        raise InputError("predict(...): input '%s' is missing; predicting reads %s"
                         % (missing[0], ", ".join(net.input_names)))
    if not net.input_names:
        return net()
    arrays, rows = {}, {}
    for name in net.input_names:
        try:
            arrays[name] = np.asarray(inputs[name])
        except (ValueError, TypeError) as err:
            raise InputError("predict(...): input '%s' is not an array of numbers (%s)"
                             % (name, err)) from None
        if arrays[name].ndim == 0 or arrays[name].shape[0] == 0:
            raise InputError("predict(...): input '%s' has shape %s; give one row or more per "
                             "sample (the batch is the first dimension)"
                             % (name, arrays[name].shape))
        rows[name] = arrays[name].shape[0]
    if len(set(rows.values())) > 1:
        raise InputError("predict(...): the inputs have different numbers of rows: %s"
                         % ", ".join("'%s' %d" % kv for kv in rows.items()))
    n = next(iter(rows.values()))
    if n <= batch:
        return net(**arrays)
    parts = {}
    for start in range(0, n, batch):
        real = min(batch, n - start)
        chunk = {k: _filled(a[start:start + real], batch) for k, a in arrays.items()}
        for name, y in net(**chunk).items():
            if y.ndim == 0 or y.shape[0] % batch:
                raise InputError("predict(...): output '%s' has shape %s, not rows per sample; "
                                 "give at most %d rows at a time" % (name, y.shape, batch))
            parts.setdefault(name, []).append(y[:real * (y.shape[0] // batch)])
    return {k: np.concatenate(v) for k, v in parts.items()}


def _filled(a, rows):
    """``a`` with its last row repeated up to ``rows`` rows (valid data for any input)."""
    if a.shape[0] == rows:
        return a
    return np.concatenate([a, np.repeat(a[-1:], rows - a.shape[0], axis=0)])
