"""Runs DLPrimitives-format test files against dlprim's layers by test_from_template's rules.

Per test: the layer is created from the options and set up with ``setup_tensors``; its
output specs must equal ``output_tensors`` and its parameter specs ``param_specs`` (shape,
dtype, trainable). Parameters come from ``param_tensors``, or from the ``init`` rule with
``random_params``, and live on the device across the test's cases (BatchNorm's running
statistics move from case to case). The workspace size is not compared: it is each
implementation's own.

Per case: the mode (``test_mode``), a reshape to ``in_shapes`` (outputs ``out_shapes``),
the inputs and reference from the file, or -- ``use_cpu_reference`` -- inputs by the
``init`` rule and the reference from PyTorch (``torch_reference``) where DLPrimitives runs
its own CPU code. Forward is compared; in training tests backward too: input gradients
where ``requires_grad``, parameter gradients where trainable, and ``parameters_check``
against the non-trainable parameters. With ``double_check`` (default) a second backward
pass accumulates: DLPrimitives runs it with ``accumulate = 0.5`` and expects 1.5 times
the gradients. dlprim's contract adds to what is there (dx with accumulate, parameter
gradients always), so the first pass's results are halved on the host before it.

Tolerance (compare_tensors): ``eps`` (the case's, default 1e-5) is multiplied by the
reference's standard deviation where that is above 1, or by |value| for a single value
above 1 -- and, as in the original, the scaled eps carries on to the later tensors of the
same comparison. Unlike the original, a NaN never passes.
"""
import numpy as np
import torch

from dlprim.dtypes import as_dtype
from dlprim.layers import PREDICT, TRAIN, TensorSpec, create, run

from layer_check import layer_memory, place
from .torch_reference import reference

__all__ = ["run_test", "compare", "Mismatch"]


class Mismatch(AssertionError):
    """A result outside the tolerance (``what``: "forward output", "input gradient",
    "parameter gradient" or "parameter"; ``tensors``: the indices of those off; ``ratio``:
    the worst error / eps), or specs other than the file's (``what`` "setup")."""

    def __init__(self, message, what="setup", ratio=None, tensors=()):
        super().__init__(message)
        self.what, self.ratio, self.tensors = what, ratio, tuple(tensors)


def init_values(rng, shape, method):
    """DLPrimitives' fills: uniform in [-1, 1), or small integers -2..2 (times 0.5 for
    small_frac)."""
    if method == "uniform":
        return rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    if method in ("small_int", "small_frac"):
        scale = 0.5 if method == "small_frac" else 1.0
        return (rng.integers(-2, 3, shape) * scale).astype(np.float32)
    raise ValueError("unknown init method %r" % method)


def compare(actual, expected, eps, factor=1.0, what="", select=None):
    """[(what, index, worst error / eps)] per compared tensor; every tensor is compared,
    then a Mismatch names those outside the tolerance (its ratio: the worst of them).
    ``select[i]`` false skips tensor i."""
    ratios, problems, bad_tensors, worst = [], [], [], 0.0
    for i, (a, r) in enumerate(zip(actual, expected)):
        if select is not None and i < len(select) and not select[i]:
            continue
        r = np.asarray(r, np.float32).reshape(-1).astype(np.float64)
        a = np.asarray(a, np.float64).reshape(-1)
        if r.size == 0:
            continue
        mean = r.mean()
        dev = np.sqrt(max((r * r).mean() - mean * mean, 0.0))
        if dev > 1:
            eps *= dev
        elif r.size == 1 and abs(mean) > 1:
            eps *= abs(mean)
        err = np.abs(a - factor * r)
        bad = ~(err <= eps)  # NaN counts as bad
        ratio = float(np.max(np.where(np.isnan(err), np.inf, err)) / eps)
        ratios.append((what, i, ratio))
        if bad.any():
            j = int(np.argmax(bad))
            problems.append("%s %d: %d of %d values off, first at %d: got %r, expected %r "
                            "(= %r * %g); eps %.3g, worst error %.3g eps"
                            % (what, i, int(bad.sum()), r.size, j, a[j], factor * r[j], r[j],
                               factor, eps, ratio))
            worst = max(worst, ratio)
            bad_tensors.append(i)
    if problems:
        raise Mismatch("; ".join(problems), what, worst, bad_tensors)
    return ratios


def _specs_of(entries):
    return [(tuple(e["shape"]), as_dtype(e.get("dtype", "float"))) for e in entries]


class _Test:
    """One test of a file: the layer, its parameters on the device and on the host, and
    the known deviations met (``known``: see run_test)."""

    def __init__(self, ctx, operator, test, seed, known=None):
        self.ctx, self.operator, self.test = ctx, operator, test
        self.known, self.deviations = known, []
        self.rng = np.random.default_rng(seed)
        self.init = test.get("init", "uniform")
        self.train = bool(test.get("train", False))
        self.in_specs = _specs_of(test["setup_tensors"])
        self.requires_grad = [e.get("requires_grad", True) for e in test["setup_tensors"]]
        self.layer = create(ctx, operator, name="test", options=test["options"])
        self.layer.mode = TRAIN if self.train else PREDICT
        setup = self.layer.setup([TensorSpec(*s) for s in self.in_specs])
        got = [(tuple(o.shape), o.dtype) for o in setup.outputs]
        if got != _specs_of(test["output_tensors"]):
            raise Mismatch("setup: outputs %s, the file says %s"
                           % (got, _specs_of(test["output_tensors"])))
        self.param_specs = []
        if "param_specs" in test:
            want = [s + (e.get("trainable", True),)
                    for s, e in zip(_specs_of(test["param_specs"]), test["param_specs"])]
            got = [(tuple(p.shape), p.dtype, p.trainable) for p in setup.params]
            if got != want:
                raise Mismatch("setup: parameters %s, the file says %s" % (got, want))
            self.param_specs = want
        self.trainable = [t for _, _, t in self.param_specs]

    def make_params(self):
        """Device parameters and their float64 torch twins for run-time references."""
        if self.test.get("random_params", False):
            host = [init_values(self.rng, s, self.init) for s, _, _ in self.param_specs]
        else:
            host = [np.asarray(v, np.float32).reshape(s)
                    for v, (s, _, _) in zip(self.test.get("param_tensors", []), self.param_specs)]
        self.params = [place(self.ctx, h) for h in host]
        self.ref_params = [torch.tensor(h, dtype=torch.float64).requires_grad_(t)
                           for h, t in zip(host, self.trainable)]

    def compare(self, case, *args):
        """``compare(*args)``, a mismatch that ``known`` recognises recorded instead."""
        try:
            return compare(*args)
        except Mismatch as err:
            reason = self.known(self.layer, case, err) if self.known is not None else None
            if reason is None:
                raise
            self.deviations.append((case, reason, err))
            return []

    def run_case(self, case):
        """Forward and backward of one case; -> the error ratios of its comparisons."""
        train = not case.get("test_mode", not self.train)
        self.layer.mode = TRAIN if train else PREDICT
        in_shapes = [tuple(s) for s in case["in_shapes"]]
        setup = self.layer.setup([TensorSpec(s, d) for s, (_, d) in zip(in_shapes, self.in_specs)])
        out_shapes = [tuple(o.shape) for o in setup.outputs]
        if out_shapes != [tuple(s) for s in case["out_shapes"]]:
            raise Mismatch("reshape to %s: outputs %s, the file says %s"
                           % (in_shapes, out_shapes, case["out_shapes"]))
        at_run_time = case.get("use_cpu_reference", False)
        if at_run_time:
            xs = [init_values(self.rng, s, self.init) for s in in_shapes]
            ref = _RunTimeReference(self.operator, self.test["options"], xs,
                                    self.requires_grad, self.ref_params, train)
            ys_ref = ref.outputs
        else:
            xs = [np.asarray(v, d).reshape(s) for v, s, (_, d)
                  in zip(case["in_tensors"], in_shapes, self.in_specs)]
            ys_ref = case["out_tensors"]
        eps = case.get("eps", 1e-5)
        x_t = [place(self.ctx, x) for x in xs]
        y_t = [place(self.ctx, np.full(o.shape, np.nan, o.dtype)) for o in setup.outputs]
        ws, saved = layer_memory(self.ctx, setup)
        run(self.layer.forward(x_t, y_t, self.params, ws, saved), self.ctx.queue)
        ratios = self.compare(case, [t.numpy() for t in y_t], ys_ref, eps, 1.0,
                              "forward output")
        if not self.train or not (at_run_time or "out_diffs" in case):
            return ratios
        if at_run_time:
            dys = [init_values(self.rng, s, self.init) for s in out_shapes]
            dx_ref, dp_ref = ref.gradients(dys)
        else:
            dys = [np.asarray(v, np.float32).reshape(s) for v, s in zip(case["out_diffs"],
                                                                        out_shapes)]
            dx_ref, dp_ref = case["in_diffs"], case.get("params_diffs", [])
        dy_t = [place(self.ctx, d) for d in dys]
        dx = [np.full(s, np.nan, np.float32) if g else None
              for s, g in zip(in_shapes, self.requires_grad)]
        dp = [np.zeros(s, np.float32) if t else None for s, _, t in self.param_specs]
        for accumulate in range(2 if case.get("double_check", True) else 1):
            scale = 0.5 if accumulate else 0.0  # DLPrimitives' accumulate factor
            dx_t = [None if d is None else place(self.ctx, d * scale if accumulate else d)
                    for d in dx]
            dp_t = [None if d is None else place(self.ctx, d * scale) for d in dp]
            run(self.layer.backward(x_t, dx_t, y_t, dy_t, self.params, dp_t, ws, saved,
                                    [bool(accumulate)] * len(xs)), self.ctx.queue)
            dx = [None if t is None else t.numpy() for t in dx_t]
            dp = [None if t is None else t.numpy() for t in dp_t]
            factor = 1.0 + scale
            ratios += self.compare(case, dx, dx_ref, eps, factor, "input gradient",
                                   self.requires_grad)
            ratios += self.compare(case, dp, dp_ref, eps, factor, "parameter gradient",
                                   self.trainable)
            if "parameters_check" in case:
                ratios += self.compare(case, [p.numpy() for p in self.params],
                                       case["parameters_check"], eps, 1.0, "parameter",
                                       [not t for t in self.trainable])
        return ratios


class _RunTimeReference:
    """PyTorch's float64 forward of a case, and its gradients for given output gradients."""

    def __init__(self, operator, options, xs, requires_grad, params, train):
        self.xs = [torch.tensor(x, dtype=torch.float64).requires_grad_(bool(g))
                   for x, g in zip(xs, requires_grad)]
        self.params = params
        self.ys = reference(operator, options)(self.xs, params, train)
        self.outputs = [y.detach().numpy() for y in self.ys]

    def gradients(self, dys):
        wrt = [t for t in self.xs + self.params if t.requires_grad]
        grads = torch.autograd.grad(self.ys, wrt, [torch.tensor(d, dtype=torch.float64)
                                                   for d in dys], allow_unused=True)
        by_id = {id(t): (torch.zeros_like(t) if g is None else g).numpy()
                 for t, g in zip(wrt, grads)}
        return ([by_id.get(id(x)) for x in self.xs], [by_id.get(id(p)) for p in self.params])


def run_test(ctx, operator, test, seed=0, known=None):
    """Run one test of a file (a dict of its "tests" list) -> (ratios, deviations):
    ``[(case index, what, tensor index, worst error / eps)]`` of the comparisons, and
    ``[(case index, reason)]`` of the comparisons that ``known(layer, case, mismatch)``
    called a known deviation (a reason string; None: a failure), the case's other
    comparisons still made. Raises Mismatch naming the case that failed."""
    t = _Test(ctx, operator, test, seed, known)
    ratios = []
    if not test["cases"]:
        return ratios, []
    t.make_params()
    for i, case in enumerate(test["cases"]):
        try:
            ratios += [(i,) + r for r in t.run_case(case)]
        except Mismatch as err:
            raise Mismatch("case %d (in_shapes %s): %s" % (i, case["in_shapes"], err),
                           err.what, err.ratio, err.tensors) from None
    index = {id(c): i for i, c in enumerate(test["cases"])}
    return ratios, [(index[id(case)], reason) for case, reason, _ in t.deviations]
