"""The pieces of DLPrimitives' test files: specs, tests, and cases from PyTorch (shapes,
data, outputs and gradients), and which cases a file keeps (Sizes).

Inputs and parameters are made in float32 (the values a case file stores) and the
reference runs in float64 on them, so a case's only rounding is the final one to float32.
"""
import numpy as np
import torch

__all__ = ["Sizes", "flat", "spec", "make_test", "params64", "out_shapes", "computed_case",
           "computed", "with_extra", "reference_case", "ref_case", "candidate"]


def flat(t):
    """A tensor's values as the flat list a case file stores."""
    return t.detach().reshape(-1).tolist()


class Sizes:
    """Which cases a file keeps: those whose tensors have at most ``limit`` elements each,
    and of them at most ``per_test`` per test -- the first, the last and evenly between,
    as the original lists cases from small to large (None: no bound)."""

    def __init__(self, limit=None, per_test=None):
        self.limit, self.per_test = limit, per_test

    def fits(self, shapes):
        """Whether every tensor of ``shapes`` is within the limit."""
        return self.limit is None or \
            max((int(np.prod(s)) for s in shapes), default=0) <= self.limit

    def cases(self, candidates, every=False):
        """The cases of one test from ``candidates``, pairs (shapes of its tensors, a
        function making the case), made only when kept. ``every``: the cases carry state
        from one to the next, so no per-test bound and the first that does not fit ends
        them."""
        if every:
            fitting = [self.fits(shapes) for shapes, _ in candidates] + [False]
            return [make() for _, make in candidates[:fitting.index(False)]]
        kept = [make for shapes, make in candidates if self.fits(shapes)]
        if self.per_test is not None and len(kept) > self.per_test:
            picks = np.unique(np.linspace(0, len(kept) - 1, self.per_test).round())
            kept = [kept[int(i)] for i in picks]
        return [make() for make in kept]


def params64(params, trainable=None):
    """Parameters as float64 leaves (gradients only for the trainable ones), kept by a
    test across its cases: BatchNorm's running statistics carry from case to case."""
    trainable = [True] * len(params) if trainable is None else trainable
    return [p.detach().double().requires_grad_(bool(t)) for p, t in zip(params, trainable)]


def out_shapes(fn, in_shapes, param_shapes=(), train=True):
    """The output shapes of ``fn`` for inputs of ``in_shapes``, from PyTorch's meta tensors
    (no data, no arithmetic)."""
    def meta(shape):
        return torch.empty(shape, device="meta", dtype=torch.float64)
    return [list(y.shape) for y in fn([meta(s) for s in in_shapes],
                                      [meta(s) for s in param_shapes], train)]


def computed_case(fn, inputs, params=(), train=True, requires_grad=None, out_diffs=None,
                  parameters_check=False):
    """A case with every tensor stored: ``fn(inputs, params, train)`` on float64 copies of
    the float32 ``inputs``; with ``train``, the gradients for ``out_diffs`` (default:
    standard normal). ``params``: float64 leaves from ``params64`` (updated in place by a
    training BatchNorm). ``parameters_check``: store the non-trainable parameters after
    the pass, as DLPrimitives' BatchNorm cases do."""
    requires_grad = [True] * len(inputs) if requires_grad is None else requires_grad
    xs = [x.detach().double().requires_grad_(bool(rg)) for x, rg in zip(inputs, requires_grad)]
    ys = fn(xs, list(params), train)
    case = {"in_shapes": [list(x.shape) for x in inputs], "out_shapes": [list(y.shape) for y in ys],
            "in_tensors": [flat(x) for x in inputs], "out_tensors": [flat(y) for y in ys]}
    if train:
        dys = out_diffs if out_diffs is not None else [torch.randn(y.shape) for y in ys]
        wrt = [t for t in xs + list(params) if t.requires_grad]
        grads = torch.autograd.grad(ys, wrt, [d.double() for d in dys], allow_unused=True)
        by_id = {id(t): g if g is not None else torch.zeros_like(t) for t, g in zip(wrt, grads)}
        case["out_diffs"] = [flat(d) for d in dys]
        case["in_diffs"] = [flat(by_id[id(x)]) if x.requires_grad else False for x in xs]
        if params:
            case["params_diffs"] = [flat(by_id[id(p)]) if p.requires_grad else False
                                    for p in params]
    if parameters_check:
        case["parameters_check"] = [False if p.requires_grad else flat(p) for p in params]
    return case


def reference_case(in_shapes, out_shapes, **extra):
    """A case without data: the runner fills the inputs by the test's ``init`` rule and
    computes the reference at run time (DLPrimitives' ``use_cpu_reference``)."""
    return dict({"in_shapes": [list(s) for s in in_shapes],
                 "out_shapes": [list(s) for s in out_shapes], "use_cpu_reference": True}, **extra)


def spec(shape, requires_grad=True, trainable=True):
    """A setup or parameter spec as the files write it."""
    out = {"shape": list(shape)}
    if not requires_grad:
        out["requires_grad"] = False
    if not trainable:
        out["trainable"] = False
    return out


def make_test(options, setup, outputs, cases, train=True, **extra):
    """One test: options, setup specs (``spec`` dicts), output shapes and its cases."""
    return dict({"train": train, "options": options, "setup_tensors": setup,
                 "output_tensors": [spec(s) for s in outputs], "cases": cases}, **extra)


def ref_case(fn, in_shapes, params=(), train=True, **extra):
    """A run-time reference case, its output shapes found on meta tensors."""
    return reference_case(in_shapes, out_shapes(fn, in_shapes, [p.shape for p in params], train),
                          **extra)


def computed(fn, shapes, scale=1.0, **kw):
    """A stored case on standard normal inputs of ``shapes`` (times ``scale``)."""
    return computed_case(fn, [torch.randn(s) * scale for s in shapes], **kw)


def with_extra(case_fn, **extra):
    """``case_fn()`` with the ``extra`` keys (a case's own eps)."""
    return dict(case_fn(), **extra)


def candidate(fn, in_shapes, make, params=()):
    """(in and out shapes, make) for Sizes.cases."""
    return (list(in_shapes) + out_shapes(fn, in_shapes, [p.shape for p in params]), make)
