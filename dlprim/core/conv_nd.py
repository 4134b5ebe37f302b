"""Convolutions of 1 to 3 spatial dims by column unrolling (``kernels/conv_nd.cl``) and the
GEMM of ``core/gemm.py``: the path of the 3-D convolutions (and of whatever the 2-D
launchers of ``core/conv.py`` do not take).

Shapes are padded to 3 spatial dims with unit dims. For a batch of N samples, vol2col
writes col[c, k, n, l] (C K rows of N L columns; K taps, L output positions), so that

- forward: y[n, g] = W[g] · col[g, :, n]  (one batched GEMM per group),
- backward-data: dcol[g] = W[g]ᵀ · dyᵀ[g], then dx = col2vol(dcol),
- backward-filter: dW[g] = dyᵀ[g] · col[g]ᵀ (one GEMM per group over the whole batch),

where dyᵀ is dy laid out (C_out, N L) and W[g] the (C_out/G, C_in/G K) weights of group g.
Tensors are contiguous dlprim Tensors of one float dtype (float32, float16, bfloat16;
the products accumulate in float32). Integer and float64 convolutions (no GEMM takes
them) run one output element per work-item (``conv_direct``), their filter gradient one
weight element per work-item (``conv_direct_filter``).
"""
import numpy as np

from ..dtypes import as_dtype, cl_type
from ..kernels import program
from ..tensor import Tensor
from ..utils import round_up
from .conv_geometry import ConvGeometry
from .gemm import Gemm
from .pointwise import memo

__all__ = ["ConvND", "ConvProblem", "conv_nd", "conv_direct", "conv_direct_filter",
           "COLUMN_ELEMENTS"]


# the column buffer holds C_in K values per output position and sample: a batch runs in
# chunks that keep it under this many elements (256 MB of float32)
COLUMN_ELEMENTS = 1 << 26


def _three(values, fill):
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values


class ConvND:
    """One convolution geometry: ``in_c``, ``out_c`` channels, ``groups``, spatial sizes
    ``in_size`` / ``out_size`` and per-dim ``kernel``, ``stride``, ``padding``,
    ``dilation`` (1 to 3 dims each), for a batch of ``batch`` samples of ``dtype``."""

    def __init__(self, ctx, batch, in_c, out_c, groups, in_size, out_size, kernel, stride,
                 padding, dilation, dtype):
        self.ctx, self.dtype = ctx, as_dtype(dtype)
        self.batch, self.in_c, self.out_c, self.groups = batch, in_c, out_c, groups
        self.in_size, self.out_size = _three(in_size, 1), _three(out_size, 1)
        self.kernel, self.stride = _three(kernel, 1), _three(stride, 1)
        self.padding, self.dilation = _three(padding, 0), _three(dilation, 1)
        self.taps = int(np.prod(self.kernel))
        self.cols = int(np.prod(self.out_size))                    # L
        self.rows_g = in_c // groups * self.taps                   # C_in/G K
        self.out_g = out_c // groups
        self.program = program.get(ctx, "conv_nd", T=cl_type(self.dtype))
        self._wg = min(256, ctx.facts.max_work_group)
        dts = (self.dtype,) * 3
        n, L = batch, self.cols
        self.gemm_forward = Gemm(ctx, self.out_g, L, self.rows_g, batch=n, dtypes=dts)
        self.gemm_data = Gemm(ctx, self.rows_g, n * L, self.out_g, trans_a=True, dtypes=dts)
        self.gemm_filter = Gemm(ctx, self.out_g, self.rows_g, n * L, trans_b=True, dtypes=dts)

    def _geometry(self):
        i32 = np.int32
        return [i32(v) for v in (self.batch, self.in_c) + self.in_size + self.out_size
                + self.kernel + self.stride + self.padding + self.dilation]

    def _launch(self, name, total, src, dst):
        return program.Launch(self.program, name, (round_up(max(total, 1), self._wg),),
                              (self._wg,), [np.uint64(total)] + self._geometry() + [src, dst])

    def _col(self):
        return Tensor(self.ctx, (max(self.in_c * self.taps * self.batch * self.cols, 1),),
                      self.dtype)

    def forward(self, x, w, y):
        """y = conv(x, w): x (N, C_in, *in_size), w (C_out, C_in/G, *kernel), y (N, C_out,
        *out_size)."""
        col = self._col()
        nl = self.batch * self.cols
        launches = [self._launch("vol2col", self.in_c * self.taps * nl, x, col)]
        for g in range(self.groups):
            a = w.view((self.out_g * self.rows_g,), g * self.out_g * self.rows_g)
            b = col.view((self.rows_g * nl,), g * self.rows_g * nl)
            c = y.view((y.size - g * self.out_g * self.cols,), g * self.out_g * self.cols)
            launches += self.gemm_forward.launches(a, b, c, lda=self.rows_g, ldb=nl,
                                                   ldc=self.cols, stride_a=0, stride_b=self.cols,
                                                   stride_c=self.out_c * self.cols)
        return launches

    def backward_data(self, dy_t, w, dx):
        """dx from dyᵀ (dy laid out (C_out, N L)) and w."""
        col = self._col()
        nl = self.batch * self.cols
        launches = []
        for g in range(self.groups):
            a = w.view((self.out_g * self.rows_g,), g * self.out_g * self.rows_g)
            b = dy_t.view((self.out_g * nl,), g * self.out_g * nl)
            c = col.view((self.rows_g * nl,), g * self.rows_g * nl)
            launches += self.gemm_data.launches(a, b, c, lda=self.rows_g, ldb=nl, ldc=nl)
        total = self.batch * self.in_c * int(np.prod(self.in_size))
        return launches + [self._launch("col2vol", total, col, dx)]

    def backward_filter(self, x, dy_t, dw, beta=0.0):
        """dw = beta dw + the filter gradient from x and dyᵀ (dy laid out (C_out, N L))."""
        col = self._col()
        nl = self.batch * self.cols
        launches = [self._launch("vol2col", self.in_c * self.taps * nl, x, col)]
        for g in range(self.groups):
            a = dy_t.view((self.out_g * nl,), g * self.out_g * nl)
            b = col.view((self.rows_g * nl,), g * self.rows_g * nl)
            c = dw.view((self.out_g * self.rows_g,), g * self.out_g * self.rows_g)
            launches += self.gemm_filter.launches(a, b, c, beta=beta, lda=nl, ldb=nl,
                                                  ldc=self.rows_g)
        return launches


def conv_nd(ctx, batch, in_c, out_c, groups, in_size, out_size, kernel, stride, padding,
            dilation, dtype):
    """The ``ConvND`` of this geometry on ctx (made once)."""
    args = (batch, in_c, out_c, groups, tuple(in_size), tuple(out_size), tuple(kernel),
            tuple(stride), tuple(padding), tuple(dilation), as_dtype(dtype))
    return memo(ctx, ("conv_nd",) + args, lambda: ConvND(ctx, *args))


def _direct_launch(ctx, kernel, total, x, out_shape, kernel_shape, stride, padding,
                   dilation, tail):
    """One work-item per element of a ``kernels/conv_nd.cl`` direct kernel's output."""
    prog = program.get(ctx, "conv_nd", T=cl_type(as_dtype(x.dtype)))
    geometry = [x.shape[0], x.shape[1]] + list(_three(x.shape[2:], 1) + _three(out_shape, 1)
                                              + _three(kernel_shape, 1) + _three(stride, 1)
                                              + _three(padding, 0) + _three(dilation, 1))
    wg = min(256, ctx.facts.max_work_group)
    args = [np.uint64(total)] + [np.int32(v) for v in geometry] + tail
    return [program.Launch(prog, kernel, (round_up(total, wg),), (wg,), args)] if total else []


def conv_direct(ctx, x, w, y, stride, padding, dilation, groups, transposed):
    """The launch of an integer or float64 convolution (``conv_direct`` of
    ``kernels/conv_nd.cl``; float64 sums in double) over contiguous dlprim Tensors: x (N,
    C, *in), y (N, C_out, *out), w (C_out, C/G, *kernel), or (C, C_out/G, *kernel) when
    ``transposed``; 1 to 3 spatial dims."""
    return _direct_launch(ctx, "conv_direct", int(np.prod(y.shape)), x, y.shape[2:],
                          w.shape[2:], stride, padding, dilation,
                          [np.int32(y.shape[1]), np.int32(groups), np.int32(bool(transposed)),
                           x, w, y])


def conv_direct_filter(ctx, x, dy, dw, stride, padding, dilation, groups):
    """The launch of the filter gradient ``dw`` (C_out, C/G, *kernel) of the plain integer
    or float64 convolution x (N, C, *in) -> dy (N, C_out, *out) (``conv_direct_filter``:
    one weight element per work-item, the batch and output positions summed in it)."""
    return _direct_launch(ctx, "conv_direct_filter", int(np.prod(dw.shape)), x, dy.shape[2:],
                          dw.shape[2:], stride, padding, dilation,
                          [np.int32(dy.shape[1]), np.int32(groups), x, dy, dw])


class ConvProblem:
    """A convolution seen from its plain side: ``src`` the input of the plain convolution
    (a transposed one's output), ``dst`` its output, as 2-D or 3-D shapes (1-D lifted to
    2-D with a unit height); the weights are (dst channels, src channels / groups,
    *kernel). It says which launchers serve it: ``geometry`` for the 2-D ones of
    ``core/conv.py``, ``nd`` for column unrolling."""

    def __init__(self, src_shape, dst_shape, w_shape, stride, padding, dilation, groups):
        self.lift = len(w_shape) == 3
        dims = len(w_shape) - 2

        def spatial(v):  # one value for every dim, as PyTorch expands it ([0] for "valid")
            v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
            return v * dims if len(v) == 1 else v
        unit = ((lambda v, one: (one,) + spatial(v)) if self.lift
                else (lambda v, one: spatial(v)))
        self.src = tuple(src_shape[:2]) + unit(src_shape[2:], 1)
        self.dst = tuple(dst_shape[:2]) + unit(dst_shape[2:], 1)
        self.kernel = unit(w_shape[2:], 1)
        self.stride, self.padding = unit(stride, 1), unit(padding, 0)
        self.dilation, self.groups = unit(dilation, 1), groups
        self.spatial = len(self.kernel)

    def consistent(self):
        """Whether the plain convolution of src has dst's spatial size (a transposed
        convolution's output_padding can add rows that no tap reaches)."""
        return all((i + 2 * p - d * (k - 1) - 1) // s + 1 == o for i, o, k, s, p, d in zip(
            self.src[2:], self.dst[2:], self.kernel, self.stride, self.padding, self.dilation))

    def key(self):
        """What fixes the problem's launches (the memo key)."""
        return (self.src, self.dst, self.kernel, self.stride, self.padding, self.dilation,
                self.groups)

    def geometry(self):
        """The ``ConvGeometry`` of a 2-D problem."""
        p = self.padding
        return ConvGeometry(self.src[1], self.dst[1], self.src[2:], self.kernel, self.stride,
                            (p[0], p[1], p[0], p[1]), self.dilation, self.groups)

    def nd(self, ctx, dtype, batch):
        """The ``ConvND`` for ``batch`` samples of ``dtype``."""
        return conv_nd(ctx, batch, self.src[1], self.dst[1], self.groups, self.src[2:],
                       self.dst[2:], self.kernel, self.stride, self.padding, self.dilation,
                       dtype)

    def chunks(self):
        """(first sample, samples) of each column-unrolled pass over the batch."""
        batch = self.src[0]
        per_sample = self.src[1] * int(np.prod(self.kernel)) * int(np.prod(self.dst[2:]))
        step = max(1, min(batch, COLUMN_ELEMENTS // max(per_sample, 1)))
        return [(n0, min(step, batch - n0)) for n0 in range(0, batch, step)]
