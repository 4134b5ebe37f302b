"""Convolution geometry and the helpers its three algorithm modules share
(``conv_gemm``, ``conv_winograd``, ``conv_depthwise``); nothing here imports them, so
``core/conv.py`` can import every algorithm statically."""
import numpy as np

from ..kernels import program

__all__ = ["ConvGeometry", "geometry_args", "scalar", "GEOM_NAMES"]

GEOM_NAMES = ("IN_C", "OUT_C", "GROUPS", "IN_H", "IN_W", "OUT_H", "OUT_W",
              "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")


class ConvGeometry:
    """Everything about a convolution except the batch size.

    ``pad`` is ``(top, left, bottom, right)``; ``out_h = (in_h + top + bottom -
    dh*(kh-1) - 1) // sh + 1``.
    """

    def __init__(self, in_c, out_c, in_hw, kernel, stride=(1, 1), pad=(0, 0, 0, 0),
                 dilate=(1, 1), groups=1):
        self.in_c, self.out_c, self.groups = int(in_c), int(out_c), int(groups)
        self.in_h, self.in_w = (int(v) for v in in_hw)
        self.kh, self.kw = (int(v) for v in kernel)
        self.sh, self.sw = (int(v) for v in stride)
        self.pad = tuple(int(v) for v in pad)
        self.dh, self.dw = (int(v) for v in dilate)
        if self.groups < 1 or self.in_c % self.groups or self.out_c % self.groups:
            raise ValueError("groups=%d must divide in_c=%d and out_c=%d"
                             % (self.groups, self.in_c, self.out_c))
        if min(self.sh, self.sw, self.dh, self.dw, self.kh, self.kw) < 1 or min(self.pad) < 0:
            raise ValueError("bad convolution geometry %r" % (self,))
        span_h, span_w = self.dh * (self.kh - 1) + 1, self.dw * (self.kw - 1) + 1
        padded_h = self.in_h + self.pad[0] + self.pad[2]
        padded_w = self.in_w + self.pad[1] + self.pad[3]
        if span_h > padded_h or span_w > padded_w:
            raise ValueError("kernel span %dx%d larger than the padded input %dx%d"
                             % (span_h, span_w, padded_h, padded_w))
        self.out_h = (padded_h - span_h) // self.sh + 1
        self.out_w = (padded_w - span_w) // self.sw + 1

    @property
    def weight_shape(self):
        """(out_c, in_c / groups, kh, kw): PyTorch's weight layout."""
        return (self.out_c, self.in_c // self.groups, self.kh, self.kw)

    def in_shape(self, batch):
        """The input shape (batch, in_c, in_h, in_w)."""
        return (batch, self.in_c, self.in_h, self.in_w)

    def out_shape(self, batch):
        """The output shape (batch, out_c, out_h, out_w)."""
        return (batch, self.out_c, self.out_h, self.out_w)

    def values(self):
        """Every size of the geometry as one tuple (kernel arguments and cache keys)."""
        return (self.in_c, self.out_c, self.groups, self.in_h, self.in_w, self.out_h,
                self.out_w, self.kh, self.kw, self.sh, self.sw, self.pad[0], self.pad[1],
                self.dh, self.dw)

    def flops(self, batch):
        """Multiply-adds counted as 2 FLOPs, one direction (forward = each backward)."""
        return 2 * batch * self.out_c * self.out_h * self.out_w * \
            (self.in_c // self.groups) * self.kh * self.kw

    def flipped(self):
        """The forward convolution that computes this layer's backward-data where the
        stride is 1: over dy, with the kernel turned by 180 degrees and in/out channels
        swapped, padded by span - 1 - pad; None where it does not exist (a stride, groups,
        or a pad past the span)."""
        span_h, span_w = self.dh * (self.kh - 1) + 1, self.dw * (self.kw - 1) + 1
        pad = (span_h - 1 - self.pad[0], span_w - 1 - self.pad[1], span_h - 1 - self.pad[2],
               span_w - 1 - self.pad[3])
        if (self.sh, self.sw) != (1, 1) or self.groups != 1 or min(pad) < 0:
            return None
        return ConvGeometry(self.out_c, self.in_c, (self.out_h, self.out_w), (self.kh, self.kw),
                            pad=pad, dilate=(self.dh, self.dw))

    @property
    def is_plain_1x1(self):
        """True for a 1x1, stride-1, unpadded, ungrouped convolution (a plain GEMM)."""
        return (self.kh == self.kw == 1 and self.sh == self.sw == 1 and self.groups == 1
                and not any(self.pad))

    def __repr__(self):
        return ("ConvGeometry(in_c=%d, out_c=%d, in=%dx%d, kernel=%dx%d, stride=%dx%d, "
                "pad=%s, dilate=%dx%d, groups=%d)"
                % (self.in_c, self.out_c, self.in_h, self.in_w, self.kh, self.kw, self.sh,
                   self.sw, list(self.pad), self.dh, self.dw, self.groups))


def geometry_args(ctx, geom):
    """(template parameter, kernel arguments): geometry baked in where builds are cheap
    and index arithmetic matters (GPUs), passed as arguments elsewhere (PoCL)."""
    if ctx.facts.is_gpu:
        return dict(zip(GEOM_NAMES, geom.values())), []
    return None, [np.int32(v) for v in geom.values()]


def scalar(v):
    """A float32 kernel argument."""
    return program.scalar(v, np.float32)
