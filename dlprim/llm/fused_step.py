"""A Llama-family decoder's one-token pass as one launch a block (``core/decoder_layer.py``)
over the decoder Net's own weights and caches, then the Net's head.

The engine takes it for a one-token pass of a single sequence where the device runs it
(NVIDIA GPUs, after a probe of the launch shape); the prompt's passes, batches of several
sequences, and every other device run the Net. Both write the same caches in the same
layout, so a sequence may move between them at any pass. ``DLPRIM_FUSED_DECODE=0`` turns
it off.
"""
import logging
import os

import numpy as np

from ..core.decoder_layer import PROBE_SPINS, DecoderBlockDims, DecoderLayerOps
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


class FusedStep:
    """The blocks of ``net`` (a Llama-family decoder of batch 1 and one token, built by
    ``llama.decoder``) as ``DecoderLayerOps`` launches, then the final RMSNorm and the head
    into the Net's ``logits``. ``groups``: work-groups (None: the device's, probed);
    ``options``: ``DecoderLayerOps``' (teams, unroll, timing)."""

    def __init__(self, net, spec, groups=None, **options):
        if spec is None:
            raise Unfusable("the decoder's options are not the fused kernel's")
        self.net, self.ctx = net, net.ctx
        tokens, pos = net.tensor("tokens"), net.tensor("pos")
        if tokens.size != 1 or pos.size != 1:
            raise Unfusable("a pass of %d tokens over %d rows" % (tokens.size, pos.size))
        dtypes = net.store.dtypes
        p0 = "model.layers.0."
        w_dt = np.dtype(dtypes[p0 + "self_attn.qkv_proj.weight"])
        if w_dt == np.uint8:
            raise Unfusable("4-bit weights")
        cache = net.param(p0 + "self_attn.cache.keys")
        table = net.param("rope.cos")
        embed_dt = np.dtype(dtypes["model.embed_tokens.weight"])
        bias_dt = np.float32
        for name in dtypes:
            if name.endswith(".bias") and name.startswith("model.layers."):
                bias_dt = np.dtype(dtypes[name])
        for name in dtypes:
            if name.startswith("model.layers.") and name.endswith("layernorm.weight") and \
                    dtypes[name] != np.float32:
                raise Unfusable("norm weights of %s" % dtypes[name])
        self.ops = {}
        self.launches = []
        self.clocks = []  # (timing: each block's (groups, 16) uint64 phase clocks)
        self.scratch = None
        for i, window in enumerate(spec["windows"]):
            dims = DecoderBlockDims(spec["hidden"], spec["inner"], spec["heads"],
                                    spec["kv_heads"], spec["width"], spec["context"],
                                    spec["vocab"], window, spec["qkv_bias"], spec["out_bias"])
            ops = self.ops.get(window)
            if ops is None:
                try:
                    ops = self.ops[window] = DecoderLayerOps(
                        self.ctx, dims, w_dt, cache.dtype, table.dtype, embed_dt, bias_dt,
                        groups, **options)
                except ValueError as err:  # (shapes the kernel does not take)
                    raise Unfusable(str(err)) from None
                if not ops.usable:
                    raise Unfusable("the device (%s) or its local memory" % self.ctx.facts.name)
                if self.scratch is None:
                    self.scratch = ops.scratch()
                if groups is None and not self._probe(ops, net, spec, i):
                    raise Unfusable("%d work-groups are not resident at once" % ops.groups)
            self.launches.append(self._block(ops, net, spec, i))
        self.launches += self._head(net, spec)

    def _block(self, ops, net, spec, i, pos=None, spins=None):
        """Block ``i``'s launch (``pos``: another position tensor than the Net's)."""
        p = "model.layers.%d." % i

        def param(name, optional=False):
            if optional and name not in net.store.dtypes:
                return None
            t = net.param(name)
            if t.offset % 8:
                raise Unfusable("%s starts at element %d, not a multiple of 8"
                                % (name, t.offset))
            return t
        block = {"norm1": param(p + "input_layernorm.weight"),
                 "norm2": param(p + "post_attention_layernorm.weight")}
        for key, name in (("qkv", "self_attn.qkv_proj"), ("o", "self_attn.o_proj"),
                          ("gate", "mlp.gate_proj"), ("up", "mlp.up_proj"),
                          ("down", "mlp.down_proj")):
            block["w_" + key] = param(p + name + ".weight")
            block["s_" + key] = param(p + name + ".weight_scale", True)
            block["b_" + key] = param(p + name + ".bias", True)
        caches = (net.param(p + "self_attn.cache.keys"), net.param(p + "self_attn.cache.values"))
        tables = (net.param("rope.cos"), net.param("rope.sin"))
        extra = {} if spins is None else {"spins": spins}
        if ops.params["TIMING"]:
            extra["clock"] = Tensor.zeros(self.ctx, (ops.groups, 16), "uint64")
            if pos is None:
                self.clocks.append(extra["clock"])
        pos = net.tensor("pos") if pos is None else pos
        return ops.launch(i == 0, self.scratch, net.tensor("tokens"), pos,
                          net.param("model.embed_tokens.weight"),
                          param("model.embed_tokens.weight_scale", True), block, caches,
                          tables, spec["eps"], **extra)

    def _head(self, net, spec):
        """The final RMSNorm and the head: the few-rows product normalizing x on the way
        where it does (GPUs), else a norm launch first."""
        ctx, hidden = self.ctx, spec["hidden"]
        w = net.param("lm_head.weight")
        scale = net.param("lm_head.weight_scale") if "lm_head.weight_scale" in \
            net.store.dtypes else None
        logits = net.tensor("logits")
        x = self.scratch["x"].reshape(1, hidden)
        norm_w = net.param("model.norm.weight")
        eps = spec["head_eps"]
        common = dict(trans_b=True, dtypes=(np.float32, w.dtype, logits.dtype),
                      b_scale=scale is not None)
        if Gemm.normalizes_a(ctx, 1, w.dtype):
            gemm = Gemm(ctx, 1, spec["vocab"], hidden, a_norm=eps, **common)
            return gemm.launches(x, w, logits, b_scale=scale, a_norm_weight=norm_w)
        norm = GroupNormOps(ctx, (1, 1, hidden, 1), eps, True, bias=False, rms=True)
        stats = Tensor(ctx, (2,))
        xn = Tensor(ctx, (1, hidden))
        self._held = (stats, xn)
        gemm = Gemm(ctx, 1, spec["vocab"], hidden, **common)
        return norm.forward_launches(x, xn, stats.view((1,)), stats.view((1,), 1), norm_w) + \
            gemm.launches(xn, w, logits, b_scale=scale)

    def _probe(self, ops, net, spec, i):
        """Whether every work-group of ``ops``' launch is resident at once: block ``i`` run
        at a position past the cache (it writes no cache row, and NaN into the scratch)
        with a small spin bound, its failure flag read back."""
        pos = Tensor(self.ctx, (1,), "int64")
        pos.to_device(np.array([spec["context"]], np.int64))
        sync = self.scratch["sync"]
        try:
            self._block(ops, net, spec, i, pos, PROBE_SPINS)(self.ctx.queue)
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
