"""DLPrimitives' convolution test files: Convolution2D and TransposedConvolution2D, each
with the algorithm left to the layer (``auto``) or forced for all three passes through the
``fwd_algo`` / ``bwd_data_algo`` / ``bwd_filter_algo`` options (gemm, winograd,
depthwise_separable), where a layer that the forced algorithm cannot serve falls back.

Parameters of fewer than 1000 weights are stored with the test, and so are the data of
cases under 5000 input elements; larger ones are filled by the test's ``init`` rule and
checked against a reference computed at run time, as in DLPrimitives.
"""
from functools import partial

import numpy as np
import torch

from .case_builder import (computed_case, flat, make_test, out_shapes, params64,
                           reference_case, spec)
from .torch_reference import reference

# kernel, pad, stride, dilate, channels in, channels out, bias, groups, relu, largest batch
CONV = [
    (5, 2, 1, 1, 98, 128, True, 1, True, 1),
    (3, 1, 1, 1, 1, 1, False, 1, False, 64),
    (3, 1, 1, 1, 2, 1, False, 1, False, 64),
    (3, 1, 1, 1, 1, 2, False, 1, False, 64),
    (3, 1, 1, 1, 3, 8, False, 1, False, 64),
    (3, 1, 1, 1, 128, 64, False, 1, False, 64),
    (3, 1, 1, 1, 3, 8, True, 1, True, 64),
    (3, 1, 1, 1, 3, 8, True, 1, True, 64),
    (1, 0, 1, 1, 3, 5, False, 1, False, 64),
    (1, 0, 1, 1, 48, 1152, False, 1, False, 64),
    (1, 0, 1, 1, 48, 1152, False, 2, False, 64),
    ([1, 2], 0, 1, 1, 48, 1152, False, 1, False, 64),
    ([1, 2], 0, 1, 1, 48, 1152, False, 2, False, 64),
    (1, 0, 2, 1, 3, 5, False, 1, False, 64),
    (3, 1, 1, 1, 4, 8, True, 2, False, 64),
    (3, 1, 2, 1, 6, 8, True, 2, False, 64),
    (3, 1, 1, 1, 8, 8, True, 8, False, 64),
    ([1, 7], [0, 3], [1, 1], [1, 1], 192, 160, True, 1, False, 64),
    ([7, 1], [3, 0], [1, 1], [1, 1], 128, 192, True, 1, False, 64),
    ([3, 5], [1, 2], [2, 3], [3, 2], 3, 8, False, 1, False, 64),
    (5, 2, 1, 1, 16, 32, True, 1, False, 64),
    (11, 2, 4, 1, 16, 32, True, 1, False, 64),
]
CONV_SHAPES = [(1, 2, 2), (1, 7, 7), (1, 8, 8), (1, 4, 4), (3, 4, 4), (2, 7, 7), (2, 10, 5),
               (2, 10, 10), (2, 19, 19), (2, 20, 20), (2, 32, 32), (64, 64, 64),
               (53, 100, 100)]

# kernel, pad, stride, dilate, channels out, channels in, bias, groups, relu, output pad
TR_CONV = [
    (1, 0, 2, 1, 1, 1, False, 1, False, 0),
    (1, 0, 2, 1, 1, 1, False, 1, False, 1),
    (3, 1, 1, 1, 1, 1, False, 1, False, 0),
    (3, 1, 1, 1, 2, 1, False, 1, False, 0),
    (3, 1, 1, 1, 1, 2, False, 1, False, 0),
    (3, 1, 1, 1, 3, 8, False, 1, False, 0),
    (3, 1, 1, 1, 3, 8, False, 1, False, 0),
    (3, 1, 1, 1, 128, 64, False, 1, False, 0),
    (3, 1, 1, 1, 3, 8, True, 1, True, 0),
    (3, 1, 1, 1, 3, 8, True, 1, True, 0),
    (1, 0, 1, 1, 3, 5, False, 1, False, 0),
    (1, 0, 2, 1, 3, 5, False, 1, False, 0),
    (3, 1, 1, 1, 4, 8, True, 2, False, 0),
    (3, 1, 2, 1, 6, 8, True, 2, False, 0),
    (3, 1, 2, 1, 6, 8, True, 2, False, 1),
    (3, 1, 1, 1, 8, 8, True, 8, False, 0),
    ([3, 5], [1, 2], [2, 3], [3, 2], 3, 8, False, 1, False, 0),
    ([3, 5], [1, 2], [2, 3], [3, 2], 3, 8, False, 1, False, [0, 1]),
    (5, 2, 1, 1, 16, 32, True, 1, False, 0),
    (11, 2, 4, 1, 16, 32, True, 1, False, 0),
    (11, 2, 4, 1, 16, 32, True, 1, False, 1),
]
TR_CONV_OUT_SHAPES = [(1, 2, 2), (1, 7, 7), (1, 4, 4), (3, 4, 4), (2, 7, 7), (2, 10, 5),
                      (2, 10, 10), (2, 19, 19), (2, 20, 20)]

ALGO_OPTIONS = ("fwd_algo", "bwd_data_algo", "bwd_filter_algo")


def _at(value, i):
    return value[i] if isinstance(value, (list, tuple)) else value


def _stored(weight_shape):
    """Whether a test stores its parameters (DLPrimitives: under 1000 weights)."""
    return np.prod(weight_shape) < 1000


def _conv_test(operator, options, algo, relu, module, setup, shapes, sizes):
    """One test over the input ``shapes`` that ``sizes`` keeps."""
    if algo is not None:
        options.update({key: algo for key in ALGO_OPTIONS})
    if relu:
        options["activation"] = "relu"
    params = list(module.parameters())
    stored = _stored(params[0].shape)
    fn = reference(operator, options)
    extra = {"param_tensors": [flat(p) for p in params]} if stored else {"random_params": True}
    state = params64(params) if stored else params
    p_shapes = [p.shape for p in params]
    candidates = []
    for shape in shapes:
        outs = out_shapes(fn, [shape], p_shapes)
        if np.prod(shape) < 5000 and stored:
            make = partial(computed_case, fn, [torch.randn(shape)], state)
        else:
            make = partial(reference_case, [shape], outs)
        candidates.append(([shape] + outs, make))
    return make_test(options, [spec(setup)], out_shapes(fn, [setup], p_shapes),
                     sizes.cases(candidates), init="small_frac",
                     param_specs=[spec(s) for s in p_shapes], **extra)


def make_conv2d(sizes, algo=None):
    tests = []
    for kernel, pad, stride, dilate, cin, cout, bias, groups, relu, batch_limit in CONV:
        weights = (cout, cin // groups, _at(kernel, 0), _at(kernel, 1))
        # weights the file does not store need no values here
        conv = torch.nn.Conv2d(cin, cout, kernel, stride=stride, padding=pad, dilation=dilate,
                               groups=groups, bias=bias,
                               device=None if _stored(weights) else "meta")
        options = {"kernel": kernel, "pad": pad, "stride": stride, "dilate": dilate,
                   "bias": bias, "channels_in": cin, "channels_out": cout, "groups": groups}
        max_dim = 256 if cin * cout < 50000 else 10
        shapes = []
        for n, h, w in CONV_SHAPES:
            # DLPrimitives' bound: the kernel's span against the input plus one side's pad
            if n > batch_limit or h > max_dim or w > max_dim or \
                    h + _at(pad, 0) < _at(kernel, 0) * _at(dilate, 0) or \
                    w + _at(pad, 1) < _at(kernel, 1) * _at(dilate, 1):
                continue
            shapes.append([n, cin, h, w])
        tests.append(_conv_test("Convolution2D", options, algo, relu, conv,
                                [batch_limit, cin, max_dim, max_dim], shapes, sizes))
    return {"operator": "Convolution2D", "tests": tests}


def _tr_input_hw(out_hw, kernel, pad, stride, dilate, output_pad):
    """The input size DLPrimitives pairs with ``out_hw``: the transposed convolution's
    output size for it, or None where the convolution of that does not give ``out_hw``
    back (the output pad cannot reach it)."""
    hw = []
    for d in range(2):
        i = (out_hw[d] - 1) * _at(stride, d) - 2 * _at(pad, d) + \
            _at(dilate, d) * (_at(kernel, d) - 1) + _at(output_pad, d) + 1
        back = (i + 2 * _at(pad, d) - _at(dilate, d) * (_at(kernel, d) - 1) - 1) // \
            _at(stride, d) + 1
        if back != out_hw[d]:
            return None
        hw.append(i)
    return hw


def make_tr_conv2d(sizes, algo=None):
    tests = []
    for kernel, pad, stride, dilate, cout, cin, bias, groups, relu, output_pad in TR_CONV:
        weights = (cin, cout // groups, _at(kernel, 0), _at(kernel, 1))
        conv = torch.nn.ConvTranspose2d(cin, cout, kernel, stride=stride, padding=pad,
                                        output_padding=output_pad, dilation=dilate,
                                        groups=groups, bias=bias,
                                        device=None if _stored(weights) else "meta")
        options = {"kernel": kernel, "pad": pad, "output_pad": output_pad, "stride": stride,
                   "dilate": dilate, "bias": bias, "channels_in": cin, "channels_out": cout,
                   "groups": groups}
        shapes = []
        for n, oh, ow in TR_CONV_OUT_SHAPES:
            hw = _tr_input_hw((oh, ow), kernel, pad, stride, dilate, output_pad)
            if hw is None or hw[0] + _at(pad, 0) < _at(kernel, 0) * _at(dilate, 0) or \
                    hw[1] + _at(pad, 1) < _at(kernel, 1) * _at(dilate, 1):
                continue
            shapes.append([n, cin] + hw)
        tests.append(_conv_test("TransposedConvolution2D", options, algo, relu, conv,
                                [64, cin, 256, 256], shapes, sizes))
    return {"operator": "TransposedConvolution2D", "tests": tests}
