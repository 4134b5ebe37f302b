"""DLPrimitives' test files for softmax, the losses, elementwise, slice, concat, the
pointwise operators and Parameter (generate_layers.py: pooling, interpolation, reduction,
batchnorm, inner product; generate_conv.py: the convolutions).

Each ``make_<name>(sizes)`` returns one file's content: ``{"operator", "tests"}`` with the
options, setup specs, case shapes, tolerances and "stored data or reference at run time"
split of DLPrimitives' generator; ``sizes`` (case_builder.Sizes) says which cases are
kept. The torch random state is seeded by ``generate.generate``.
"""
from functools import partial

import numpy as np
import torch

from .case_builder import (candidate, computed, computed_case, flat, make_test, params64,
                           ref_case, spec, with_extra)
from .torch_reference import reference


def make_softmax(sizes, log=False):
    fn = reference("Softmax", {"log": log})
    candidates = []
    for tail in ([], [1], [5], [10]):
        for b in (1, 2, 5, 10, 50, 100, 120):
            for f in (1, 5, 31, 32, 33, 63, 64, 65, 100, 1000, 2000):
                shape = [b, f] + tail
                extra = {"eps": 3e-3} if f > 1000 else {"eps": 1e-3} if f > 100 else {}
                if b <= 5 and f <= 32:
                    make = partial(with_extra, partial(computed, fn, [shape]), **extra)
                else:
                    make = partial(ref_case, fn, [shape], **extra)
                candidates.append(([shape, shape], make))
    test = make_test({"log": log}, [spec([10, 50])], [[10, 50]], sizes.cases(candidates),
                     workspace=0)
    return {"operator": "Softmax", "tests": [test]}


def make_log_softmax(sizes):
    return make_softmax(sizes, log=True)


def _label_case(fn, b, f, dy_shape):
    inputs = [torch.randn(b, f), torch.randint(f, (b,)).float()]
    return computed_case(fn, inputs, requires_grad=[True, False],
                         out_diffs=[torch.rand(dy_shape) * 0.5 + 0.5])


LOSS_SHAPES = [(b, f) for b in (1, 2, 5, 10, 50) for f in (2, 5, 31, 32, 33, 63, 64, 65)]


def make_softmax_loss(sizes):
    fn = reference("SoftmaxWithLoss", {})
    cases = sizes.cases([([[b, f]], partial(_label_case, fn, b, f, [1])) for b, f in LOSS_SHAPES])
    test = make_test({}, [spec([10, 50]), spec([10], requires_grad=False)], [[1]], cases,
                     workspace=0)
    return {"operator": "SoftmaxWithLoss", "tests": [test]}


def make_nll_loss(sizes):
    tests = []
    for reduce in ("none", "mean", "sum"):
        fn = reference("NLLLoss", {"reduce": reduce})
        cases = sizes.cases([([[b, f]], partial(_label_case, fn, b, f,
                                                [b] if reduce == "none" else [1]))
                             for b, f in LOSS_SHAPES])
        tests.append(make_test({"reduce": reduce}, [spec([10, 50]), spec([10], False)],
                               [[10] if reduce == "none" else [1]], cases, workspace=0))
    return {"operator": "NLLLoss", "tests": tests}


def _mse_case(fn, s, dy_shape):
    return computed_case(fn, [torch.randn(s), torch.randn(s)],
                         out_diffs=[torch.rand(dy_shape) * 0.5 + 0.5])


def make_mse_loss(sizes):
    tests = []
    for reduce in ("none", "mean", "sum"):
        fn = reference("MSELoss", {"reduce": reduce})
        cases = sizes.cases([([s], partial(_mse_case, fn, s, s if reduce == "none" else [1]))
                             for s in ([2], [2, 3], [2, 3, 4])])
        tests.append(make_test({"reduce": reduce}, [spec([10]), spec([10])],
                               [[10] if reduce == "none" else [1]], cases, workspace=0))
    return {"operator": "MSELoss", "tests": tests}


ELTWISE_SHAPES = [
    ([5, 2], [5, 2]), ([5, 2], [5, 1]), ([5, 2], [2]),
    ([2, 3, 4], [2, 3, 4]), ([2, 3, 4], [4]), ([2, 3, 4], [3, 1]), ([2, 3, 4], [2, 1, 1]),
    ([1, 3, 1], [2, 3, 4]),
    ([2, 3, 4, 5], [2, 3, 4, 5]), ([2, 3, 4, 5], [4, 1]), ([2, 3, 4, 5], [3, 1, 1]),
    ([2, 3, 4, 5], [2, 1, 1, 1]), ([3, 1, 5], [2, 3, 4, 5]),
    ([2, 3, 4, 5, 6], [2, 3, 4, 5, 6]), ([2, 3, 4, 5, 6], [4, 1, 1]),
    ([2, 3, 4, 5, 6], [3, 1, 1, 1]), ([2, 3, 4, 5, 6], [2, 1, 1, 1, 1]),
    ([3, 1, 1, 1], [2, 3, 4, 5, 6]),
    ([32, 6, 16, 16], [32, 6, 16, 16]), ([32, 1, 16, 16], [6, 16, 1]),
    ([32, 6, 16, 16], [6, 1, 1])]


def make_elementwise(sizes):
    tests = []
    for op in ("sum", "prod", "max"):
        for c1 in (-1.5, 2.0):
            for act in ("identity", "relu"):
                options = {"operation": op, "activation": act, "coef1": c1, "coef2": 1.2}
                fn = reference("Elementwise", options)
                candidates = []
                for s1, s2 in ELTWISE_SHAPES:
                    if np.prod(s1) < 1000 and np.prod(s2) < 1000:
                        make = partial(computed, fn, [s1, s2])
                    else:
                        make = partial(ref_case, fn, [s1, s2])
                    candidates.append(candidate(fn, [s1, s2], make))
                tests.append(make_test(options, [spec([10, 50]), spec([10, 50])], [[10, 50]],
                                       sizes.cases(candidates)))
    return {"operator": "Elementwise", "tests": tests}


def make_slice(sizes):
    tests = []
    for dim, begin, end, shapes in ((0, 1, 3, [[10, 5], [15, 2], [20, 5]]),
                                    (1, 2, 7, [[2, 10, 5], [5, 10, 1]]),
                                    (1, 2, 7, [[2, 10], [5, 10]])):
        options = {"dim": dim, "begin": begin, "end": end}
        fn = reference("Slice", options)
        cases = sizes.cases([([s], partial(computed, fn, [s])) for s in shapes])
        out = list(shapes[0])
        out[dim] = end - begin
        tests.append(make_test(options, [spec(shapes[0])], [out], cases))
    return {"operator": "Slice", "tests": tests}


CONCAT = [
    (0, [[[10, 5], [10, 5]], [[30, 5], [30, 5]], [[1, 1], [1, 1]]]),
    (0, [[[10, 5], [5, 5], [15, 5]], [[3, 20], [7, 20], [10, 20]]]),
    (0, [[[10, 5], [5, 5], [3, 5], [18, 5]], [[3, 20], [7, 20], [1, 20], [11, 20]]]),
    (1, [[[10, 5], [10, 5]], [[30, 5], [30, 5]], [[1, 1], [1, 1]]]),
    (1, [[[10, 5], [10, 5], [10, 10]], [[15, 2], [15, 1], [15, 3]]]),
    (1, [[[10, 5, 2], [10, 5, 2], [10, 10, 2]], [[15, 2, 4], [15, 1, 4], [15, 3, 4]]]),
]


def make_concat(sizes):
    tests = []
    for dim, variants in CONCAT:
        fn = reference("Concat", {"dim": dim})
        cases = sizes.cases([(shapes, partial(computed, fn, shapes[:-1])) for shapes in variants])
        tests.append(make_test({"dim": dim}, [spec(s) for s in variants[0][:-1]],
                               [variants[0][-1]], cases))
    return {"operator": "Concat", "tests": tests}


POINTWISE_SHAPES = ([5, 2], [32, 6, 16, 16], [128, 256, 16, 16], [10023])


def _pointwise(operator, option_sets, sizes, scale=1.0):
    tests = []
    for options in option_sets:
        fn = reference(operator, options)
        candidates = [([s], partial(computed, fn, [s], scale) if np.prod(s) < 100
                       else partial(ref_case, fn, [s])) for s in POINTWISE_SHAPES]
        tests.append(make_test(options, [spec([10, 50])], [[10, 50]], sizes.cases(candidates)))
    return {"operator": operator, "tests": tests}


def make_hardtanh(sizes):
    return _pointwise("Hardtanh", [{"min_val": -0.1, "max_val": 1.1},
                                   {"min_val": 0, "max_val": 6}], sizes)


def make_abs(sizes):
    return _pointwise("Abs", [{}], sizes)


def make_threshold(sizes):
    return _pointwise("Threshold", [{}, {"threshold": 0.5}], sizes)


def make_activation(sizes):
    acts = ("relu", "tanh", "sigmoid", "identity", "relu6")
    return _pointwise("Activation", [{"activation": a} for a in acts], sizes, scale=16.0)


def make_param(sizes):
    value = torch.randn(2, 3, 4)
    options = {"shape": [2, 3, 4], "dtype": "float"}
    fn = reference("Parameter", options)
    cases = sizes.cases([([[2, 3, 4]], partial(computed_case, fn, [], params64([value])))])
    test = make_test(options, [], [[2, 3, 4]], cases, param_specs=[spec(value.shape)],
                     param_tensors=[flat(value)])
    return {"operator": "Parameter", "tests": [test]}
