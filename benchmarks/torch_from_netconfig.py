"""A dlprim net (a NetConfig or its JSON dict) run by PyTorch: the reference side of the
CPU benchmarks, so that both sides time the same graph without torchvision.

    model = TorchNet(dlprim.models.resnet18(batch=4, train=False))
    model.load_parameters(net.get_parameters())     # dlprim's weights, by dlprim's names
    out = model(data=torch.from_numpy(x))           # {output name: tensor}

Each operator becomes a call of ``torch.nn.functional`` on the tensors it names; an
operator that writes over its input (in place in dlprim) just rebinds the name. Options
take the dlprim layer's defaults (``dlprim.layers.REGISTRY[type].OPTIONS``), so a JSON
net means the same on both sides. Parameters carry dlprim's names (``params`` of the
operator, else ``<op>.<i>``), in dlprim's order (BatchNorm: running_mean, running_var,
weight, bias). ``train()`` normalises with batch statistics and drops out; ``eval()``
uses the running statistics, as dlprim's TRAIN and PREDICT modes.
"""
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F

from dlprim.core.activation import PARAMS
from dlprim.layers import REGISTRY

__all__ = ["TorchNet", "activation"]

_ACT = {
    "identity": lambda x, o: x,
    "relu": lambda x, o: F.relu(x),
    "relu6": lambda x, o: F.relu6(x),
    "sigmoid": lambda x, o: torch.sigmoid(x),
    "tanh": lambda x, o: torch.tanh(x),
    "leaky_relu": lambda x, o: F.leaky_relu(x, o["negative_slope"]),
    "elu": lambda x, o: F.elu(x, o["alpha"]),
    "gelu": lambda x, o: F.gelu(x),
    "gelu_tanh": lambda x, o: F.gelu(x, approximate="tanh"),
    "erf": lambda x, o: torch.erf(x),
    "silu": lambda x, o: F.silu(x),
    "swish": lambda x, o: F.silu(x),
    "hardswish": lambda x, o: F.hardswish(x),
    "hardsigmoid": lambda x, o: F.hardsigmoid(x),
    "mish": lambda x, o: F.mish(x),
    "softplus": lambda x, o: F.softplus(x, o["beta"], o["threshold"]),
}


def activation(name, x, options=None):
    """dlprim's activation ``name`` of ``x``; ``options`` holds its parameters (defaults
    from the activation table)."""
    if name not in _ACT:
        raise ValueError("activation %r has no PyTorch counterpart here; known: %s"
                         % (name, ", ".join(sorted(_ACT))))
    return _ACT[name](x, dict(PARAMS, **(options or {})))


def _pair(v):
    return (int(v), int(v)) if np.ndim(v) == 0 else (int(v[0]), int(v[1]))


# a parameter an operator needs: ``init`` is "zeros", "ones" or the fan-in of a uniform init
Param = namedtuple("Param", "shape init trainable")


class _Op:
    """One operator: ``params(shapes)`` lists the Params it needs for inputs of ``shapes``;
    ``run(xs, ps, training)`` returns its outputs."""

    def __init__(self, spec):
        self.name, self.type = spec["name"], spec["type"]
        defaults, given = REGISTRY[self.type].OPTIONS, spec.get("options", {})
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            self.fail("unknown options %s; known: %s" % (", ".join(unknown), ", ".join(defaults)))
        self.o = dict(defaults, **given)

    def params(self, shapes):
        return []

    def fail(self, msg):
        raise ValueError("%s '%s': %s" % (self.type, self.name, msg))


class _Conv(_Op):
    def params(self, shapes):
        o, c = self.o, shapes[0][1]
        if o["channels_in"] not in (-1, c):
            self.fail("input has %d channels, option 'channels_in' is %d" % (c, o["channels_in"]))
        kh, kw = _pair(o["kernel"])
        w = (o["channels_out"], c // o["groups"], kh, kw)
        fan_in = int(np.prod(w[1:]))
        return [Param(w, fan_in, True)] + ([Param(w[:1], fan_in, True)] if o["bias"] else [])

    def run(self, xs, ps, training):
        o, x = self.o, xs[0]
        pad = o["pad"]
        if np.ndim(pad) and len(pad) == 4:
            t, l, b, r = pad
            if (t, l) != (b, r):  # conv2d pads symmetrically; F.pad takes (l, r, t, b)
                x = F.pad(x, (l, r, t, b))
                t = l = 0
            pad = (t, l)
        y = F.conv2d(x, ps[0], ps[1] if o["bias"] else None, _pair(o["stride"]), _pair(pad),
                     _pair(o["dilate"]), o["groups"])
        return [activation(o["activation"], y)]


class _BatchNorm(_Op):
    def params(self, shapes):
        c = (shapes[0][1],)
        stats = [Param(c, "zeros", False), Param(c, "ones", False)]
        affine = [Param(c, "ones", True), Param(c, "zeros", True)] if self.o["affine"] else []
        return stats + affine

    def run(self, xs, ps, training):
        o = self.o
        w, b = (ps[2], ps[3]) if o["affine"] else (None, None)
        return [F.batch_norm(xs[0], ps[0], ps[1], w, b, training and not o["use_global_stats"],
                             o["momentum"], o["eps"])]


class _Activation(_Op):
    def run(self, xs, ps, training):
        return [activation(self.o["activation"], xs[0], self.o)]


class _Pooling(_Op):
    def run(self, xs, ps, training):
        o = self.o
        args = (xs[0], _pair(o["kernel"]), _pair(o["stride"]), _pair(o["pad"]))
        if o["mode"] == "max":
            return [F.max_pool2d(*args, ceil_mode=bool(o["ceil_mode"]))]
        return [F.avg_pool2d(*args, ceil_mode=bool(o["ceil_mode"]),
                             count_include_pad=bool(o["count_include_pad"]))]


class _GlobalPooling(_Op):
    def run(self, xs, ps, training):
        reduce = torch.amax if self.o["mode"] == "max" else torch.mean
        return [reduce(xs[0], (2, 3), keepdim=True)]


class _Flatten(_Op):
    def run(self, xs, ps, training):
        return [xs[0].flatten(1)]


class _InnerProduct(_Op):
    def params(self, shapes):
        o, n = self.o, int(np.prod(shapes[0][1:]))
        if o["inputs"] not in (-1, n):
            self.fail("input has %d features, option 'inputs' is %d" % (n, o["inputs"]))
        return [Param((o["outputs"], n), n, True)] + ([Param((o["outputs"],), n, True)]
                                                      if o["bias"] else [])

    def run(self, xs, ps, training):
        y = F.linear(xs[0].flatten(1), ps[0], ps[1] if self.o["bias"] else None)
        return [activation(self.o["activation"], y)]


_ELEMENTWISE = {"sum": lambda a, b: a + b, "sub": lambda a, b: a - b, "prod": torch.mul,
                "div": torch.div, "max": torch.maximum, "min": torch.minimum}


class _Elementwise(_Op):
    def run(self, xs, ps, training):
        o = self.o
        if o["operation"] not in _ELEMENTWISE:
            self.fail("unknown operation %r" % o["operation"])
        y = _ELEMENTWISE[o["operation"]](xs[0] * o["coef1"], xs[1] * o["coef2"])
        return [activation(o["activation"], y)]


class _Concat(_Op):
    def run(self, xs, ps, training):
        return [torch.cat(xs, self.o["dim"])]


class _Dropout(_Op):
    def run(self, xs, ps, training):
        return [F.dropout(xs[0], self.o["ratio"], training)]


class _Softmax(_Op):
    def run(self, xs, ps, training):
        return [(F.log_softmax if self.o["log"] else F.softmax)(xs[0], 1)]


class _SoftmaxWithLoss(_Op):
    def run(self, xs, ps, training):
        loss = F.cross_entropy(xs[0], xs[1].reshape(-1).long(), ignore_index=self.o["ignore_index"])
        return [loss.reshape(1)]   # dlprim's loss is a (1,) tensor


OPS = {"Convolution2D": _Conv, "BatchNorm": _BatchNorm, "Activation": _Activation,
       "Pooling2D": _Pooling, "GlobalPooling": _GlobalPooling, "Flatten": _Flatten,
       "InnerProduct": _InnerProduct, "Elementwise": _Elementwise, "Concat": _Concat,
       "Dropout": _Dropout, "Softmax": _Softmax, "SoftmaxWithLoss": _SoftmaxWithLoss}


def _init(p, gen):
    if p.init == "zeros":
        return torch.zeros(p.shape)
    if p.init == "ones":
        return torch.ones(p.shape)
    # PyTorch's default for Conv2d and Linear, weight and bias alike: U(+-1/sqrt(fan_in))
    return (torch.rand(p.shape, generator=gen) * 2 - 1) / np.sqrt(p.init)


class TorchNet(torch.nn.Module):
    """The net ``cfg`` (a NetConfig or its dict) as a torch module; ``forward(**inputs)``
    returns {output name: tensor}."""

    def __init__(self, cfg, seed=0):
        super().__init__()
        cfg = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
        self.input_names = [i["name"] for i in cfg["inputs"]]
        self.output_names = [o if isinstance(o, str) else o["name"] for o in cfg["outputs"]]
        self.ops, self._keys = [], {}   # dlprim parameter name -> torch attribute name
        gen = torch.Generator().manual_seed(seed)
        # shapes flow through the graph on the meta device: no arithmetic, only the shapes
        # every parameter needs
        env = {i["name"]: torch.empty(i["shape"], device="meta", dtype=torch.float32
                                      if i.get("dtype", "float") == "float" else torch.int64)
               for i in cfg["inputs"]}
        for k, spec in enumerate(cfg["operators"]):
            if spec["type"] not in OPS:
                raise ValueError("operator '%s' (#%d): type %r has no PyTorch counterpart here; "
                                 "known: %s" % (spec["name"], k, spec["type"],
                                                ", ".join(sorted(OPS))))
            op = OPS[spec["type"]](spec)
            missing = [n for n in spec["inputs"] if n not in env]
            if missing:
                op.fail("reads %s, which nothing before it writes" % ", ".join(missing))
            wanted = op.params([tuple(env[n].shape) for n in spec["inputs"]])
            names = spec.get("params") or ["%s.%d" % (op.name, j) for j in range(len(wanted))]
            if len(names) != len(wanted):
                op.fail("lists %d params, the layer has %d" % (len(names), len(wanted)))
            for name, p in zip(names, wanted):
                if name not in self._keys:
                    self._add(name, _init(p, gen), p.trainable and not spec.get("frozen"))
                elif tuple(self.tensors[name].shape) != tuple(p.shape):
                    op.fail("parameter '%s' has shape %s here and %s elsewhere"
                            % (name, tuple(p.shape), tuple(self.tensors[name].shape)))
            op.param_names = names
            self.ops.append((op, spec["inputs"], spec["outputs"]))
            self._step(op, spec["inputs"], spec["outputs"], env, meta=True)

    def _add(self, name, value, trainable):
        key = name.replace(".", "__")   # torch names may not hold dots
        if hasattr(self, key):
            raise ValueError("parameters '%s' and another one both map to torch name %r"
                             % (name, key))
        if trainable:
            self.register_parameter(key, torch.nn.Parameter(value))
        else:
            self.register_buffer(key, value)
        self._keys[name] = key

    @property
    def tensors(self):
        """{dlprim parameter name: its torch parameter or buffer}."""
        return {name: getattr(self, key) for name, key in self._keys.items()}

    def _step(self, op, inputs, outputs, env, meta=False):
        # looked up on each call: Module.to() and friends replace buffers
        ps = [getattr(self, self._keys[n]) for n in op.param_names]
        ps = [p.to("meta") for p in ps] if meta else ps
        ys = op.run([env[n] for n in inputs], ps, self.training and not meta)
        if len(ys) != len(outputs):
            op.fail("writes %d outputs, the net names %d" % (len(ys), len(outputs)))
        env.update(zip(outputs, ys))

    def forward(self, **inputs):
        missing = set(self.input_names) - set(inputs)
        if missing:
            raise ValueError("missing net inputs: %s" % ", ".join(sorted(missing)))
        env = dict(inputs)
        for op, ins, outs in self.ops:
            self._step(op, ins, outs, env)
        return {n: env[n] for n in self.output_names}

    def load_parameters(self, arrays):
        """Copy {dlprim name: array} (``Net.get_parameters()``) into the module; every
        parameter must be given, with its shape."""
        missing = sorted(set(self.tensors) - set(arrays))
        if missing:
            raise ValueError("load_parameters: no value for %s" % ", ".join(missing))
        with torch.no_grad():
            for name, t in self.tensors.items():
                value = torch.as_tensor(np.asarray(arrays[name], np.float32))
                if tuple(value.shape) != tuple(t.shape):
                    raise ValueError("load_parameters: '%s' has shape %s, the net wants %s"
                                     % (name, tuple(value.shape), tuple(t.shape)))
                t.copy_(value)
