"""``dlprim.torch.compile(model)``: a whole model as dlprim Nets, without dynamo, and
``export_net``, the same conversion for leaving PyTorch.

The model is called as its users call it (positional and keyword arguments, nested
lists, dicts, None) and returns what it returns (HuggingFace output objects,
dataclasses, dicts, tuples): arguments and results are flattened with PyTorch's pytree
(``torch.utils._pytree``, where transformers registers its ``ModelOutput``), the tensor
leaves are the Net's inputs and outputs, and everything else is fixed per conversion.
"""
import copy

import torch
import torch.utils._pytree as pytree

from .export_attention import packed_attention
from . import compiler as _compiler

__all__ = ["CompiledModule", "compile", "export_net"]


def export_net(model, example_inputs, path=None):
    """(NetConfig, {parameter name: array}) of ``model`` in eval mode, its parameters named
    as in its state dict: the conversion ``torch.compile`` uses, for leaving PyTorch. With
    ``path``, also writes ``path + ".json"`` (DLPrimitives' net format) and ``path +
    ".dlp"`` (the weights). Raises ValueError where the model cannot be converted."""
    from ..net.weights import save_dlp
    from ..onnx import to_netconfig
    from ..onnx.errors import OnnxImportError
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    cpu_model = copy.deepcopy(model).to("cpu").eval()
    data = [_compiler._cpu(x) for x in example_inputs]
    try:
        model_bytes = _compiler._to_onnx(cpu_model, data, train=False)
        cfg, weights = to_netconfig(model_bytes)
    except OnnxImportError as e:
        raise ValueError("export_net: %s" % e) from None
    except Exception as e:  # the exporter's own errors
        raise ValueError("export_net: PyTorch's ONNX exporter: %s"
                         % str(e).split("\n")[0]) from None
    if path is not None:
        from ..utils import atomic_write
        text = cfg.to_str().encode()
        atomic_write(str(path) + ".json", lambda f: f.write(text))
        save_dlp(str(path) + ".dlp", weights)
    return cfg, weights


class _Call:
    """One call's arguments, flattened: the tensor leaves (the Net's data inputs) and
    what fixes a conversion (the structure, the other leaves, the tensors' ranks and
    dtypes)."""

    def __init__(self, args, kwargs):
        leaves, self.spec = pytree.tree_flatten((args, kwargs))
        self.is_tensor = [isinstance(x, torch.Tensor) for x in leaves]
        self.tensors = [x for x, t in zip(leaves, self.is_tensor) if t]
        self.others = [None if t else x for x, t in zip(leaves, self.is_tensor)]
        self.key = (str(self.spec), repr(self.others),
                    tuple((x.dim(), x.dtype) for x in self.tensors))

    def rebuild(self, tensors):
        """(args, kwargs) with ``tensors`` in place of the tensor leaves."""
        it = iter(tensors)
        leaves = [next(it) if t else x for x, t in zip(self.others, self.is_tensor)]
        return pytree.tree_unflatten(leaves, self.spec)


class _Result:
    """What a model returned, as a structure whose tensor leaves the Net computes."""

    def __init__(self, out):
        leaves, self.spec = pytree.tree_flatten(out)
        self.is_tensor = [isinstance(x, torch.Tensor) for x in leaves]
        self.others = [None if t else x for x, t in zip(leaves, self.is_tensor)]

    @staticmethod
    def tensors(out):
        return tuple(x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))

    def rebuild(self, tensors):
        it = iter(tensors)
        leaves = [next(it) if t else x for x, t in zip(self.others, self.is_tensor)]
        return pytree.tree_unflatten(leaves, self.spec)


class CompiledModule(torch.nn.Module):
    """``model`` running as dlprim Nets, made by ``compile``: called as the model (any
    positional and keyword arguments), it returns what the model returns. It converts
    the model once per (training mode, whether gradients are needed, the structure of
    the arguments, their non-tensor values, the tensors' ranks and dtypes), re-plans
    for new shapes, and otherwise runs the Net. ``model``'s parameters stay where they
    are (an optimizer over them works as before) and are copied into the Net only when
    they changed. A model that cannot be converted runs as itself, with a
    ``CompileFallbackWarning`` and the reason in ``reports()``."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self._runners = {}
        self._slots = None  # (name, module, its _parameters or _buffers, key, tensor) per weight

    def forward(self, *args, **kwargs):
        call = _Call(args, kwargs)
        weights = [t for _, t in self._weights()]
        grads = torch.is_grad_enabled() and any(p.requires_grad for p in weights[:self._n_params])
        key = (self.model.training, grads, call.key)
        tensors = weights + call.tensors
        runner = _compiler._pick(self._runners.setdefault(key, []), tensors,
                                 lambda: self._convert(call))
        if runner is None:
            return self.model(*args, **kwargs)
        return runner.result.rebuild(_compiler._run(runner, tensors))

    def _weights(self):
        """(name, tensor) of the model's parameters, then its buffers. Walking the
        modules costs about a millisecond for a ResNet-50, so where they were found is
        kept and checked (every slot still holding its tensor) at each call."""
        slots = self._slots
        if slots is not None and all(d.get(k) is t for _, _, d, k, t in slots):
            return [(n, t) for n, _, _, _, t in slots]
        unique, seen = [], set()  # a tensor two modules share is one weight, as PyTorch has it
        for kind in ("_parameters", "_buffers"):
            for prefix, module in self.model.named_modules():
                table = getattr(module, kind)
                for k, t in table.items():
                    if t is not None and id(t) not in seen:
                        seen.add(id(t))
                        unique.append(((prefix + "." if prefix else "") + k, module, table, k, t))
        self._slots = unique
        self._n_params = sum(1 for s in unique if s[2] is s[1]._parameters)
        return [(n, t) for n, _, _, _, t in unique]

    def _convert(self, call):
        weights = self._weights()
        names = [n for n, _ in weights]
        kinds = (["param"] * self._n_params + ["buffer"] * (len(weights) - self._n_params) +
                 ["data"] * len(call.tensors))
        # what the exporter traces: the model with CPU copies of its weights (put in the
        # deepcopy's memo, as an ocl tensor itself cannot be deep-copied)
        memo = {id(t): (torch.nn.Parameter(_compiler._cpu(t), t.requires_grad)
                        if isinstance(t, torch.nn.Parameter) else _compiler._cpu(t))
                for _, t in weights}
        shadow = copy.deepcopy(self.model, memo)
        packed_attention(shadow)  # the exported copy only: one node per self-attention
        results = []

        class Traced(torch.nn.Module):  # the shadow over the tensor leaves, to theirs
            def __init__(self):
                super().__init__()
                self.m = shadow

            def forward(self, *data):
                args, kwargs = call.rebuild(data)
                out = self.m(*args, **kwargs)
                results.append(_Result(out))
                return _Result.tensors(out)
        bumps = [(names.index(n + ".num_batches_tracked"), 1)
                 for n, m in self.model.named_modules()
                 if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training
                 and m.track_running_stats and (n + ".num_batches_tracked") in names]
        examples = [t for _, t in weights] + call.tensors
        ops = [type(m).__name__ for m in self.model.modules() if not list(m.children())]
        index_of = {"m." + n: i for i, n in enumerate(names)}
        runner = _compiler._convert(None, examples, kinds, module=Traced(), index_of=index_of,
                                    train=self.model.training, ops=ops, bumps=bumps,
                                    instead="the model runs as itself")
        if runner is not None:
            runner.result = results[0]
            runner.share_weights(examples)
        return runner


def compile(model):
    """``model`` (an nn.Module on ``ocl`` or the CPU) as a ``CompiledModule``: dlprim Nets
    for its forward and backward passes, its weights kept on the device, called with the
    model's own arguments and returning what the model returns. The same conversion as
    ``torch.compile(model, backend="dlprim")``, for a whole model, without dynamo's
    graph breaks."""
    return CompiledModule(model)
