"""HuggingFace transformers models exported to ONNX by PyTorch, imported by dlprim and run
against onnxruntime on the same file: small configs (random weights, no downloads), the
way their users call them (token ids with attention masks, pixel values, log-mel
features, decoder ids).

    python benchmarks/onnx_hf_exports.py [--models gpt2 bert ...] [--dynamo]

Per model: whether the export imports, the largest difference from onnxruntime relative
to the output's largest magnitude, and the import error where there is one.
``--dynamo`` exports with ``torch.onnx.export(dynamo=True)`` (needs onnxscript) instead
of the TorchScript exporter at opset 17.
"""
import argparse
import os
import tempfile

import numpy as np
import torch

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             vocab_size=128)


def _ids(batch=2, seq=16, vocab=128, masked=3):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, :masked] = 0  # left padding in the last row: the mask reaches the scores
    return ids, mask


class _Logits(torch.nn.Module):
    """The model called with keyword arguments, returning one output tensor."""

    def __init__(self, model, names, output):
        super().__init__()
        self.model, self.names, self.output = model, names, output

    def forward(self, *inputs):
        kw = dict(zip(self.names, inputs))
        kw.setdefault("return_dict", True)
        if "use_cache" in self.model.forward.__code__.co_varnames:
            kw["use_cache"] = False
        return getattr(self.model(**kw), self.output)


def gpt2():
    import transformers
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg), dict(zip(("input_ids", "attention_mask"), _ids())), "logits"


def bert():
    import transformers
    cfg = transformers.BertConfig(**SMALL, max_position_embeddings=64)
    ids, mask = _ids()
    return (transformers.BertModel(cfg), {"input_ids": ids, "attention_mask": mask,
                                          "token_type_ids": torch.zeros_like(ids)},
            "last_hidden_state")


def llama():
    import transformers
    cfg = transformers.LlamaConfig(**SMALL, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg), dict(zip(("input_ids", "attention_mask"), _ids())), "logits"


def t5():
    import transformers
    cfg = transformers.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                num_heads=4, decoder_start_token_id=0)
    ids, mask = _ids()
    return (transformers.T5ForConditionalGeneration(cfg),
            {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": ids[:, :8]}, "logits")


def whisper():
    import transformers
    cfg = transformers.WhisperConfig(vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                                     max_source_positions=32, max_target_positions=32,
                                     decoder_start_token_id=1, pad_token_id=0)
    feats = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(1))
    ids, _ = _ids(seq=8)
    return (transformers.WhisperForConditionalGeneration(cfg),
            {"input_features": feats, "decoder_input_ids": ids}, "logits")


def vit():
    import transformers
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=128)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    return transformers.ViTModel(cfg), {"pixel_values": x}, "last_hidden_state"


MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama, "t5": t5, "whisper": whisper, "vit": vit}


def export(name, folder, dynamo=False):
    """(path of the ONNX file, {input name: numpy}) for a model of MODELS."""
    torch.manual_seed(0)
    model, inputs, output = MODELS[name]()
    model.eval()
    names = list(inputs)
    wrapped = _Logits(model, names, output).eval()
    path = os.path.join(folder, name + (".dynamo" if dynamo else "") + ".onnx")
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(wrapped, tuple(inputs.values()), path, dynamo=True,
                              input_names=names, output_names=[output])
        else:
            torch.onnx.export(wrapped, tuple(inputs.values()), path, dynamo=False,
                              opset_version=17, input_names=names, output_names=[output])
    return path, {k: v.numpy() for k, v in inputs.items()}, output


def compare(path, feeds, ctx=None):
    """The largest difference between dlprim and onnxruntime on the file, relative to the
    largest magnitude of onnxruntime's output."""
    import onnxruntime
    import dlprim as dp
    import dlprim.onnx
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    net = dlprim.onnx.load(path, ctx or dp.Context(), batch=next(iter(feeds.values())).shape[0])
    got = next(iter(net(**feeds).values()))
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--dynamo", action="store_true")
    args = p.parse_args(argv)
    print("| model | exporter | imports | error vs onnxruntime | what stops it |")
    print("|---|---|---|---:|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            how = "dynamo" if args.dynamo else "TorchScript, opset 17"
            try:
                path, feeds, _ = export(name, folder, args.dynamo)
            except Exception as e:  # the exporter's own failure: reported, not ours
                print("| %s | %s | export failed | | %s |" % (name, how, str(e).splitlines()[0][:150]))
                continue
            try:
                err = compare(path, feeds)
                print("| %s | %s | yes | %.1e | |" % (name, how, err))
            except Exception as e:
                print("| %s | %s | no | | %s: %s |" % (name, how, type(e).__name__,
                                                     " ".join(str(e).split())[:300]))


if __name__ == "__main__":
    main()
