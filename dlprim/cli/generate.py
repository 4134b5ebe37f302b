"""dlprim-generate: text from a HuggingFace language model folder, on an OpenCL device.

    dlprim-generate path/to/model --prompt "Once upon a time" --max-new-tokens 64
    dlprim-generate path/to/model --chat --prompt "Why is the sky blue?" \\
                    --temperature 0.7 --top-p 0.9 --seed 1
    echo "a prompt" | dlprim-generate path/to/model --prompt -

Streams the text to stdout as it comes; then, on stderr, the prompt's and the decoding's
tokens per second. Settings not given come from the folder's generation_config.json, else
HuggingFace's defaults; --temperature, --top-k or --top-p turn sampling on. Needs the
folder's tokenizer.json (the llm extra: pip install dlprim[llm]).
"""
import argparse
import logging
import sys

from ..errors import Error

__all__ = ["main", "parse_args"]

DTYPES = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}


def parse_args(argv):
    """The parsed command line of dlprim-generate."""
    p = argparse.ArgumentParser(prog="dlprim-generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a HuggingFace model folder (config.json, *.safetensors, "
                                 "tokenizer.json)")
    p.add_argument("--prompt", required=True, help='the prompt ("-": read it from stdin)')
    p.add_argument("--chat", action="store_true",
                   help="the prompt is a user message, through the model's chat template")
    p.add_argument("--system", help="with --chat: a system message before it")
    p.add_argument("--max-new-tokens", type=int, help="at most this many tokens")
    p.add_argument("--temperature", type=float, help="sampling temperature (0: greedy)")
    p.add_argument("--top-k", type=int, help="draw among the K most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, help="draw among the most likely tokens whose "
                                               "probabilities sum to P")
    p.add_argument("--repetition-penalty", type=float, help="HF's repetition penalty (1: none)")
    p.add_argument("--seed", type=int, help="the random stream's seed (default 0)")
    p.add_argument("--stop", action="append", help="end the text at this string (repeatable)")
    add_model_options(p)
    return p.parse_args(argv)


def add_model_options(p):
    """How a model loads, as dlprim-generate and dlprim-serve both take it: --context,
    --dtype, --quantize, --device (``load_options`` reads them back)."""
    p.add_argument("--context", type=int, help="positions of the key/value cache per "
                                               "sequence (default: the model's, at most 2048)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                   help="storage of the activations and weights: fp32 (default), fp16 or "
                        "bf16 (norms, softmax and sums stay float32)")
    p.add_argument("--quantize", choices=("int8", "q4"),
                   help="weight-only quantization: int8 (a scale per output channel) or "
                        "q4 (4-bit, a scale per 32 values)")
    p.add_argument("--device", help='OpenCL device: "cpu", "gpu", "P:D" or an index')


def load_options(args):
    """``dlprim.llm.load``'s keywords from the options ``add_model_options`` added; opens
    the device."""
    from ..context import Context  # opens OpenCL: not needed to parse
    return dict(ctx=Context(args.device), context=args.context,
                precision=DTYPES[args.dtype], quantize=args.quantize)


def main(argv=None):
    """The dlprim-generate program; returns the exit status (0 done, 2 a bad option, model
    or prompt: nothing generated, 130 interrupted)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="dlprim-generate: %(message)s")
    try:
        prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
        if args.system and not args.chat:
            raise Error("--system needs --chat")
        from ..llm import load
        model = load(args.model, **load_options(args))
        if model.tokenizer is None:
            raise Error("%s has no tokenizer.json: dlprim-generate needs one to read the "
                        "prompt" % args.model)
        if args.chat:
            prompt = ([{"role": "system", "content": args.system}] if args.system else []) + \
                [{"role": "user", "content": prompt}]
        stream = model.generate(
            prompt, stream=True, chat=args.chat, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            repetition_penalty=args.repetition_penalty, seed=args.seed, stop=args.stop)
    except (Error, OSError, ValueError, ImportError) as err:
        print("dlprim-generate: %s" % err, file=sys.stderr)
        return 2
    try:
        for piece in stream:
            sys.stdout.write(piece)
            sys.stdout.flush()
    except KeyboardInterrupt:
        print("\ndlprim-generate: interrupted", file=sys.stderr)
        return 130
    except Error as err:
        print("\ndlprim-generate: %s" % err, file=sys.stderr)
        return 1
    r = stream.result
    sys.stdout.write("\n")
    print("dlprim-generate: prompt %d tokens in %.3f s (%.1f tokens/s); %d new tokens, "
          "decode %.1f tokens/s; ended by %s"
          % (r.prompt_tokens, r.prefill_seconds, r.prefill_tokens_per_second, len(r.tokens),
             r.decode_tokens_per_second, r.finish_reason), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
