"""dlprim-convert: an ONNX model to a DLPrimitives JSON net and a .dlp weights file.

    dlprim-convert model.onnx net.json net.dlp [--batch 16]

No OpenCL device is needed. A model with operators dlprim cannot run is refused with the
list of every such operator.
"""
import argparse
import sys

__all__ = ["main"]


def main(argv=None):
    """The dlprim-convert program; returns the exit status."""
    parser = argparse.ArgumentParser(prog="dlprim-convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="the ONNX model file")
    parser.add_argument("json", help="where to write the JSON net")
    parser.add_argument("weights", help="where to write the weights (.dlp)")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size of the inputs (default: the model's, or 1 if symbolic)")
    args = parser.parse_args(argv)
    if args.batch is not None and args.batch < 1:
        parser.error("--batch must be at least 1")
    try:
        from .. import onnx as dox
        from ..net.weights import save_dlp
        cfg, weights = dox.to_netconfig(args.model, batch=args.batch)
    except (ImportError, OSError, ValueError) as err:
        print("dlprim-convert: %s" % err, file=sys.stderr)
        return 1
    cfg.save(args.json)
    save_dlp(args.weights, weights)
    size = sum(int(a.size) for a in weights.values())
    print("%s: %d operators, %d parameter tensors (%d values); inputs %s; outputs %s"
          % (args.model, len(cfg.operators), len(weights), size,
             ", ".join("%s %s" % (i["name"], i["shape"]) for i in cfg.inputs),
             ", ".join(o if isinstance(o, str) else o["name"] for o in cfg.outputs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
