"""DLPrimitives' test files for every operator but the convolutions (generate_conv.py).

Each ``make_<name>(sizes)`` returns one file's content: ``{"operator", "tests"}`` with the
options, setup specs, case shapes, tolerances and "stored data or reference at run time"
split of DLPrimitives' generator; ``sizes`` (case_builder.Sizes) says which cases are
kept. The torch random state is seeded by ``generate.generate``.
"""
from functools import partial

import numpy as np
import torch

from .case_builder import computed_case, flat, out_shapes, params64, reference_case
from .torch_reference import reference


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


def _computed(fn, shapes, scale=1.0, **kw):
    return computed_case(fn, [torch.randn(s) * scale for s in shapes], **kw)


def _with(case_fn, **extra):
    return dict(case_fn(), **extra)


def _candidate(fn, in_shapes, make, params=()):
    """(in and out shapes, make) for Sizes.cases."""
    return (list(in_shapes) + out_shapes(fn, in_shapes, [p.shape for p in params]), make)


def make_softmax(sizes, log=False):
    fn = reference("Softmax", {"log": log})
    candidates = []
    for tail in ([], [1], [5], [10]):
        for b in (1, 2, 5, 10, 50, 100, 120):
            for f in (1, 5, 31, 32, 33, 63, 64, 65, 100, 1000, 2000):
                shape = [b, f] + tail
                extra = {"eps": 3e-3} if f > 1000 else {"eps": 1e-3} if f > 100 else {}
                if b <= 5 and f <= 32:
                    make = partial(_with, partial(_computed, fn, [shape]), **extra)
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
                        make = partial(_computed, fn, [s1, s2])
                    else:
                        make = partial(ref_case, fn, [s1, s2])
                    candidates.append(_candidate(fn, [s1, s2], make))
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
        cases = sizes.cases([([s], partial(_computed, fn, [s])) for s in shapes])
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
        cases = sizes.cases([(shapes, partial(_computed, fn, shapes[:-1])) for shapes in variants])
        tests.append(make_test({"dim": dim}, [spec(s) for s in variants[0][:-1]],
                               [variants[0][-1]], cases))
    return {"operator": "Concat", "tests": tests}


POINTWISE_SHAPES = ([5, 2], [32, 6, 16, 16], [128, 256, 16, 16], [10023])


def _pointwise(operator, option_sets, sizes, scale=1.0):
    tests = []
    for options in option_sets:
        fn = reference(operator, options)
        candidates = [([s], partial(_computed, fn, [s], scale) if np.prod(s) < 100
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


def make_interpolation(sizes):
    tests = []
    for method, align in (("bilinear", False), ("bilinear", True), ("nearest", None),
                          ("nearest-exact", None)):
        for xs in ((4, 8), (7, 9), (16, 16)):
            targets = [(None, s) for s in ((2, 1), (2, 2), (3.4, 3.3), (0.5, 0.7))]
            targets += [(s, None) for s in ((8, 8), (15, 16), (4, 4))]
            for size, scale in targets:
                options = {"method": method,
                           "out_h": -1 if size is None else size[0],
                           "out_w": -1 if size is None else size[1],
                           "scale_y": -1 if scale is None else scale[0],
                           "scale_x": -1 if scale is None else scale[1],
                           "align_corners": bool(align)}
                fn = reference("Interpolation", options)
                candidates = []
                for s in ([1, 1, *xs], [2, 3, *xs], [4, 4, *xs], [64, 128, *xs]):
                    make = partial(_computed, fn, [s]) if np.prod(s) < 200 else \
                        partial(ref_case, fn, [s], eps=1e-4)
                    candidates.append(_candidate(fn, [s], make))
                setup = [1, 1, *xs]
                tests.append(make_test(options, [spec(setup)], out_shapes(fn, [setup]),
                                       sizes.cases(candidates)))
    return {"operator": "Interpolation", "tests": tests}


def make_pooling2d(sizes):
    tests = []
    for kernel, pad, stride in ((2, 0, 2), (3, 1, 1), ([2, 4], [1, 0], [1, 2]),
                                ([3, 5], [1, 2], [3, 4])):
        for mode, include_pad, ceil in (("max", False, False), ("avg", False, False),
                                        ("avg", True, False), ("max", False, True),
                                        ("avg", False, True), ("avg", True, True)):
            options = {"mode": mode, "kernel": kernel, "pad": pad, "stride": stride,
                       "ceil_mode": ceil, "count_include_pad": include_pad}
            fn = reference("Pooling2D", options)
            candidates = [([s], partial(_computed, fn, [s]) if np.prod(s) < 200
                           else partial(ref_case, fn, [s]))
                          for s in ([2, 3, 5, 5], [1, 1, 6, 6], [1, 1, 7, 7], [1, 1, 8, 8],
                                    [8, 32, 64, 65], [8, 256, 247, 247])]
            setup = [4, 16, 32, 32]
            tests.append(make_test(options, [spec(setup)], out_shapes(fn, [setup]),
                                   sizes.cases(candidates)))
    return {"operator": "Pooling2D", "tests": tests}


REDUCTIONS = [
    (1, {}), (1, {"dims": [0]}), (1, {"start_axis": 0}),
    (2, {"start_axis": 1}), (2, {"dims": [1]}), (2, {"start_axis": 0}), (2, {"dims": [0, 1]}),
    (3, {"start_axis": -1}), (3, {"start_axis": 1}), (3, {"start_axis": 1, "output_scale": 0.2}),
    (3, {"dims": [-1, -2]}), (3, {"dims": [0, -1]}),
    (4, {"start_axis": 1}), (4, {"dims": [1, 2]}),
    (5, {"start_axis": 2}), (5, {"dims": [1, 3, 4]}),
]
REDUCTION_SHAPES = {1: ((5,), (100,)), 2: ((2, 3), (200, 300)), 3: ((2, 3, 4), (20, 30, 40)),
                    4: ((2, 3, 4, 5), (20, 30, 40, 50)), 5: ((2, 3, 4, 5, 6), (20, 30, 40, 50, 60))}


def make_reduction(sizes):
    tests = []
    for keep in (False, True):
        for ndim, cfg in REDUCTIONS:
            for method in ("sum", "sumsq", "abssum", "mean"):
                options = dict(cfg, method=method, keep_dim=keep)
                fn = reference("Reduction", options)
                candidates = [([s], partial(_computed, fn, [s]) if max(s) < 10 else
                               partial(ref_case, fn, [s], eps=0.01 if len(s) <= 4 else 0.1))
                              for s in REDUCTION_SHAPES[ndim]]
                setup = list(REDUCTION_SHAPES[ndim][0])
                tests.append(make_test(options, [spec(setup)], out_shapes(fn, [setup]),
                                       sizes.cases(candidates)))
    return {"operator": "Reduction", "tests": tests}


def make_global_pooling(sizes):
    tests = []
    for mode in ("max", "avg"):
        fn = reference("GlobalPooling", {"mode": mode})
        candidates = []
        for s in ([2, 3, 5, 5], [1, 1, 6, 6], [1, 1, 7, 7], [1, 1, 8, 8], [8, 32, 64, 65],
                  [8, 256, 247, 247], [5, 1, 1000, 1000]):
            if np.prod(s) < 200:
                make = partial(computed_case, fn, [torch.randn(s)],
                               out_diffs=[torch.randn(s[0], s[1], 1, 1)])
            else:
                make = partial(ref_case, fn, [s])
            candidates.append(([s], make))
        tests.append(make_test({"mode": mode}, [spec([4, 16, 32, 32])], [[4, 16, 1, 1]],
                               sizes.cases(candidates)))
    return {"operator": "GlobalPooling", "tests": tests}


BATCHNORM = [(5, 4, True, {}, False), (5, 4, False, {}, False), (7, 4, True, {}, False),
             (6, 3, True, {"eps": 1e-2}, False), (7, 2, True, {"eps": 1e-2}, False),
             (6, 4, False, {}, False), (30, 4, True, {"momentum": 0.7, "eps": 0.01}, False),
             (300, 4, True, {}, True)]
# (train, shape) per case: the same shapes several times, so the running statistics move
BN_STORED = [(True, (2, 1, 1)), (True, (2, 1, 1)), (True, (2, 1, 1)), (False, (2, 1, 1)),
             (False, (2, 1, 1)), (True, (2, 4, 4)), (True, (2, 4, 4)), (True, (2, 4, 4)),
             (False, (2, 4, 4)), (False, (2, 4, 4)), (True, (5, 5, 7)), (True, (5, 5, 7)),
             (False, (5, 5, 7)), (False, (5, 5, 7))]
BN_COMPUTED = [(True, (17, 35, 24)), (True, (17, 35, 24)), (False, (17, 35, 24)),
               (True, (32, 64, 64)), (True, (32, 64, 64)), (False, (32, 64, 64)),
               (True, (32, 64, 64))]


def _bn_case(fn, shape, state, train):
    case = computed_case(fn, [torch.randn(shape)], state, train=train, parameters_check=True)
    return dict(case, double_check=False, test_mode=not train, eps=1e-4)


def make_batchnorm(sizes):
    tests = []
    for features, ndim, affine, extra, at_run_time in BATCHNORM:
        options = dict({"features": features, "affine": affine}, **extra)
        fn = reference("BatchNorm", options)
        params = [torch.zeros(features), torch.ones(features)]
        if affine:
            params += [torch.randn(features), torch.randn(features)]
        trainable = [i >= 2 for i in range(len(params))]
        state = params64(params, trainable)
        candidates = []
        for train, (n, *rest) in (BN_COMPUTED if at_run_time else BN_STORED):
            shape = ([n, features] + list(rest))[:ndim]
            if at_run_time:
                make = partial(reference_case, [shape], [shape], test_mode=not train, eps=1e-4)
            else:
                make = partial(_bn_case, fn, shape, state, train)
            candidates.append(([shape], make))
        setup = [64, features, 256, 256]
        # the cases follow the running statistics from one to the next: all of them
        tests.append(make_test(options, [spec(setup)], [setup],
                               sizes.cases(candidates, every=True), init="small_frac",
                               param_specs=[spec(p.shape, trainable=t)
                                            for p, t in zip(params, trainable)],
                               param_tensors=[flat(p) for p in params]))
    return {"operator": "BatchNorm", "tests": tests}


def make_param(sizes):
    value = torch.randn(2, 3, 4)
    options = {"shape": [2, 3, 4], "dtype": "float"}
    fn = reference("Parameter", options)
    cases = sizes.cases([([[2, 3, 4]], partial(computed_case, fn, [], params64([value])))])
    test = make_test(options, [], [[2, 3, 4]], cases, param_specs=[spec(value.shape)],
                     param_tensors=[flat(value)])
    return {"operator": "Parameter", "tests": [test]}


def make_inner_product(sizes):
    tests = []
    for batch in (1, 128, 512):
        for n_in, n_out in ((5, 11), (1024, 1024), (5, 1024), (1024, 5), (4096, 4096),
                            (500, 1000)):
            for bias in (True, False):
                stored = n_in * n_out < 100
                # weights the file does not store need no values here
                linear = torch.nn.Linear(n_in, n_out, bias=bias,
                                         device=None if stored else "meta")
                params = list(linear.parameters())
                for act in ("identity", "relu"):
                    options = {"inputs": n_in, "outputs": n_out, "activation": act, "bias": bias}
                    fn = reference("InnerProduct", options)
                    state = params64(params) if stored else params
                    candidates = []
                    for rows in (1, 2, 8, 16, 127, 128, 512):
                        if rows > batch:
                            continue
                        if rows * n_in < 50 and stored:
                            make = partial(computed_case, fn, [torch.randn(rows, n_in)], state)
                        else:
                            make = partial(ref_case, fn, [[rows, n_in]], state)
                        candidates.append(([[rows, n_in], [rows, n_out]], make))
                    extra = {"param_tensors": [flat(p) for p in params]} \
                        if stored else {"random_params": True}
                    tests.append(make_test(options, [spec([batch, n_in])], [[batch, n_out]],
                                           sizes.cases(candidates), init="small_frac",
                                           param_specs=[spec(p.shape) for p in params], **extra))
    return {"operator": "InnerProduct", "tests": tests}
