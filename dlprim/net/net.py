"""Net: a static graph with its own autograd, run from flat lists of prepared launches.

JSON graph -> layers -> shapes (``setup``) -> parameter arenas -> per mode: each layer's
``Setup`` in that mode (flags, workspace, saved tensors) -> backprop marks and lifetimes
(``dlprim.net.autograd``) -> one planned arena for activations, gradients, workspaces and
saved tensors (``dlprim.net.memory_plan``) -> forward and backward launch lists bound once.

Two ways to drive it, the DLPrimitives one::

    net = dp.Net(ctx); net.mode = dp.PREDICT
    net.load_from_json_file("resnet18.json"); net.setup(); net.load_parameters("r18.dlp")
    net.tensor("data").to_device(batch); net.forward(); out = net.tensor("prob").to_host()

and the Pythonic one::

    net = dp.Net(ctx, models.lenet(batch=64), mode="train")
    outs = net(data=x, label=y); net.backward()
"""
import collections
import logging
import os
import weakref
from typing import TYPE_CHECKING, Any, Dict, Union

import numpy as np

from .. import layers as _layers
from ..dtypes import as_dtype
from ..errors import InputError
from ..kernels import program
from ..layers.base import PREDICT, TRAIN, LayerError, TensorSpec
from ..core.precision import HALF_STORAGE_TYPES, check_precision
from ..tensor import Tensor
from ..utils import shape_problem
from . import inputs as inputs_rules
from . import prediction, weights
from .execution_plan import ExecutionPlan
from .graph import GraphError, load_graph, load_graph_file, parse_json
from .mixed_precision import LossScale, with_casts
from .parameters import ParamStore

# the input shapes whose plans (and input tensors) a net keeps, the latest used: a prefill
# and a decode, the sequence lengths a compiled graph meets, come back to theirs
PLANS_KEPT = 8

__all__ = ["Net", "TRAIN", "PREDICT"]

log = logging.getLogger(__name__)
_WARNED_FP16_ON_CPU = weakref.WeakSet()  # contexts told once that fp16 is slow on their CPU

if TYPE_CHECKING:
    from ..context import Context


class Net:
    """A graph of layers with parameters, gradients and planned memory on one Context."""

    def __init__(self, ctx: "Context", graph: Any = None, mode: str = TRAIN, seed: int = 0,
                 input_shape: Any = None, loss: Union[str, None] = None,
                 precision: str = "fp32") -> None:
        """``graph``: a NetConfig, dict, JSON text or file path, or a dlprim.nn model, which
        needs ``input_shape`` (its input ``data``, batch first) and may take ``loss``
        ("cross_entropy" ...: see ``Module.netconfig``). With a graph, the net is set up
        and its parameters initialised from ``seed``. ``precision`` ("fp32", "tf32", "fp16"
        or "bf16", ``dlprim.core.precision``): "tf32" runs the GEMMs and convolutions on
        tensor cores where the device has them (float32 storage and sums); "fp16" stores
        the activations of the layers that take half as float16, with float32 parameters
        and a dynamic loss scale (``loss_scale``; ``net/mixed_precision.py``); "bf16" stores
        them as bfloat16 (float32's range: no loss scale)."""
        self.ctx = ctx
        self._mode = _check_mode(mode)
        self._precision = check_precision(precision, "Net: precision")
        # fp16: what multiplies the loss gradients, and how it moves (the solvers use it)
        self.loss_scale = LossScale() if precision == "fp16" else None
        # the 16-bit storage of the activations that take it (mixed precision), else None
        self._half = HALF_STORAGE_TYPES.get(precision)
        if self._half and ctx.facts.is_cpu and ctx not in _WARNED_FP16_ON_CPU:
            _WARNED_FP16_ON_CPU.add(ctx)
            log.warning("precision %s on the CPU device %s: 16-bit storage saves memory "
                        "but no time there, a decoder's few-row products aside; layers with "
                        "few channels run up to 1.5x slower than fp32 (docs/precision.md)",
                        precision, ctx.name)
        self._keep = False
        self.graph = None
        self.layers = []
        self._plans = {}
        self._ready = False
        self._shared_params = None  # a predict-mode copy's view of another net's parameters
        self._prediction = None  # the predict-mode copy behind predict(), made on first use
        graph = _model_graph(graph, input_shape, loss)
        if graph is not None:
            self.load(graph)
            self.setup()
            self.initialize_parameters(seed=seed)

    # ----- loading (DLPrimitives names kept)
    def load(self, source):
        """Load a graph from a dict, JSON text, a file path or a NetConfig."""
        self._set_graph(load_graph(source))

    def _set_graph(self, graph):
        self.graph = graph
        self._ready = False
        self._plans = {}
        self._shape_plans = collections.OrderedDict()
        self._handles = {}  # value id -> the Tensor tensor() gave for it (follows re-plans)

    def load_from_json(self, source):
        """DLPrimitives' name for ``load``: a dict or JSON text (a string is never a path)."""
        if isinstance(source, (str, bytes)):
            source = parse_json(source, "the text given to load_from_json")
        self.load(source)

    def load_from_json_file(self, path):
        """Load the graph from a JSON file (DLPrimitives' name)."""
        self._set_graph(load_graph_file(path))

    def load_model(self, model: Any) -> None:
        """DLPrimitives' import of an external model, e.g. a built ``dp.ONNXModel``: its
        ``network`` graph is loaded and set up in the current mode, then its
        ``parameters`` ({name: array}) are written, all of them checked by name and shape."""
        self.load_from_json(model.network)
        self.setup()
        self.set_parameters(model.parameters)

    # ----- setup: layers, shapes, parameters
    def setup(self):
        """Create the layers, infer every shape, lay out the parameters and plan the current
        mode (builds the kernels). Call after ``load``; ``initialize_parameters`` or
        ``load_parameters`` then fill the weights.
        """
        if self.graph is None:
            raise GraphError("setup: no graph loaded (call load_from_json first)")
        # the layers' kernels built while they are set up, several at once where the
        # device allows (kernels/build_ahead.py; the plan's builds then find them cached)
        with program.building_ahead(self.ctx):
            self._setup_layers()
        self._setups_mode = self._mode
        g = self.graph
        specs = [list(st.params) for st in self._setups]
        self.store = (ParamStore(self.ctx, g.ops, specs) if self._shared_params is None
                      else self._shared_params.checked(g.ops, specs))
        self._alloc_inputs()
        self._forget_plans()
        self._plan()
        self._ready = True

    def _setup_layers(self):
        """Create the layers (with the casts of a 16-bit net) and set each up on its
        inputs' shapes: ``self.layers`` and their Setups, ``self._setups``."""
        made = {}  # fp16: operator name -> (its layer, set up by the Cast placement, Setup)
        if self._half:
            self.graph = load_graph(with_casts(self.graph, _half_storage,
                                               lambda op, specs: self._specs_of(op, specs, made),
                                               half=self._half))
            self._handles = {}
        g = self.graph
        self.layers = [made[op.name][0] if op.name in made else
                       _layers.create(self.ctx, op.type, op.name, op.options, len(op.outputs))
                       for op in g.ops]
        for layer in self.layers:
            layer.mode = self._mode  # some layers check shapes per mode in setup
            # the products (fp16: FP16 tensor-core GEMMs where the device has them)
            layer.precision = self._precision
        for name, (shape, dtype, _) in g.inputs.items():
            v = g.values[g.input_values[name]]
            v.shape, v.dtype = shape, as_dtype(dtype)
        self._setups = []
        for op, layer in zip(g.ops, self.layers):
            if op.name in made:  # set up on these very inputs already: its outputs' specs
                result = made[op.name][1]
                self._set_outputs(op, layer, result.outputs)
            else:
                result = self._setup_layer(op, layer)
            self._setups.append(result)

    def _specs_of(self, op, in_specs, made):
        """The output (shape, dtype)s of operator ``op`` on ``in_specs``: its layer set up
        on them, kept with its Setup in ``made`` for the net to use; for ``with_casts``."""
        layer = _layers.create(self.ctx, op.type, op.name, op.options, len(op.outputs))
        layer.mode, layer.precision = self._mode, self._precision
        result = _call_layer(layer, op, "setup", [TensorSpec(s, dt) for s, dt in in_specs])
        made[op.name] = (layer, result)
        return [(spec.shape, spec.dtype) for spec in result.outputs]

    def _setup_layer(self, op, layer):
        """``layer.setup`` over the current shapes of the op's inputs; sets its outputs'."""
        g = self.graph
        in_specs = [TensorSpec(g.values[v].shape, g.values[v].dtype) for v in op.in_values]
        result = _call_layer(layer, op, "setup", in_specs)
        self._set_outputs(op, layer, result.outputs)
        return result

    def _set_outputs(self, op, layer, out_specs):
        if len(out_specs) != len(op.out_values):
            raise LayerError("%s '%s': gives %d outputs, the graph lists %d (%s)" % (
                op.type, op.name, len(out_specs), len(op.out_values), ", ".join(op.outputs)))
        for v, spec in zip(op.out_values, out_specs):
            value = self.graph.values[v]
            value.shape = tuple(int(s) for s in spec.shape)
            value.dtype = as_dtype(spec.dtype)

    def _alloc_inputs(self):
        self._inputs = {}
        for name in self.graph.inputs:
            v = self.graph.values[self.graph.input_values[name]]
            self._inputs[v.id] = Tensor.zeros(self.ctx, v.shape, v.dtype,
                                              name="net input '%s'" % name)

    # ----- batch size changes
    def reshape(self, shapes=None, **kw):
        """New input shapes (``{name: shape}`` or keywords); re-plans with the kernels built
        (a layer may build a variant for a shape class it has not met: a GEMM over a few rows).
        The plans of the last ``PLANS_KEPT`` input shapes are kept: shapes met before take
        theirs back (their activation memory and input tensors too) instead of planning.

        With no arguments, picks up shapes set on the input tensors (``tensor.shape = ...``).
        A shape no operator can take is a LayerError naming the first such operator and the
        net input that changed; the net then stays as it was.
        """
        self._need_setup()
        shapes = dict(shapes or {}, **kw)
        g = self.graph
        for name, shape in shapes.items():
            if name not in g.inputs:
                raise InputError("reshape: '%s' is not a net input; inputs: %s"
                                 % (name, ", ".join(g.inputs)))
            problem = shape_problem(shape, "reshape: net input '%s' shape" % name)
            if problem:
                raise InputError(problem)
        old_shapes = [v.shape for v in g.values]
        for vid, t in self._inputs.items():
            g.values[vid].shape = tuple(int(s) for s in shapes.get(g.values[vid].name, t.shape))
        try:
            self._setups = [self._setup_layer(op, layer) for op, layer in zip(g.ops, self.layers)]
        except LayerError as err:
            changes = ["net input '%s' is now %s, was %s" % (g.values[vid].name,
                                                              g.values[vid].shape, old_shapes[vid])
                       for vid in self._inputs if g.values[vid].shape != old_shapes[vid]]
            self._restore(old_shapes)
            raise LayerError("%s (%s)" % (err, "; ".join(changes) or "no input changed")) \
                from err
        self._setups_mode = self._mode
        kept = self._shape_plans.get(self._shapes_key())
        if kept is not None:  # shapes planned before: their inputs and plans, as they were
            self._inputs, self._plans = kept
            self._shape_plans.move_to_end(self._shapes_key())
        else:
            old = self._inputs
            self._alloc_inputs()
            for vid, t in self._inputs.items():
                if t.shape == old[vid].shape:
                    self._inputs[vid] = old[vid]
            self._plans = {}
            self._keep_plans()
        self._plan()

    def _shapes_key(self):
        g = self.graph
        return tuple(g.values[g.input_values[name]].shape for name in g.inputs)

    def _keep_plans(self):
        """File the current shapes' inputs and plans (the last PLANS_KEPT shapes stay)."""
        self._shape_plans[self._shapes_key()] = (self._inputs, self._plans)
        while len(self._shape_plans) > PLANS_KEPT:
            self._shape_plans.popitem(last=False)

    def _forget_plans(self):
        """Drop every plan (of every shape): the next ``_plan`` makes the current one."""
        self._plans = {}
        self._shape_plans = collections.OrderedDict()
        self._keep_plans()

    def _restore(self, shapes):
        """Back to the value shapes of the last good setup (the layers too: no kernel is
        built, these shapes were set up before)."""
        for v, shape in zip(self.graph.values, shapes):
            v.shape = shape
        self._setups = [self._setup_layer(op, layer)
                        for op, layer in zip(self.graph.ops, self.layers)]
        self._setups_mode = self._mode

    # ----- modes and plans
    @property
    def precision(self):
        """The precision ("fp32", "tf32", "fp16" or "bf16"), fixed at construction."""
        return self._precision

    @property
    def mode(self):
        """``"train"`` or ``"predict"`` (``dp.TRAIN``, ``dp.PREDICT``). Setting it on a set-up
        net switches to that mode's plan (made once, then reused); no kernel is rebuilt.
        """
        return self._mode

    @mode.setter
    def mode(self, mode):
        self._mode = _check_mode(mode)
        if self._ready:
            self._plan()

    @property
    def keep_intermediate_tensors(self):
        """When True, every activation keeps its own memory, so all of them stay readable
        after ``forward`` (debugging; uses more memory). Re-plans the net.
        """
        return self._keep

    @keep_intermediate_tensors.setter
    def keep_intermediate_tensors(self, keep):
        self._keep = bool(keep)
        if self._ready:
            self._forget_plans()
            self._plan()
        else:
            self._plans = {}

    def _plan(self):
        for layer in self.layers:
            layer.mode = self._mode
        plan = self._plans.get(self._mode)
        if plan is None:
            if self._setups_mode != self._mode:
                # layers size workspaces and saved tensors by mode (backward scratch, batch
                # statistics, masks only when training): ask again; no kernel is rebuilt
                self._setups = [self._setup_layer(op, layer)
                                for op, layer in zip(self.graph.ops, self.layers)]
                self._setups_mode = self._mode
            plan = ExecutionPlan(self.ctx, self.graph, self.layers, self.store, self._setups,
                                 self._inputs, self._mode == TRAIN, self._keep)
            self._plans[self._mode] = plan
        self.plan = plan
        for vid, handle in self._handles.items():  # DLPrimitives' handles stay valid
            t = plan.acts[vid]
            handle.buffer, handle.offset, handle.shape, handle._owner = t.buffer, t.offset, t.shape, t
        return plan

    def _need_setup(self):
        if not self._ready:
            raise RuntimeError("the net is not set up: call setup() first")

    # ----- running
    def forward(self, e: Any = None, sync: bool = False) -> None:
        """Enqueue the forward pass (inputs already written into ``tensor(name)``); with
        ``sync`` (DLPrimitives' second argument), wait until it has run."""
        self._need_setup()
        self._enqueue(self.plan.forward, e)
        if sync:
            self.ctx.queue.finish()

    def backward(self, e: Any = None) -> None:
        """Enqueue the backward pass; parameter gradients are added to ``grad_arena``."""
        self.backward_check()
        self._enqueue(self.plan.backward, e)

    def _enqueue(self, launches, e):
        """The launches on ``e``'s queue, else round the context's queue ring."""
        if e is None:
            self.ctx.run(launches)
            return
        for launch in launches:
            launch(e.queue)

    def backward_check(self) -> None:
        """Raise unless ``plan.backward`` may run now (set up, in train mode); with a loss
        scale, its current value goes into the loss gradients' fills."""
        self._need_setup()
        if self._mode != TRAIN:
            raise RuntimeError("backward() needs mode TRAIN; the net is in %r" % self._mode)
        if self.loss_scale is not None:
            self.plan.scale_losses(self.loss_scale.scale)

    def zero_grad(self, e=None):
        """Zero every parameter gradient: one fill over the gradient arena."""
        self.store.grad_arena.zero_(e)

    def __call__(self, **inputs: np.ndarray) -> Dict[str, np.ndarray]:
        """Write inputs (numpy), run forward, return {output name: numpy array}.

        Every net input an operator reads must be given, as numbers of its kind (float
        data for float inputs, float64 converted; integers for integer inputs); the layers
        reading an input check its values on the host (labels: integers in [0, classes)
        or the loss's ignore_index). Errors are InputErrors (LabelErrors) naming the input;
        see ``dlprim.net.inputs``. A new shape re-plans the net (``reshape``).
        """
        self._need_setup()
        who = inputs_rules.readers(self.graph, self.layers)
        arrays = inputs_rules.as_arrays(inputs, self.graph, who)
        changed = {n: a.shape for n, a in arrays.items() if a.shape != self.tensor(n).shape}
        if changed:
            self.reshape(changed)
        inputs_rules.check_values(arrays, who)
        for n, a in arrays.items():
            t = self.tensor(n)
            t.to_device(inputs_rules.converted(n, a, t.dtype, who), wait=False)
        self.forward()
        return {n: self.tensor(n).to_host() for n in self.graph.outputs}

    def predict(self, **inputs: np.ndarray) -> Dict[str, np.ndarray]:
        """{prediction name: numpy array} for inputs given by name, at inference.

        The predictions are the net's outputs that are not losses; a net whose outputs
        are all losses (a training net) predicts what its losses read first, under that
        name: the logits of a SoftmaxWithLoss (``dlprim.net.prediction`` says why no
        softmax is added). Labels are not asked for (given ones are ignored) and the
        operators that only feed a loss or read labels do not run.

        They run on a copy of the net planned in predict mode (BatchNorm running
        statistics, no dropout) that shares this net's parameter arena: it is made on
        first use (and after ``setup``), reads the current weights, writes no parameter
        or statistic, and leaves this net's mode, plans and input tensors as they were,
        so training goes on afterwards as if nothing ran. Any number of rows: up to this
        net's planned batch at once (fewer re-plan the copy), more in batches of that size.
        """
        self._need_setup()
        copy = self._prediction_net()
        first = self.tensor(copy.input_names[0]).shape if copy.input_names else ()
        batch = first[0] if first else 1
        return prediction.predict_rows(copy, inputs, self.input_names, batch)

    def twin(self, graph):
        """A predict-mode Net of ``graph`` over this net's parameters: the same operators in
        the same order, with the same parameters (a graph built for other input shapes, a
        decoder's prefill beside its one-token step), planned once for its own shapes and
        kept so. Both see every write to the parameters (a key/value cache's). Shapes used
        in turn so run without the layers' setup that each ``reshape`` runs again."""
        self._need_setup()
        twin = Net(self.ctx, mode=PREDICT, precision=self._precision)
        twin.load(graph)
        twin._shared_params = prediction.SharedParams(self.store, range(len(self.graph.ops)))
        twin.setup()
        mine, theirs = [op.name for op in self.graph.ops], [op.name for op in twin.graph.ops]
        if mine != theirs:
            first = next((a, b) for a, b in zip(mine + [None], theirs + [None]) if a != b)
            raise GraphError("twin: the graph's operators differ from the net's (first: %r "
                             "where the net has %r)" % (first[1], first[0]))
        return twin

    def _prediction_net(self):
        """The predict-mode copy behind ``predict``, over this net's parameter store."""
        copy = self._prediction
        if copy is None or copy.store.source is not self.store:
            part = prediction.prediction_graph(
                self.graph, {n: self.tensor(n).shape for n in self.input_names})
            copy = Net(self.ctx, mode=PREDICT, precision=self._precision)
            copy.load(part.graph)
            copy._shared_params = prediction.SharedParams(self.store, part.ops)
            copy.setup()
            self._prediction = copy
        return copy

    # ----- tensors
    @property
    def input_names(self):
        """Names of the net's inputs, in the order of the JSON."""
        return list(self.graph.inputs)

    @property
    def output_names(self):
        """Names of the net's outputs, in the order of the JSON."""
        return list(self.graph.outputs)

    def _vid(self, name):
        # a net input's name means the buffer users write, even if an operator later
        # overwrites the name in place; any other name means its latest value
        g = self.graph
        vid = None if g is None else g.input_values.get(name, g.latest.get(name))
        if vid is None:
            raise KeyError("no tensor named '%s' in the net" % name)
        return vid

    def tensor(self, name: str) -> Tensor:
        """The Tensor holding activation ``name`` in the current plan (an input: the buffer
        to write; any other name: its latest value). As in DLPrimitives, the object stays
        valid when the net re-plans (``reshape``, a mode switch) and then shows the new plan.
        """
        self._need_setup()
        vid = self._vid(name)
        if vid in self._inputs:
            return self._inputs[vid]
        handle = self._handles.get(vid)
        if handle is None:
            t = self.plan.acts[vid]
            handle = self._handles[vid] = t._view(t.shape, 0, t.dtype)
        return handle

    def tensor_diff(self, name):
        """The gradient Tensor of activation ``name`` (train mode, after ``backward``)."""
        self._need_setup()
        t = self.plan.grads.get(self._vid(name))
        if t is None:
            raise KeyError("tensor '%s' has no gradient in mode %r (it reaches no loss or "
                           "depends on nothing trainable)" % (name, self._mode))
        return t

    # ----- parameters
    param_arena = property(lambda self: self.store.param_arena,
                           doc="The float32 Tensor holding every parameter.")
    grad_arena = property(lambda self: self.store.grad_arena,
                          doc="The parameter gradients, same layout as ``param_arena``.")
    trainable_size = property(lambda self: self.store.trainable_size,
                              doc="Elements at the start of the arenas that a solver updates.")
    param_layout = property(lambda self: self.store.layout,
                            doc="{name: (offset, shape, trainable)} of every parameter.")
    params = property(lambda self: self.store.params,
                      doc="{name: Tensor} views of the parameters.")
    grads = property(lambda self: (self.store.ensure_grads(), self.store.grads)[1],
                     doc="{name: Tensor} views of the parameter gradients.")

    def param(self, name):
        """The parameter Tensor called ``name`` (a view into the parameter arena)."""
        return self.store.get(name, self.store.params, "parameter")

    def param_diff(self, name):
        """The gradient Tensor of parameter ``name`` (a view into the gradient arena)."""
        return self.store.get(name, self.grads, "parameter gradient")

    def initialize_parameters(self, e=None, seed=0):
        """Each layer's default initialisation (PyTorch's), from a seeded generator."""
        self._need_setup()
        rng = np.random.default_rng(seed)
        for op, layer in zip(self.graph.ops, self.layers):
            layer.init_params(self.store.op_params[op.index], rng)
        self.ctx.finish()

    def get_parameters(self):
        """{name: numpy array} of every parameter (one read of the arena)."""
        return self.store.to_numpy()

    def set_parameters(self, arrays, strict=True):
        """Write parameters from {name: array} (a PyTorch state dict's numpy values map one
        to one for dlprim.models nets), all or nothing.

        Wrong shapes or non-numeric arrays are reported first, by name; then, with
        ``strict`` (the default, as PyTorch's ``load_state_dict``), the net's parameters
        missing from ``arrays`` and the names the net lacks. ``strict=False`` writes the
        parameters both have and leaves the others as they are. Raises ParameterError.
        """
        self._need_setup()
        self.store.from_numpy(arrays, strict, "set_parameters")

    def save_parameters(self, path: Union[str, os.PathLike]) -> None:
        """Write every parameter, atomically, in the format the name says: ``.safetensors``
        (what torchvision and other packages publish), ``.h5``, else DLPrimitives' .dlp."""
        weights.save(path, self.store.to_numpy())

    def save_parameters_to_hdf5(self, path):
        """Write every parameter to an HDF5 file, one dataset each (needs h5py)."""
        weights.save_hdf5(path, self.store.to_numpy())

    def to_onnx(self, path, opset=None):
        """Export as an ONNX model with the current weights (needs the onnx extra).

        The exporter is ``dlprim.onnx.save``, registered in ``weights.NET_EXPORTERS`` when
        ``import dlprim`` loads the (light) ``dlprim.onnx`` package."""
        exporter = weights.NET_EXPORTERS.get("onnx")
        if exporter is None:
            raise RuntimeError("no ONNX exporter registered: import dlprim.onnx")
        return exporter(self, path, opset=opset)

    def load_parameters(self, path: Union[str, os.PathLike], strict: bool = True) -> None:
        """Load a .dlp, safetensors or .h5 file (told apart by content), checked as
        ``set_parameters`` checks its arrays (a damaged file is a FileFormatError naming
        it and the entry)."""
        self._need_setup()
        self.store.from_numpy(weights.load(path), strict, str(path))

    # ----- reports
    def memory_stats(self):
        """The current plan's memory in bytes: arena, unplanned sum of its tensors, ratio,
        the saved tensors among them (kept by layers from forward to backward), parameters,
        gradients, inputs, total; and the number of launches per pass.
        """
        self._need_setup()
        return self.plan.memory_stats()

    def summary(self):
        """A text table of the operators: output shapes, parameters, MFLOPs, memory."""
        from .summary import summary_text
        return summary_text(self)

    def _repr_html_(self):
        from .summary import summary_html
        return summary_html(self)

    def __repr__(self):
        n = len(self.graph.ops) if self.graph else 0
        return "Net(%d operators, mode=%r%s)" % (n, self._mode, "" if self._ready else ", not set up")


def _check_mode(mode):
    if mode not in (TRAIN, PREDICT):
        raise ValueError("mode must be %r or %r, got %r" % (TRAIN, PREDICT, mode))
    return mode


def _model_graph(graph, input_shape, loss):
    """A dlprim.nn model (anything with ``netconfig``) as its NetConfig; other graphs as
    they are, which declare their own inputs and outputs."""
    if callable(getattr(graph, "netconfig", None)):
        if input_shape is None:
            raise GraphError("Net: a %s model has no input shape of its own; pass input_shape="
                             "[batch, ...], e.g. dp.Net(ctx, model, input_shape=[64, 1, 28, 28])"
                             % type(graph).__name__)
        return graph.netconfig(input_shape, loss=loss)
    if input_shape is not None or loss is not None:
        given = "no graph" if graph is None else "a " + type(graph).__name__
        raise GraphError("Net: input_shape and loss are for dlprim.nn models, not for %s (a "
                         "graph declares its own inputs and outputs)" % given)
    return graph


def _half_storage(type_name):
    cls = _layers.REGISTRY.get(type_name)
    return "none" if cls is None else cls.HALF_STORAGE


def _call_layer(layer, op, method, arg):
    try:
        return getattr(layer, method)(arg)
    except LayerError:
        raise
    except (ValueError, TypeError, IndexError) as err:
        raise LayerError("%s '%s': %s failed: %s" % (op.type, op.name, method, err)) from err
