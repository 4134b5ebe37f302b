"""dlprim-serve: an OpenAI-compatible HTTP server over a HuggingFace language model folder,
on an OpenCL device.

    dlprim-serve path/to/model --port 8000 --batch 4
    curl http://127.0.0.1:8000/v1/chat/completions -H "Content-Type: application/json" \\
         -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}'

Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (with "stream":
true as server-sent events). Up to --batch requests decode together; more wait for a free
row. Sampling follows OpenAI's defaults (temperature 1, top_p 1; temperature 0 is greedy),
not the folder's generation_config.json (dlprim/llm/server.py says what is taken). Serves
until Ctrl-C or SIGTERM. Needs the folder's tokenizer.json (the llm extra: pip install dlprim[llm]).
"""
import argparse
import logging
import signal
import sys
import threading
import time

from ..errors import Error
from .generate import add_model_options, load_options

__all__ = ["main", "parse_args"]


def parse_args(argv):
    """The options of dlprim-serve (module docstring)."""
    p = argparse.ArgumentParser(prog="dlprim-serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a HuggingFace model folder (config.json, *.safetensors, "
                                 "tokenizer.json)")
    p.add_argument("--port", type=int, required=True, help="TCP port (0: any free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0: every one)")
    p.add_argument("--batch", type=int, default=4,
                   help="sequences decoded together (default 4)")
    add_model_options(p)
    p.add_argument("--model-name", help="the model's id in the API (default: the folder's "
                                        "name)")
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error("--port %d: a TCP port is 0 to 65535" % args.port)
    if args.batch < 1:
        p.error("--batch %d: at least 1" % args.batch)
    return args


def main(argv=None):
    """The dlprim-serve program; returns the exit status (0 after Ctrl-C or SIGTERM and a
    clean shutdown, 2 a bad option or model, or an address it cannot listen on)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="dlprim-serve: %(message)s")
    logging.getLogger("dlprim.llm.server").setLevel(logging.INFO)  # the requests
    try:
        from ..llm import load
        from ..llm.server import Server
        model = load(args.model, batch=args.batch, **load_options(args))
        server = Server(model, args.host, args.port, args.model_name)
    except (Error, OSError, ValueError, ImportError) as err:
        print("dlprim-serve: %s" % err, file=sys.stderr)
        return 2
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        server.start()
        print("dlprim-serve: serving %s on %s (batch %d, context %d)"
              % (server.name, server.url, args.batch, model.context), file=sys.stderr)
        while True:
            time.sleep(1)  # (a signal that lands in another thread: seen within 1 s)
    except KeyboardInterrupt:
        print("\ndlprim-serve: shutting down", file=sys.stderr)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    server.close()
    return 0


def _interrupt(signum, frame):  # SIGTERM (a service manager's stop) as Ctrl-C
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
