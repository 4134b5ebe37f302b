"""A HuggingFace model folder as dlprim reads it, without PyTorch or ``transformers``:
``config.json`` and the weights of ``model.safetensors``, or of the shards that
``model.safetensors.index.json`` maps tensor names to. Every shard is memory-mapped
(``net.safetensors``): a tensor is read from disk when used, so a folder of several GB
costs no memory up front.

    ckpt = Checkpoint("path/to/model")
    ckpt.architecture            # "llama", "mistral", "qwen2", "phi3" or "gpt2"
    ckpt.config["hidden_size"]
    w = ckpt.tensor("model.layers.0.self_attn.q_proj.weight")   # numpy, memory-mapped

An architecture dlprim does not build is an ``ArchitectureError`` naming it and the
known ones; a missing file or tensor, a ``MissingFileError`` or ``FileFormatError``
naming the folder, the file and the tensor.
"""
import json
import os

import numpy as np

from ..dtypes import bfloat16, bfloat16_values
from ..errors import Error, FileFormatError, MissingFileError
from ..net.safetensors import load_safetensors

__all__ = ["Checkpoint", "ArchitectureError", "ARCHITECTURES", "ACTIVATIONS", "activation",
           "as_float32"]

# HuggingFace's class name (config.json "architectures") -> dlprim's name for the family
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                 "Qwen2ForCausalLM": "qwen2", "Phi3ForCausalLM": "phi3",
                 "GPT2LMHeadModel": "gpt2"}
_MODEL_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "phi3": "phi3",
                "gpt2": "gpt2"}

# transformers' activation names (ACT2FN) -> the InnerProduct epilogue that computes them
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu",
               "tanh": "tanh", "sigmoid": "sigmoid"}
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


class ArchitectureError(Error, ValueError):
    """A model folder whose architecture dlprim does not build: names it and the known
    ones."""


class Checkpoint:
    """A model folder: ``config`` (config.json as a dict), ``architecture`` (dlprim's
    name), ``names()`` and ``tensor(name)`` (the weights, memory-mapped)."""

    def __init__(self, folder):
        self.folder = os.fspath(folder)
        if not os.path.isdir(self.folder):
            raise MissingFileError("%s: no such model folder" % self.folder)
        self.config = read_json(os.path.join(self.folder, "config.json"), "the model's config")
        self.architecture = _architecture(self.config, self.folder)
        self._shards = {}  # shard file -> {name: array}, mapped when first read
        self._where = self._weight_map()  # tensor name -> shard file

    def _weight_map(self):
        index = os.path.join(self.folder, INDEX)
        if os.path.exists(index):
            data = read_json(index, "the weights' index")
            where = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(where, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in where.items()):
                raise FileFormatError("%s: no weight_map of tensor names to files" % index)
            for shard in set(where.values()):
                if os.path.basename(shard) != shard:
                    raise FileFormatError("%s: shard %r is not a file beside the index"
                                          % (index, shard))
                if not os.path.isfile(os.path.join(self.folder, shard)):
                    raise MissingFileError("%s: shard %s, named by %s, is missing"
                                           % (self.folder, shard, INDEX))
            return dict(where)
        single = os.path.join(self.folder, WEIGHTS)
        if not os.path.isfile(single):
            raise MissingFileError("%s: no %s or %s (dlprim reads safetensors weights)"
                                   % (self.folder, WEIGHTS, INDEX))
        return {name: WEIGHTS for name in self._shard(WEIGHTS)}

    def _shard(self, shard):
        arrays = self._shards.get(shard)
        if arrays is None:
            arrays = self._shards[shard] = load_safetensors(os.path.join(self.folder, shard))
        return arrays

    def names(self):
        """Every tensor name of the checkpoint, in the index's (or the file's) order."""
        return list(self._where)

    def __contains__(self, name):
        return name in self._where

    def tensor(self, name):
        """The tensor ``name`` (a read-only memory-mapped numpy array in the file's dtype;
        bfloat16 as dlprim's ``dtypes.bfloat16``)."""
        shard = self._where.get(name)
        if shard is None:
            raise FileFormatError("%s: the checkpoint has no tensor '%s' (%d tensors, e.g. %s)"
                                  % (self.folder, name, len(self._where),
                                     ", ".join(list(self._where)[:3])))
        arrays = self._shard(shard)
        if name not in arrays:
            raise FileFormatError("%s: %s has no tensor '%s', which %s places there"
                                  % (self.folder, shard, name, INDEX))
        return arrays[name]


def activation(name, what):
    """The epilogue of transformers' activation ``name`` (``what`` uses it: the error's
    subject), an ArchitectureError naming the known ones for any other."""
    if name not in ACTIVATIONS:
        raise ArchitectureError("%s's activation %r is not one dlprim builds (known: %s)"
                                % (what, name, ", ".join(sorted(ACTIVATIONS))))
    return ACTIVATIONS[name]


def as_float32(array):
    """A checkpoint's float tensor (float16, bfloat16, float32, float64) as float32."""
    if array.dtype == bfloat16:
        return bfloat16_values(array)
    if array.dtype.kind != "f":
        raise FileFormatError("a weight of dtype %s is not a float tensor" % array.dtype)
    return np.asarray(array, np.float32)


def read_json(path, what):
    """A JSON file of the folder (``what`` names it in errors: missing or not JSON)."""
    if not os.path.isfile(path):
        raise MissingFileError("%s: %s is missing" % (path, what))
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (UnicodeDecodeError, ValueError) as e:
        raise FileFormatError("%s: %s is not JSON (%s)" % (path, what, e)) from None


def _architecture(config, folder):
    if not isinstance(config, dict):
        raise FileFormatError("%s: config.json is not a JSON object" % folder)
    names = config.get("architectures") or []
    for name in names if isinstance(names, list) else []:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    kind = _MODEL_TYPES.get(config.get("model_type"))
    if kind is not None and not names:
        return kind
    raise ArchitectureError(
        "%s: architecture %s (model_type %r) is not one dlprim builds; known: %s"
        % (folder, ", ".join(map(str, names)) or "unnamed", config.get("model_type"),
           ", ".join(sorted(ARCHITECTURES))))
