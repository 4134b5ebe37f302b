"""PyTorch's own operator database (``op_db``, the OpInfo entries of
``torch.testing._internal.common_methods_invocations``) run on ``ocl`` against the CPU.

For each entry and dtype the CPU supports, the first ``samples`` sample inputs run on both
devices; the outputs must match (shape, dtype and values, NaN where the CPU has NaN). For
float32 entries that support autograd, the gradients of ``sum(output * cotangent)`` with
respect to every input that requires one must match too.

Each (entry, dtype) gets one verdict:
- ``pass``: every sample matched (and its gradients, where asked);
- ``grad``: the forward matched and a gradient did not run or did not match;
- ``refused``: dlprim raised NotImplementedError / TypeError naming an operator or dtype;
- ``wrong``: a result differs from the CPU's (the worst outcome: it is silent);
- ``error``: any other exception on ocl;
- ``skip``: the CPU itself fails on the samples, or the entry has none.

``python tests/opinfo_sweep.py --dtype float32 --json out.json`` prints the counts;
tests/test_opinfo.py runs it as a test with floors on the pass rates.
"""
import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import warnings

import torch

RANDOM_OPS = {  # outputs are draws: only shape and dtype are compared
    "bernoulli", "multinomial", "normal", "uniform", "rand_like", "randn_like",
    "randint_like", "randint", "randn", "rand", "exponential", "geometric", "cauchy",
    "log_normal", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.rrelu", "randperm",
    "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
    "empty_permuted", "nn.functional.gumbel_softmax", "torch.empty", "normal.number_mean",
    "normal.in_place", "bernoulli.p", "uniform_"}
HOST_ARGS = {"tensor_split"}  # their tensor arguments must stay on the CPU (as on CUDA)
DTYPES = {"float32": torch.float32, "float16": torch.float16, "int64": torch.int64,
          "bool": torch.bool, "bfloat16": torch.bfloat16, "int32": torch.int32,
          "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
          "float64": torch.float64}


class Mismatch(Exception):
    pass


def _is_random(op):
    return op.name in RANDOM_OPS or op.name.split(".")[0] in RANDOM_OPS \
        or "empty" in op.name or op.name.startswith("new_empty")


def _map(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(x, fn) for x in obj) if not hasattr(obj, "_fields") \
            else type(obj)(*(_map(x, fn) for x in obj))
    if isinstance(obj, dict):
        return {k: _map(v, fn) for k, v in obj.items()}
    return obj


def _leaves(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _leaves(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _leaves(x)]
    return []


def _to_ocl(t):
    moved = t.detach().to("ocl")
    return moved.requires_grad_(t.requires_grad)


def _on_ocl(obj):
    """A sample's device arguments ("cpu", device="cpu": factories, ``to``) made ocl, so
    that the ocl run makes its results there."""
    if isinstance(obj, torch.device) and obj.type == "cpu" or obj == "cpu":
        return torch.device("ocl") if isinstance(obj, torch.device) else "ocl"
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_on_ocl(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _on_ocl(v) for k, v in obj.items()}
    return obj


def _clone_cpu(t):
    c = t.detach().clone()
    return c.requires_grad_(t.requires_grad)


def _tolerance(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-5)
    return dict(rtol=1e-7, atol=1e-7)


def _compare(expected, actual, random, what):
    exp, act = _leaves(expected), _leaves(actual)
    if len(exp) != len(act):
        raise Mismatch("%s: %d tensors, expected %d" % (what, len(act), len(exp)))
    if not exp and expected != actual and not random:
        if isinstance(expected, (int, float, bool)) and isinstance(actual, (int, float, bool)):
            if abs(float(expected) - float(actual)) <= 1e-5 * max(1, abs(float(expected))):
                return
        raise Mismatch("%s: %r, expected %r" % (what, actual, expected))
    for i, (e, a) in enumerate(zip(exp, act)):
        if a.device.type != "ocl" and e.device.type == "cpu" and a.numel() > 0 \
                and not isinstance(a, torch.nn.Parameter):
            raise Mismatch("%s[%d]: result on %s, expected on ocl" % (what, i, a.device))
        if tuple(a.shape) != tuple(e.shape):
            raise Mismatch("%s[%d]: shape %s, expected %s" % (what, i, list(a.shape),
                                                               list(e.shape)))
        if a.dtype != e.dtype:
            raise Mismatch("%s[%d]: dtype %s, expected %s" % (what, i, a.dtype, e.dtype))
        if random:
            continue
        a = a.detach().cpu()
        e = e.detach()
        try:
            torch.testing.assert_close(a, e, equal_nan=True, check_stride=False,
                                       check_device=False, **_tolerance(e.dtype))
        except AssertionError as err:
            raise Mismatch("%s[%d]: %s" % (what, i, str(err).splitlines()[0] if str(err)
                                           else "values differ")) from None


def _grad_inputs(sample):
    return [t for t in _leaves([sample.input, sample.args, sample.kwargs])
            if t.requires_grad and t.is_floating_point()]


def _run_sample(op, sample, dtype, with_grad, random):
    """Compare one sample; raises Mismatch, or what ocl raised."""
    cpu_in = _map(sample.input, _clone_cpu)
    cpu_args = _map(sample.args, _clone_cpu)
    cpu_kwargs = _map(sample.kwargs, _clone_cpu)
    try:
        torch.manual_seed(0)
        expected = op(cpu_in, *cpu_args, **cpu_kwargs)
    except Exception:
        return "cpu"
    random = random or _draws(op, sample, expected)
    ocl_in = _on_ocl(_map(sample.input, _to_ocl))
    ocl_args = _on_ocl(_map(sample.args, _to_ocl if op.name not in HOST_ARGS
                            else _clone_cpu))
    ocl_kwargs = _on_ocl(_map(sample.kwargs, _to_ocl))
    actual = op(ocl_in, *ocl_args, **ocl_kwargs)
    try:
        _compare(expected, actual, random, "output")
    except Mismatch as err:
        if not (_ties_only(op, sample, expected, actual)
                or _matches_float_reference(op, sample, dtype, actual)):
            raise err
        return "ok"   # (nothing further to compare: these have no gradient samples)
    if not with_grad or random:
        return "ok"
    fn = sample.output_process_fn_grad
    exp_out = [t for t in _leaves(fn(expected)) if t.requires_grad and t.is_floating_point()]
    act_out = [t for t in _leaves(fn(actual)) if t.requires_grad and t.is_floating_point()]
    cpu_leaves = [t for t in _leaves([cpu_in, cpu_args, cpu_kwargs]) if t.requires_grad]
    ocl_leaves = [t for t in _leaves([ocl_in, ocl_args, ocl_kwargs]) if t.requires_grad]
    if not exp_out or not cpu_leaves:
        return "ok"
    gen = torch.Generator().manual_seed(0)
    cots = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in exp_out]
    try:
        exp_grads = torch.autograd.grad(exp_out, cpu_leaves, cots, allow_unused=True)
    except Exception:
        return "ok"
    try:
        act_grads = torch.autograd.grad(act_out, ocl_leaves, [c.to("ocl") for c in cots],
                                        allow_unused=True)
    except Exception as err:
        raise GradFailure("%s: %s" % (type(err).__name__, str(err).splitlines()[0]
                                      if str(err) else "")) from None
    try:
        _compare([g for g in exp_grads if g is not None],
                 [g for g in act_grads if g is not None], False, "gradient")
    except Mismatch as err:
        raise GradFailure(str(err)) from None
    return "ok"



# ----- what a difference from the CPU's answer may be, and is not a wrong result
def _draws(op, sample, expected):
    """Whether the sample draws random numbers (dropout inside attention, say): the CPU
    run under another seed gives another answer. Only shape and dtype are compared then."""
    try:
        torch.manual_seed(1)
        again = op(_map(sample.input, _clone_cpu), *_map(sample.args, _clone_cpu),
                   **_map(sample.kwargs, _clone_cpu))
    except Exception:
        return False
    try:
        _compare(expected, again, False, "output")
    except Mismatch:
        return True
    return False


# operators whose indices of equal elements PyTorch leaves unspecified (unstable sorts,
# selections), and where the dim is among their arguments
def _dim_arg(position, default):
    return lambda s: s.kwargs.get("dim", s.args[position] if len(s.args) > position and
                                  isinstance(s.args[position], int) else default)


TIE_DIMS = {"sort": _dim_arg(0, -1), "argsort": _dim_arg(0, -1), "msort": lambda s: 0,
            "topk": _dim_arg(1, -1), "kthvalue": _dim_arg(1, -1), "mode": _dim_arg(0, -1),
            "median": _dim_arg(0, None), "nanmedian": _dim_arg(0, None)}


def _ties_only(op, sample, expected, actual):
    """For an operator of TIE_DIMS: the values match and every index ocl gave picks the
    same input element value as the CPU's index (a different one of equal elements)."""
    if op.name not in TIE_DIMS or not isinstance(sample.input, torch.Tensor):
        return False
    dim = TIE_DIMS[op.name](sample)
    x = sample.input.detach()
    if dim is None or x.dim() == 0:
        return False
    exp, act = _leaves(expected), _leaves(actual)
    if len(exp) != len(act):
        return False
    for e, a in zip(exp, act):
        a = a.detach().cpu()
        if e.dtype != torch.int64 or e.shape != a.shape:
            try:
                _compare(e, a, False, "values")
            except Mismatch:
                return False
            continue
        ei, ai = (e, a) if e.dim() == x.dim() else (e.unsqueeze(dim), a.unsqueeze(dim))
        if ai.numel() and (ai.min() < 0 or ai.max() >= x.shape[dim]):
            return False
        if not torch.equal(torch.take_along_dim(x, ai, dim).isnan(),
                           torch.take_along_dim(x, ei, dim).isnan()):
            return False
        picked_a = torch.take_along_dim(x, ai, dim).nan_to_num(0)
        picked_e = torch.take_along_dim(x, ei, dim).nan_to_num(0)
        if not torch.equal(picked_a, picked_e):
            return False
    return True


def _matches_float_reference(op, sample, dtype, actual):
    """For a 16-bit float dtype: ocl matches the CPU run in float32 on the same values,
    rounded to the dtype (the CPU's own 16-bit arithmetic rounds every step; PyTorch's
    tests take such a float32 reference too)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return False

    def up(t):
        return t.detach().float() if t.dtype == dtype else t.detach().clone()
    try:
        ref = op(_map(sample.input, up), *_map(sample.args, up), **_map(sample.kwargs, up))
    except Exception:
        return False
    ref = _map(ref, lambda t: t.to(dtype) if t.dtype == torch.float32 else t)
    try:
        _compare(ref, actual, False, "output")
    except Mismatch:
        return False
    return True

class GradFailure(Exception):
    pass


def _classify_error(err):
    text = "%s: %s" % (type(err).__name__, str(err).splitlines()[0] if str(err) else "")
    if isinstance(err, NotImplementedError) or (isinstance(err, TypeError)
                                                and "not supported on ocl" in str(err)):
        return "refused", text
    return "error", text


def run_entry(op, dtype, samples=2):
    """(verdict, detail) for one OpInfo entry at one dtype."""
    with_grad = dtype == torch.float32 and op.supports_autograd
    random = _is_random(op)
    try:
        inputs = list(op.sample_inputs("cpu", dtype, requires_grad=with_grad))
    except Exception as err:
        return "skip", "samples: %s" % type(err).__name__
    ran = 0
    grad_problem = None
    for sample in inputs:
        if ran >= samples:
            break
        try:
            got = _run_sample(op, sample, dtype, with_grad, random)
        except Mismatch as err:
            return "wrong", str(err)
        except GradFailure as err:
            grad_problem = grad_problem or str(err)
            ran += 1
            continue
        except Exception as err:  # noqa: BLE001 - the verdict names it
            return _classify_error(err)
        if got == "cpu":
            continue
        ran += 1
    if ran == 0:
        return "skip", "no sample the CPU runs"
    if grad_problem:
        return "grad", grad_problem
    return "pass", ""


def entries(names=None):
    from torch.testing._internal.common_methods_invocations import op_db
    out = [op for op in op_db if names is None or op.name in names]
    return out


class EntryTimeout(BaseException):
    """An entry ran past its time (a BaseException: the sample loop's handlers let it by)."""


def _on_alarm(signum, frame):
    raise EntryTimeout()


def run_guarded(op, dtype, samples=2, timeout=60):
    """run_entry, but an entry that hangs (past ``timeout`` seconds, by SIGALRM where the
    main thread runs Python) or raises anything at all gets an ``error`` verdict instead of
    ending the sweep."""
    alarm = timeout and hasattr(signal, "setitimer") \
        and threading.current_thread() is threading.main_thread()
    if alarm:  # (the timer of a caller, pytest-timeout's say, is put back afterwards)
        t0 = time.time()
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        outer, _ = signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return run_entry(op, dtype, samples)
    except EntryTimeout:
        return "error", "timed out after %ds" % timeout
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - one entry must not end the sweep
        return "error", "%s: %s" % (type(err).__name__, str(err).splitlines()[0] if str(err)
                                     else "")
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            if outer:
                signal.setitimer(signal.ITIMER_REAL, max(outer - (time.time() - t0), 0.01))


def entry_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def sweep(dtype_name, names=None, samples=2, progress=True, time_limit=None, exclude=(),
          timeout=60, ops=None):
    dtype = DTYPES[dtype_name]
    results = {}
    ops = entries(names) if ops is None else ops
    start = time.time()
    for i, op in enumerate(ops):
        key = entry_key(op)
        if dtype not in op.supported_dtypes("cpu") or op.name in exclude:
            continue
        t0 = time.time()
        verdict, detail = run_guarded(op, dtype, samples, timeout)
        results[key] = {"verdict": verdict, "detail": detail[:300],
                        "seconds": round(time.time() - t0, 2)}
        if progress:
            print("[%d/%d %s %.0fs] %s: %s %s" % (i + 1, len(ops), dtype_name,
                                                time.time() - start, key, verdict,
                                                detail[:150]), file=sys.stderr, flush=True)
        if time_limit and time.time() - start > time_limit:
            break
    return results


def summary(results):
    counts = {}
    for r in results.values():
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    ran = sum(v for k, v in counts.items() if k != "skip")
    return counts, ran


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--json")
    parser.add_argument("--ops", nargs="*")
    parser.add_argument("--exclude", nargs="*", default=())
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per entry")
    parser.add_argument("--no-decompositions", action="store_true",
                        help="without the table of PyTorch's decompositions that the ocl "
                             "dispatcher uses (to measure what they bring)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    import dlprim.torch  # noqa: F401
    if args.no_decompositions:
        from dlprim.torch import dispatch
        dispatch._tables[:] = [{}]
    results = sweep(args.dtype, set(args.ops) if args.ops else None, args.samples,
                    progress=not args.quiet, exclude=set(args.exclude), timeout=args.timeout)
    counts, ran = summary(results)
    print("%s: %s of %d pass (%.1f%%); %s" % (
        args.dtype, counts.get("pass", 0), ran, 100.0 * counts.get("pass", 0) / max(ran, 1),
        ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
