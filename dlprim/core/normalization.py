"""Normalisation over groups of a tensor seen as (N, G, K, S): statistics per (n, g) over
its K x S values, an affine per (g, k). One launcher serves three layers:

- LayerNorm over the last dims: (rows, 1, normalized size, 1);
- GroupNorm of (N, C, H, W): (N, groups, C / groups, H * W), the affine per channel;
- RMSNorm (``rms=True``): LayerNorm's view without the mean, y = x / sqrt(mean(x^2) + eps).

    y = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(var + eps)   (var biased)

Every step is the pointwise-broadcast-reduce generator, except where the statistics are
per row of contiguous values (LayerNorm and RMSNorm: G = 1, S = 1): on GPUs the forward
pass and the input gradient there run on ``kernels/normalization.cl``, one work-group per
row in one launch each (``kernels="rows"``; "pointwise" forces the generic path). mean
and rstd are (N, G) outputs that the backward pass reads. With xhat = (x - mean) rstd and g = dy * weight:

    dx = rstd (g - mean(g) - xhat mean(g xhat))     (RMSNorm: without the mean(g) term)
    dweight = sum over n, s of dy xhat,   dbias = sum over n, s of dy
"""
import numpy as np
import pyopencl as cl

from ..kernels import program
from ..kernels.program import Launch
from . import tuning
from .copy import fill_launches
from .pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from ..dtypes import HALF_TYPES, as_dtype, cl_type
from .softmax import row_work_group

__all__ = ["GroupNormOps", "default_kernels"]

F = np.dtype(np.float32)
F64 = np.dtype(np.float64)


def _or(t, stand_in):
    """``t``, or a tensor to fill an unread kernel argument with."""
    return stand_in if t is None else t


def default_kernels(facts, rows, dtype=F):
    """The path a normalisation takes unless told: where the statistics are per row, the
    row kernels on GPUs ("rows"), and on CPUs other than PoCL for float32 a work-item a
    row ("cpu_rows": 2.5-4x the generator's passes on Intel's runtime); else "pointwise"
    (PoCL runs the generator's vectorised loops faster than a work-group's tree
    reductions per row)."""
    if rows and facts.is_gpu:
        return "rows"
    if rows and facts.is_cpu and facts.vendor_id != "pocl" and np.dtype(dtype) == F:
        return "cpu_rows"
    return "pointwise"


class GroupNormOps:
    """The launchers of one normalisation over ``shape`` = (N, G, K, S); ``dtype``: the
    storage of x, y and their gradients (float32, float16 or bfloat16; statistics and parameters
    float32; or float64, everything float64 and computed in double). ``affine``: times a
    weight per (g, k); ``bias``: plus a bias per (g, k), by default where there is a weight,
    and with or without one when given."""

    def __init__(self, ctx, shape, eps, affine=True, bias=None, rms=False, kernels=None,
                 dtype=F):
        self.ctx = ctx
        self.shape = tuple(int(v) for v in shape)
        if len(self.shape) != 4:
            raise ValueError("GroupNormOps: shape must be (N, G, K, S), got %s" % (self.shape,))
        n, g, k, s = self.shape
        self.count = k * s
        self.eps, self.affine, self.rms = float(eps), bool(affine), bool(rms)
        # a bias with the weight unless told (PyTorch's functional norms take either alone)
        self.bias = self.affine if bias is None else bool(bias)
        rows = g == 1 and s == 1
        # float64: statistics, parameters and arithmetic in double (the row kernels and the
        # float expressions below would round to float)
        wide = np.dtype(dtype) == F64
        acc, stat_dtype = ("double", F64) if wide else ("float", F)
        if kernels is None and wide:
            kernels = "pointwise"
        if kernels is None:
            kernels = default_kernels(ctx.facts, rows, dtype)
        if kernels not in ("rows", "cpu_rows", "pointwise"):
            raise ValueError("GroupNormOps: kernels must be None, 'rows', 'cpu_rows' or "
                             "'pointwise', got %r" % (kernels,))
        if kernels == "cpu_rows" and (not rows or np.dtype(dtype) != F):
            raise ValueError("GroupNormOps: the CPU row kernels take float32 rows of "
                             "contiguous values (shape (N, 1, K, 1)), got %s %s"
                             % (np.dtype(dtype).name, self.shape))
        if kernels == "rows" and wide:
            raise ValueError("GroupNormOps: the row kernels take float32, float16 or bfloat16, "
                             "got float64 (kernels='pointwise' serves it)")
        if kernels == "rows" and not rows:
            raise ValueError("GroupNormOps: the row kernels need one group of contiguous "
                             "values per row (shape (N, 1, K, 1)), got %s" % (self.shape,))
        self.kernels = kernels
        if kernels == "rows":
            self.wg = row_work_group(ctx, k)
            extra = dict(ACT_T=cl_type(dtype)) if as_dtype(dtype) in HALF_TYPES else {}
            self.rows_prg = program.get(ctx, "normalization", RMS=int(self.rms),
                                        AFFINE=int(self.affine), BIAS=int(self.bias), **extra)
        full = (self.shape, np.dtype(dtype))
        stat, chan = ((n, g, 1, 1), stat_dtype), ((1, g, k, 1), stat_dtype)
        self._full, self._stat, self._chan = full, stat, chan
        # the parameters' gradients, column sums over the rows (every path), built when
        # a backward pass first asks for them (``_param_sums``); backward inputs: x0 x,
        # x1 dy, x2 mean, x3 rstd [, x4 weight]
        xhat = "%s * x3" % ("x0" if self.rms else "(x0 - x2)")
        self._xhat, self._param_ops = xhat, {}
        if kernels == "cpu_rows":
            self.rows_prg = program.get(ctx, "normalization_cpu_rows",
                                        VW=tuning.cpu_vector_width(ctx.facts),
                                        RMS=int(self.rms), AFFINE=int(self.affine),
                                        BIAS=int(self.bias))
            return  # (the generator's other ops are not needed)
        centred = "x0" if self.rms else "(x0 - x1)"
        self._mean = PointwiseBroadcastReduce(ctx, [full], [stat], "y0 = x0;", name="norm_mean")
        # (biased) variance, or for RMSNorm the mean square; x1 is the mean (unread by RMS)
        self._var = PointwiseBroadcastReduce(
            ctx, [full, stat], [stat], "%s d = %s; y0 = d * d;" % (acc, centred),
            name="norm_var")
        self._rstd = PointwiseBroadcast(ctx, [stat], [stat], "y0 = rsqrt(x0 + w0);", [acc],
                                        name="norm_rstd")
        ins, code = [full, stat, stat], "y0 = %s * x2" % centred
        if self.affine:
            ins.append(chan)
            code += " * x3"
        if self.bias:
            ins.append(chan)
            code += " + x%d" % (len(ins) - 1)
        self._apply = PointwiseBroadcast(ctx, ins, [full], code + ";", name="norm_apply")
        g_code = "x1 * x4" if self.affine else "x1"
        g_ins = [full, full, stat, stat] + [chan] * self.affine
        self._sums = PointwiseBroadcastReduce(
            ctx, g_ins, [stat, stat],
            "%s g = %s, xhat = %s; y0 = g; y1 = g * xhat;" % (acc, g_code, xhat),
            "reduce_y0 = 0; reduce_y1 = 0;", "reduce_y0 += y0; reduce_y1 += y1;",
            name="norm_grad_sums")
        s1, s2 = "x%d" % len(g_ins), "x%d" % (len(g_ins) + 1)
        dx = "x3 * (g - %s - xhat * %s)" % (s1, s2) if not self.rms else \
            "x3 * (g - xhat * %s)" % s2
        self._dx = PointwiseBroadcast(
            ctx, g_ins + [stat, stat], [full],
            "%s g = %s, xhat = %s; y0 = %s;" % (acc, g_code, xhat, dx),
            name="norm_backward_data")

    def _param_sums(self, weight, bias):
        """The column sums of dy * xhat (``weight``) and of dy (``bias``) in one reduction
        over the rows, built once for each pair asked for."""
        op = self._param_ops.get((weight, bias))
        if op is None:
            full, stat, chan = self._full, self._stat, self._chan
            terms = (["x1 * %s" % self._xhat] + ["x1"] * bias) if weight else ["x0"]
            ys = range(len(terms))
            op = self._param_ops[weight, bias] = PointwiseBroadcastReduce(
                self.ctx, [full, full, stat, stat] if weight else [full], [chan] * len(terms),
                " ".join("y%d = %s;" % (i, t) for i, t in zip(ys, terms)),
                " ".join("reduce_y%d = 0;" % i for i in ys),
                " ".join("reduce_y%d += y%d;" % (i, i) for i in ys),
                name="norm_dparams" if weight and bias else
                "norm_dweight" if weight else "norm_dbias")
        return op

    def _rows(self, kernel, args):
        """One work-group per row of ``kernels/normalization.cl``."""
        rows, k = self.shape[0], self.shape[2]
        if rows == 0 or k == 0:
            return []
        return [Launch(self.rows_prg, kernel, (rows * self.wg,), (self.wg,),
                       [np.uint64(k)] + args + [cl.LocalMemory(4 * self.wg)])]

    def _cpu_rows(self, kernel, args):
        n, k = self.shape[0], self.shape[2]
        return [Launch(self.rows_prg, kernel, (n,), None, [np.uint32(k)] + args)] \
            if n and k else []

    def _stats(self, t):
        return t.view(self._stat[0])

    def _chans(self, t):
        return t.view(self._chan[0])

    def forward_launches(self, x, y, mean, rstd, weight=None, bias=None, eps=None):
        """y = the normalised x; mean and rstd ((N, G) each, any shape of that size) are
        written for the backward pass (RMSNorm leaves mean at 0). ``eps``: another than the
        one built with (the backward pass reads only rstd, so one op serves any eps)."""
        x, y = x.view(self.shape), y.view(self.shape)
        m, r = self._stats(mean), self._stats(rstd)
        if self.kernels == "cpu_rows":
            return self._cpu_rows("norm_rows_forward", [
                x, y, m, r, _or(weight, x), _or(bias, x),
                np.float32(self.eps if eps is None else eps)])
        if self.kernels == "rows":
            return self._rows("normalization_rows_forward", [x, y, m, r, _or(weight, x), _or(bias, x),
                                                    np.float32(self.eps if eps is None else eps)])
        inv = 1.0 / max(self.count, 1)
        out = []
        if self.rms:
            out += fill_launches(self.ctx, m, 0.0)
        else:
            out += self._mean.launches([x], [m], alpha=inv)
        # the variance goes through rstd's memory, then becomes rstd in place
        out += self._var.launches([x, m], [r], alpha=inv)
        out += self._rstd.launches([r], [r], [self.eps if eps is None else float(eps)])
        ins = [x, m, r] + ([self._chans(weight)] if self.affine else []) + \
            ([self._chans(bias)] if self.bias else [])
        return out + self._apply.launches(ins, [y])

    def backward_launches(self, x, dy, mean, rstd, dx=None, weight=None, dweight=None,
                          dbias=None, sums=None, beta=0.0, param_beta=1.0):
        """dx = beta * dx + the input gradient (beta=0 never reads dx); dweight and dbias
        = param_beta * themselves + theirs (a Net's accumulate, 1). ``sums``: two scratch
        tensors of (N, G) elements."""
        x, dy = x.view(self.shape), dy.view(self.shape)
        m, r = self._stats(mean), self._stats(rstd)
        out = []
        if dweight is not None or dbias is not None:
            wanted = [t for t in (dweight, dbias) if t is not None]
            out += self._param_sums(dweight is not None, dbias is not None).launches(
                [x, dy, m, r] if dweight is not None else [dy],
                [self._chans(t) for t in wanted], beta=param_beta)
        if dx is not None and self.kernels == "cpu_rows":
            return out + self._cpu_rows("norm_rows_backward_data", [
                x, dy, m, r, _or(weight, x), dx.view(self.shape), np.float32(beta)])
        if dx is not None and self.kernels == "rows":
            out += self._rows("normalization_rows_backward_data",
                              [x, dy, m, r, _or(weight, x), dx.view(self.shape), np.float32(beta)])
        elif dx is not None:
            if sums is None or len(sums) != 2:
                raise ValueError("GroupNormOps: the input gradient needs two scratch tensors")
            s1, s2 = (self._stats(t) for t in sums)
            ins = [x, dy, m, r] + ([self._chans(weight)] if self.affine else [])
            out += self._sums.launches(ins, [s1, s2], alpha=1.0 / max(self.count, 1))
            out += self._dx.launches(ins + [s1, s2], [dx.view(self.shape)], beta=beta)
        return out
