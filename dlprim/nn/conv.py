"""Conv2d: PyTorch's ``nn.Conv2d`` as a Convolution2D operator."""
from .module import Module
from .shapes import pair, positive_int, window_output
from .value import Value

__all__ = ["Conv2d"]


class Conv2d(Module):
    """2-D convolution over (N, C, H, W), PyTorch's arguments and weight layout
    ([out_channels, in_channels / groups, kh, kw]); parameters ``weight`` and ``bias``.

    ``padding`` is an int, a pair, "valid" (0) or "same" (stride 1; an odd total pads one
    more at the bottom and right, as PyTorch does). Only zero padding exists."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros"):
        super().__init__()
        in_channels = positive_int(in_channels, "Conv2d in_channels")
        out_channels = positive_int(out_channels, "Conv2d out_channels")
        groups = positive_int(groups, "Conv2d groups")
        if in_channels % groups or out_channels % groups:
            raise ValueError("Conv2d: groups (%d) must divide in_channels (%d) and "
                             "out_channels (%d)" % (groups, in_channels, out_channels))
        if padding_mode != "zeros":
            raise ValueError("Conv2d: padding_mode %r is not supported; dlprim pads with zeros"
                             % (padding_mode,))
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = pair(kernel_size, "Conv2d kernel_size")
        self.stride = pair(stride, "Conv2d stride")
        self.dilation = pair(dilation, "Conv2d dilation")
        self.padding = padding if isinstance(padding, str) else pair(padding, "Conv2d padding", 0)
        if self.padding == "same" and self.stride != (1, 1):
            raise ValueError("Conv2d: padding='same' needs stride 1, got %r" % (stride,))
        if isinstance(self.padding, str) and self.padding not in ("same", "valid"):
            raise ValueError("Conv2d: padding %r is not 'same', 'valid' or sizes" % (padding,))
        self.bias = bool(bias)

    def own_parameters(self) -> list:
        return ["weight", "bias"] if self.bias else ["weight"]

    def _pads(self):
        """(top, left, bottom, right)."""
        if self.padding == "valid":
            return (0, 0, 0, 0)
        if self.padding == "same":
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            return (total[0] // 2, total[1] // 2, total[0] - total[0] // 2, total[1] - total[1] // 2)
        return self.padding + self.padding

    def forward(self, x: Value) -> Value:
        trace = x.trace
        if x.ndim != 4 or x.dtype != "float":
            trace.fail("expects a float (N, C, H, W) input, got %s %s" % (x.dtype, x.shape))
        if x.shape[1] != self.in_channels:
            trace.fail("input has %d channels, in_channels is %d" % (x.shape[1], self.in_channels))
        pads = self._pads()
        size = [window_output(x.shape[2 + i], self.kernel_size[i], self.stride[i], pads[i],
                              pads[2 + i], self.dilation[i]) for i in range(2)]
        if min(size) < 1:
            trace.fail("the %dx%d input is smaller than the kernel's span (kernel %s, "
                       "dilation %s, padding %s)" % (x.shape[2], x.shape[3], self.kernel_size,
                                                     self.dilation, pads))
        pad = list(pads[:2]) if pads[:2] == pads[2:] else list(pads)
        options = {"bias": self.bias, "groups": self.groups, "kernel": list(self.kernel_size),
                   "stride": list(self.stride), "dilate": list(self.dilation), "pad": pad,
                   "channels_out": self.out_channels, "channels_in": self.in_channels}
        return trace.add("Convolution2D", [x], (x.shape[0], self.out_channels) + tuple(size),
                         options=options, params=trace.param_names(self.own_parameters()))

    def extra_repr(self) -> str:
        s = "%d, %d, kernel_size=%s, stride=%s" % (self.in_channels, self.out_channels,
                                                   self.kernel_size, self.stride)
        if self.padding != (0, 0):
            s += ", padding=%r" % (self.padding,)
        if self.dilation != (1, 1):
            s += ", dilation=%s" % (self.dilation,)
        if self.groups != 1:
            s += ", groups=%d" % self.groups
        return s + ("" if self.bias else ", bias=False")
