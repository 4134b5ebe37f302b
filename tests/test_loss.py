"""SoftmaxWithLoss, NLLLoss and MSELoss against float64 numpy references."""
import json

import numpy as np
import pytest

import dlprim as dp
from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, check_reference_grads, run_layer


def logsumexp(x):
    m = x.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def valid(labels, c, ignore=-100):
    """Integer labels and the rows that count: in [0, c) and not ``ignore``."""
    k = labels.astype(np.int64)
    return k, (k >= 0) & (k < c) & (k != ignore)


def xent_ref(x, labels, ignore=-100):
    # PyTorch's mean: over the rows that count (NaN when none does)
    k, ok = valid(labels, x.shape[1], ignore)
    rows = np.where(ok, logsumexp(x) - x[np.arange(len(k)), np.clip(k, 0, x.shape[1] - 1)], 0)
    with np.errstate(invalid="ignore"):
        return np.array([rows.sum() / ok.sum()])


def xent_grad_ref(x, labels, dy, ignore=-100):
    k, ok = valid(labels, x.shape[1], ignore)
    p = np.exp(x - logsumexp(x)[:, None])
    p[ok, k[ok]] -= 1
    return p * ok[:, None] * dy[0] / max(ok.sum(), 1)


def nll_ref(x, labels, reduce, ignore=-100):
    k, ok = valid(labels, x.shape[1], ignore)
    rows = np.where(ok, -x[np.arange(len(k)), np.clip(k, 0, x.shape[1] - 1)], 0)
    with np.errstate(invalid="ignore"):
        return {"none": rows, "sum": np.array([rows.sum()]),
                "mean": np.array([rows.sum() / ok.sum()])}[reduce]


def nll_grad_ref(x, labels, dy, reduce, ignore=-100):
    k, ok = valid(labels, x.shape[1], ignore)
    g = np.zeros_like(x)
    w = dy if reduce == "none" else np.full(len(k), dy[0] / (max(ok.sum(), 1) if reduce == "mean"
                                                             else 1))
    g[np.nonzero(ok)[0], k[ok]] = -w[ok]
    return g


def mse_ref(a, b, reduce):
    d = (a - b) ** 2
    return {"none": d, "sum": np.array([d.sum()]), "mean": np.array([d.mean()])}[reduce]


def mse_grad_ref(a, b, dy, reduce):
    s = 1.0 / a.size if reduce == "mean" else 1.0
    g = 2 * s * dy * (a - b)
    return g, -g


def labels_for(rng, n, c, dtype, invalid=True):
    k = rng.integers(0, c, n)
    if invalid and n > 3:
        # ignore_index, and two labels only written straight to the device can hold
        # (net(...) refuses them): all three rows count for nothing
        k[0], k[1], k[2] = -100, -1, c
    return k.astype(dtype)


def test_reference_gradients():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3))
    k = np.array([0, 2, -1, 1])
    check_reference_grads(lambda xs, ps: [xent_ref(xs[0], k)],
                          lambda xs, ps, ys, dys: ([xent_grad_ref(xs[0], k, dys[0])], []), [x])
    for reduce in ("none", "sum", "mean"):
        check_reference_grads(lambda xs, ps: [nll_ref(xs[0], k, reduce)],
                              lambda xs, ps, ys, dys: ([nll_grad_ref(xs[0], k, dys[0], reduce)], []),
                              [x])
        check_reference_grads(lambda xs, ps: [mse_ref(xs[0], xs[1], reduce)],
                              lambda xs, ps, ys, dys: (list(mse_grad_ref(xs[0], xs[1], dys[0], reduce)), []),
                              [x, rng.standard_normal(x.shape)])


XENT_SHAPES = [(1, 1), (3, 31), (2, 32), (4, 33), (2, 63), (1, 64), (5, 65), (2, 129), (3, 300),
               (65, 10), (128, 10)]


@pytest.mark.parametrize("shape", XENT_SHAPES)
def test_softmax_with_loss(ctx, rng, shape):
    n, c = shape
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    dy = np.array([1.7], np.float32)
    layer = create(ctx, "SoftmaxWithLoss", "loss", {})
    for dtype, acc in ((np.int32, False), (np.int64, True), (np.float32, False)):
        k = labels_for(rng, n, c, dtype)
        r = run_layer(ctx, layer, [x, k], dy=[dy], accumulate=acc, want_dx=[True, False])
        x64 = x.astype(np.float64)
        assert r.y[0].shape == (1,)
        assert_close(r.y[0], xent_ref(x64, k), rtol=1e-5, what="loss")
        assert_close(r.dx[0], xent_grad_ref(x64, k, dy.astype(np.float64)), rtol=1e-4,
                     atol=1e-6, what="dx")


@pytest.mark.parametrize("keep_lse", [False, True])
@pytest.mark.parametrize("shape", [(3, 31), (4, 33), (2, 129), (3, 300)])
def test_cross_entropy_backward_with_and_without_the_kept_log_sum_exp(ctx, rng, shape,
                                                                      keep_lse):
    # the backward pass from each row's log sum exp kept by the forward pass (one read of
    # the logits), or finding it again; an ignored row and a row of -inf but one logit
    from dlprim.core.loss import SoftmaxCrossEntropy
    n, c = shape
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x[0, 1:] = -np.inf
    k = labels_for(rng, n, c, np.int64)
    k[0], k[1] = 0, -100  # (row 0's label on its one finite logit)
    op = SoftmaxCrossEntropy(ctx, n, c, "int64")
    X, K = dp.Tensor.from_numpy(ctx, x), dp.Tensor.from_numpy(ctx, k)
    rows, y, norm = (dp.Tensor(ctx, (m,)) for m in (n, 1, 1))
    lse = dp.Tensor(ctx, (n,)) if keep_lse else None
    dx = dp.Tensor(ctx, (n, c))
    dy = np.array([1.7], np.float32)
    launches = op.launches(X, K, rows, y, norm, lse=lse) + op.backward_launches(
        X, K, dp.Tensor.from_numpy(ctx, dy), dx, norm, lse=lse)
    assert launches[-1].name == ("xent_backward_rows_lse" if keep_lse else "xent_backward_rows")
    for launch in launches:
        launch(ctx.queue)
    x64 = x.astype(np.float64)
    assert_close(y.numpy(), xent_ref(x64, k), rtol=1e-5, what="loss")
    if keep_lse:
        assert_close(lse.numpy(), logsumexp(x64), rtol=1e-6, what="lse")
    assert_close(dx.numpy(), xent_grad_ref(x64, k, dy.astype(np.float64)), rtol=1e-4,
                 atol=1e-6, what="dx")


def test_softmax_with_loss_keeps_log_sum_exp_for_training(ctx, rng):
    # a training layer saves each row's log sum exp and its backward pass reads it
    layer = create(ctx, "SoftmaxWithLoss", "loss", {})
    layer.mode = "train"
    setup = layer.setup([TensorSpec((6, 40), np.float32), TensorSpec((6,), np.int32)])
    assert [tuple(s.shape) for s in setup.saved] == [(1,), (6,)]


@pytest.mark.parametrize("shape", [(3, 31), (2, 129), (3, 300)])
def test_softmax_with_loss_reads_half_logits(ctx, rng, shape):
    # an fp16 net's logits as stored: widened as they load (the loss is that of their
    # float32 values), the gradient rounded to half once as it stores; NLLLoss keeps
    # float32 only
    n, c = shape
    x = (rng.standard_normal(shape) * 3).astype(np.float16)
    dy = np.array([1.7], np.float32)
    k = labels_for(rng, n, c, np.int32)
    layer = create(ctx, "SoftmaxWithLoss", "loss", {})
    r = run_layer(ctx, layer, [x, k], dy=[dy], want_dx=[True, False])
    x64 = x.astype(np.float64)
    assert r.y[0].dtype == np.float32 and r.dx[0].dtype == np.float16
    assert_close(r.y[0], xent_ref(x64, k), rtol=1e-5, what="loss")
    want = xent_grad_ref(x64, k, dy.astype(np.float64))
    assert_close(r.dx[0].astype(np.float64), want.astype(np.float16).astype(np.float64),
                 rtol=2e-3, atol=1e-7, what="dx")
    with pytest.raises(LayerError, match="input 0 must be float32, got float16"):
        create(ctx, "NLLLoss", "nll", {}).setup([TensorSpec(x.shape, np.float16),
                                                 TensorSpec((n,), np.int32)])


@pytest.mark.parametrize("type_name", ["SoftmaxWithLoss", "NLLLoss"])
def test_label_gradient_is_zero(ctx, rng, type_name):
    # float labels that a gradient reaches: the Net asks the loss for no label gradient
    # (NO_GRAD_INPUTS) and the label's own gradient reads 0
    assert create(ctx, type_name, "l", {}).NO_GRAD_INPUTS == (1,)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    k = np.array([0, 1, 2, 3], np.float32)
    net = dp.Net(ctx, {"inputs": [{"name": "x", "shape": [4, 5], "requires_grad": True},
                                  {"name": "t", "shape": [4], "requires_grad": True}],
                       "outputs": ["loss"],
                       "operators": [{"name": "l", "type": type_name, "inputs": ["x", "t"],
                                      "outputs": ["loss"]}]}, mode=dp.TRAIN)
    net(x=x, t=k)
    net.backward()
    assert np.all(net.tensor_diff("t").numpy() == 0)
    assert np.all(np.isfinite(net.tensor_diff("x").numpy()))


@pytest.mark.parametrize("reduce", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 33), (65, 10), (2, 129)])
def test_nll_loss(ctx, rng, shape, reduce):
    n, c = shape
    x = rng.standard_normal(shape).astype(np.float32)
    layer = create(ctx, "NLLLoss", "nll", {"reduce": reduce})
    for dtype, acc in ((np.int32, False), (np.int64, True), (np.float32, True)):
        k = labels_for(rng, n, c, dtype)
        dy = rng.standard_normal((n,) if reduce == "none" else (1,)).astype(np.float32)
        r = run_layer(ctx, layer, [x, k], dy=[dy], accumulate=acc, want_dx=[True, False])
        assert_close(r.y[0], nll_ref(x.astype(np.float64), k, reduce), rtol=1e-5, what="loss")
        assert_close(r.dx[0], nll_grad_ref(x.astype(np.float64), k, dy.astype(np.float64), reduce),
                     rtol=1e-5, atol=1e-6, what="dx")


@pytest.mark.parametrize("reduce", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(1,), (65,), (3, 33), (2, 3, 4, 5)])
def test_mse_loss(ctx, rng, shape, reduce):
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape if reduce == "none" else (1,)).astype(np.float32)
    layer = create(ctx, "MSELoss", "mse", {"reduce": reduce})
    for want, acc in (([True, True], False), ([True, False], True), ([False, True], True)):
        r = run_layer(ctx, layer, [a, b], dy=[dy], accumulate=acc, want_dx=want)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        assert_close(r.y[0], mse_ref(a64, b64, reduce), rtol=1e-5, what="loss")
        grads = mse_grad_ref(a64, b64, dy.astype(np.float64), reduce)
        for i in range(2):
            if want[i]:
                assert_close(r.dx[i], grads[i], rtol=1e-4, atol=1e-6, what="dx%d" % i)
            else:
                assert r.dx[i] is None


def test_config_round_trip(ctx):
    for type_name, opts in (("SoftmaxWithLoss", {}), ("NLLLoss", {"reduce": "sum"}),
                            ("NLLLoss", {}), ("MSELoss", {"reduce": "none"})):
        layer = create(ctx, type_name, "l", opts)
        again = create(ctx, type_name, "l", json.loads(json.dumps(layer.config())))
        assert again.config() == layer.config()
    assert create(ctx, "MSELoss", "l", {}).config() == {"reduce": "mean"}


def test_errors(ctx):
    with pytest.raises(LayerError, match="NLLLoss 'l'.*'reduce'"):
        create(ctx, "NLLLoss", "l", {"reduce": "avg"})
    with pytest.raises(LayerError, match="MSELoss 'l'.*'reduce'"):
        create(ctx, "MSELoss", "l", {"reduce": "max"})
    with pytest.raises(LayerError, match="SoftmaxWithLoss 'l'.*unknown option 'log'"):
        create(ctx, "SoftmaxWithLoss", "l", {"log": True})
    x = TensorSpec((4, 5))
    for type_name in ("SoftmaxWithLoss", "NLLLoss"):
        layer = create(ctx, type_name, "l", {})
        with pytest.raises(LayerError, match="%s 'l'.*labels must be int32 or int64.*float16" % type_name):
            layer.setup([x, TensorSpec((4,), "float16")])
        with pytest.raises(LayerError, match="%s 'l'.*labels must have shape \\(4,\\)" % type_name):
            layer.setup([x, TensorSpec((3,), "int32")])
        with pytest.raises(LayerError, match="%s 'l'.*2 inputs" % type_name):
            layer.setup([x])
    with pytest.raises(LayerError, match="MSELoss 'l'.*same shape"):
        create(ctx, "MSELoss", "l", {}).setup([x, TensorSpec((4, 6))])


def _loss_net(ctx, type_name, n, c, options, mode, label_dtype="int"):
    return dp.Net(ctx, {"inputs": [{"name": "x", "shape": [n, c], "requires_grad": True},
                                   {"name": "t", "shape": [n], "dtype": label_dtype}],
                        "outputs": ["loss"],
                        "operators": [{"name": "l", "type": type_name, "inputs": ["x", "t"],
                                       "outputs": ["loss"], "options": options}]}, mode=mode)


@pytest.mark.parametrize("mode", ["train", "predict"])
@pytest.mark.parametrize("ignore", [-100, 0, 3])
@pytest.mark.parametrize("type_name, reduce", [("SoftmaxWithLoss", None), ("NLLLoss", "mean"),
                                               ("NLLLoss", "sum"), ("NLLLoss", "none")])
def test_ignore_index_matches_torch(ctx, rng, type_name, reduce, ignore, mode):
    torch = pytest.importorskip("torch")
    n, c = 37, 5
    x = rng.standard_normal((n, c)).astype(np.float32)
    k = rng.integers(0, c, n)
    k[::4] = ignore  # a quarter of the rows ignored (ignore 0 and 3 are classes too)
    options = {"ignore_index": ignore}
    if reduce:
        options["reduce"] = reduce
    net = _loss_net(ctx, type_name, n, c, options, mode)
    got = net(x=x, t=k.astype(np.int32))["loss"]
    xt = torch.tensor(x, requires_grad=True)
    if type_name == "SoftmaxWithLoss":
        want = torch.nn.functional.cross_entropy(xt, torch.tensor(k), ignore_index=ignore)
    else:
        want = torch.nn.functional.nll_loss(xt, torch.tensor(k), ignore_index=ignore,
                                            reduction=reduce)
    assert_close(got.reshape(want.shape), want.detach().numpy(), rtol=1e-5, what="loss")
    if mode == "train":
        want.sum().backward()
        net.backward()  # the loss weight 1 fills every element of dy
        assert_close(net.tensor_diff("x").to_host(), xt.grad.numpy(), rtol=1e-4, atol=1e-6,
                     what="dx")


@pytest.mark.parametrize("type_name", ["SoftmaxWithLoss", "NLLLoss"])
def test_every_row_ignored_gives_nan_and_no_gradient_as_torch(ctx, rng, type_name):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    net = _loss_net(ctx, type_name, 4, 3, {}, "train")
    loss = net(x=x, t=np.full(4, -100, np.int32))["loss"]
    net.backward()
    assert np.isnan(loss).all()  # torch: 0/0
    assert np.all(net.tensor_diff("x").to_host() == 0)
