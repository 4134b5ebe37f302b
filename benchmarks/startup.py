"""Start-up of ``dlprim-benchmark`` rows, cold and warm: each row runs twice as a process
of its own, first with every kernel cache empty (dlprim's, PyOpenCL's, PoCL's and
NVIDIA's compute cache pointed at a fresh folder), then again with the caches that run
left. Prints the process's wall time to its first step's end and the part of it from the
Net's construction on (``first_step_s`` of ``run_net``: the kernel builds and the
planning), and of that the seconds in the driver's compiler; after the table, the
templates whose cold builds took longest (``--slowest N``).

    python benchmarks/startup.py --rows resnet50:train:fp32 vit_b_16:train:fp16 [--batch 64]
    python benchmarks/startup.py --rows examples/mnist/lenet.json:train:fp32 --device cpu

A row is NET:MODE:PRECISION (MODE infer or train).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

# where each runtime keeps what it has built, as environment variables
CACHE_VARIABLES = ("XDG_CACHE_HOME", "DLPRIM_CACHE_DIR", "POCL_CACHE_DIR", "CUDA_CACHE_PATH")


def cold_environment(folder):
    """os.environ with every kernel cache inside ``folder`` (fresh: nothing built yet)."""
    env = dict(os.environ)
    for name in CACHE_VARIABLES:
        env[name] = os.path.join(folder, name.lower())
        os.makedirs(env[name], exist_ok=True)
    env.pop("CUDA_CACHE_DISABLE", None)
    return env


def parse_row(text):
    """(net, train, precision) of NET:MODE:PRECISION; a ValueError naming what is wrong."""
    net, _, rest = text.rpartition(":")
    net, _, mode = net.rpartition(":")
    if not net or mode not in ("infer", "train") or not rest:
        raise ValueError("a row is NET:MODE:PRECISION with MODE infer or train, got %r" % text)
    return net, mode == "train", rest


def one_run(net, train, precision, batch, device, env):
    """(process wall seconds, the run's first_step_s, its build_s, its builds by template)
    of one dlprim-benchmark process stopping after its first timed step."""
    cmd = [sys.executable, "-m", "dlprim.cli.benchmark", net, "--batch", str(batch),
           "--precision", precision, "--warmup", "1", "--iters", "1", "--json"]
    if train:
        cmd.append("--train")
    if device:
        cmd += ["--device", device]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), done.stderr[-2000:]))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, float(result["first_step_s"]), float(result["build_s"]), result["builds"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", nargs="+", required=True, help="NET:MODE:PRECISION")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--device", default=None)
    p.add_argument("--slowest", type=int, default=5,
                   help="templates listed per row after the table, by cold build seconds")
    args = p.parse_args(argv)
    rows = [parse_row(r) for r in args.rows]
    print("| net | batch | mode | precision | cold: process s | cold: net to first step s "
          "| cold: builds s | warm: process s | warm: net to first step s |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    slowest = []
    for net, train, precision in rows:
        folder = tempfile.mkdtemp(prefix="dlprim-startup-")
        try:
            env = cold_environment(folder)
            cold = one_run(net, train, precision, args.batch, args.device, env)
            warm = one_run(net, train, precision, args.batch, args.device, env)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        name = "%s %s %s" % (net, "train" if train else "infer", precision)
        print("| %s | %d | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f |"
              % (net, args.batch, "train" if train else "infer", precision, *cold[:3],
                 *warm[:2]), flush=True)
        slowest.append((name, cold[3][:args.slowest]))
    for name, builds in slowest:
        print("%s, cold, slowest templates: %s" % (name, ", ".join(
            "%s %d x %.1f s" % (template, count, seconds) for template, count, seconds in builds)))


if __name__ == "__main__":
    main()
