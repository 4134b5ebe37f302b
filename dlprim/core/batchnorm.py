"""Batch normalisation launchers (Ioffe & Szegedy 2015) over x seen as (N, C, S).

On CPUs every step is the pointwise-broadcast-reduce generator:
- ``stats``: per-channel count, mean and sum of squared deviations in one reduction pass
  (partial results merged with Chan's formula, M = N*S values per channel; for float32
  outside PoCL, ``kernels/batchnorm_rows.cl`` instead: each (image, channel) row in two
  passes while it is in cache, then the rows merged), then a C-sized pass: biased
  variance for normalising, and the running statistics updated as PyTorch does,
  ``running = (1 - momentum) running + momentum * batch`` with the *unbiased* variance.
- ``apply``: ``y = (x - mean) / sqrt(var + eps) * gamma + beta``, with
  ``1 / sqrt(var + eps)`` found per channel first (for dx too), so that no pass over x
  computes a square root per element (float32 outside PoCL: by rows,
  ``kernels/batchnorm_rows_apply.cl``, the same bits).
- ``backward``: per-channel sums of dy and dy*xhat, then dgamma/dbeta and dx (float32
  outside PoCL: by rows, ``kernels/batchnorm_rows_backward.cl``).

On GPUs (``kernels="channels"``) each step runs ``kernels/batchnorm.cl`` instead: the
reductions per (channel, part of the batch) then a per-channel finish that also updates
the running statistics, the pointwise passes a vector of a row at a time. Elsewhere
(``"pointwise"``) PoCL keeps the generator's vectorised CPU loops.

The channel kernels can also run the activation that alone reads the output
(``BN_ACTIVATIONS``, ``activation=``): ``apply`` writes act(y), and ``backward`` takes the
activation's dy, its gradient found from y recomputed from x, so neither pass has a launch
of the activation's own (``net/fusion.py``, ``train_folds``). The generator runs it too,
except in float64: ``apply`` writes act(y), and ``backward`` takes dy through the
activation's gradient from the activation's output (the row kernels inline, the
generator in place first).

Shapes are fixed when built (a new batch size builds new launchers, same programs).
"""
import numpy as np

from ..dtypes import HALF_TYPES, cl_type
from ..kernels import program
from ..kernels.program import Launch
from ..tensor import Tensor
from ..utils import ceil_div
from . import tuning
from .activation import ACTIVATIONS, FUSABLE, backward_code, forward_code
from .pointwise import PointwiseBroadcast, PointwiseBroadcastReduce, divisor_args, index_type

__all__ = ["BatchNormOps", "default_kernels", "BN_ACTIVATIONS"]

F = np.dtype(np.float32)
F64 = np.dtype(np.float64)
WG = 256  # the channel kernels' reduction work-group
# activations the channel kernels can run after BatchNorm: their gradient follows from
# their output, and they take no options
BN_ACTIVATIONS = tuple(k for k in FUSABLE if ACTIVATIONS[k].from_y and not ACTIVATIONS[k].params
                       and k != "identity")


def default_kernels(facts):
    """The path a BatchNorm takes unless told: ``kernels/batchnorm.cl`` on GPUs
    ("channels"), else the pointwise generator ("pointwise"), whose CPU loops PoCL
    vectorises."""
    return "channels" if facts.is_gpu else "pointwise"


class BatchNormOps:
    """The launchers of one BatchNorm over ``shape`` = (N, C, S); ``dtype``: the storage
    of x, y and their gradients (float32, float16 or bfloat16; statistics and parameters
    float32; or float64: everything float64, computed in double on the generator).
    ``kernels``: "channels" or "pointwise" (None: ``default_kernels``, and the generator
    wherever the tensor has 2^31 values or more, or the dtype is float64)."""

    def __init__(self, ctx, shape, eps, affine, dtype=F, kernels=None):
        self.ctx = ctx
        self.shape = tuple(int(v) for v in shape)
        n, c, s = self.shape
        self.M = n * s
        self.eps, self.affine = float(eps), bool(affine)
        small = index_type(n * c * s) is np.uint32  # the channel kernels' index math is 32-bit
        # float64: the statistics, parameters and arithmetic in double (the channel kernels
        # compute in float)
        wide = np.dtype(dtype) == F64
        acc, self.stat_dtype = ("double", F64) if wide else ("float", F)
        if kernels is None:
            kernels = default_kernels(ctx.facts) if small and not wide else "pointwise"
        if kernels not in ("channels", "pointwise"):
            raise ValueError("BatchNormOps: kernels must be None, 'channels' or 'pointwise', "
                             "got %r" % (kernels,))
        if kernels == "channels" and wide:
            raise ValueError("BatchNormOps: the channel kernels take float32, float16 or "
                             "bfloat16, got float64 (kernels='pointwise' serves it)")
        if kernels == "channels" and not small:
            raise ValueError("BatchNormOps: the channel kernels index below 2^31 values, the "
                             "shape %s has %d" % (self.shape, n * c * s))
        # nothing to normalise: the generator's launchers know how to do nothing
        self.kernels = kernels if n * c * s else "pointwise"
        self._act_t = cl_type(dtype) if np.dtype(dtype) in HALF_TYPES else "float"
        # the reductions' parts: enough work-groups (channels x parts) for 4 per compute
        # unit, whole rows of the batch each
        parts = min(max(n, 1), max(1, ceil_div(4 * ctx.facts.compute_units, max(c, 1))))
        self._part_rows = ceil_div(max(n, 1), parts)
        self._parts = ceil_div(max(n, 1), self._part_rows)
        self._parts_buffer = None
        self._istd_buffer = None
        full = (self.shape, np.dtype(dtype))
        ch, vec = ((1, c, 1), self.stat_dtype), ((c,), self.stat_dtype)
        self._full, self._ch, self._acc = full, ch, acc
        # the generator's launchers (built only where they run: the channel kernels
        # replace them all)
        if self.kernels == "pointwise":
            # count, mean, M2 (sum of squared deviations) merged pairwise (Chan et al. 1979):
            # n = na + nb, d = mean_b - mean_a, mean = mean_a + d nb/n, M2 = M2a + M2b + d^2 na nb/n.
            # One pass over x, and no cancellation when |mean| >> std (unlike E[x^2] - mean^2).
            self._moments = PointwiseBroadcastReduce(
                ctx, [full], [ch, ch, ch], "y0 = 1.0f; y1 = x0; y2 = 0.0f;",
                "reduce_y0 = 0; reduce_y1 = 0; reduce_y2 = 0;",
                "if (y0 > 0) { %s n = reduce_y0 + y0; %s d = y1 - reduce_y1; "
                "reduce_y1 += d * (y0 / n); reduce_y2 += y2 + d * d * (reduce_y0 * (y0 / n)); "
                "reduce_y0 = n; }" % (acc, acc), name="bn_moments")
            # mean, M2, running mean, running var -> mean, biased var, running mean, running var
            self._update = PointwiseBroadcast(
                ctx, [vec] * 4, [vec] * 4,
                "%s m = x0; %s v = x1 * w2; y0 = m; y1 = v; "
                "y2 = (1.0f - w0) * x2 + w0 * m; y3 = (1.0f - w0) * x3 + w1 * v;" % (acc, acc),
                [acc] * 3, name="bn_update_stats")
            # istd = 1 / sqrt(var + eps) per channel, found once for the passes over x
            # below (Intel's CPU runtime calls rsqrt per element inside their loops: apply
            # took 5.8 ms at 4 x 96 x 112 x 112 on a 2-core EPYC); they keep the order of
            # their operations, so each value rounds as it did with rsqrt inside. Backward
            # finds it again rather than trusting forward's: one BatchNormOps may serve
            # several layers of a shape (the ocl device memoizes them by shape).
            self._istd = PointwiseBroadcast(ctx, [vec], [vec], "y0 = rsqrt(x0 + w0);", [acc],
                                            name="bn_istd")
            # sum dy, sum dy * xhat over each channel
            self._grad_sums = PointwiseBroadcastReduce(
                ctx, [full, full, ch, ch], [ch, ch],
                "y0 = x1; y1 = x1 * (x0 - x2) * rsqrt(x3 + w0);",
                "reduce_y0 = 0; reduce_y1 = 0;", "reduce_y0 += y0; reduce_y1 += y1;",
                params=[acc], name="bn_grad_sums")
            # dgamma, dbeta += the sums (launched with beta = 1; the channel kernels'
            # finish adds them itself)
            self._param_grad = PointwiseBroadcast(ctx, [vec], [vec], "y0 = x0;",
                                                  name="bn_param_grad")
        # float32 statistics and apply on CPUs: a row's passes in cache (batchnorm_rows.cl,
        # batchnorm_rows_apply.cl), 7x and 2.4-8x the generator's passes on Intel's
        # runtime; pip's PoCL ran the statistics both ways at about 8 GB/s and keeps the
        # generator
        self._rows = self._rows_buffer = None
        if (self.kernels == "pointwise" and ctx.facts.is_cpu and ctx.facts.vendor_id != "pocl"
                and np.dtype(dtype) == F and n * c * s):
            self._vw = tuning.cpu_vector_width(ctx.facts)
            self._rows = program.get(ctx, "batchnorm_rows", VW=self._vw)
        self._built = {}  # the generator's launchers built on first use, by role

    def _rows_scratch(self):
        """Two floats per (image, channel) row, the row kernels' partial results."""
        if self._rows_buffer is None:
            self._rows_buffer = Tensor(self.ctx, (2 * self.shape[0] * self.shape[1],))
        return self._rows_buffer

    def _row_moments(self, x, count, mean, m2):
        """count, mean and M2 per channel through batchnorm_rows.cl."""
        n, c, s = self.shape
        rows = self._rows_scratch()  # each row's mean and M2
        return [Launch(self._rows, "bn_row_moments", (c, n), None,
                       [np.uint32(c), np.uint32(s), x, rows]),
                Launch(self._rows, "bn_row_moments_merge", (c,), None,
                       [np.uint32(n), np.uint32(c), np.uint32(s), rows, count, mean, m2])]

    # ----- kernels/batchnorm.cl ("channels")
    def fuses(self, activation):
        """Whether apply and backward can run ``activation`` too: the channel kernels, and
        the generator in float arithmetic (not float64)."""
        return activation in BN_ACTIVATIONS and (self.kernels == "channels"
                                                 or self.stat_dtype == F)

    def _check_activation(self, activation):
        if activation != "identity" and not self.fuses(activation):
            raise ValueError("BatchNormOps: %s kernels cannot run activation %r (fusable: "
                             "%s, not in float64)" % (self.kernels, activation,
                                                      ", ".join(BN_ACTIVATIONS)))

    def _program(self, *tensors, batch=True, activation="identity"):
        """The channel kernels' program: V = 4 values per load where every row and each
        tensor's start allow 16-byte (float) or 8-byte (16-bit) vector accesses."""
        vec = 4 if self.shape[2] % 4 == 0 and all(t.offset % 4 == 0 for t in tensors) else 1
        return program.get(self.ctx, "batchnorm", VEC=vec, WG=WG, AFFINE=int(self.affine),
                           BATCH=int(batch), ACT_T=self._act_t, ACTIVATION=activation), vec

    def _parts_tensor(self):
        if self._parts_buffer is None:  # (count, mean, M2) or (sum dy, sum dy xhat) per part
            self._parts_buffer = Tensor(self.ctx, (3 * self._parts * self.shape[1],))
        return self._parts_buffer

    def _reduce(self, prg, vec, kernel, args, finish_args):
        """A reduction over each channel's parts of the batch, then its finish kernel."""
        n, c, s = self.shape
        sv = s // vec
        parts = self._parts_tensor()
        geometry = [np.uint32(c), np.uint32(s)] + divisor_args(np.uint32, sv) + \
            [np.uint32(n), np.uint32(self._part_rows)]
        return [Launch(prg, kernel, (WG, c, self._parts), (WG, 1, 1), geometry + args + [parts]),
                Launch(prg, kernel + "_finish", (ceil_div(c, 64) * 64,), (64,),
                       [np.uint32(c), np.uint32(self._parts), parts] + finish_args)]

    def _pointwise(self, prg, vec, kernel, args):
        n, c, s = self.shape
        vectors = n * c * s // vec
        geometry = [np.uint32(vectors)] + divisor_args(np.uint32, s // vec) + \
            divisor_args(np.uint32, c)
        return [Launch(prg, kernel, (ceil_div(vectors, WG) * WG,), (WG,), geometry + args)]

    def stats_launches(self, x, mean, var, running_mean, running_var, momentum, scratch):
        """Batch mean and biased variance into ``mean``/``var`` (C,), running stats updated;
        ``scratch``: a (C,) tensor free during forward."""
        m = self.M
        unbiased = momentum * m / (m - 1)
        if self.kernels == "channels":
            prg, vec = self._program(x)
            return self._reduce(prg, vec, "bn_moments", [x],
                                [mean, var, running_mean, running_var, np.float32(momentum),
                                 np.float32(unbiased), np.float32(1.0 / m)])
        c = self.shape[1]
        ch = lambda t: t.view((1, c, 1))
        moments = (self._row_moments(x, scratch, mean, var) if self._rows is not None
                   else self._moments.launches([x], [ch(scratch), ch(mean), ch(var)]))
        return (moments + self._update.launches([mean, var, running_mean, running_var],
                                        [mean, var, running_mean, running_var],
                                        [momentum, unbiased, 1.0 / m]))

    def apply_launches(self, x, y, mean, var, gamma=None, beta=None, activation="identity"):
        """y = gamma * (x - mean) / sqrt(var + eps) + beta per channel (without gamma/beta
        when not affine), then ``activation`` (``fuses``)."""
        self._check_activation(activation)
        if self.kernels == "channels":
            prg, vec = self._program(x, y, activation=activation)
            return self._pointwise(prg, vec, "bn_apply", [x, y, mean, var]
                                   + ([gamma, beta] if self.affine else []) + [np.float32(self.eps)])
        n, c, s = self.shape
        istd = self._istd_tensor()
        out = self._istd.launches([var], [istd], [self.eps])
        if self._rows is not None:  # float32 on CPUs: row by row (batchnorm_rows_apply.cl)
            act = "x" if activation == "identity" else ACTIVATIONS[activation].forward
            prg = program.get(self.ctx, "batchnorm_rows_apply", VW=self._vw,
                              AFFINE=int(self.affine), ACT=act)
            return out + [Launch(prg, "bn_row_apply", (c, n), None,
                                 [np.uint32(c), np.uint32(s), x, mean, istd]
                                 + ([gamma, beta] if self.affine else []) + [y])]
        xs = [x, mean.view((1, c, 1)), istd.view((1, c, 1))]
        if self.affine:
            xs += [gamma.view((1, c, 1)), beta.view((1, c, 1))]
        return out + self._apply_op(activation).launches(xs, [y])

    def _apply_op(self, activation):
        """The generator's apply, y = act((x - mean) istd [gamma + beta]): the activation
        on the value before it is stored (as the channel kernels do)."""
        key = ("apply", activation)
        if key not in self._built:
            full, ch = self._full, self._ch
            z = "(x0 - x1) * x2" + (" * x3 + x4" if self.affine else "")
            code = ("y0 = %s;" % z if activation == "identity"
                    else forward_code(activation, z, "y0"))
            xs = [full, ch, ch] + [ch, ch] * self.affine
            name = "bn_apply" + ("" if activation == "identity" else "_" + activation)
            self._built[key] = PointwiseBroadcast(self.ctx, xs, [full], code, name=name)
        return self._built[key]

    def _istd_tensor(self):
        """A (C,) vector of the statistics' type, private to these launchers, for istd."""
        if self._istd_buffer is None:
            self._istd_buffer = Tensor(self.ctx, (self.shape[1],), self.stat_dtype)
        return self._istd_buffer

    def _dx_op(self, batch_stats):
        # inputs: x, dy, mean, istd, sum dy, sum dy*xhat, [gamma]
        if batch_stats not in self._built:
            full, ch = self._full, self._ch
            xs = [full, full, ch, ch, ch, ch] + [ch] * self.affine
            gamma = "x6" if self.affine else "1.0f"
            acc = self._acc
            if batch_stats:
                # dx = gamma istd (dy - sum(dy)/M - xhat sum(dy xhat)/M)
                code = ("%s xhat = (x0 - x2) * x3; "
                        "y0 = %s * x3 * (x1 - w0 * (x4 + xhat * x5));" % (acc, gamma))
            else:
                # fixed statistics: y is affine in x, dx = gamma istd dy
                code = "y0 = %s * x3 * x1;" % gamma
            self._built[batch_stats] = PointwiseBroadcast(self.ctx, xs, [full], code,
                                                          [acc], name="bn_backward_data")
        return self._built[batch_stats]

    def _row_backward(self, x, dy, y, mean, var, sums, gamma, dx, beta, dgamma, dbeta,
                      batch_stats, sums_wanted, activation):
        """backward_launches through batchnorm_rows_backward.cl: the sums by rows, then
        merged, and dx; a folded activation's gradient taken inline from its output y."""
        if activation != "identity" and y is None:
            raise ValueError("BatchNormOps: the row kernels' fused activation gradient needs "
                             "the activation's output y")
        n, c, s = self.shape
        dz = "dy" if activation == "identity" else ACTIVATIONS[activation].backward
        prg = program.get(self.ctx, "batchnorm_rows_backward", VW=self._vw,
                          AFFINE=int(self.affine), ACT=int(activation != "identity"), DZ=dz,
                          BATCH=int(batch_stats))
        istd = self._istd_tensor()
        head = [np.uint32(c), np.uint32(s), x, dy] + ([y] if activation != "identity" else []) \
            + [mean, istd]
        out = self._istd.launches([var], [istd], [self.eps])
        s_dy, s_dyx = sums
        if dx is not None or dgamma is not None or dbeta is not None or sums_wanted:
            rows = self._rows_scratch()
            out += [Launch(prg, "bn_row_grad_sums", (c, n), None, head + [rows]),
                    Launch(prg, "bn_row_grad_sums_merge", (c,), None,
                           [np.uint32(n), np.uint32(c), rows, s_dy, s_dyx])]
            for grad, sm in ((dgamma, s_dyx), (dbeta, s_dy)):
                if grad is not None:
                    out += self._param_grad.launches([sm], [grad], beta=1.0)
        if dx is not None:
            out.append(Launch(prg, "bn_row_dx", (c, n), None,
                              head + [s_dy, s_dyx] + ([gamma] if self.affine else [])
                              + [dx, np.float32(1.0 / self.M), np.float32(beta)]))
        return out

    def _activation_backward(self, activation):
        """dy = act'(y) dy in place, y the activation's output (the generator's fused
        backward: the activation's own pass, then the BatchNorm's)."""
        key = ("backward", activation)
        if key not in self._built:
            full = self._full
            self._built[key] = PointwiseBroadcast(
                self.ctx, [full, full], [full], backward_code(activation, "x0", "x1", "y0"),
                name="bn_activation_backward_" + activation)
        return self._built[key]

    def backward_launches(self, x, dy, mean, var, sums, gamma=None, dx=None, beta=0.0,
                          dgamma=None, dbeta=None, batch_stats=True, sums_wanted=False,
                          activation="identity", bn_beta=None, y=None):
        """Gradients of BN with statistics ``mean``/``var`` (the batch's when
        ``batch_stats``, else fixed). ``sums`` = two (C,) tensors that receive sum(dy) and
        sum(dy*xhat), which are dbeta and dgamma (``sums_wanted``: computed even without
        dx, dgamma or dbeta). dgamma/dbeta are added to; dx = beta*dx + grad (beta=0 never
        reads dx).

        With xhat = (x - mu) istd, istd = 1/sqrt(var + eps), y = gamma xhat + beta and
        batch statistics (mu, var depend on x):
            dbeta  = sum dy,   dgamma = sum dy xhat
            dx     = gamma istd / M * (M dy - sum dy - xhat sum(dy xhat))
        With fixed statistics only the first term remains: dx = gamma istd dy.
        With ``activation`` (``fuses``), ``dy`` is the activation's: the channel kernels
        first take it through the activation's gradient at z = gamma xhat + beta
        (``bn_beta``: the layer's beta, needed then when affine); the generator takes it
        there in place from the activation's output ``y`` first (reading x again for z
        inside its two passes made them 1.5-2x slower on CPUs).
        """
        self._check_activation(activation)
        fused = activation != "identity"
        if fused and self.affine and (gamma is None or bn_beta is None):
            raise ValueError("BatchNormOps: a fused activation's gradient needs gamma and "
                             "beta to recompute the BatchNorm's output")
        c = self.shape[1]
        ch = lambda t: t.view((1, c, 1))
        s_dy, s_dyx = sums
        out = []
        channels = self.kernels == "channels"
        if self._rows is not None:  # float32 on CPUs: row by row
            return self._row_backward(x, dy, y if fused else None, mean, var, sums, gamma, dx,
                                      beta, dgamma, dbeta, batch_stats, sums_wanted, activation)
        if fused and not channels:
            if y is None:
                raise ValueError("BatchNormOps: the generator's fused activation gradient "
                                 "needs the activation's output y")
            out += self._activation_backward(activation).launches([dy, y], [dy])
            fused, activation = False, "identity"
        if dx is not None or dgamma is not None or dbeta is not None or sums_wanted:
            if channels:
                # the finish adds the sums into dbeta and dgamma itself
                prg, vec = self._program(x, dy, activation=activation)
                adds = [dbeta if dbeta is not None else s_dy,
                        dgamma if dgamma is not None else s_dyx,
                        np.int32(dbeta is not None), np.int32(dgamma is not None)]
                affine = [gamma, bn_beta] if fused and self.affine else []
                out += self._reduce(prg, vec, "bn_grad_sums",
                                    [x, dy, mean, var, np.float32(self.eps)] + affine,
                                    [s_dy, s_dyx] + adds)
            else:
                out += self._grad_sums.launches([x, dy, ch(mean), ch(var)], [ch(s_dy), ch(s_dyx)],
                                                [self.eps])
                for grad, s in ((dgamma, s_dyx), (dbeta, s_dy)):
                    if grad is not None:
                        out += self._param_grad.launches([s], [grad], beta=1.0)
        if dx is not None and channels:
            prg, vec = self._program(x, dy, dx, batch=batch_stats, activation=activation)
            out += self._pointwise(prg, vec, "bn_backward_data",
                                   [x, dy, mean, var, s_dy, s_dyx] + ([gamma] if self.affine else [])
                                   + ([bn_beta] if fused and self.affine else [])
                                   + [dx, np.float32(self.eps), np.float32(1.0 / self.M),
                                      np.float32(beta)])
        elif dx is not None:
            istd = self._istd_tensor()
            xs = [x, dy, ch(mean), ch(istd), ch(s_dy), ch(s_dyx)]
            if self.affine:
                xs.append(ch(gamma))
            out += self._istd.launches([var], [istd], [self.eps])
            out += self._dx_op(batch_stats).launches(xs, [dx], [1.0 / self.M], beta=beta)
        return out
