"""Each DLPrimitives operator, from its JSON options, as a PyTorch CPU function.

``reference(operator, options)`` gives ``f(inputs, params, train) -> outputs``: lists of
torch tensors, computed in the inputs' dtype (the cases use float64). Parameters come in
DLPrimitives' order and layout (BatchNorm: running mean, running variance, weight, bias;
in training its running statistics are updated in place, as PyTorch's module does). A
reduced output of no dimensions is returned with shape (1,), as DLPrimitives stores it.
"""
import torch
import torch.nn.functional as F

__all__ = ["reference", "OPERATORS"]

ACTIVATIONS = {
    "identity": lambda x: x,
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu6": lambda x: F.hardtanh(x, 0.0, 6.0),
}


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _act(options):
    return ACTIVATIONS[options.get("activation", "identity")]


def _softmax(o, x, p, train):
    return [(F.log_softmax if o.get("log", False) else F.softmax)(x[0], dim=1)]


def _softmax_loss(o, x, p, train):
    return [F.cross_entropy(x[0], x[1].long())]


def _nll_loss(o, x, p, train):
    return [F.nll_loss(x[0], x[1].long(), reduction=o.get("reduce", "mean"))]


def _mse_loss(o, x, p, train):
    return [F.mse_loss(x[0], x[1], reduction=o.get("reduce", "mean"))]


_ELTWISE = {"sum": torch.add, "prod": torch.mul, "max": torch.maximum}


def _elementwise(o, x, p, train):
    a, b = o.get("coef1", 1.0) * x[0], o.get("coef2", 1.0) * x[1]
    return [_act(o)(_ELTWISE[o.get("operation", "sum")](a, b))]


def _pooling2d(o, x, p, train):
    kernel, stride, pad = _pair(o["kernel"]), _pair(o.get("stride", 1)), _pair(o.get("pad", 0))
    ceil = o.get("ceil_mode", False)
    if o.get("mode", "max") == "max":
        return [F.max_pool2d(x[0], kernel, stride, pad, ceil_mode=ceil)]
    return [F.avg_pool2d(x[0], kernel, stride, pad, ceil_mode=ceil,
                         count_include_pad=o.get("count_include_pad", False))]


def _global_pooling(o, x, p, train):
    pool = F.adaptive_max_pool2d if o.get("mode", "max") == "max" else F.adaptive_avg_pool2d
    return [pool(x[0], (1, 1))]


def _inner_product(o, x, p, train):
    bias = p[1] if o.get("bias", True) else None
    return [_act(o)(F.linear(x[0], p[0], bias))]


def _conv_args(o):
    return dict(stride=_pair(o.get("stride", 1)), padding=_pair(o.get("pad", 0)),
                dilation=_pair(o.get("dilate", 1)), groups=o.get("groups", 1))


def _conv2d(o, x, p, train):
    bias = p[1] if o.get("bias", True) else None
    return [_act(o)(F.conv2d(x[0], p[0], bias, **_conv_args(o)))]


def _tr_conv2d(o, x, p, train):
    bias = p[1] if o.get("bias", True) else None
    y = F.conv_transpose2d(x[0], p[0], bias, output_padding=_pair(o.get("output_pad", 0)),
                           **_conv_args(o))
    return [_act(o)(y)]


def _activation(o, x, p, train):
    return [_act(o)(x[0])]


def _batchnorm(o, x, p, train):
    weight, bias = (p[2], p[3]) if o.get("affine", True) else (None, None)
    return [F.batch_norm(x[0], p[0], p[1], weight, bias, training=train,
                         momentum=o.get("momentum", 0.1), eps=o.get("eps", 1e-5))]


def _concat(o, x, p, train):
    return [torch.cat(x, dim=o.get("dim", 1))]


def _slice(o, x, p, train):
    dim = o.get("dim", 1)
    begin, end = o.get("begin", 0), o.get("end", x[0].shape[dim])
    return [x[0].narrow(dim, begin, end - begin)]


def _threshold(o, x, p, train):
    # a step: 1 above the threshold, else 0, and a zero gradient everywhere
    return [(x[0] > o.get("threshold", 0.0)).to(x[0].dtype) + 0 * x[0]]


def _hardtanh(o, x, p, train):
    return [F.hardtanh(x[0], o.get("min_val", -1.0), o.get("max_val", 1.0))]


def _abs(o, x, p, train):
    return [torch.abs(x[0])]


_REDUCE = {"sum": lambda x, d, k: torch.sum(x, d, keepdim=k),
           "sumsq": lambda x, d, k: torch.sum(x * x, d, keepdim=k),
           "abssum": lambda x, d, k: torch.sum(torch.abs(x), d, keepdim=k),
           "mean": lambda x, d, k: torch.mean(x, d, keepdim=k)}


def _reduction(o, x, p, train):
    nd = x[0].dim()
    if o.get("dims") is not None:
        dims = [d % nd for d in o["dims"]]
    else:
        start = o.get("start_axis") or 0
        dims = list(range(start % nd, nd))
    y = o.get("output_scale", 1.0) * _REDUCE[o.get("method", "sum")](x[0], dims,
                                                                      o.get("keep_dim", True))
    return [y.reshape(1) if y.dim() == 0 else y]


def _parameter(o, x, p, train):
    return [p[0] + 0]


def _interpolation(o, x, p, train):
    size = None if o.get("out_h", -1) == -1 else (o["out_h"], o["out_w"])
    scale = None if o.get("scale_y", -1) == -1 else (o["scale_y"], o["scale_x"])
    method = o["method"]
    align = o.get("align_corners", False) if method == "bilinear" else None
    return [F.interpolate(x[0], size=size, scale_factor=scale, mode=method, align_corners=align)]


OPERATORS = {
    "Softmax": _softmax, "SoftmaxWithLoss": _softmax_loss, "NLLLoss": _nll_loss,
    "MSELoss": _mse_loss, "Elementwise": _elementwise, "Pooling2D": _pooling2d,
    "GlobalPooling": _global_pooling, "InnerProduct": _inner_product,
    "Convolution2D": _conv2d, "TransposedConvolution2D": _tr_conv2d,
    "Activation": _activation, "BatchNorm": _batchnorm, "Concat": _concat, "Slice": _slice,
    "Threshold": _threshold, "Hardtanh": _hardtanh, "Abs": _abs, "Reduction": _reduction,
    "Parameter": _parameter, "Interpolation": _interpolation,
}


def reference(operator, options):
    """``f(inputs, params, train) -> [outputs]`` for DLPrimitives' ``operator``; 0-d results
    come back with shape (1,)."""
    fn = OPERATORS[operator]

    def run(inputs, params, train):
        return [y.reshape(1) if y.dim() == 0 else y for y in fn(options, inputs, params, train)]
    return run
