"""Pooling over (N, C, H, W): MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, AdaptiveMaxPool2d
and their functional forms (Pooling2D and GlobalPooling operators).

An adaptive pooling becomes the plain pooling that equals it: GlobalPooling for a 1x1
output, else windows of input/output size where the input size is a multiple of the
output size; other sizes are an error (dlprim has no adaptive window operator).
"""
from typing import Optional

from .module import Module
from .shapes import Size2, pair, window_output
from .value import Value

__all__ = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
           "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"]


def _window(kernel_size, stride, padding, what):
    """(kernel, stride, pad) pairs; stride None is the kernel, as in PyTorch."""
    kernel = pair(kernel_size, what + " kernel_size")
    stride = kernel if stride is None else pair(stride, what + " stride")
    pad = pair(padding, what + " padding", 0)
    if any(2 * p > k for p, k in zip(pad, kernel)):
        raise ValueError("%s: padding %s must be at most half of kernel_size %s"
                         % (what, pad, kernel))
    return kernel, stride, pad


def _image(x, what):
    trace = x.trace
    if x.ndim != 4 or x.dtype != "float":
        trace.fail("%s expects a float (N, C, H, W) input, got %s %s" % (what, x.dtype, x.shape))
    return trace


def _pool(x, mode, kernel_size, stride, padding, ceil_mode, count_include_pad, name, what):
    trace = _image(x, what)
    kernel, stride, pad = _window(kernel_size, stride, padding, what)
    size = [window_output(x.shape[2 + i], kernel[i], stride[i], pad[i], ceil_mode=ceil_mode)
            for i in range(2)]
    if min(size) < 1:
        trace.fail("%s: the %dx%d input is smaller than the %dx%d window (padding %s)"
                   % (what, x.shape[2], x.shape[3], kernel[0], kernel[1], pad))
    options = {"kernel": list(kernel), "stride": list(stride), "pad": list(pad),
               "count_include_pad": bool(count_include_pad), "mode": mode}
    if ceil_mode:
        options["ceil_mode"] = True
    return trace.add("Pooling2D", [x], x.shape[:2] + tuple(size), options=options,
                     name=name or trace.call_name(what))


def max_pool2d(x: Value, kernel_size: Size2, stride: Optional[Size2] = None, padding: Size2 = 0,
               ceil_mode: bool = False, name: Optional[str] = None) -> Value:
    """Maximum over kernel_size windows (stride None: the kernel)."""
    return _pool(x, "max", kernel_size, stride, padding, ceil_mode, False, name, "max_pool2d")


def avg_pool2d(x: Value, kernel_size: Size2, stride: Optional[Size2] = None, padding: Size2 = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               name: Optional[str] = None) -> Value:
    """Mean over kernel_size windows; ``count_include_pad`` counts the zero padding."""
    return _pool(x, "avg", kernel_size, stride, padding, ceil_mode, count_include_pad, name,
                 "avg_pool2d")


def _adaptive(x, mode, output_size, name, what):
    trace = _image(x, what)
    sizes = output_size if isinstance(output_size, (list, tuple)) else (output_size, output_size)
    if len(sizes) != 2:
        raise TypeError("%s output_size must be an int or a pair, got %r" % (what, output_size))
    # None keeps the input's size along that axis, as in PyTorch
    target = pair(tuple(x.shape[2 + i] if s is None else s for i, s in enumerate(sizes)),
                  what + " output_size")
    name = name or trace.call_name(what)
    if target == (1, 1):
        return trace.add("GlobalPooling", [x], x.shape[:2] + (1, 1), options={"mode": mode},
                         name=name)
    if x.shape[2] % target[0] or x.shape[3] % target[1]:
        trace.fail("%s to %dx%d of a %dx%d input has no plain pooling equal to it: the input "
                   "size must be a multiple of the output size (or the output 1x1)"
                   % (what, target[0], target[1], x.shape[2], x.shape[3]))
    window = [x.shape[2] // target[0], x.shape[3] // target[1]]
    return trace.add("Pooling2D", [x], x.shape[:2] + target, name=name, options={
        "kernel": window, "stride": list(window), "pad": [0, 0], "count_include_pad": False,
        "mode": mode})


def adaptive_avg_pool2d(x: Value, output_size: Size2, name: Optional[str] = None) -> Value:
    """Mean pooling to ``output_size`` (1: global average pooling)."""
    return _adaptive(x, "avg", output_size, name, "adaptive_avg_pool2d")


def adaptive_max_pool2d(x: Value, output_size: Size2, name: Optional[str] = None) -> Value:
    """Max pooling to ``output_size`` (1: global max pooling)."""
    return _adaptive(x, "max", output_size, name, "adaptive_max_pool2d")


class MaxPool2d(Module):
    """Maximum over windows (PyTorch's ``nn.MaxPool2d``; no dilation, no indices)."""

    def __init__(self, kernel_size: Size2, stride: Optional[Size2] = None, padding: Size2 = 0,
                 dilation: Size2 = 1, return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        if dilation not in (1, (1, 1), [1, 1]) or return_indices:
            raise ValueError("MaxPool2d: dilation and return_indices are not supported")
        self.kernel_size, self.stride, self.padding = _window(kernel_size, stride, padding, "MaxPool2d")
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x: Value) -> Value:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    """Mean over windows (PyTorch's ``nn.AvgPool2d``; no divisor_override)."""

    def __init__(self, kernel_size: Size2, stride: Optional[Size2] = None, padding: Size2 = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: None = None):
        super().__init__()
        if divisor_override is not None:
            raise ValueError("AvgPool2d: divisor_override is not supported")
        self.kernel_size, self.stride, self.padding = _window(kernel_size, stride, padding, "AvgPool2d")
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def forward(self, x: Value) -> Value:
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "kernel_size=%s, stride=%s, padding=%s" % (self.kernel_size, self.stride, self.padding)


class AdaptiveAvgPool2d(Module):
    """Mean pooling to ``output_size``: global for 1, else where a plain pooling equals it."""

    def __init__(self, output_size: Size2):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Value) -> Value:
        return adaptive_avg_pool2d(x, self.output_size, name=x.trace.own_name())

    def extra_repr(self) -> str:
        return "output_size=%r" % (self.output_size,)


class AdaptiveMaxPool2d(AdaptiveAvgPool2d):
    """Max pooling to ``output_size``: global for 1, else where a plain pooling equals it."""

    def forward(self, x: Value) -> Value:
        return adaptive_max_pool2d(x, self.output_size, name=x.trace.own_name())
