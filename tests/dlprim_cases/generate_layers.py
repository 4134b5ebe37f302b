"""DLPrimitives' test files for pooling, interpolation, reduction, batchnorm and the
inner product (see generate_ops.py for the conventions)."""
from functools import partial

import numpy as np
import torch

from .case_builder import (candidate, computed, computed_case, flat, make_test, out_shapes,
                           params64, ref_case, reference_case, spec)
from .torch_reference import reference


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
                    make = partial(computed, fn, [s]) if np.prod(s) < 200 else \
                        partial(ref_case, fn, [s], eps=1e-4)
                    candidates.append(candidate(fn, [s], make))
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
            candidates = [([s], partial(computed, fn, [s]) if np.prod(s) < 200
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
                candidates = [([s], partial(computed, fn, [s]) if max(s) < 10 else
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
