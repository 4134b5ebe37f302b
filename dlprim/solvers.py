"""Solvers: SGD, Adam and AdamW with PyTorch's numbers, in one kernel launch per step.

A Net keeps every trainable parameter in one contiguous arena and the gradients in
another of the same layout (``net.param_arena``, ``net.grad_arena``, the first
``net.trainable_size`` elements), so one pointwise launch updates the whole net; frozen
parameters and running statistics lie after that range and are never touched. Moments
live in arenas of the same layout. Nothing here waits for the device.

Two ways to use them:

DLPrimitives style::

    sgd = dp.SGD(ctx); sgd.lr = 0.01; sgd.momentum = 0.9
    sgd.init(net, e)
    sgd.step(net, e)            # zero_grad + forward + backward + apply

Pythonic::

    opt = dp.Adam(net, lr=1e-3, weight_decay=1e-4, no_decay=dp.solvers.no_decay_1d)
    opt.zero_grad(); net.forward(); net.backward(); opt.step()
"""
import io
import json
import math
import zipfile
import zlib
from typing import Any

import numpy as np

from .core.pointwise import PointwiseBroadcast, PointwiseBroadcastReduce
from .errors import FileFormatError
from .tensor import Tensor

__all__ = ["Solver", "SGD", "Adam", "AdamW", "no_decay_1d", "create_solver"]

FLOAT32_MAX = float(np.finfo(np.float32).max)


def no_decay_1d(name, shape):
    """A ``no_decay`` rule: biases and BatchNorm parameters (1-D) get no weight decay."""
    return len(shape) <= 1


class Solver:
    """Base: hyperparameters as attributes, one fused update launch over all parameters."""
    HYPER = {}

    def __init__(self, ctx_or_net, no_decay=None, clip_norm=None, clip_value=None, **hyper):
        net = ctx_or_net if hasattr(ctx_or_net, "param_arena") else None
        self.ctx = net.ctx if net is not None else ctx_or_net
        unknown = sorted(set(hyper) - set(self.HYPER))
        if unknown:
            raise TypeError("%s: unknown hyperparameter%s %s; known: %s"
                            % (type(self).__name__, "s" if len(unknown) > 1 else "",
                               ", ".join(unknown), ", ".join(sorted(self.HYPER))))
        for k, v in self.HYPER.items():
            setattr(self, k, hyper.get(k, v))
        self.no_decay, self.clip_norm, self.clip_value = no_decay, clip_norm, clip_value
        self.validate()
        self.net = None
        self._scale = None  # the bound net's loss scale (init)
        self.step_count = 0
        if net is not None:
            self.init(net)

    def __repr__(self):
        hyper = ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.HYPER)
        clip = "".join(", %s=%r" % (k, getattr(self, k)) for k in ("clip_norm", "clip_value")
                       if getattr(self, k) is not None)
        return "%s(%s%s, step %d)" % (type(self).__name__, hyper, clip, self.step_count)

    # ----- checks
    # hyperparameter -> (low, low_open, high, high_open); booleans are the HYPER defaults
    # that are bools. One home for the rules: construction raises the first problem, and
    # dlprim-train's config check reports every one (``problems``).
    BOUNDS = {"lr": (0, False, None, False), "weight_decay": (0, False, None, False),
              "clip_norm": (0, True, None, False), "clip_value": (0, True, None, False)}

    @classmethod
    def problems(cls, hyper):
        """[(name, what is wrong)] for ``hyper`` ({name: value} over HYPER's names plus
        ``clip_norm``/``clip_value``, None meaning off); empty when all is well."""
        found = []
        for name, value in hyper.items():
            if isinstance(cls.HYPER.get(name), bool):
                if not isinstance(value, bool):
                    found.append((name, "must be true or false, got %r" % (value,)))
                continue
            bounds = cls.BOUNDS.get(name)
            if bounds is None or (value is None and name.startswith("clip_")):
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                found.append((name, "must be a number, got %r" % (value,)))
                continue
            # NaN fails every comparison below, so it would pass them; and the update
            # kernel takes float32, where a larger float becomes inf
            if not (math.isfinite(value) and abs(value) <= FLOAT32_MAX):
                found.append((name, "must be a finite number (float32), got %r" % (value,)))
                continue
            low, low_open, high, high_open = bounds
            if low is not None and (value <= low if low_open else value < low):
                found.append((name, "must be %s %r, got %r" % (">" if low_open else ">=", low, value)))
            elif high is not None and (value >= high if high_open else value > high):
                found.append((name, "must be %s %r, got %r" % ("<" if high_open else "<=", high, value)))
        return found + cls._joint_problems(hyper, found)

    @classmethod
    def _joint_problems(cls, hyper, found):
        """Rules over several hyperparameters, once each of them is valid alone."""
        return []

    def validate(self):
        """Check the hyperparameters; a ValueError names the bad one."""
        hyper = {k: getattr(self, k) for k in self.HYPER}
        hyper.update(clip_norm=self.clip_norm, clip_value=self.clip_value)
        found = self.problems(hyper)
        if found:
            raise ValueError("%s: %s %s" % ((type(self).__name__,) + found[0]))

    # ----- setup
    def init(self, net, e=None):
        """Bind to ``net``: allocate moments, build the update kernel."""
        self.net = net
        n = int(net.trainable_size)
        self.size = n
        self.states = {name: Tensor.zeros(self.ctx, (max(n, 1),), "float32")
                       for name in self.state_names()}
        self._decay_mask = self._make_decay_mask(net) if self.no_decay else None
        self._norm = Tensor(self.ctx, (1,), "float32") if self.clip_norm else None
        # a net of precision "fp16" scales its loss gradients (net.loss_scale): the update
        # divides the scale out, and a step whose gradients are not all finite is skipped
        self._scale = getattr(net, "loss_scale", None)
        self._build()
        return self

    def _make_decay_mask(self, net):
        mask = np.zeros(max(self.size, 1), np.float32)
        for name, (offset, shape, trainable) in net.param_layout.items():
            if trainable and offset < self.size:
                mask[offset:offset + int(np.prod(shape, dtype=np.int64))] = \
                    0.0 if self.no_decay(name, tuple(shape)) else 1.0
        return Tensor.from_numpy(self.ctx, mask)

    def state_names(self):
        """Names of the per-parameter moment arenas this solver keeps."""
        return []

    def _grad_expr(self):
        """OpenCL for the gradient as the update sees it: clipped, plus L2 decay if any."""
        g = "x1"
        norm = "sqrt(x_norm)"
        if self._scale is not None:  # gradients and their norm carry the loss scale
            g, norm = "(x1 * w_unscale)", "sqrt(x_norm) * w_unscale"
        if self.clip_value:
            g = "clamp(%s, -w_clipv, w_clipv)" % g
        if self.clip_norm:
            g = "(%s) * min(1.0f, w_clipn / (%s + 1e-6f))" % (g, norm)
        return g

    def _build(self):
        """Build the update kernel and prepare its launches over the net's arenas once;
        a step only re-binds the scalar hyperparameters and enqueues."""
        self._launches = []
        if self.size == 0:
            return
        n = (self.size,)
        p = self.net.param_arena.view(n)
        g = self.net.grad_arena.view(n)
        moments = [self.states[s] for s in self.state_names()]
        xs = [p, g] + moments
        decay = "w_wd"
        if self._decay_mask is not None:
            decay = "w_wd * x%d" % len(xs)
            xs.append(self._decay_mask)
        code = self.update_code(decay=decay)
        if self._norm is not None:
            code = code.replace("x_norm", "x%d" % len(xs))
            xs.append(self._norm)
            sumsq = PointwiseBroadcastReduce(self.ctx, [(n, "float")], [((1,), "float")],
                                             "y0 = x0 * x0;", name="grad_sumsq")
            self._launches += sumsq.launches([g], [self._norm])
        self._param_names = self.param_names() + (["unscale"] if self._scale is not None else [])
        if self._scale is not None:
            # count of gradients that are not finite: one reduction, read before the step
            self._overflow = Tensor(self.ctx, (1,), "float32")
            self._finite_check = PointwiseBroadcastReduce(
                self.ctx, [(n, "float")], [((1,), "float")],
                "y0 = (isnan(x0) || isinf(x0)) ? 1.0f : 0.0f;",
                name="grad_overflow").launches([g], [self._overflow])
        for i, pn in enumerate(self._param_names):
            code = code.replace("w_%s" % pn, "w%d" % i)
        self._update = PointwiseBroadcast(self.ctx, [(x.shape, "float") for x in xs],
                                          [(n, "float")] * (1 + len(moments)), code,
                                          ["float"] * len(self._param_names),
                                          name=type(self).__name__.lower() + "_update")
        # hyperparameters are bound at each step (set_params); zeros hold their places
        self._update_launches = self._update.launches(xs, [p] + moments,
                                                      [0.0] * len(self._param_names))
        self._launches += self._update_launches

    def _values(self):
        values = self.param_values()
        if self._scale is not None:
            values["unscale"] = self._unscale
        return [values[k] for k in self._param_names]

    def _gradients_finite(self, queue, e=None):
        """Whether every trainable gradient is finite (waits for the check); the loss
        scale learns the answer."""
        for launch in self._finite_check:
            launch(queue)
        finite = float(self._overflow.to_host(e=e)[0]) == 0.0
        self._scale.update(finite)
        return finite

    # ----- the step
    def zero_grad(self, net: Any = None, e: Any = None) -> None:
        """Zero the parameter gradients of the net (one fill)."""
        (net or self.net).zero_grad()

    def apply(self, net: Any = None, e: Any = None) -> None:
        """Update the parameters from the accumulated gradients (enqueued, no wait)."""
        if net is not None and net is not self.net:
            self.init(net)
        if self.net is None:
            raise RuntimeError("%s: call init(net) first" % type(self).__name__)
        self.validate()
        queue = e.queue if e is not None else self.ctx.queue
        if self._launches and self._scale is not None:
            self._unscale = 1.0 / self._scale.scale  # this step's, before the check moves it
            if not self._gradients_finite(queue, e):
                return  # skipped: parameters, moments and the step count stay
        self.step_count += 1
        if not self._launches:
            return
        self._update.set_params(self._update_launches, self._values())
        for launch in self._launches:
            launch(queue)

    def step(self, net: Any = None, e: Any = None) -> None:
        """With a net (DLPrimitives style): zero_grad, forward, backward, apply.
        Without (Pythonic, bound at construction): apply the accumulated gradients."""
        if net is None:
            return self.apply(None, e)
        if net is not self.net:
            self.init(net, e)
        self.zero_grad(net, e)
        net.forward(e)
        net.backward(e)
        self.apply(net, e)

    # ----- state
    def hyperparameters(self):
        """{name: value} of the hyperparameters."""
        return {k: getattr(self, k) for k in self.HYPER}

    def state_dict(self):
        """Hyperparameters, step count and moments (host copies), enough to resume."""
        state = {"type": type(self).__name__, "hyper": self.hyperparameters(),
                 "step": self.step_count,
                 "states": {k: t.numpy()[:self.size].copy() for k, t in self.states.items()}}
        if self._scale is not None:  # an fp16 net's loss scale resumes where it was
            state["loss_scale"] = self._scale.state_dict()
        return state

    def load_state_dict(self, state):
        """Restore what ``state_dict()`` gave (same solver type and net size). All of it is
        checked first, so a bad state (ValueError naming the entry) changes nothing."""
        name = type(self).__name__
        kind = state.get("type") if isinstance(state, dict) else None
        if kind != name:
            raise ValueError("solver state is for %s, not %s" % (kind, name))
        hyper = state.get("hyper")
        if not isinstance(hyper, dict) or set(hyper) != set(self.HYPER):
            raise ValueError("solver state 'hyper' must hold %s, got %r"
                             % (", ".join(sorted(self.HYPER)), hyper))
        found = self.problems(hyper)
        if found:
            raise ValueError("solver state 'hyper' %s: %s" % found[0])
        step = state.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError("solver state 'step' must be an integer >= 0, got %r" % (step,))
        moments = state.get("states")
        if not isinstance(moments, dict) or set(moments) != set(self.states):
            raise ValueError("solver state has moments %s; %s%s needs %s" % (
                ", ".join(sorted(moments)) if isinstance(moments, dict) else repr(moments),
                name, " with amsgrad" if getattr(self, "amsgrad", False) else "",
                ", ".join(sorted(self.states)) or "none"))
        for k, arr in moments.items():
            if np.shape(arr) != (self.size,):
                raise ValueError("solver state %r has shape %s; this net needs (%d,)"
                                 % (k, np.shape(arr), self.size))
        scale = state.get("loss_scale")
        if scale is not None and not (isinstance(scale, dict) and
                                      isinstance(scale.get("scale"), (int, float)) and
                                      0 < scale["scale"] < float("inf")):
            raise ValueError("solver state 'loss_scale' must be {scale: a positive number, ...}"
                             ", got %r" % (scale,))
        for k, v in hyper.items():
            setattr(self, k, v)
        self.step_count = step
        if scale is not None and self._scale is not None:
            self._scale.load_state_dict(scale)
        for k, arr in moments.items():
            self.states[k].view((self.size,)).to_device(np.asarray(arr, np.float32))

    def save_state(self, path):
        """Write ``state_dict()`` atomically as .npz (moments) with a JSON header."""
        from .utils import atomic_write
        state = self.state_dict()
        meta = {k: state[k] for k in ("type", "hyper", "step", "loss_scale") if k in state}
        buf = io.BytesIO()
        np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                 **state["states"])
        atomic_write(path, lambda f: f.write(buf.getvalue()))

    def load_state(self, path):
        """Restore a state written by ``save_state(path)``. A damaged or foreign file is a
        ``dlprim.errors.FileFormatError`` naming it and what is wrong; the solver is
        left as it was."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if "__meta__" not in data.files:
                    raise FileFormatError("%s: no __meta__ entry: not a solver state" % path)
                meta = json.loads(bytes(data["__meta__"]).decode())
                moments = {k: data[k] for k in data.files if k != "__meta__"}
        except (FileFormatError, FileNotFoundError):
            raise
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
            raise FileFormatError("%s: not a readable solver state (.npz): %s"
                                  % (path, e)) from None
        if not isinstance(meta, dict):
            raise FileFormatError("%s: __meta__ must be a JSON object, got %r" % (path, meta))
        try:
            self.load_state_dict(dict(meta, states=moments))
        except ValueError as e:
            raise FileFormatError("%s: %s" % (path, e)) from None


class SGD(Solver):
    """Stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    g <- g + wd * p;  b <- g on the first step, else momentum * b + (1 - dampening) * g;
    g <- g + momentum * b (nesterov) or b;  p <- p - lr * g

    ``weight_decay_mode="dlprimitives"`` applies the decay as DLPrimitives' SGD does
    instead: not through the gradient (so neither momentum nor lr scale it) but as a
    shrink of the weights, p <- (1 - wd) * p - lr * g, with g the momentum step above
    taken without the decay term. With momentum and no dampening or nesterov that is
    DLPrimitives' v <- momentum * v + g;  p <- (1 - wd) * p - lr * v exactly.
    """
    HYPER = {"lr": 0.1, "momentum": 0.0, "dampening": 0.0, "nesterov": False, "weight_decay": 0.0,
             "weight_decay_mode": "pytorch"}
    WEIGHT_DECAY_MODES = ("pytorch", "dlprimitives")
    BOUNDS = dict(Solver.BOUNDS, momentum=(0, False, None, False), dampening=(0, False, 1, False))

    @classmethod
    def problems(cls, hyper):
        found = super().problems(hyper)
        mode = hyper.get("weight_decay_mode", cls.HYPER["weight_decay_mode"])
        if mode not in cls.WEIGHT_DECAY_MODES:
            found.append(("weight_decay_mode", "must be %s, got %r"
                          % (" or ".join('"%s"' % m for m in cls.WEIGHT_DECAY_MODES), mode)))
        return found

    @classmethod
    def _joint_problems(cls, hyper, found):
        bad = {name for name, _ in found}
        if (hyper.get("nesterov") is True and not bad & {"momentum", "dampening"}
                and (hyper.get("momentum", 0) <= 0 or hyper.get("dampening", 0) != 0)):
            return [("nesterov", "needs momentum > 0 and dampening 0")]
        return []

    def state_names(self):
        return ["momentum_buffer"]

    def load_state_dict(self, state):
        # a state saved before weight_decay_mode existed decayed as PyTorch does
        hyper = state.get("hyper") if isinstance(state, dict) else None
        if isinstance(hyper, dict) and "weight_decay_mode" not in hyper:
            state = dict(state, hyper=dict(hyper, weight_decay_mode="pytorch"))
        super().load_state_dict(state)

    def param_names(self):
        """Names of the scalar parameters the update kernel takes, in order (``w_<name>``)."""
        return ["lr", "momentum", "dampening", "nesterov", "wd", "shrink", "first", "clipv",
                "clipn"]

    def param_values(self):
        """{name: value} of those scalars for the coming step."""
        return {"lr": self.lr, "momentum": self.momentum, "dampening": self.dampening,
                "nesterov": float(bool(self.nesterov)), "wd": self.weight_decay,
                "shrink": float(self.weight_decay_mode == "dlprimitives"),
                "first": float(self.step_count == 1), "clipv": self.clip_value or 0.0,
                "clipn": self.clip_norm or 0.0}

    def update_code(self, decay):
        """The OpenCL statements of one element's update (``decay``: the decay term).
        The decay mode is a scalar of the launch, so changing it needs no rebuild."""
        g = self._grad_expr()
        return ("float d = %s; float g = %s;"
                "if (w_shrink == 0.0f) g += d * x0;"
                "float b = w_first != 0.0f ? g : w_momentum * x2 + (1.0f - w_dampening) * g;"
                "if (w_momentum != 0.0f) g = w_nesterov != 0.0f ? g + w_momentum * b : b;"
                "y0 = (w_shrink != 0.0f ? (1.0f - d) * x0 : x0) - w_lr * g; y1 = b;" % (decay, g))


class Adam(Solver):
    """Adam (Kingma & Ba, 2015) as ``torch.optim.Adam``, L2 weight decay, optional AMSGrad.

    g <- g + wd * p;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  (v^ <- max(v^, v))
    p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """
    HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
             "amsgrad": False}
    DECOUPLED = False
    BOUNDS = dict(Solver.BOUNDS, beta1=(0, False, 1, True), beta2=(0, False, 1, True),
                  eps=(0, True, None, False))

    def state_names(self):
        return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if self.amsgrad else [])

    def init(self, net, e=None):
        self._amsgrad_built = bool(self.amsgrad)
        return super().init(net, e)

    def param_names(self):
        """Names of the scalar parameters the update kernel takes, in order (``w_<name>``)."""
        return ["lr", "beta1", "beta2", "eps", "wd", "step", "c2sqrt", "clipv", "clipn"]

    def param_values(self):
        """{name: value} of those scalars for the coming step."""
        t = self.step_count
        return {"lr": self.lr, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
                "wd": self.weight_decay, "step": self.lr / (1 - self.beta1 ** t),
                "c2sqrt": math.sqrt(1 - self.beta2 ** t), "clipv": self.clip_value or 0.0,
                "clipn": self.clip_norm or 0.0}

    def update_code(self, decay):
        """The OpenCL statements of one element's update (``decay``: the decay term)."""
        g = self._grad_expr()
        if self.DECOUPLED:
            head = "float g = %s; float p = x0 * (1.0f - w_lr * %s);" % (g, decay)
        else:
            head = "float g = %s + %s * x0; float p = x0;" % (g, decay)
        vhat = "fmax(x4, v)" if self.amsgrad else "v"
        tail = " y3 = vh;" if self.amsgrad else ""
        return (head + "float m = x2 + (1.0f - w_beta1) * (g - x2);"
                "float v = w_beta2 * x3 + (1.0f - w_beta2) * (g * g);"
                "float vh = %s;"
                "y0 = p - w_step * (m / (sqrt(vh) / w_c2sqrt + w_eps)); y1 = m; y2 = v;%s"
                % (vhat, tail))

    def apply(self, net: Any = None, e: Any = None) -> None:
        if self.net is not None and bool(self.amsgrad) != self._amsgrad_built:
            raise ValueError("%s: amsgrad cannot change after init" % type(self).__name__)
        super().apply(net, e)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019), as ``torch.optim.AdamW``:
    p <- p (1 - lr wd) before the Adam step."""
    HYPER = dict(Adam.HYPER, weight_decay=1e-2)
    DECOUPLED = True


_SOLVERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW}


def create_solver(net, config):
    """A solver from a training config's ``solver`` section ({"type": "adam", "lr": ...})."""
    args = dict(config)
    kind = str(args.pop("type", "adam")).lower()
    if kind not in _SOLVERS:
        raise ValueError("solver.type: unknown %r; known: %s" % (kind, ", ".join(sorted(_SOLVERS))))
    if args.pop("no_decay_1d", False):
        args["no_decay"] = no_decay_1d
    return _SOLVERS[kind](net, **args)
