"""Decoding speed of dlprim.llm beside HuggingFace generate: random-weight models built
from configs and saved as HF folders (nothing downloaded), a prompt of --context tokens
and --new tokens decoded greedily (EOS ignored), tokens per second of the decoding alone.

    python benchmarks/llm_decode.py --kinds dlprim              # dlprim on its device
    python benchmarks/llm_decode.py --kinds dlprim_fp16,dlprim_fp16_q4  # activations_weights
    python benchmarks/llm_decode.py --kinds hf_cuda,hf_compiled  # PyTorch on CUDA, fp16
    python benchmarks/llm_decode.py --kinds dlprim,hf_cpu --models gpt2 --device cpu
    python benchmarks/llm_decode.py --kinds llama_cpp --models gpt2   # llama.cpp's CPU path

Models: ``tinyllama`` (TinyLlama-1.1B's shape: 22 layers, 2048 wide, 32 heads, 4 KV
heads) and ``gpt2`` (124M). ``hf_compiled`` is HF generate with a static cache, which
makes generate compile the forward (torch.compile, CUDA graphs). Decode time = time(prompt + N tokens) - time(prompt + 1
token), over N - 1 tokens; ``prefill_ms`` is time(prompt + 1 token). The memory floor is the bytes a step must read (weights, and
the cache up to the context) at the device's copy bandwidth (--bandwidth GB/s).
``llama_cpp`` (``llama_cpp_f16``): llama.cpp's CPU path (llama-cpp-python, --threads
threads) on the same weights written as a float32 (float16) GGUF file by
benchmarks/gguf_export.py; GPT-2 only.
"""
import argparse
import json
import os
import sys
import tempfile
import time

MODELS = {
    "tinyllama": dict(kind="llama", vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                      max_position_embeddings=2048),
    "gpt2": dict(kind="gpt2", vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12,
                 n_head=12),
}


def save_model(name, folder):
    import torch
    import transformers
    spec = dict(MODELS[name])
    kind = spec.pop("kind")
    torch.manual_seed(0)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**spec))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**spec))
    model.half().save_pretrained(folder)  # (as checkpoints ship: 16-bit)
    return sum(p.numel() for p in model.parameters())


def time_dlprim(folder, context, new, batch, precision, device, quantize=None):
    import numpy as np

    import dlprim as dp
    from dlprim.llm import load
    lm = load(folder, ctx=dp.Context(device), context=context + new + 8, batch=batch,
              precision=precision, quantize=quantize)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 1000, context).tolist() for _ in range(batch)]

    def run(n):
        start = time.perf_counter()
        lm.generate(prompts if batch > 1 else prompts[0], max_new_tokens=n, eos_ids=[])
        return time.perf_counter() - start
    run(2)
    run(new)  # plans and kernels built
    one = min(run(1) for _ in range(2))
    full = min(run(new) for _ in range(2))
    net, queue = lm.engine.net, lm.ctx.queue  # the one-token pass alone: host and device
    queue.finish()
    start = time.perf_counter()
    for _ in range(20):
        net.forward()
    host = (time.perf_counter() - start) / 20
    queue.finish()
    wall = (time.perf_counter() - start) / 20
    detail = dict(prefill_ms=round(one * 1e3, 2), launches=len(net.plan.forward),
                  enqueue_ms=round(host * 1e3, 3),
                  pass_ms=round(wall * 1e3, 3), weights_mb=round(
                      lm.engine.memory()["weights"] / 2 ** 20, 1))
    return (full - one) / (new - 1), detail


def time_hf(folder, context, new, batch, compiled, device="cuda"):
    import torch
    import transformers
    dtype = torch.float16 if device == "cuda" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, torch_dtype=dtype).to(device).eval()
    ids = torch.randint(1, 1000, (batch, context), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    if compiled:  # generate then compiles the forward itself (CUDA graphs, fullgraph)
        model.generation_config.cache_implementation = "static"

    def run(n):
        sync()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, **kw)
        sync()
        return time.perf_counter() - start
    run(2)
    run(new)
    one = min(run(1) for _ in range(2))
    full = min(run(new) for _ in range(2))
    return (full - one) / (new - 1), dict(prefill_ms=round(one * 1e3, 2))


def time_llama_cpp(folder, context, new, batch, f16=False, threads=None):
    import numpy as np
    import llama_cpp
    from gguf_export import export
    if batch != 1:
        raise ValueError("llama_cpp rows are batch 1")
    path = os.path.join(folder, "model-%s.gguf" % ("f16" if f16 else "f32"))
    if not os.path.isfile(path):
        export(folder, path, f16)
    llm = llama_cpp.Llama(model_path=path, n_ctx=context + new + 8, n_batch=512,
                          n_threads=threads or os.cpu_count(), verbose=False)
    prompt = np.random.default_rng(0).integers(1, 1000, context).tolist()

    def run(n):
        start = time.perf_counter()
        llm.reset()
        for i, _ in enumerate(llm.generate(prompt, top_k=1, temp=0.0, reset=True)):
            if i + 1 == n:
                break
        return time.perf_counter() - start
    run(2)
    one = min(run(1) for _ in range(2))
    full = min(run(new) for _ in range(2))
    return (full - one) / (new - 1), dict(prefill_ms=round(one * 1e3, 2),
                                          weights_mb=round(os.path.getsize(path) / 2 ** 20, 1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gpt2,tinyllama")
    p.add_argument("--kinds", default="dlprim",
                   help="dlprim[_fp16|_bf16][_int8|_q4] (activations, then stored "
                        "weights: dlprim_q4, dlprim_fp16_q4, ...), hf_cuda, hf_compiled, "
                        "hf_cpu (float32), llama_cpp, llama_cpp_f16")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None, help="llama.cpp's threads (all cores)")
    p.add_argument("--folder", default=None, help="where the models are saved (kept)")
    p.add_argument("--json", default=None, help="append the rows to this JSON-lines file")
    args = p.parse_args(argv)
    root = args.folder or tempfile.mkdtemp(prefix="dlprim-llm-")
    for name in args.models.split(","):
        folder = os.path.join(root, name)
        if not os.path.isfile(os.path.join(folder, "config.json")):
            save_model(name, folder)
        for kind in args.kinds.split(","):
            try:
                if kind.startswith("llama_cpp"):
                    s, detail = time_llama_cpp(folder, args.context, args.new, args.batch,
                                               kind == "llama_cpp_f16", args.threads)
                elif kind.startswith("dlprim"):
                    # dlprim[_fp16|_bf16][_int8|_q4]: activations, then stored weights
                    parts = kind.split("_")[1:]
                    precision = ([p for p in parts if p in ("fp16", "bf16")] or ["fp32"])[0]
                    quantize = ([p for p in parts if p in ("int8", "q4")] or [None])[0]
                    s, detail = time_dlprim(folder, args.context, args.new, args.batch,
                                            precision, args.device, quantize)
                else:
                    s, detail = time_hf(folder, args.context, args.new, args.batch,
                                        kind == "hf_compiled",
                                        "cpu" if kind == "hf_cpu" else "cuda")
                row = dict(model=name, kind=kind, batch=args.batch, context=args.context,
                           ms_per_step=round(s * 1e3, 3),
                           tokens_per_s=round(args.batch / s, 1), **detail)
            except Exception as e:  # a row that fails is reported, the others go on
                row = dict(model=name, kind=kind, batch=args.batch, error=repr(e)[:300])
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
