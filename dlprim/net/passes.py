"""Graph passes: rewrite rules over a NetConfig's operators, shared by every front end.

``run(cfg)`` returns a rewritten copy of ``cfg`` (the argument is left as it is): each rule
in ``RULES`` is applied where it matches until none does. A rule is a small named
function ``rule(ops, graph, outputs) -> bool`` that makes one rewrite of the operator list
in place and says whether it did; ``graph`` is ``Values(ops)``, the single-assignment
view (an in-place write is a new value of the same name, as ``graph.py`` reads a net).

dlprim.nn lowering and the ONNX importer (so torch.compile too) end with ``run``; a
NetConfig written by hand or loaded from JSON is built as written unless the caller asks
for ``run`` (docs/net.md).

The rules:

* ``fold_activation``: an Activation without parameters whose input is read by nothing
  else, and is no net output, goes into the operator producing that input when its kernel
  applies that activation (``FUSES``) and has none yet; the producer then writes the
  activation's output tensor, so no other operator changes.
* the same through a Reshape: an activation commutes with a reshape, so an Activation of
  a Reshape of such a producer (a Linear over (N, L, C) is an InnerProduct over rows,
  reshaped) goes into the producer when the reshape alone reads it.

Pure Python: no driver is needed to import or run it.
"""
import copy

from ..core.activation import EPILOGUES, FUSABLE, Y_ACTIVATIONS
from .netconfig import NetConfig

__all__ = ["FUSES", "INFERENCE_FUSES", "RULES", "INFERENCE_RULES", "Values", "run",
           "fold_activation", "fold_inference_activation"]

# operator type -> the activations its kernels apply after it (its "activation" option):
# GEMM and convolution epilogues, and Elementwise those whose gradient follows from y.
# BatchNorm has no such option; its train- and predict-mode folds are the Net's
# (net/fusion.py), over a set-up net.
FUSES = {"Convolution2D": FUSABLE, "TransposedConvolution2D": FUSABLE,
         "InnerProduct": FUSABLE, "Elementwise": Y_ACTIVATIONS}
# in a net that never runs backward: also those InnerProduct's epilogue applies for
# inference only (GELU, SiLU: their gradients need the input, which it does not keep)
INFERENCE_FUSES = dict(FUSES, InnerProduct=EPILOGUES)


class Values:
    """The single-assignment values of an operator list: ``reads[i]``/``writes[i]`` the
    value ids operator i reads and writes, ``producer[v]`` the operator writing value v
    (None for a net input), ``readers[v]`` the operators reading it, ``last[name]`` the
    value a name holds after the last operator (what a net output means)."""

    def __init__(self, ops):
        self.reads, self.writes, self.producer, self.readers, self.last = [], [], [], [], {}
        for i, op in enumerate(ops):
            self.reads.append([self._value(n) for n in op["inputs"]])
            for v in self.reads[-1]:
                self.readers[v].append(i)
            self.writes.append([self._new(n, i) for n in op["outputs"]])

    def _new(self, name, producer):
        self.producer.append(producer)
        self.readers.append([])
        self.last[name] = len(self.producer) - 1
        return self.last[name]

    def _value(self, name):
        return self.last[name] if name in self.last else self._new(name, None)


def _output_names(cfg):
    return {o if isinstance(o, str) else o["name"] for o in cfg.outputs}


def _sole_reader(graph, outputs, v, i):
    """Value ``v`` is read once, by operator ``i``, and is no net output."""
    return graph.readers[v] == [i] and all(graph.last.get(name) != v for name in outputs)


def _takes(op, activation, fuses):
    """``op``'s kernel can apply ``activation`` (``fuses``: FUSES or INFERENCE_FUSES) and
    applies none yet."""
    return activation in fuses.get(op["type"], ()) and len(op["outputs"]) == 1 and \
        op.get("options", {}).get("activation", "identity") == "identity"


def _free_between(ops, name, first, last):
    """No operator strictly between ``first`` and ``last`` names tensor ``name``."""
    return not any(name in op["inputs"] or name in op["outputs"] for op in ops[first + 1:last])


def fold_activation(ops, graph, outputs, fuses=FUSES):
    """Fold one Activation into its producer (directly, or through a Reshape that alone
    reads the producer's output), where ``fuses`` says the producer applies it; True if
    one was folded."""
    for i, act in enumerate(ops):
        options = act.get("options", {})
        kind = options.get("activation")
        # activations with parameters (leaky_relu's slope ...) have no epilogue form
        if act["type"] != "Activation" or set(options) != {"activation"} or kind == "identity" \
                or act.get("params") or len(act["inputs"]) != 1 or len(act["outputs"]) != 1:
            continue
        v = graph.reads[i][0]
        p = graph.producer[v]
        if p is None or not _sole_reader(graph, outputs, v, i):
            continue
        target, writer = p, p            # the operator taking the activation; the one renamed
        if ops[p]["type"] == "Reshape":
            w = graph.reads[p][0] if graph.reads[p] else None
            q = None if w is None else graph.producer[w]
            if q is None or not _sole_reader(graph, outputs, w, p):
                continue
            target = q
        if not _takes(ops[target], kind, fuses):
            continue
        out = act["outputs"][0]
        if out != ops[writer]["outputs"][0] and (out in ops[writer]["inputs"] or
                                                 not _free_between(ops, out, writer, i)):
            continue    # writing ``out`` earlier would change what another operator reads
        ops[target].setdefault("options", {})["activation"] = kind
        ops[writer]["outputs"][0] = out
        del ops[i]
        return True
    return False


def fold_inference_activation(ops, graph, outputs):
    """``fold_activation`` with INFERENCE_FUSES: for a net set up for predict mode only."""
    return fold_activation(ops, graph, outputs, INFERENCE_FUSES)


RULES = (fold_activation,)
INFERENCE_RULES = (fold_inference_activation,)


def run(cfg, rules=RULES):
    """A copy of ``cfg`` (a NetConfig, or what ``NetConfig()`` reads) with every rule
    applied until none matches."""
    if not isinstance(cfg, NetConfig):
        cfg = NetConfig(cfg)
    out = NetConfig()
    out.inputs, out.outputs = copy.deepcopy(cfg.inputs), copy.deepcopy(cfg.outputs)
    ops = out.operators = copy.deepcopy(cfg.operators)
    outputs = _output_names(out)
    for rule in rules:
        while rule(ops, Values(ops), outputs):
            pass
    out._last = ops[-1]["outputs"][0] if ops else cfg.last
    return out
