"""Write text with a character-level model trained by dlprim-train.

    python sample.py runs --prompt "ROMEO:" --length 400

reads ``model-deploy.json``, ``model.dlp`` (or ``--weights best``) and ``vocab.json``
from the run folder and prints what the model writes after the prompt.
"""
import argparse
import os
import sys

import dlprim as dp
from dlprim.data import CharVocab
from dlprim.errors import Error
from dlprim.sampling import sample_text


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="the output folder of dlprim-train")
    p.add_argument("--prompt", default="\n", help="text to start from (default: a new line)")
    p.add_argument("--length", type=int, default=400, help="characters to write")
    p.add_argument("--temperature", type=float, default=0.8,
                   help="below 1: safer, more repetitive; above 1: wilder")
    p.add_argument("--top-k", type=int, default=None, help="draw only from the k likeliest")
    p.add_argument("--weights", choices=["model", "best"], default="model")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default=None, help='OpenCL device: "cpu", "gpu", "P:D"')
    args = p.parse_args(argv)
    try:
        vocab = CharVocab.load(os.path.join(args.run, "vocab.json"))
        net = dp.Net(dp.Context(args.device), mode=dp.PREDICT)
        net.load_from_json_file(os.path.join(args.run, args.weights + "-deploy.json"))
        net.setup()
        net.load_parameters(os.path.join(args.run, args.weights + ".dlp"))
        text = sample_text(net, vocab, args.prompt, args.length, args.temperature, args.top_k,
                           args.seed)
    except (Error, ValueError, OSError) as e:
        print("sample.py: %s" % e, file=sys.stderr)
        return 2
    print(args.prompt + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
