"""A HuggingFace GPT-2 folder as a GGUF file for llama.cpp's CPU path (llm_decode.py's
``llama_cpp`` rows), written with the ``gguf`` package's writer: the same weights in
float32 (or float16), llama.cpp's tensor names and layout, and a byte-level BPE
vocabulary of the model's size (the benchmark feeds token ids, so the vocabulary only
has to load: 256 byte tokens, then tokens of two bytes, each with its merge).

    python benchmarks/gguf_export.py HF_FOLDER OUT.gguf [--f16]
"""
import argparse
import json
import os

import numpy as np

# HF GPT-2 name (after "transformer.") -> (GGUF name, whether the weight is a Conv1D's
# [inputs, outputs], which GGUF holds as [outputs, inputs])
_BLOCK = {"ln_1": ("attn_norm", False), "attn.c_attn": ("attn_qkv", True),
          "attn.c_proj": ("attn_output", True), "ln_2": ("ffn_norm", False),
          "mlp.c_fc": ("ffn_up", True), "mlp.c_proj": ("ffn_down", True)}


def _bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = keep[:], 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return [chr(c) for _, c in sorted(zip(keep, chars))]


def _vocabulary(size):
    byte = _bytes_to_unicode()
    tokens, merges = list(byte), []
    for i in range(256):
        for j in range(256):
            if len(tokens) == size:
                return tokens, merges
            tokens.append(byte[i] + byte[j])
            merges.append("%s %s" % (byte[i], byte[j]))
    raise ValueError("a vocabulary of %d tokens is more than 256 + 256^2" % size)


def _tensors(folder):
    from safetensors.numpy import load_file
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if \
        os.path.isfile(index) else ["model.safetensors"]
    out = {}
    for name in files:
        out.update(load_file(os.path.join(folder, name)))
    return {k[len("transformer."):] if k.startswith("transformer.") else k: v
            for k, v in out.items()}


def export(folder, path, f16=False):
    """Write ``folder`` (a GPT2LMHeadModel's save_pretrained) to ``path`` as GGUF."""
    import gguf
    config = json.load(open(os.path.join(folder, "config.json")))
    if config.get("model_type") != "gpt2":
        raise ValueError("gguf_export: only GPT-2 folders, got model_type %r"
                         % config.get("model_type"))
    weights = _tensors(folder)
    dtype = np.float16 if f16 else np.float32
    n_embd, n_layer = config["n_embd"], config["n_layer"]
    w = gguf.GGUFWriter(path + ".part", "gpt2")
    w.add_context_length(config["n_positions"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(config.get("n_inner") or 4 * n_embd)
    w.add_block_count(n_layer)
    w.add_head_count(config["n_head"])
    w.add_layer_norm_eps(config.get("layer_norm_epsilon", 1e-5))
    w.add_file_type(1 if f16 else 0)
    tokens, merges = _vocabulary(config["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(merges)
    w.add_bos_token_id(config.get("bos_token_id", 0))
    w.add_eos_token_id(config.get("eos_token_id", 0))

    def put(name, array, matrix=False):
        # (norms and biases stay float32, as llama.cpp's converter writes them)
        w.add_tensor(name, np.ascontiguousarray(array.astype(dtype if matrix else np.float32)))
    put("token_embd.weight", weights["wte.weight"], True)
    put("position_embd.weight", weights["wpe.weight"])
    for i in range(n_layer):
        for hf, (name, conv1d) in _BLOCK.items():
            weight = weights["h.%d.%s.weight" % (i, hf)]
            put("blk.%d.%s.weight" % (i, name), weight.T if conv1d else weight, conv1d)
            put("blk.%d.%s.bias" % (i, name), weights["h.%d.%s.bias" % (i, hf)])
    put("output_norm.weight", weights["ln_f.weight"])
    put("output_norm.bias", weights["ln_f.bias"])
    put("output.weight", weights.get("lm_head.weight", weights["wte.weight"]), True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(path + ".part", path)  # (a file that is there is whole)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("out")
    p.add_argument("--f16", action="store_true")
    args = p.parse_args()
    print(export(args.folder, args.out, args.f16))


if __name__ == "__main__":
    main()
