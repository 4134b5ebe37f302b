"""A Net's execution plan for one mode: planned arena, tensor views, bound launch lists.

Built once per (mode, input shapes) from what each layer's ``setup`` returned in that
mode (flags, workspace, saved tensors): the schedule says what runs backward and what
lives when, the memory plan places it in one arena, and every layer is asked once for the
launches of its forward and backward passes over those placed tensors. Running an
iteration is then a loop over ``forward`` (and ``backward``) calling each with a queue.
"""
import contextlib

import numpy as np

from . import fusion, memory_plan
from .autograd import OpFacts, Autograd
from ..dtypes import is_float
from ..layers.base import LayerError
from ..tensor import Tensor, fill_bytes

__all__ = ["ExecutionPlan", "Fill", "ARENA_ALIGN"]

ARENA_ALIGN = 256  # bytes


class Fill:
    """A prepared fill of a tensor with one float value (a loss weight, or zero)."""
    __slots__ = ("ctx", "buffer", "offset", "nbytes", "pattern", "name")

    def __init__(self, tensor, value):
        self.ctx = tensor.ctx
        self.buffer, self.offset, self.nbytes = tensor.buffer, tensor.byte_offset, tensor.nbytes
        self.pattern = np.asarray(value, tensor.dtype).reshape(1)
        self.name = "fill"

    def __call__(self, queue):
        if self.nbytes:
            return fill_bytes(self.ctx, queue, self.buffer, self.pattern, self.offset, self.nbytes)


class ExecutionPlan:
    """One mode's plan over a set-up graph: ``layers`` (one per operator), the parameter
    ``store``, each operator's ``Setup`` in this mode (``setups``) and the net's ``inputs``
    tensors ({value id: Tensor}); ``keep_all`` keeps every activation readable."""

    def __init__(self, ctx, graph, layers, store, setups, inputs, train, keep_all=False):
        g = graph
        self.train = train
        facts = [OpFacts(has_backward=st.flags.has_backward,
                         reads_inputs=st.flags.backward_reads_inputs,
                         reads_outputs=st.flags.backward_reads_outputs,
                         inplace=st.flags.inplace, view=st.flags.view,
                         trains=store.op_trains[i],
                         no_grad_inputs=st.flags.no_grad_inputs,
                         ws_bytes=st.workspace, saved_bytes=[_nbytes(t) for t in st.saved])
                 for i, st in enumerate(setups)]
        value_bytes = [_nbytes(v) for v in g.values]
        floats = [is_float(v.dtype) for v in g.values]
        # outputs that are their op's parameter (Setup.param_outputs): the parameter's memory
        pinned = {g.ops[i].out_values[o]: (i, p)
                  for i, st in enumerate(setups) for o, p in st.param_outputs}
        self.autograd = s = Autograd(g, facts, value_bytes, floats, train, keep_all,
                                     pinned=set(pinned))
        # predict mode: convolution + BatchNorm (+ activation) chains run as one (fusion.py)
        self.folds = {} if train or keep_all else \
            fusion.predict_folds(g, layers, [st.workspace for st in setups])
        # train mode: BatchNorm + the activation it can run, as one (fusion.py)
        self.act_folds = fusion.train_folds(g, layers, s) if train and not keep_all else {}
        act_folded = {f.act for f in self.act_folds.values()}  # activations run by them
        blocks = fusion.stretch(s.blocks, self.folds, s) if self.folds else s.blocks
        self.memory = plan = memory_plan.place(blocks, ARENA_ALIGN)
        shapes = ", ".join("%s %s" % (g.values[vid].name, t.shape) for vid, t in inputs.items())
        self.arena = Tensor(ctx, (max(plan.arena_bytes, 1),), np.uint8, name=(
            "the net's %s-mode arena (activations%s and workspaces for inputs %s)"
            % ("train" if train else "predict", ", gradients" if train else "", shapes)))
        self.input_bytes = sum(t.nbytes for t in inputs.values())
        self.param_bytes = store.nbytes
        self.saved_bytes = sum(sum(f.saved_bytes) for f in facts)

        def at(key, shape, dtype):
            dtype = np.dtype(dtype)
            return self.arena.view(shape, plan.offsets[key] // dtype.itemsize, dtype)

        self.acts = {}
        for v in g.values:
            root = s.storage[v.id]
            if g.values[root].producer < 0:
                self.acts[v.id] = inputs[root]
            elif root in pinned:
                op_index, p = pinned[root]
                self.acts[v.id] = store.op_params[op_index][p].view(v.shape)
            else:
                self.acts[v.id] = at("a:%d" % root, v.shape, v.dtype)
        self.grads = {v.id: at("g:%d" % s.grad_storage[v.id], v.shape, v.dtype)
                      for v in g.values if s.grad_needed[v.id]}
        # a workspace is a uint8 tensor of the bytes the layer asked for (256-byte aligned)
        ws = [None if not st.workspace else at("w:%d" % i, (st.workspace,), np.uint8)
              for i, st in enumerate(setups)]
        saved = [[at("s:%d:%d" % (i, j), t.shape, t.dtype) for j, t in enumerate(st.saved)]
                 for i, st in enumerate(setups)]

        self.forward, self.op_forward = [], []
        folded = {f.bn for f in self.folds.values()} | \
            {f.act for f in self.folds.values() if f.act is not None}
        for op, layer in zip(g.ops, layers):
            with _naming(op):
                fold = self.folds.get(op.index)
                act_fold = self.act_folds.get(op.index)
                if op.index in folded or op.index in act_folded:  # run by the op before it
                    launches = []
                elif act_fold is not None:  # BatchNorm writing the activation's output
                    launches = list(layer.forward(
                        [self.acts[v] for v in op.in_values],
                        [self.acts[g.ops[act_fold.act].out_values[0]]],
                        store.op_params[op.index], ws[op.index], saved[op.index],
                        activation=act_fold.activation))
                elif fold is not None:
                    launches = list(layer.folded_forward(
                        [self.acts[v] for v in op.in_values], self.acts[fold.out],
                        store.op_params[op.index], layers[fold.bn], store.op_params[fold.bn],
                        fold.activation, ws[op.index]))
                else:
                    launches = list(layer.forward([self.acts[v] for v in op.in_values],
                                                  [self.acts[v] for v in op.out_values],
                                                  store.op_params[op.index], ws[op.index],
                                                  saved[op.index]))
            self.op_forward.append(len(launches))
            self.forward.extend(launches)
        self.backward = [Fill(self.grads[vid], w) for vid, w in s.fills]
        self.backward_fills = len(self.backward)  # the launches before any op's backward
        # the loss gradients' fills with their weights, for a loss scale (scale_losses)
        self._loss_fills = [(f, w) for f, (vid, w) in zip(self.backward, s.fills)
                            if vid in s.loss_values]
        self._loss_scale = 1.0
        # op index -> how many of self.backward's launches have run once its backward has
        # (what a gradient reader needs to start on that op's parameters early)
        self.backward_done = {}
        if train:
            store.ensure_grads()
            for op, layer in zip(reversed(g.ops), reversed(layers)):
                i = op.index
                if not s.backward[i]:
                    continue
                if i in act_folded:  # its gradient runs in the BatchNorm's backward
                    self.backward_done[i] = len(self.backward)
                    continue
                dx = [self.grads[v] if want else None for v, want in zip(op.in_values, s.dx_wanted[i])]
                dy = [self.grads.get(v) for v in op.out_values]
                act_fold = self.act_folds.get(i)
                extra = {}
                if act_fold is not None:  # the activation's gradient, and its name
                    dy = [self.grads.get(g.ops[act_fold.act].out_values[0])]
                    extra = dict(activation=act_fold.activation)
                with _naming(op):
                    self.backward.extend(layer.backward(
                        [self.acts[v] for v in op.in_values], dx,
                        [self.acts[v] for v in op.out_values], dy,
                        store.op_params[i], store.op_dparams[i], ws[i], saved[i],
                        list(s.accumulate[i]), **extra))
                self.backward_done[i] = len(self.backward)

    def scale_losses(self, scale):
        """Start the loss gradients at ``loss_weight * scale`` (a loss scale; 1: plain)."""
        if scale != self._loss_scale:
            for fill, w in self._loss_fills:
                fill.pattern[0] = w * scale
            self._loss_scale = scale

    def memory_stats(self):
        """Planned arena bytes against the sum of every tensor it holds, plus the rest;
        ``saved_bytes``: the part of the tensors that layers keep from forward to backward."""
        p = self.memory
        return {"mode": "train" if self.train else "predict",
                "arena_bytes": p.arena_bytes, "unplanned_bytes": p.unplanned_bytes,
                "ratio": (p.arena_bytes / p.unplanned_bytes) if p.unplanned_bytes else 1.0,
                "saved_bytes": self.saved_bytes,
                "params_bytes": self.param_bytes,
                "grads_bytes": self.param_bytes if self.train else 0,
                "inputs_bytes": self.input_bytes,
                "total_bytes": p.arena_bytes + self.input_bytes
                + self.param_bytes * (2 if self.train else 1),
                "launches_forward": len(self.forward), "launches_backward": len(self.backward)}


@contextlib.contextmanager
def _naming(op):
    """A launcher's complaint while a layer binds its launches names the operator (setup
    checks shapes first, so this is the last line of defence)."""
    try:
        yield
    except LayerError:
        raise
    except (ValueError, TypeError, IndexError) as err:
        raise LayerError("%s '%s': preparing its launches failed: %s" % (op.type, op.name, err)) \
            from err


def _nbytes(spec):
    """Bytes of a graph value or a TensorSpec (anything with a shape and a dtype)."""
    return int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize
