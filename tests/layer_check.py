"""Running one layer on the device against numpy references, and checking the references.

``run_layer`` places every tensor at a non-zero offset inside a NaN-poisoned buffer, so a
kernel that ignores offsets or writes out of bounds shows up; it pre-fills gradients with
known values so the accumulate contract is checked too. Saved tensors start as poison
(NaN, or -1 for integers): backward can only read what forward wrote.

``check_reference_grads`` checks a float64 numpy backward against central differences of
the numpy forward along a random direction (Caffe/Chainer style):
``(L(x + eps*v) - L(x - eps*v)) / (2*eps) == <dL/dx, v>`` with ``L = sum(y * dy)``.
"""
from collections import namedtuple

import numpy as np
import pytest

from dlprim import Tensor
from dlprim.dtypes import as_dtype, bfloat16, bfloat16_values, is_float, to_bfloat16
from dlprim.layers import TensorSpec, run

PAD = 7  # elements of poison before and after every placed tensor

Result = namedtuple("Result", "y dx dparams params layer")


def host(values, dtype):
    """``values`` as a numpy array of ``dtype``; bfloat16 rounded from them (numpy has no
    bfloat16 arithmetic: ``dlprim.dtypes``)."""
    if as_dtype(dtype) == bfloat16:
        return to_bfloat16(values)
    return np.asarray(values, dtype)


def stored(values, dtype):
    """``values`` as float64 after the device's storage of ``dtype`` rounds them."""
    if as_dtype(dtype) == bfloat16:
        return bfloat16_values(to_bfloat16(values)).astype(np.float64)
    return np.asarray(values).astype(dtype).astype(np.float64)


def skip_unless_cpu(ctx):
    """Skip on anything but a CPU device: the emulated tensor-core products (MMA_EMULATE)
    are for CPU runtimes, and NVIDIA's compiler refuses them."""
    if not ctx.facts.is_cpu:
        pytest.skip("the emulated tensor-core products are for CPU runtimes; %s runs "
                    "the real ones (test_tensor_cores_match_float64)" % ctx.facts.name)


def place(ctx, array, poison=np.nan):
    """A Tensor holding ``array`` at offset PAD inside a poisoned buffer."""
    array = np.ascontiguousarray(array)
    flat = host(np.full(array.size + 2 * PAD, poison if is_float(array.dtype) else 0),
                array.dtype)
    flat[PAD:PAD + array.size] = array.ravel()
    owner = Tensor.from_numpy(ctx, flat)
    return owner.view(array.shape, offset=PAD)


def layer_memory(ctx, setup):
    """(workspace, saved tensors) for a layer's ``Setup``: the workspace a uint8 tensor,
    each saved tensor poisoned and placed at an offset like every other."""
    ws = Tensor(ctx, (setup.workspace,), "uint8") if setup.workspace else None
    saved = [place(ctx, host(np.full(s.shape, np.nan if is_float(s.dtype) else -1), s.dtype))
             for s in setup.saved]
    return ws, saved


def check_unpoisoned(t):
    """The poison around a placed tensor is intact (no out-of-bounds writes)."""
    owner = t._owner.numpy()
    if owner.dtype.kind == "f":
        assert np.all(np.isnan(owner[:PAD])) and np.all(np.isnan(owner[PAD + t.size:])), \
            "a kernel wrote outside its tensor"


def run_layer(ctx, layer, xs, params=None, dy=None, accumulate=False, want_dx=None,
              want_dparams=True, mode="train", rng=None):
    """Setup, forward and (when ``dy`` is given) backward of ``layer`` on numpy inputs.

    ``params``: numpy arrays, or None to let the layer initialise them (seeded ``rng``).
    With ``accumulate``, dx starts from 0.5 and the returned dx has 0.5 subtracted; param
    gradients always start from 0.25 (they always accumulate) and have it subtracted.
    """
    rng = rng or np.random.default_rng(0)
    layer.mode = mode
    specs = [TensorSpec(x.shape, x.dtype) for x in xs]
    setup = layer.setup(specs)
    out_specs, param_specs = setup.outputs, setup.params
    x_t = [place(ctx, x) for x in xs]
    y_t = [place(ctx, np.zeros(s.shape, s.dtype)) for s in out_specs]
    if params is None:
        p_t = [place(ctx, np.zeros(s.shape, s.dtype)) for s in param_specs]
        layer.init_params(p_t, rng)
    else:
        assert len(params) == len(param_specs), "layer wants %d params" % len(param_specs)
        for p, s in zip(params, param_specs):
            assert tuple(p.shape) == s.shape, (p.shape, s.shape)
        p_t = [place(ctx, np.asarray(p, s.dtype)) for p, s in zip(params, param_specs)]
    ws, saved = layer_memory(ctx, setup)
    run(layer.forward(x_t, y_t, p_t, ws, saved), ctx.queue)
    y = [t.numpy() for t in y_t]
    for t in y_t + saved:
        check_unpoisoned(t)
    dx = dparams = None
    if dy is not None:
        if want_dx is None:
            want_dx = [is_float(x.dtype) for x in xs]
        start = 0.5 if accumulate else np.nan  # NaN: a kernel must overwrite, not add
        dx_t = [place(ctx, host(np.full(x.shape, start), x.dtype)) if w else None
                for x, w in zip(xs, want_dx)]
        dp_t = [place(ctx, np.full(s.shape, 0.25, s.dtype)) if want_dparams and s.trainable
                else None for s in param_specs]
        dy_t = [place(ctx, host(d, s.dtype)) for d, s in zip(dy, out_specs)]
        acc = [bool(accumulate)] * len(xs)
        run(layer.backward(x_t, dx_t, y_t, dy_t, p_t, dp_t, ws, saved, acc), ctx.queue)
        dx = [None if t is None else t.numpy() - (0.5 if accumulate else 0) for t in dx_t]
        dparams = [None if t is None else t.numpy() - 0.25 for t in dp_t]
        for t in dx_t + dp_t + saved:
            if t is not None:
                check_unpoisoned(t)
    return Result(y, dx, dparams, [t.numpy() for t in p_t], layer)


def check_reference_grads(forward, backward, xs, params=(), eps=1e-6, rtol=1e-5, seed=0):
    """Check a float64 numpy backward against finite differences of the numpy forward.

    ``forward(xs, params) -> list of outputs``;
    ``backward(xs, params, ys, dys) -> (list of dx, list of dparams)``.
    """
    rng = np.random.default_rng(seed)
    xs = [np.asarray(x, np.float64) for x in xs]
    params = [np.asarray(p, np.float64) for p in params]
    ys = forward(xs, params)
    dys = [rng.standard_normal(np.shape(y)) for y in ys]
    dxs, dps = backward(xs, params, ys, dys)

    def loss(xs_, ps_):
        return sum(float(np.sum(y * d)) for y, d in zip(forward(xs_, ps_), dys))

    for group, grads, which in ((xs, dxs, "input"), (params, dps, "param")):
        for i, g in enumerate(grads):
            if g is None:
                continue
            v = rng.standard_normal(group[i].shape)
            plus = [a.copy() for a in group]
            minus = [a.copy() for a in group]
            plus[i] += eps * v
            minus[i] -= eps * v
            if which == "input":
                numeric = (loss(plus, params) - loss(minus, params)) / (2 * eps)
            else:
                numeric = (loss(xs, plus) - loss(xs, minus)) / (2 * eps)
            analytic = float(np.sum(g * v))
            scale = max(abs(numeric), abs(analytic), 1.0)
            assert abs(numeric - analytic) <= rtol * scale * 100, \
                "%s %d: finite differences %g, reference backward %g" % (which, i, numeric, analytic)


def assert_close(actual, expected, rtol=1e-4, atol=1e-5, what="value"):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, "%s: shape %s, expected %s" % (what, actual.shape,
                                                                          expected.shape)
    err = np.abs(actual - expected)
    bound = atol + rtol * np.abs(expected)
    if not np.all(err <= bound):
        i = np.unravel_index(np.argmax(err - bound), err.shape)
        raise AssertionError("%s: mismatch at %s: got %r, expected %r (max abs err %g)"
                             % (what, i, actual[i], expected[i], err.max()))


def assert_loss_and_grads_match_torch(net, loss, twin, logits, targets, grad_rtol=1e-3):
    """A Net's mean cross-entropy ``loss`` (its forward just run) against a PyTorch twin's
    whose forward gave ``logits`` for integer ``targets``; then, after backward on both,
    every parameter gradient (``assert_grads_match_torch``)."""
    import torch
    net.backward()
    want = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        torch.as_tensor(np.asarray(targets), dtype=torch.long).reshape(-1))
    want.backward()
    np.testing.assert_allclose(loss.reshape(()), want.item(), rtol=1e-5)
    assert_grads_match_torch(net, twin, rtol=grad_rtol)


def assert_grads_match_torch(net, twin, rtol=1e-3, atol=2e-5):
    """Every parameter gradient of a Net against the same-named one of a PyTorch twin
    (after backward on both)."""
    for name, p in twin.named_parameters():
        np.testing.assert_allclose(net.param_diff(name).to_host(), p.grad.numpy(), rtol=rtol,
                                   atol=atol, err_msg=name)
