"""Memory, perplexity and decoding speed of dlprim.llm's weight storages on a model that
has learned something: a small Llama trained here with PyTorch on the charlm example's
Shakespeare (a byte-level BPE tokenizer trained on it too), saved as a HF folder, then
loaded by dlprim in float32, float16, bfloat16, int8 (weight-only, a scale per output
channel) and q4 (4-bit, a scale per 32 values). Perplexity over held-out text the training never saw.

    python benchmarks/llm_quantization.py [--steps 300] [--device cpu] [--folder DIR]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "examples", "charlm", "data", "shakespeare.txt")


def train(folder, steps, seed=0):
    """A small Llama and its tokenizer trained on the first 90% of the text."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    cut = int(len(text) * 0.9)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text[:cut]], trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<s>", "</s>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                         eos_token="</s>").save_pretrained(folder)
    ids = torch.tensor(tok.encode(text[:cut]).ids)
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=320,
                                      num_hidden_layers=4, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=256,
                                      bos_token_id=0, eos_token_id=1)
    model = transformers.LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    seq, batch = 128, 16
    for step in range(steps):
        starts = torch.randint(0, len(ids) - seq - 1, (batch,))
        x = torch.stack([ids[s:s + seq] for s in starts])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print("step %d loss %.3f" % (step, loss.item()), file=sys.stderr)
    model.save_pretrained(folder)
    return text[cut:]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--device", default=None)
    p.add_argument("--folder", default=None, help="where the model is saved (kept)")
    p.add_argument("--tokens", type=int, default=200, help="held-out tokens scored")
    args = p.parse_args(argv)
    import tempfile

    import dlprim as dp
    from dlprim.llm import load
    folder = args.folder or tempfile.mkdtemp(prefix="dlprim-quant-")
    held_out = train(folder, args.steps)
    ctx = dp.Context(args.device)
    for precision, quantize in (("fp32", None), ("fp16", None), ("bf16", None),
                                ("fp32", "int8"), ("fp32", "q4")):
        lm = load(folder, ctx=ctx, context=256, precision=precision, quantize=quantize)
        ids = lm.encode(held_out)[:args.tokens]
        ppl = lm.perplexity(ids)
        lm.generate(ids[:16], max_new_tokens=4, eos_ids=[])
        start = time.perf_counter()
        r = lm.generate(ids[:16], max_new_tokens=64, eos_ids=[])
        elapsed = time.perf_counter() - start
        print(json.dumps(dict(weights=quantize or precision, perplexity=round(ppl, 3),
                              memory=lm.engine.memory(),
                              decode_tokens_per_s=round(r.decode_tokens_per_second, 1),
                              seconds=round(elapsed, 3))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
