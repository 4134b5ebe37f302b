"""Backprop marks, in-place sharing and tensor lifetimes for a Graph in one mode.

Pure Python, no OpenCL. The Net gives each operator's facts (``OpFacts``) and each
value's byte size; ``Autograd`` decides:

* which operators run backward: an operator does when it depends on something trainable
  (its own non-frozen trainable parameters, or an input that does, or a net input marked
  ``requires_grad``) and one of its outputs reaches a loss through operators that have a
  backward pass;
* which input gradients each backward writes, and whether it assigns or accumulates: the
  first writer in backward order assigns, later writers add (fan-out sums); a loss value
  is first written by the fill of its ``loss_weight``; inputs a layer declares gradient-free
  (``no_grad_inputs``: labels) are never written, so their gradient is what the other
  consumers give, or the fill of 0;
* which values share memory: an in-place write reuses its input's memory only if the
  layer allows it (``LayerFlags.inplace``), the old value is not a net input, and no
  backward pass reads the old value (otherwise gradients would be wrong); else it gets
  memory of its own. A view (``LayerFlags.view``: Reshape, Flatten, Squeeze) shares its
  input's memory under any name, unless the input is a net input; an in-place write is
  then refused on that memory, since another name still reads it. The view's gradient
  is the input's (``grad_alias``): the view's consumers add into the input's gradient
  in backward order with its other consumers, and the view's backward copies nothing
  (with ``keep_all``, where every gradient stays readable, only for the input's last
  consumer, whose gradient the input's then is);
* values ``pinned`` to a parameter's memory (``Setup.param_outputs``: a key/value
  cache's outputs) get no arena block and no in-place writes; views of them share it;
* the lifetime of every activation, gradient, workspace and saved tensor, as
  ``memory_plan.Block``s named ``a:<value>``, ``g:<value>``, ``w:<op>`` and
  ``s:<op>:<j>``.

Time steps: net inputs at 0, forward of op i at i+1, loss fills at n+1, backward of op i
at 2n+1-i, the end (outputs read by the user) at 2n+2 (n+1 when predicting). A
workspace is alive at its op's forward and backward steps only; a saved tensor from its
op's forward to its backward (only at the forward when the op runs no backward).
"""
from .memory_plan import Block

__all__ = ["OpFacts", "Autograd"]


class OpFacts:
    """What the schedule needs to know of one operator's layer: its LayerFlags, whether
    it trains parameters, its workspace bytes and the bytes of each saved tensor."""
    __slots__ = ("has_backward", "reads_inputs", "reads_outputs", "inplace", "view", "trains",
                 "ws_bytes", "saved_bytes", "no_grad_inputs")

    def __init__(self, has_backward=True, reads_inputs=True, reads_outputs=False, inplace=False,
                 trains=False, ws_bytes=0, saved_bytes=(), no_grad_inputs=(), view=False):
        self.has_backward, self.reads_inputs, self.reads_outputs = has_backward, reads_inputs, reads_outputs
        self.inplace, self.view, self.trains, self.ws_bytes = inplace, view, trains, int(ws_bytes)
        self.saved_bytes = [int(b) for b in saved_bytes]
        self.no_grad_inputs = tuple(no_grad_inputs)


class Autograd:
    def __init__(self, graph, facts, value_bytes, value_is_float, train, keep_all=False,
                 pinned=()):
        self.graph, self.facts, self.train, self.keep_all = graph, facts, bool(train), keep_all
        # values whose memory is a parameter's (Setup.param_outputs): no arena block, and
        # no in-place write over them
        self.pinned = frozenset(pinned)
        n = len(graph.ops)
        self.n = n
        self.t_end = 2 * n + 2 if self.train else n + 1
        self.loss_values = {graph.latest[name]: w for name, w in graph.loss_weights.items()}
        self.output_values = {graph.latest[name] for name in graph.outputs}
        self.value_bytes = list(value_bytes)
        self._mark_backward(value_is_float)
        self._share()
        self._writers()
        self.blocks = self._blocks(value_bytes)

    # ----- autograd marks
    def t_fwd(self, i):
        return i + 1

    def t_bwd(self, i):
        return 2 * self.n + 1 - i

    def _mark_backward(self, is_float):
        ops, values, facts = self.graph.ops, self.graph.values, self.facts
        depends = [bool(v.requires_grad and is_float[v.id]) for v in values]
        for op in ops:
            f = facts[op.index]
            dep = f.has_backward and (f.trains or any(depends[v] for v in op.in_values))
            for v in op.out_values:
                depends[v] = dep and is_float[v]
        reaches = [v.id in self.loss_values for v in values]
        for op in reversed(ops):
            if facts[op.index].has_backward and any(reaches[v] for v in op.out_values):
                for v in op.in_values:
                    reaches[v] = True
        self.backward = [self.train and facts[op.index].has_backward
                         and any(depends[v] and reaches[v] for v in op.out_values) for op in ops]
        flows = [[self.backward[op.index] and depends[v] and reaches[v] for v in op.in_values]
                 for op in ops]
        self.dx_wanted = [[f and pos not in facts[op.index].no_grad_inputs
                           for pos, f in enumerate(flows[op.index])] for op in ops]
        # gradient buffers: every float output of a backward op, every input a gradient flows
        # to (a gradient-free one too: it reads as 0 where no other consumer writes it)
        self.grad_needed = [False] * len(values)
        for op in ops:
            if self.backward[op.index]:
                for v in op.out_values:
                    self.grad_needed[v] = bool(is_float[v])
            for v, flow in zip(op.in_values, flows[op.index]):
                if flow:
                    self.grad_needed[v] = True

    def _writers(self):
        """Who writes each gradient, in backward order: a loss value's fill first, then its
        consumers from the last; the first writer assigns and later ones add (fan-out
        sums). A view whose gradient is its input's (``grad_alias``) writes nothing: what
        its consumers write goes straight into the input's gradient, in the same order."""
        ops, values = self.graph.ops, self.graph.values
        key = [self._alias_key(v.id) for v in values]  # the gradient a value's writers add into
        self.accumulate = [[False] * len(op.in_values) for op in ops]
        self.fills = []  # (value id, value): the loss weight, or 0 for a gradient nobody writes
        written = [False] * len(values)
        for vid, w in self.loss_values.items():
            if self.grad_needed[vid]:
                self.fills.append((vid, w))
                written[key[vid]] = True
        for op in reversed(ops):
            for pos, v in enumerate(op.in_values):
                if not self.dx_wanted[op.index][pos] or any(
                        out in self.grad_alias for out in op.out_values):
                    continue
                self.accumulate[op.index][pos] = written[key[v]]
                written[key[v]] = True
        for v in values:
            if self.grad_needed[v.id] and key[v.id] == v.id and not written[v.id]:
                self.fills.append((v.id, 0.0))

    # ----- in-place sharing
    def _backward_reads(self, vid):
        v = self.graph.values[vid]
        if v.producer >= 0 and self.backward[v.producer] and self.facts[v.producer].reads_outputs:
            return True
        return any(self.backward[c] and self.facts[c].reads_inputs for c, _ in v.consumers)

    def _share(self):
        values = self.graph.values
        self.storage = list(range(len(values)))
        self.grad_storage = list(range(len(values)))
        self.inplace_ops, self.view_ops = [], []
        self.grad_alias = {}  # view output -> its input, where they share one gradient
        viewed = set()  # storage that several names read: no in-place writes on it
        for op in self.graph.ops:
            if self._view(op, viewed):
                continue
            if not self.facts[op.index].inplace:
                continue
            for out in op.out_values:
                name = values[out].name
                if name not in op.inputs:
                    continue
                pos = op.inputs.index(name)
                old = op.in_values[pos]
                root = self.storage[old]
                if (values[root].producer < 0 or root in self.pinned
                        or self.value_bytes[old] != self.value_bytes[out]
                        or root in viewed or (self.train and self._backward_reads(old))):
                    continue
                self.storage[out] = root
                self.inplace_ops.append(op.name)
                if (self.backward[op.index] and self.dx_wanted[op.index][pos]
                        and op.in_values.count(old) == 1 and self.grad_needed[out]):
                    self.grad_storage[old] = out
        for vid in range(len(values)):  # follow in-place chains to the last value's gradient
            root = vid
            while self.grad_storage[root] != root:
                root = self.grad_storage[root]
            self.grad_storage[vid] = root

    def _view(self, op, viewed):
        """Share a view's memory (and gradient) with its input's; whether it did."""
        if not self.facts[op.index].view or len(op.in_values) != 1 or len(op.out_values) != 1:
            return False
        values = self.graph.values
        old, out = op.in_values[0], op.out_values[0]
        root = self.storage[old]
        if (values[root].producer < 0
                or self.value_bytes[old] != self.value_bytes[out]):
            return False
        self.storage[out] = root
        viewed.add(root)
        self.view_ops.append(op.name)
        # the view's gradient is its input's: its consumers add into the input's gradient
        # and the view's backward copies nothing. Not for a loss value's view of another
        # loss value's gradient (two fills), and with keep_all only for the input's last
        # consumer (whose gradient is then the input's: it is written first)
        last = max(c for c, _ in values[old].consumers) == op.index
        key = self._alias_key(old)
        if (self.backward[op.index] and self.dx_wanted[op.index][0] and self.grad_needed[out]
                and (last or not self.keep_all)
                and not (out in self.loss_values and self._class_has_loss(key))):
            self.grad_alias[out] = old
            self.grad_storage[out] = old
        return True

    def _class_has_loss(self, key):
        return any(v in self.loss_values for v in [key] + [
            out for out in self.grad_alias if self._alias_key(out) == key])

    def _alias_key(self, vid):
        while vid in self.grad_alias:
            vid = self.grad_alias[vid]
        return vid

    # ----- lifetimes
    def _value_interval(self, v):
        start = 0 if v.producer < 0 else self.t_fwd(v.producer)
        end = start
        for c, _ in v.consumers:
            end = max(end, self.t_fwd(c))
            if self.backward[c] and self.facts[c].reads_inputs:
                end = max(end, self.t_bwd(c))
        if v.producer >= 0 and self.backward[v.producer] and self.facts[v.producer].reads_outputs:
            end = max(end, self.t_bwd(v.producer))
        if v.id in self.output_values or self.keep_all:
            end = self.t_end
        return start, end

    def _grad_interval(self, v):
        times = [self.t_bwd(c) for c, pos in v.consumers if self.dx_wanted[c][pos]]
        if any(vid == v.id for vid, _ in self.fills):
            times.append(self.n + 1)
        start = min(times) if times else self.n + 1
        end = max(times) if times else start
        if v.producer >= 0 and self.backward[v.producer]:
            end = max(end, self.t_bwd(v.producer))
        if v.producer < 0 or self.keep_all:
            end = self.t_end
        return start, end

    def _blocks(self, value_bytes):
        values = self.graph.values
        acts, grads = {}, {}
        for v in values:
            root = self.storage[v.id]
            if values[root].producer >= 0 and root not in self.pinned:
                acts.setdefault(root, []).append(self._value_interval(v))
            if self.grad_needed[v.id]:
                grads.setdefault(self.grad_storage[v.id], []).append(self._grad_interval(v))
        blocks = []
        for root, spans in acts.items():
            blocks.append(Block("a:%d" % root, value_bytes[root], [_hull(spans)]))
        for root, spans in grads.items():
            blocks.append(Block("g:%d" % root, value_bytes[root], [_hull(spans)]))
        for op in self.graph.ops:
            ws = self.facts[op.index].ws_bytes
            if ws:
                spans = [(self.t_fwd(op.index),) * 2]
                if self.backward[op.index]:
                    spans.append((self.t_bwd(op.index),) * 2)
                blocks.append(Block("w:%d" % op.index, ws, spans))
            start = self.t_fwd(op.index)
            end = self.t_bwd(op.index) if self.backward[op.index] else start
            for j, nbytes in enumerate(self.facts[op.index].saved_bytes):
                blocks.append(Block("s:%d:%d" % (op.index, j), nbytes, [(start, end)]))
        return blocks


def _hull(spans):
    return (min(a for a, _ in spans), max(b for _, b in spans))
