"""A decoder's one-token pass as one launch of all its blocks (``core/decoder_layer.py``;
consecutive blocks of one kernel whose tensors share the Net's parameter buffer, at most
``max_blocks`` a launch) over the decoder Net's own weights and caches, then the Net's
head: the Llama and GPT-2 families, whose ``fused_spec`` (llama.py, gpt2.py) says the
block's shape, family and parameter names.

The engine takes it for a one-token pass of a single sequence where the device runs it
(NVIDIA GPUs, after a probe of the launch shape); the prompt's passes, batches of several
sequences, and every other device run the Net. Both write the same caches in the same
layout, so a sequence may move between them at any pass. ``DLPRIM_FUSED_DECODE=0`` turns
it off.
"""
import logging
import os

import numpy as np

from ..core.decoder_layer import PROBE_SPINS, DecoderBlockDims, DecoderLayerOps, misplaced
from ..core.gemm import Gemm
from ..core.normalization import GroupNormOps
from ..tensor import Tensor

__all__ = ["FusedStep", "Unfusable", "fused_step"]

log = logging.getLogger(__name__)

_FLOATS = (np.float32, np.float16)


class Unfusable(Exception):
    """Why a decoder's pass stays the Net's."""


def fused_step(net, spec, groups=None, **options):
    """The FusedStep of a one-token ``net`` (``spec``: ``llama.fused_spec``'s), or None
    where the device or the decoder does not take it (logged at debug level)."""
    if os.environ.get("DLPRIM_FUSED_DECODE", "1") == "0":
        return None
    try:
        return FusedStep(net, spec, groups, **options)
    except Unfusable as why:
        log.debug("decoding one token a pass through the Net: %s", why)
        return None


def _aligned(net, name, optional=False):
    """``net``'s parameter ``name`` (None where ``optional`` and absent), which the kernel
    reads 8 values a load."""
    if optional and name not in net.store.dtypes:
        return None
    t = net.param(name)
    if t.offset % 8:
        raise Unfusable("%s starts at element %d, not a multiple of 8" % (name, t.offset))
    return t


class FusedStep:
    """The blocks of ``net`` (a decoder of batch 1 and one token, as ``spec``, its
    family's ``fused_spec``, describes it) as ``DecoderLayerOps`` launches, then the final
    norm and the head into the Net's ``logits``. ``groups``: work-groups (None: the
    device's, probed); ``options``: ``DecoderLayerOps``' (teams, unroll, timing)."""

    def __init__(self, net, spec, groups=None, **options):
        if spec is None:
            raise Unfusable("the decoder's options are not the fused kernel's")
        self.net, self.ctx, self.spec = net, net.ctx, spec
        self.names = names = spec["names"]
        tokens, pos = net.tensor("tokens"), net.tensor("pos")
        if tokens.size != 1 or pos.size != 1:
            raise Unfusable("a pass of %d tokens over %d rows" % (tokens.size, pos.size))
        dtypes = net.store.dtypes
        p0 = names["block"] % 0
        w_dt = np.dtype(dtypes[p0 + names["qkv"] + ".weight"])  # (uint8: 4-bit weights)
        cache = net.param(p0 + names["cache"] + ".keys")
        table = net.param("rope.cos") if spec["rotary"] else None
        embed_dt = np.dtype(dtypes[names["embed"]])
        pos_dt = np.dtype(dtypes[names["positions"]]) if names.get("positions") else np.float32
        if pos_dt not in _FLOATS and pos_dt.name != "bfloat16":
            raise Unfusable("a position table of %s" % pos_dt)
        bias_dt = np.float32  # (the products' biases: one storage for all)
        for key in ("qkv", "o", "gate", "up", "down"):
            if names.get(key) and p0 + names[key] + ".bias" in dtypes:
                bias_dt = np.dtype(dtypes[p0 + names[key] + ".bias"])
        for i in range(len(spec["windows"])):
            for key in ("norm1", "norm2"):
                for part in (".weight", ".bias"):
                    name = names["block"] % i + names[key] + part
                    if name in dtypes and dtypes[name] != np.float32:
                        raise Unfusable("%s stored as %s" % (name, dtypes[name]))
            for key in ("qkv", "o", "gate", "up", "down"):  # (the kernel's one W_T)
                if not names.get(key):  # (no gate: one MLP product)
                    continue
                name = names["block"] % i + names[key] + ".weight"
                if np.dtype(dtypes[name]) != w_dt:
                    raise Unfusable("%s stored as %s, the first q/k/v weight as %s"
                                    % (name, np.dtype(dtypes[name]), w_dt))
        self.ops = {}
        self.launches = []
        self.clocks = []  # (timing: each launch's (blocks, groups, 16) uint64 phase clocks)
        self.scratch = None
        runs = []  # ([(index, tensors)], ops): consecutive blocks of one kernel, a launch each
        for i, window in enumerate(spec["windows"]):
            dims = DecoderBlockDims(
                spec["hidden"], spec["inner"], spec["heads"], spec["kv_heads"], spec["width"],
                spec["context"], spec["vocab"], window, spec["qkv_bias"], spec["out_bias"],
                spec["mlp_bias"], spec["norm"], spec["rotary"], spec["gated"],
                spec["activation"], bool(names.get("positions")))
            ops = self.ops.get(window)
            if ops is None:
                try:
                    ops = self.ops[window] = DecoderLayerOps(
                        self.ctx, dims, w_dt, cache.dtype,
                        np.float32 if table is None else table.dtype, embed_dt, bias_dt,
                        groups, pos_dtype=pos_dt, **options)
                except ValueError as err:  # (shapes the kernel does not take)
                    raise Unfusable(str(err)) from None
                if not ops.usable:
                    raise Unfusable("the device (%s) or its local memory" % self.ctx.facts.name)
                if self.scratch is None:
                    self.scratch = ops.scratch()
                if groups is None and not self._probe(ops, net, spec, i):
                    raise Unfusable("%d work-groups are not resident at once" % ops.groups)
            block = self._tensors(net, spec, i)
            if runs and runs[-1][1] is ops and len(runs[-1][0]) < ops.max_blocks and \
                    misplaced(runs[-1][0][0][1], block) is None:
                runs[-1][0].append((i, block))
            else:
                runs.append(([(i, block)], ops))
        for run, ops in runs:
            self.launches.append(self._launch(ops, net, spec, run))
        self.launches += self._head(net, spec)

    def _tensors(self, net, spec, i):
        """Block ``i``'s tensors (BLOCK_TENSORS' names; absent ones left out)."""
        names = self.names
        p = names["block"] % i
        block = {}
        for key in ("norm1", "norm2"):
            block[key] = _aligned(net, p + names[key] + ".weight")
            block[key + "_b"] = _aligned(net, p + names[key] + ".bias", spec["norm"] == "rms")
        for key in ("qkv", "o", "gate", "up", "down"):
            if names.get(key) is None:  # (no gate: one MLP product)
                continue
            block["w_" + key] = _aligned(net, p + names[key] + ".weight")
            block["s_" + key] = _aligned(net, p + names[key] + ".weight_scale", True)
            block["b_" + key] = _aligned(net, p + names[key] + ".bias", True)
        block["keys"] = net.param(p + names["cache"] + ".keys")
        block["values"] = net.param(p + names["cache"] + ".values")
        return {k: v for k, v in block.items() if v is not None}

    def _launch(self, ops, net, spec, run, pos=None, spins=None):
        """The launch of ``run``'s blocks ((index, tensors) pairs; ``pos``: another position
        tensor than the Net's)."""
        names = self.names
        tables = (net.param("rope.cos"), net.param("rope.sin")) if spec["rotary"] else None
        extra = {} if spins is None else {"spins": spins}
        if ops.params["TIMING"]:
            extra["clock"] = Tensor.zeros(self.ctx, (len(run), ops.groups, 16), "uint64")
            if pos is None:
                self.clocks.append(extra["clock"])
        pos = net.tensor("pos") if pos is None else pos
        positions, embed = names.get("positions"), names["embed"]
        return ops.launch(run[0][0] == 0, self.scratch, net.tensor("tokens"), pos,
                          net.param(embed), _aligned(net, embed + "_scale", True),
                          [block for _, block in run], tables, spec["eps"],
                          [spec["scales"][i] for i, _ in run],
                          pos_table=_aligned(net, positions) if positions else None, **extra)

    def _head(self, net, spec):
        """The final norm and the head: the few-rows product normalizing x on the way
        where it does (GPUs), else a norm launch first."""
        ctx, hidden = self.ctx, spec["hidden"]
        head, final = self.names["head"], self.names["final_norm"]
        w = net.param(head + ".weight")
        scale = net.param(head + ".weight_scale") if head + ".weight_scale" in \
            net.store.dtypes else None
        logits = net.tensor("logits")
        x = self.scratch["x"].reshape(1, hidden)
        layer = spec["norm"] == "layer"
        norm_w = net.param(final + ".weight")
        norm_b = net.param(final + ".bias") if layer else None
        eps = spec["head_eps"]
        common = dict(trans_b=True, dtypes=(np.float32, w.dtype, logits.dtype),
                      b_scale=scale is not None)
        if Gemm.normalizes_a(ctx, 1, w.dtype):
            gemm = Gemm(ctx, 1, spec["vocab"], hidden, a_norm=eps,
                        a_norm_kind="layer" if layer else "rms", **common)
            return gemm.launches(x, w, logits, b_scale=scale, a_norm_weight=norm_w,
                                 a_norm_bias=norm_b)
        norm = GroupNormOps(ctx, (1, 1, hidden, 1), eps, True, bias=layer, rms=not layer)
        stats = Tensor(ctx, (2,))
        xn = Tensor(ctx, (1, hidden))
        self._held = (stats, xn)
        gemm = Gemm(ctx, 1, spec["vocab"], hidden, **common)
        return norm.forward_launches(x, xn, stats.view((1,)), stats.view((1,), 1), norm_w,
                                     norm_b) + gemm.launches(xn, w, logits, b_scale=scale)

    def _probe(self, ops, net, spec, i):
        """Whether every work-group of ``ops``' launch is resident at once: block ``i`` run
        at a position past the cache (it writes no cache row, and NaN into the scratch)
        with a small spin bound, its failure flag read back."""
        pos = Tensor(self.ctx, (1,), "int64")
        pos.to_device(np.array([spec["context"]], np.int64))
        sync = self.scratch["sync"]
        try:
            run = [(i, self._tensors(net, spec, i))]
            self._launch(ops, net, spec, run, pos, PROBE_SPINS)(self.ctx.queue)
            failed = int(sync.numpy()[1])
        except Unfusable:
            raise
        except Exception as err:  # a build or a launch the driver refuses
            log.info("decoding: no one-launch blocks on %s (%s)", self.ctx.facts.name,
                     str(err).splitlines()[0])
            return False
        sync.to_device(np.zeros(2, np.uint64))  # (a failed launch leaves it mid-count)
        return not failed

    def failed(self):
        """Whether a launch gave up waiting at a grid barrier (its outputs are NaN)."""
        return bool(self.scratch["sync"].numpy()[1])

    def forward(self):
        """Enqueue the pass: the Net's ``tokens`` and ``pos`` in, its ``logits`` out."""
        queue = self.ctx.queue
        for launch in self.launches:
            launch(queue)
