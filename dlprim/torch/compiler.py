"""``torch.compile(model, backend="dlprim")``: the graphs dynamo captures run as dlprim Nets.

A captured graph (an FX GraphModule whose placeholders are the parameters, buffers and
inputs) is converted once, through PyTorch's ONNX exporter and ``dlprim.onnx``'s
importer, into a NetConfig: the Net then plans memory, shares buffers in place and runs
one prepared launch list per pass. Parameters and buffers are copied into the Net's
arena at every call (the optimizer may have changed them; a device copy each), running
statistics back out after a training forward.

Training: the Net is in train mode and gets, per graph output o, an input for o's
upstream gradient g and a loss ``sum(o * g)``, whose gradient with respect to o is g; so
``backward`` of the compiled function is the Net's backward, and the parameters'
gradients are returned to autograd from the Net's gradient arena.

A graph that cannot be converted (an operator the importer lacks, a parameter the
importer would transform) runs eagerly where its tensors are (on ``ocl`` for a model on
ocl) instead, with a ``CompileFallbackWarning`` once per reason; ``explain`` and
``reports`` say which ran where and why. A new input shape re-plans the Net (no kernel
is rebuilt). Integer and boolean inputs (token ids, masks) are Net inputs of their
dtype, and outputs are read back in theirs.
"""
import contextlib
import io
import logging
import re
import warnings
import weakref

import numpy as np
import torch

from ..core.copy import TransposeCopy
from ..core.pointwise import memo
from ..net import passes
from .export_attention import DOMAIN
from .ops_nn import matmul_precision
from . import compiler_dynamo
from . import device as _device
from . import tensor as _tensor

# (dlprim.torch.compile, CompiledModule and export_net: compiler_module.py)
__all__ = ["compile_graph", "CompileFallbackWarning", "explain", "reports"]

log = logging.getLogger(__name__)

# the numpy dtype of a Net tensor -> the torch dtype of its values
_TORCH_DTYPES = {np.dtype(k): v for k, v in (
    (np.float32, torch.float32), (np.float16, torch.float16), (np.float64, torch.float64),
    (np.int8, torch.int8), (np.int16, torch.int16), (np.int32, torch.int32),
    (np.int64, torch.int64), (np.uint8, torch.uint8), (np.bool_, torch.bool))}

_REPORTS = []  # a GraphReport per graph the backend saw, newest last
_SHARED = weakref.WeakSet()  # storages over a Net's weights (Runner.share_weights)


class GraphReport:
    """What became of one captured graph: ``where`` is "dlprim" or "eager", ``reason``
    why it fell back, ``operators`` the FX call targets and ``layers`` the Net's layer
    types (dlprim only)."""

    def __init__(self, operators, where, reason=None, layers=()):
        self.operators, self.where, self.reason, self.layers = operators, where, reason, list(layers)

    def __repr__(self):
        return "GraphReport(%s, %d operators%s)" % (
            self.where, len(self.operators), "" if self.reason is None else ": " + self.reason)


def reports():
    """The GraphReports of the graphs compiled so far in this process, oldest first."""
    return list(_REPORTS)


class CompileFallbackWarning(UserWarning):
    """A captured graph (or a model given to ``dlprim.torch.compile``) that did not become
    a dlprim Net: the message says why and what runs instead. Given once per reason and
    device; ``reports()`` keeps every graph's."""


_WARNED = set()  # (reason, where it runs instead) warned of already


def _warn_fallback(ops, reason, example_inputs, instead):
    """Say, once per reason and device, that a graph of ``ops`` runs as PyTorch's
    operators (``instead`` says how), and where: on the device of its tensors."""
    devices = sorted({str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)})
    where = ", ".join(devices) or "cpu"
    if (reason, where) in _WARNED:
        return
    _WARNED.add((reason, where))
    on_cpu = all(d == "cpu" for d in devices)
    warnings.warn("dlprim: a graph of %d operators is not a dlprim Net (%s); %s, as PyTorch's "
                  "operators on %s%s" % (
                      len(ops), reason, instead, where,
                      " (the model and its inputs are on the CPU: move them with .to('ocl'))"
                      if on_cpu else ""), CompileFallbackWarning, stacklevel=3)


class _Unsupported(Exception):
    pass


def _bumps(gm):
    """[(placeholder index, amount)] of the in-place counters a graph adds to."""
    return [(i, n.args[1]) for i, p in enumerate(_placeholders(gm))
            for n in p.users if n.op == "call_method" and n.target == "add_"
            and len(n.args) == 2 and isinstance(n.args[1], (int, float))]


def _placeholders(gm):
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _kinds(gm, example_inputs):
    """Per placeholder: "param" (a Parameter), "buffer" (a module buffer), "size" (a
    symbolic size: an int at run time) or "data"."""
    kinds = []
    for node, x in zip(_placeholders(gm), example_inputs):
        if not isinstance(x, torch.Tensor):
            kinds.append("size")
        elif isinstance(x, torch.nn.Parameter):
            kinds.append("param")
        elif "_buffers_" in node.name:
            kinds.append("buffer")
        else:
            kinds.append("data")
    return kinds


def _trains(gm):
    """Whether the graph computes in training mode (batch statistics, dropout)."""
    F = torch.nn.functional
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is F.batch_norm:
            training = n.kwargs.get("training", n.args[5] if len(n.args) > 5 else False)
            if training:
                return True
        if n.op == "call_function" and n.target is F.dropout:
            training = n.kwargs.get("training", n.args[2] if len(n.args) > 2 else True)
            p = n.kwargs.get("p", n.args[1] if len(n.args) > 1 else 0.5)
            if training and p:
                return True
    return False


class _Lifted(torch.nn.Module):
    """The graph with its parameters and buffers held as this module's own (named p<i>,
    after their placeholder index), so the exporter writes them as initializers."""

    def __init__(self, gm, kinds, example_inputs):
        super().__init__()
        self.gm, self.kinds = _on_cpu(gm), kinds
        self.sizes = {}  # placeholder index -> the int it is in this conversion
        for i, (kind, x) in enumerate(zip(kinds, example_inputs)):
            if kind == "param":
                self.register_parameter("p%d" % i, torch.nn.Parameter(_cpu(x)))
            elif kind == "buffer":
                self.register_buffer("p%d" % i, _cpu(x))
            elif kind == "size":
                self.sizes[i] = _size_value(x)

    def forward(self, *data):
        it = iter(data)
        args = [next(it) if k == "data" else self.sizes[i] if k == "size" else
                getattr(self, "p%d" % i) for i, k in enumerate(self.kinds)]
        out = self.gm(*args)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def _size_value(x):
    """The value of a size input. A symbolic size (dynamo's SymInt, while it compiles) is
    read from its hint: ``int()`` of it would add a guard on that very value, and dynamo
    would then trace and compile the graph again for every new size."""
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        if hint is not None:
            return int(hint)
    return int(x)


def _on_cpu(gm):
    """``gm``, or a copy of it whose operators create their tensors on the CPU where they
    named an ocl device (``torch.arange(n, device=x.device)`` of a model on ocl): the
    exporter traces the graph on the CPU."""
    import copy
    import torch.fx as fx

    def cpu(a):
        return torch.device("cpu") if isinstance(a, torch.device) and a.type == "ocl" else \
            "cpu" if isinstance(a, str) and a.startswith("ocl") else a
    graph = copy.deepcopy(gm.graph)
    changed = False
    for n in graph.nodes:
        if "device" in n.kwargs:
            new = cpu(n.kwargs["device"])
            if new is not n.kwargs["device"]:
                n.kwargs = {**n.kwargs, "device": new}
                changed = True
        args = fx.node.map_aggregate(n.args, lambda a: cpu(a) if isinstance(a, torch.device)
                                     else a)
        if any(x is not y for x, y in zip(args, n.args)):
            n.args, changed = args, True
    return fx.GraphModule(gm, graph) if changed else gm


def _cpu(x):
    x = x.detach()
    return _tensor.to_cpu(x) if x.device.type == "ocl" else x.clone()


# aten operators PyTorch's ONNX exporter has no symbolic for, learned from its errors: the
# exports of this process run them as their decompositions (_Decompose)
_DECOMPOSED = set()
_MISSING = re.compile(r"Exporting the operator '?aten::(\w+)'? to ONNX opset version \d+ "
                      r"is not supported")


def _decomposition(name):
    """[OpOverload callables] computing aten operator ``name`` from other aten operators:
    its CompositeImplicitAutograd kernel (what eager PyTorch runs: ``torch.diff`` is
    ``narrow`` and ``sub``), else the decomposition in ``torch._decomp``; one per overload
    (not the ``out`` ones), the default first."""
    from torch._decomp import decomposition_table
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return []
    names = sorted((n for n in packet.overloads() if "out" not in n), key=lambda n: n != "default")
    found = []
    for n in names:
        op = getattr(packet, n)
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
            found.append(op.decompose)
        elif op in decomposition_table:
            found.append(decomposition_table[op])
    return found


class _Decompose(torch.overrides.TorchFunctionMode):
    """While the exporter traces: a torch function whose aten operator is in
    ``_DECOMPOSED`` runs as that operator's decomposition, so the trace records the
    operators it is made of, which the exporter has."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = torch.overrides.resolve_name(func)
        name = name.rsplit(".", 1)[-1] if name else None
        if name in _DECOMPOSED:
            for decomposed in _decomposition(name):
                try:
                    return decomposed(*args, **kwargs)
                except (TypeError, RuntimeError):  # the arguments of another overload
                    continue
        return func(*args, **kwargs)


def _to_onnx(module, data, train):
    """The ONNX model (bytes) of ``module`` called with ``data``. An aten operator the
    exporter lacks is decomposed (and remembered for later exports) and the export
    tried again; one with no decomposition raises the exporter's error."""
    for _ in range(16):
        try:
            with _Decompose():
                return _export(module, data, train)
        except Exception as e:  # the exporter's errors are of many kinds
            missing = _MISSING.search(str(e))
            if missing is None or missing.group(1) in _DECOMPOSED or \
                    not _decomposition(missing.group(1)):
                raise
            log.info("dlprim backend: aten::%s is exported as its decomposition",
                     missing.group(1))
            _DECOMPOSED.add(missing.group(1))
    raise RuntimeError("PyTorch's ONNX exporter: too many operators to decompose (%s)"
                       % ", ".join(sorted(_DECOMPOSED)))


@contextlib.contextmanager
def _exporter_log_off():
    """PyTorch's TorchScript exporter switches its ONNX log on for every export (its
    ``setup_onnx_logging`` tests the function ``_jit_is_onnx_log_enabled``, always true,
    not its value), so an export that fails, which the backend retries with a
    decomposition, prints the whole traced graph: here the log stays off."""
    try:
        from torch.onnx._internal.torchscript_exporter import utils
    except ImportError:  # another PyTorch: its exporter as it is
        utils = None
    setup = getattr(utils, "setup_onnx_logging", None)
    was = torch._C._jit_is_onnx_log_enabled()  # (on already after any earlier export)
    torch._C._jit_set_onnx_log_enabled(False)
    if setup is not None:
        utils.setup_onnx_logging = lambda verbose: contextlib.nullcontext()
    try:
        yield
    finally:
        if setup is not None:
            utils.setup_onnx_logging = setup
        torch._C._jit_set_onnx_log_enabled(was)


def _export(module, data, train):
    f = io.BytesIO()
    mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
    mha = getattr(torch.backends, "mha", None)
    fast = mha.get_fastpath_enabled() if mha else None
    try:
        if mha:  # the fused transformer kernels of eval mode have no ONNX form
            mha.set_fastpath_enabled(False)
        with warnings.catch_warnings(), _exporter_log_off():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(data), f, opset_version=17, dynamo=False,
                              do_constant_folding=False, training=mode,
                              input_names=["in%d" % i for i in range(len(data))],
                              custom_opsets={DOMAIN: 1})
    finally:
        if mha:
            mha.set_fastpath_enabled(fast)
    return f.getvalue()


def _netconfig(module, example_inputs, kinds, train, index_of):
    """(NetConfig, weights, output shapes, weight sources, folded buffers) of ``module``
    (called with the data inputs; its weights are the placeholders named as ``index_of``
    says), or _Unsupported."""
    from ..onnx import to_netconfig
    from ..onnx.errors import OnnxImportError
    data = [_cpu(x) for x, k in zip(example_inputs, kinds) if k == "data"]
    try:
        model = _to_onnx(module, data, train)
    except Exception as e:  # the exporter's errors are of many kinds
        raise _Unsupported("PyTorch's ONNX exporter: %s" % str(e).split("\n")[0]) from None
    if train:
        model = _training_nodes_by_the_net(model)
    try:
        # parameters stay parameters: a class token expanded over the batch is computed
        # in the net, not folded into a constant the backend could not trace back
        cfg, weights = to_netconfig(model, live=[n for n, i in index_of.items()
                                                 if kinds[i] == "param"],
                                    mode="train" if train else "predict")
    except OnnxImportError as e:
        raise _Unsupported(str(e).split("\n")[0] + (" " + "; ".join(
            "%s '%s': %s" % p for p in getattr(e, "problems", [])[:5]))) from None
    _seed_dropout(cfg)
    sources, folded = _weight_sources(model, weights, kinds, example_inputs, index_of)
    return cfg, weights, _output_types(model), sources, folded


def _training_nodes_by_the_net(model):
    """``model`` (ONNX bytes of a training graph) with its Dropout nodes of
    ``training_mode`` true whose mask nothing reads written as in inference: the Dropout
    layer drops in training (PyTorch's inverted dropout with masks of its own random
    stream), where ONNX's node drops whatever the Net's mode, which the importer refuses.
    (BatchNormalization of ``training_mode=1`` is the importer's, for a train-mode Net:
    ``to_netconfig(mode="train")``.)"""
    import onnx
    proto = onnx.load_from_string(model)
    graph = proto.graph
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    changed = False
    for node in graph.node:
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2] and \
                not any(o in read for o in node.output[1:]):
            del node.input[2:]  # (the ratio, input 1, stays)
            del node.output[1:]
            changed = True
    return proto.SerializeToString() if changed else model


def _seed_dropout(cfg):
    """Dropout layers' masks, and those of attention-probability dropout folded into the
    fused attention, seeded from PyTorch's default generator (``torch.manual_seed``
    reproduces them), a seed per layer drawn at conversion."""
    for op in cfg.operators:
        if op["type"] == "Dropout" or (op["type"] == "ScaledDotProductAttention" and
                                       (op.get("options") or {}).get("dropout")):
            seed = int(torch.randint(0, 2 ** 32 - 1, (), dtype=torch.int64))
            op.setdefault("options", {})["seed"] = seed


def _placeholders_read(name, producer, index_of):
    """The placeholder indices ONNX tensor ``name`` depends on (names in ``index_of``),
    -1 standing for any data input (in<i>); empty for a tensor of constants only."""
    found, todo, seen = set(), [name], set()
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in index_of:
            found.add(index_of[t])
        elif t[:2] == "in" and t[2:].isdigit():
            found.add(-1)
        node = producer.get(t)
        if node is not None:
            todo.extend(node.input)
    return found


def _weight_sources(model, weights, kinds, example_inputs, index_of):
    """({Net weight: (placeholder index, "same" or "t")}, {buffer index: its values}): the
    parameter or buffer each weight of the Net holds, as it is or transposed (a Linear's
    weight the exporter wrote as MatMul by its transpose), and the buffers the importer
    computed weights from at conversion (a rotary embedding's cos and sin tables from
    ``inv_freq``), which the Net then holds as constants; _Unsupported for any other
    transformation of a parameter."""
    import onnx
    import numpy as np
    producer = {o: n for n in onnx.load_from_string(model).graph.node for o in n.output}
    out, folded = {}, {}
    for name, value in weights.items():
        if name in index_of and kinds[index_of[name]] == "buffer":
            # (a buffer as it is: tracing a training graph moved the running statistics,
            # so its values are not the model's any more)
            out[name] = (index_of[name], "same")
            continue
        read = _placeholders_read(name, producer, index_of) if name not in index_of else None
        if read is not None and not read:
            continue  # a constant of the graph itself (a scale, a mask): the Net keeps it
        if read and all(i >= 0 and kinds[i] == "buffer" for i in read):
            for i in read:  # (the runner compares them at each call: see _Runner.takes)
                folded[i] = _cpu(example_inputs[i])
            continue
        source, seen = name, 0
        while source not in index_of and seen < 8:
            node = producer.get(source)  # back through Transpose, Reshape, Identity, ...
            if node is None or node.op_type not in ("Transpose", "Reshape", "Identity",
                                                    "Squeeze", "Unsqueeze", "Flatten"):
                raise _Unsupported("the Net weight %s is computed from a parameter in a way "
                                   "the backend does not follow" % name)
            source, seen = node.input[0], seen + 1
        index = index_of.get(source, -1)
        if index < 0 or kinds[index] == "data":
            raise _Unsupported("the Net weight %s is computed from an input" % name)
        # compared by value, a parameter's initializer too: the importer may keep its
        # name for a transposed copy (a MatMul by a parameter, held as InnerProduct's)
        p = _cpu(example_inputs[index]).numpy()
        w = np.asarray(value)
        if w.size == p.size and np.array_equal(w.ravel(), p.ravel()):
            how = "same"
        elif p.ndim == 2 and w.size == p.size and np.array_equal(w.ravel(), p.T.ravel()):
            how = "t"
        else:
            raise _Unsupported("the Net weight %s is parameter %d transformed" % (name, index))
        if how == "same" and p.ndim == 2 and p.shape[0] == p.shape[1] > 1 and \
                np.array_equal(p, p.T):
            raise _Unsupported("parameter %d is symmetric: how the Net holds it is ambiguous"
                               % index)
        out[name] = (index, how)
    return out, folded


def _output_types(model):
    """{output name: (shape, whether it is floating point)} of the ONNX model."""
    import onnx
    graph = onnx.load_from_string(model).graph
    floating = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
    return {o.name: ([d.dim_value for d in o.type.tensor_type.shape.dim],
                     o.type.tensor_type.elem_type in floating) for o in graph.output}


def _add_gradient_losses(cfg, types):
    """Per floating-point output o: an input "grad:o" and a loss sum(o * grad:o), so that
    the Net's backward starts from the upstream gradient (integer and boolean outputs
    have none). Returns the output names."""
    outputs = list(cfg.outputs)
    losses = []
    for k, name in enumerate(outputs):
        shape, floating = types[name]
        if not floating:
            continue
        g = cfg.add_input("grad:%s" % name, shape)
        prod = cfg.add("Elementwise", name="grad_dot%d/prod" % k, inputs=[name, g],
                       options={"operation": "prod"})
        if not shape:  # a 0-d output (a reduced loss): Reduction takes an axis to reduce
            prod = cfg.add("Reshape", name="grad_dot%d/1d" % k, inputs=[prod],
                           options={"dims": [1]})
        losses.append(cfg.add("Reduction", name="grad_dot%d" % k, inputs=[prod],
                              outputs=["loss_grad%d" % k], options={"keep_dim": False}))
    cfg.set_outputs(outputs + losses)
    return outputs


class _Runner:
    """One converted graph: its Net, and the copies in and out of it."""

    def __init__(self, gm, example_inputs, kinds, train, cfg, weights, outputs, sources,
                 bumps=None, folded=None):
        from ..net import Net, PREDICT, TRAIN
        self.kinds, self.train = kinds, train
        ocl = [x for x in example_inputs if isinstance(x, torch.Tensor) and x.device.type == "ocl"]
        self.index = (ocl[0].device.index or 0) if ocl else 0
        self.ctx = _device.context(self.index)
        self.host = not ocl  # a CPU model: copies in and out at every call
        if self.host:
            warnings.warn("dlprim backend: the model and its inputs are on the CPU, the net runs "
                          "on %s: parameters and inputs are copied there at every call (move "
                          "the model with .to('ocl') to keep them there)" % self.ctx.name,
                          stacklevel=2)
        self.data_names = [i["name"] for i in cfg.inputs if not i["name"].startswith("grad:")]
        self.wants_grad = {i["name"]: i.get("requires_grad", False) for i in cfg.inputs}
        self.outputs = list(outputs)
        inputs = {i["name"] for i in cfg.inputs}
        # the outputs that take an upstream gradient (the floating-point ones)
        self.graded = [o for o in self.outputs if "grad:" + o in inputs]
        # in-place counters the graph bumps (BatchNorm's num_batches_tracked += 1)
        self.bumps = _bumps(gm) if bumps is None else bumps
        # PyTorch's float32 matmul precision when the graph is converted ("high": TF32)
        # loaded and set up without the layers' random initialisation: every parameter
        # is written from the model next (set_parameters is strict)
        self.net = Net(self.ctx, mode=TRAIN if train else PREDICT, precision=matmul_precision())
        self.net.load(cfg)
        self.net.setup()
        self.net.set_parameters(weights)
        self.sources = sources  # Net weight -> (placeholder index, "same" or "t")
        # buffer index -> its values at conversion (the Net holds constants made of them)
        self.folded = folded or {}
        self.folded_seen = {i: None for i in self.folded}  # index -> (id, version) checked
        self.refused = set()  # data input shapes the Net could not be re-planned for
        self.shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else None
                       for x in example_inputs]
        self.versions = {}  # weight name -> (tensor id, version) last copied into the Net
        self.shared = {}  # weight name -> the Storage the model's tensor and the Net share
        self.step = 0
        self._grad_views = {}  # parameter index -> (its gradient tensor, AccumulateGrad)
        self._candidates = None  # parameter indices that _direct_grads may take
        self._weights = {}  # parameter index -> [(Net weight, "same" or "t")]

    def _write(self, dst, t):
        """dlprim tensor ``dst`` = torch tensor t (an ocl tensor, else copied from the host),
        of dst's dtype."""
        t = t.detach().reshape(dst.shape)
        if t.device.type == "ocl":
            src = _tensor.as_dlprim(t)  # (bool is stored as bytes: viewed as the Net's bool)
            if t.dtype == torch.bool and src.dtype != dst.dtype:
                src = src._view(src.shape, 0, dst.dtype)
            dst.copy_from(src)
        else:
            dst.to_device(t.contiguous().numpy(), wait=False)

    def share_weights(self, tensors):
        """Make the model's ocl weights that the Net holds as they are live in the Net's
        parameter arena (their values copied there first): no copy per call, optimizer
        steps land in the Net, and the Net's BatchNorm statistics are the model's. A
        tensor another Net shares already is left to copies."""
        for name, (i, how) in self.sources.items():
            t = tensors[i]
            dst = self.net.param(name)
            if (how != "same" or t.device.type != "ocl" or t.dtype != torch.float32
                    or not t.is_contiguous() or t.storage_offset() or t.numel() != dst.size
                    or t._ocl_storage in _SHARED):
                continue
            self._write(dst, t)
            storage = _tensor.Storage.over(self.index, dst)
            t._ocl_storage = storage
            _SHARED.add(storage)
            self.shared[name] = storage

    def _data_shapes(self, tensors):
        return tuple(tuple(t.shape) for t, k in zip(tensors, self.kinds) if k == "data")

    def planned_for(self, tensors):
        """Whether the Net is planned for these inputs' shapes as it is."""
        return all(tuple(t.shape) == self.net.tensor(n).shape for n, t in zip(
            self.data_names, (t for t, k in zip(tensors, self.kinds) if k == "data")))

    def takes(self, tensors):
        """Whether the Net runs these inputs: their shapes, or new ones it re-plans for (a
        new batch size; kernels are kept). False where the exported graph fixed a size
        (a Reshape of constant dims, as PyTorch's exporter writes a sequence length):
        then the Net stays as it was, and these shapes are not tried on it again."""
        from ..layers.base import LayerError
        if not self._folded_unchanged(tensors):
            return False
        if self.planned_for(tensors):
            return True
        key = self._data_shapes(tensors)
        if key in self.refused:
            return False
        data = [t for t, k in zip(tensors, self.kinds) if k == "data"]
        shapes = {n: tuple(t.shape) for n, t in zip(self.data_names, data)}
        changed = {n: s for n, s in shapes.items() if s != self.net.tensor(n).shape}
        try:
            self.net.reshape(self._grad_shapes(changed))
        except LayerError as e:
            log.debug("dlprim backend: the Net does not re-plan for %s: %s", key, e)
            self.refused.add(key)
            if self.train:  # the gradient inputs were re-planned first: undo it all
                self.net.reshape({n: self.net.tensor(n).shape for n in self.data_names})
            return False
        return True

    def _folded_unchanged(self, tensors):
        """Whether the buffers the Net's constants were computed from hold the values
        they had at conversion: compared (a read to the host) only when the tensor or its
        version counter changed, which every in-place operator but the foreach family
        moves."""
        for i, values in self.folded.items():
            t = tensors[i]
            seen = (id(t), t._version)
            if self.folded_seen[i] == seen:
                continue
            if t.shape != values.shape or not torch.equal(_cpu(t), values):
                return False
            self.folded_seen[i] = seen
        return True

    def forward(self, tensors):
        data = [t for t, k in zip(tensors, self.kinds) if k == "data"]
        if not self.takes(tensors):
            raise RuntimeError("dlprim compiled graph: inputs of shapes %s do not fit the net"
                               % [tuple(t.shape) for t in data])
        for name, (i, how) in self.sources.items():
            t = tensors[i]
            if self.shared.get(name) is not None and \
                    getattr(t, "_ocl_storage", None) is self.shared[name]:
                continue  # t's memory is the Net's weight (``share_weights``)
            # a CPU tensor's version counter moves at every in-place change (an optimizer
            # step); an ocl tensor's does not under the foreach and fused optimizers, so an
            # ocl weight the Net does not share is copied at every call (a device copy)
            seen = (id(t), t._version) if t.device.type != "ocl" else None
            if seen is None or self.versions.get(name) != seen:
                if how == "t" and t.device.type == "ocl" and t.dtype == torch.float32:
                    _transposed_into(self.net.param(name), t)
                else:
                    self._write(self.net.param(name), t.detach().t() if how == "t" else t)
                self.versions[name] = seen
        for name, t in zip(self.data_names, data):
            self._write(self.net.tensor(name), t)
        self.net.forward()
        self.step += 1
        if self.train:
            self._running_stats_back(tensors)
        with torch.no_grad():
            for amount in {amount for _, amount in self.bumps}:  # one call per amount
                torch._foreach_add_([tensors[i] for i, a in self.bumps if a == amount], amount)
        return tuple(self._read(self.net.tensor(o)) for o in self.outputs)

    def _grad_shapes(self, changed):
        """The new input shapes, and those of the gradient inputs (the outputs' new shapes,
        known after a re-plan of the inputs alone)."""
        if not self.train:
            return changed
        self.net.reshape({**changed, **{"grad:" + o: (1,) for o in self.graded}})
        return {**changed, **{"grad:" + o: self.net.tensor(o).shape for o in self.graded}}

    def _read(self, t):
        """A torch tensor of the Net's tensor ``t``, of its dtype (bool included)."""
        if self.host:
            return torch.from_numpy(t.to_host())
        out = _tensor.empty(t.shape, _TORCH_DTYPES[t.dtype], self.index)
        dst = _tensor.as_dlprim(out)  # (a bool tensor's storage holds bytes: viewed as them)
        dst.copy_from(t if t.dtype == dst.dtype else t._view(t.shape, 0, dst.dtype))
        return out

    def _running_stats_back(self, tensors):
        for name, (i, how) in self.sources.items():
            if self.kinds[i] == "buffer" and tensors[i].dtype == torch.float32 and \
                    how == "same" and name not in self.shared:
                src = self.net.param(name)
                t = tensors[i]
                with torch.no_grad():
                    if t.device.type == "ocl":
                        _tensor.as_dlprim(t).copy_from(src.view(tuple(t.shape)))
                    else:
                        t.copy_(torch.from_numpy(src.to_host()).reshape(t.shape))
                self.versions[name] = (id(t), t._version)  # the Net holds these values

    def backward(self, step, grads, tensors):
        if step != self.step:
            raise RuntimeError("dlprim compiled graph: backward of an earlier call (the graph "
                               "ran again before this backward); call backward after each "
                               "forward, or compile with another backend")
        for o, g in zip(self.outputs, grads):
            if o not in self.graded:
                continue  # an integer or boolean output: no gradient
            dst = self.net.tensor("grad:" + o)
            if g is None:
                dst.zero_()
            else:
                self._write(dst, g.contiguous() if g.device.type == "ocl" else g)
        direct = self._direct_grads(tensors)
        # (a gradient of its own is added to on the torch side, the Net's gradients zeroed
        # like any other; a view of the Net's gradient memory sums this backward into it)
        adding = {self._weights[i][0][0] for i, (p, view) in direct.items()
                  if p.grad is view and self._shares(i)}
        if not adding:
            self.net.zero_grad()
        else:  # those .grad views sum this backward into what they hold
            for name in self.net.params:
                if name not in adding:
                    self.net.param_diff(name).zero_()
        self.net.backward()
        out = [None] * len(self.kinds)
        names = iter(self.data_names)
        for i, kind in enumerate(self.kinds):
            name = next(names) if kind == "data" else None
            if name is not None and self.wants_grad.get(name):
                out[i] = self._read(self.net.tensor_diff(name))
        for i, (p, view) in direct.items():
            if not self._shares(i):
                self._sum_into(i, view, adding=p.grad is view)
            if p.grad is not view:
                p.grad = view
        for name, (i, how) in self.sources.items():
            if self.kinds[i] != "param" or i in direct:
                continue
            g = self._read(self.net.param_diff(name))
            g = (g.t() if how == "t" else g).reshape(self.shapes[i])
            out[i] = g if out[i] is None else out[i] + g  # a parameter used twice
        return out

    def _sum_into(self, i, view, adding):
        """Parameter i's own gradient tensor ``view`` = (``adding``: +=) the sum of its Net
        weights' gradients, each as the parameter is laid out. The first is written with
        one copy, nothing dispatched (every step, for every such parameter); the rest (a
        tied weight's other uses, gradients being accumulated) are added."""
        for k, (name, how) in enumerate(self._weights[i]):
            diff = self.net.param_diff(name)
            if k == 0 and not adding:
                dst = _tensor.as_dlprim(view)
                if how == "t":
                    _transposed_into(dst, _over(self.index, diff))
                else:
                    dst.copy_from(diff.view(dst.shape))
                continue
            diff = _over(self.index, diff)
            with torch.no_grad():
                view.add_(diff.t() if how == "t" else diff.view(view.shape))

    def _shares(self, i):
        """Whether parameter i's gradient is a view of the Net's gradient memory (one Net
        weight, held as the parameter is), not a tensor of its own."""
        weights = self._weights[i]
        return len(weights) == 1 and weights[0][1] == "same"

    def _direct_grads(self, tensors):
        """{parameter index: (parameter, its gradient tensor)} for the parameters whose
        gradient this backward leaves in ``.grad`` itself, not through autograd: a view of
        the Net's gradient memory (a weight the Net holds as it is: no copy, no add), or a
        tensor of the parameter's own that each backward writes (a weight held transposed,
        or a parameter that is several Net weights, such as tied embeddings: their sum).
        For ocl parameters that autograd's ``backward()`` would accumulate into
        (``torch.autograd.grad`` takes its gradients through autograd), without gradient
        hooks, whose ``.grad`` is None or that tensor (then this backward adds to it, as
        accumulation does). The next backward writes the same memory, as a later
        ``.grad +=`` would."""
        if self.host or torch.is_grad_enabled():  # create_graph: gradients are graphs
            return {}
        if self._candidates is None:  # what the graph fixes: each parameter's Net weights
            self._weights = {}
            for name, (i, how) in self.sources.items():
                if self.kinds[i] == "param":
                    self._weights.setdefault(i, []).append((name, how))
            self._candidates = sorted(self._weights)
        out = {}
        for i in self._candidates:
            p = tensors[i]
            if p._backward_hooks or p._post_accumulate_grad_hooks is not None or \
                    p.dtype != torch.float32 or p.device.type != "ocl":
                continue
            view, node = self._grad_views.get(i, (None, None))
            if view is None or view.shape != p.shape:
                diffs = [self.net.param_diff(name) for name, _ in self._weights[i]]
                if any(d.size != p.numel() for d in diffs) or not p.requires_grad or \
                        p.grad_fn is not None or not p.is_contiguous():
                    continue
                if self._shares(i):  # (p is contiguous: its shape says its strides)
                    view = _over(self.index, diffs[0], tuple(p.shape))
                else:  # a tensor of its own, written each backward
                    view = _tensor.empty(p.shape, torch.float32, self.index)
                with torch.enable_grad():  # p's AccumulateGrad, behind a view of p
                    node = p.view_as(p).grad_fn.next_functions[0][0]
                self._grad_views[i] = (view, node)
            try:
                if not torch._C._will_engine_execute_node(node):
                    continue  # backward(inputs=...) without p
            except RuntimeError:  # autograd.grad(): no .grad is written
                return {}
            grad = p.grad
            if grad is None or grad is view:
                out[i] = (p, view)
        return out


def _over(index, t, shape=None):
    """A contiguous torch view of the dlprim tensor ``t`` (float32) on ocl:index, of its
    shape or of ``shape`` (as many elements)."""
    shape = tuple(t.shape) if shape is None else shape
    return _tensor.OclTensor(_tensor.Storage.over(index, t), shape,
                             _tensor.contiguous_strides(shape), 0, torch.float32)


def _transposed_into(dst, t):
    """dlprim tensor ``dst`` (R, C) = the 2-D float32 ocl tensor ``t`` (C, R) transposed:
    one copy, nothing staged (a weight the Net holds transposed, each call). A contiguous
    t goes through ``TransposeCopy`` (tiles on GPUs, register blocks on CPUs: 3-4x the
    strided copy on a 2-core CPU), another through a strided copy."""
    rows, cols = dst.shape
    s0, s1 = t.stride()
    if (s0, s1) == (rows, 1) and dst.dtype == np.float32:
        op = memo(dst.ctx, ("torch_transposed_into", cols, rows),
                  lambda: TransposeCopy(dst.ctx, (cols, rows), (1, 0)))
        op(t._ocl_storage.at(t.storage_offset(), (cols, rows)), dst)
        return
    _tensor.strided_copy(dst.ctx, (rows, cols), _tensor._start(t), (s1, s0), dst, (cols, 1))


class _NetFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, runner, *tensors):
        outs = runner.forward(tensors)
        ctx.runner, ctx.step, ctx.tensors = runner, runner.step, tensors
        ctx.mark_non_differentiable(*[t for t in outs if not t.is_floating_point()])
        return outs

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(ctx.runner.backward(ctx.step, grads, ctx.tensors))


def compile_graph(gm, example_inputs):
    """The dynamo backend "dlprim": a callable running ``gm`` as dlprim Nets, or ``gm``
    itself (eagerly) where it cannot be converted (see ``reports``).

    A graph with symbolic sizes among its inputs is converted once per set of their
    values (the Net for a new batch size alone is re-planned, not converted again)."""
    kinds = _kinds(gm, example_inputs)
    sizes = [i for i, k in enumerate(kinds) if k == "size"]
    first = _convert(gm, example_inputs, kinds)
    if first is None:
        return gm.forward
    runners = {tuple(_size_value(example_inputs[i]) for i in sizes): [first]}

    def run(*tensors):
        key = tuple(int(tensors[i]) for i in sizes)
        runner = _pick(runners.setdefault(key, []), tensors,
                       lambda: _convert(gm, tensors, kinds))
        if runner is None:
            return gm.forward(*tensors)
        return _run(runner, tensors)
    return run


def _pick(runners, tensors, convert):
    """The runner of ``runners`` that takes ``tensors``, else a new one from ``convert()``
    added to them; None where there can be none. A runner planned for these very shapes
    is taken first (nothing is re-planned: after a new sequence length, an earlier one
    finds its own Net as it left it), then one that can re-plan for them."""
    live = [r for r in runners if r is not None]
    for runner in sorted(live, key=lambda r: not r.planned_for(tensors)):
        if runner.takes(tensors):
            return runner
    if None in runners:
        return None
    runner = convert()
    runners.append(runner)
    return runner


def _run(runner, tensors):
    if runner.train:
        return tuple(_NetFunction.apply(runner, *tensors))
    with torch.no_grad():
        return runner.forward(tensors)


def _convert(gm, example_inputs, kinds, module=None, index_of=None, train=None, ops=None,
             bumps=None, instead="the graph runs as dynamo captured it"):
    """A _Runner of ``gm`` for these inputs (or of ``module``, called with the data
    inputs, its weights named as ``index_of`` says), or None where it cannot be one:
    reported, and warned of (``instead`` says what runs in its place)."""
    if ops is None:
        ops = [str(getattr(n.target, "__name__", n.target)) for n in gm.graph.nodes
               if n.op in ("call_function", "call_method", "call_module")]
    train = _trains(gm) if train is None else train
    if module is None:
        module = _Lifted(gm, kinds, example_inputs)
        index_of = {"p%d" % i: i for i, k in enumerate(kinds) if k in ("param", "buffer")}
    try:
        cfg, weights, shapes, sources, folded = _netconfig(module, example_inputs, kinds,
                                                           train, index_of)
        data = [x for x, k in zip(example_inputs, kinds) if k == "data"]
        wanted = [x.requires_grad for x in data] if torch.is_grad_enabled() else [False] * len(data)
        for spec, want in zip(cfg.inputs, wanted):  # an input needing its gradient (a graph
            if want:                                # after a break) gets one from the Net
                spec["requires_grad"] = True
        grads = train or any(wanted) or (torch.is_grad_enabled() and any(
            x.requires_grad for x, k in zip(example_inputs, kinds) if k == "param"))
        if not grads:  # never run backward: GELU and SiLU into the products before them
            cfg = passes.run(cfg, passes.INFERENCE_RULES)
        outputs = list(cfg.outputs)
        if grads:
            _add_gradient_losses(cfg, shapes)
            if not train:  # gradients of an eval-mode graph: the Net trains, BatchNorm must not
                for op in cfg.operators:
                    if op["type"] == "BatchNorm":
                        op.setdefault("options", {})["use_global_stats"] = True
        try:
            runner = _Runner(gm, example_inputs, kinds, grads, cfg, weights, outputs, sources,
                             bumps, folded)
        except Exception as e:  # a layer the Net refuses for these dtypes or shapes
            log.debug("dlprim backend: building the Net failed", exc_info=True)
            raise _Unsupported("the Net could not be built: %s: %s"
                               % (type(e).__name__, str(e).split("\n")[0])) from None
    except _Unsupported as why:
        _REPORTS.append(GraphReport(ops, "eager", str(why)))
        log.info("dlprim backend: a graph of %d operators runs eagerly: %s", len(ops), why)
        _warn_fallback(ops, str(why), example_inputs, instead)
        return None
    _REPORTS.append(GraphReport(ops, "dlprim", layers=[op["type"] for op in cfg.operators]))
    return runner


class Explanation:
    """What ``explain`` found: ``graphs`` (a GraphReport per captured graph: where it runs
    and why) and ``breaks`` (dynamo's reasons for splitting the model into graphs)."""

    def __init__(self, graphs, breaks):
        self.graphs, self.breaks = graphs, breaks

    def __str__(self):
        lines = ["%d graph%s, %d graph break%s" % (
            len(self.graphs), "" if len(self.graphs) == 1 else "s",
            len(self.breaks), "" if len(self.breaks) == 1 else "s")]
        for k, g in enumerate(self.graphs):
            lines.append("  graph %d: %d operators on %s%s" % (
                k, len(g.operators), g.where, "" if g.reason is None else " (%s)" % g.reason))
        for b in self.breaks:
            lines.append("  break: %s" % b)
        return "\n".join(lines)

    __repr__ = __str__


def explain(model, *example_inputs):
    """Compile ``model`` with the dlprim backend and run it once on ``example_inputs``:
    which captured graphs run as dlprim Nets, which eagerly on ocl and why, and where
    dynamo broke the model into graphs. Returns an ``Explanation``."""
    import torch._dynamo
    torch._dynamo.reset()
    start = len(_REPORTS)
    torch.compile(model, backend=compile_graph)(*example_inputs)
    graphs = _REPORTS[start:]
    torch._dynamo.reset()
    found = torch._dynamo.explain(model)(*example_inputs)
    torch._dynamo.reset()
    return Explanation(graphs, [getattr(r, "reason", str(r)) for r in found.break_reasons])


# torch.compile of ocl models: dynamo traces ocl tensors as tensors once it is imported,
# and knows backend="dlprim" even where dlprim is not installed as a package
compiler_dynamo.install_when_imported(backend=compile_graph)
