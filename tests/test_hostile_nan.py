"""NaN and infinities against PyTorch CPU: where PyTorch answers NaN (or +-inf) so must we,
in every activation (pointwise and fused into InnerProduct / Convolution2D, forward and
backward), pooling mode, reduction, elementwise max/min, softmax and loss, and a whole
net in train mode. A NaN that turns into a finite number hides a diverged net."""
import numpy as np
import pytest

import dlprim as dp
from dlprim.core.activation import FUSABLE, canonical
from dlprim.core.reduction import ArgMax, Reduce
from dlprim.layers import create
from layer_check import assert_close, place, run_layer

torch = pytest.importorskip("torch")
F = torch.nn.functional
NAN, INF = np.nan, np.inf

# NaN, both infinities, kinks (0, +-3, 6) and ordinary values; a multiple of 4 long
X = np.array([NAN, INF, -INF, -25, -7, -3, -1.5, -0.5, 0, 0.5, 1.5, 3, 6, 7, 25, NAN],
             np.float32)

TORCH_ACT = {
    "identity": lambda x: x, "relu": F.relu, "relu6": F.relu6, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "leaky_relu": F.leaky_relu, "elu": F.elu, "gelu": F.gelu,
    "erf": torch.erf, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "mish": F.mish,
    "softplus": F.softplus,
}


def same(got, want, what):
    """NaN where ``want`` has NaN, the same infinities, finite values close."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    bad = np.isnan(got) != np.isnan(want)
    assert not bad.any(), "%s: NaN at %s, PyTorch NaN at %s" % (
        what, np.argwhere(np.isnan(got)).tolist(), np.argwhere(np.isnan(want)).tolist())
    inf = np.isinf(want)
    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], want[inf]), \
        "%s: infinities %s, PyTorch %s" % (what, got[np.isinf(got) | inf], want[np.isinf(got) | inf])
    fin = np.isfinite(want)
    assert_close(got[fin], want[fin], rtol=1e-3, atol=1e-5, what=what)


def torch_grad(f, x, dy, each=False):
    """(f(x), df/dx . dy) by autograd, as numpy. ``each``: one element at a time, which
    runs PyTorch's scalar kernels; their CUDA kernels agree with them, while the CPU
    vector kernels give another gradient at a NaN input for elu, hardswish and hardtanh
    (NaN, NaN and 0 where the scalar ones pass dy)."""
    if each:
        pairs = [torch_grad(f, a.reshape(1), d.reshape(1)) for a, d in zip(x.ravel(), dy.ravel())]
        return tuple(np.concatenate(p).reshape(x.shape) for p in zip(*pairs))
    t = torch.tensor(x, requires_grad=True)
    y = f(t)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), t.grad.numpy()


def check_layer(ctx, layer, x, f, direction, params=None, dy=None, each=False):
    dy = np.ones_like(x) if dy is None else dy
    res = run_layer(ctx, layer, [x], params=params, dy=[dy])
    y, dx = torch_grad(f, x, dy, each)
    if direction == "forward":
        same(res.y[0], y, "forward")
    else:
        same(res.dx[0], dx, "backward")


DIRECTIONS = ["forward", "backward"]


@pytest.fixture(scope="module")
def tanh_saturates(ctx):
    """Whether the device's tanh reaches +-1 (PoCL stops at +-0.99999994 even at +-inf, so
    x (1 + tanh u) at x = -inf is -inf, not PyTorch's NaN, and far out 1 - tanh^2 is not 0)."""
    y = run_layer(ctx, create(ctx, "Activation", "t", {"activation": "tanh"}),
                  [np.array([INF, -INF], np.float32)]).y[0]
    return y.tolist() == [1.0, -1.0]


def activation_input(name, tanh_saturates):
    """X, less the values beyond +-20 where the activation hangs on tanh saturating."""
    if name in ("gelu_tanh", "mish") and not tanh_saturates:
        return X[np.isnan(X) | (np.abs(X) < 20)]
    return X


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", [k for k, _ in canonical()])
def test_activation_layer(ctx, tanh_saturates, name, direction):
    layer = create(ctx, "Activation", "act", {"activation": name})
    check_layer(ctx, layer, activation_input(name, tanh_saturates), TORCH_ACT[name],
                direction, each=True)


@pytest.mark.parametrize("name", [k for k, _ in canonical()])
def test_activation_backward_of_a_nan_gradient(ctx, tanh_saturates, name):
    """dy NaN everywhere: NaN where PyTorch multiplies, 0 where it selects a zero."""
    layer = create(ctx, "Activation", "act", {"activation": name})
    x = activation_input(name, tanh_saturates)
    check_layer(ctx, layer, x, TORCH_ACT[name], "backward", dy=np.full_like(x, NAN), each=True)


# a single input feature and a weight of 1: the epilogue sees x itself
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", FUSABLE)
@pytest.mark.parametrize("kind", ["InnerProduct", "Convolution2D"])
def test_fused_activation(ctx, kind, name, direction):
    if kind == "InnerProduct":
        layer = create(ctx, kind, "fc", dict(outputs=1, bias=False, activation=name))
        x, w = X.reshape(-1, 1), np.ones((1, 1), np.float32)
    else:
        layer = create(ctx, kind, "conv", dict(channels_out=1, kernel=1, bias=False,
                                                activation=name))
        x, w = X.reshape(1, 1, 4, -1), np.ones((1, 1, 1, 1), np.float32)
    check_layer(ctx, layer, x, TORCH_ACT[name], direction, params=[w], each=True)


OTHER_LAYERS = {
    "Hardtanh": ({"min_val": -1.0, "max_val": 6.0}, lambda x: F.hardtanh(x, -1.0, 6.0)),
    "Abs": ({}, torch.abs),
}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", sorted(OTHER_LAYERS))
def test_hardtanh_and_abs(ctx, kind, direction):
    options, f = OTHER_LAYERS[kind]
    x = X[X != 0]  # Abs keeps DLPrimitives' sign(0) = +1 in its gradient
    check_layer(ctx, create(ctx, kind, "a", options), x, f, direction, each=True)


def test_threshold_keeps_nan(ctx):
    y = run_layer(ctx, create(ctx, "Threshold", "t", {"threshold": 0.5}), [X]).y[0]
    same(y, np.where(np.isnan(X), NAN, X > 0.5), "Threshold")


# planes with one NaN, two NaNs in one window, a window of -inf only, +inf
def _planes():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 6, 7)).astype(np.float32)
    x[0, 0, 1, 1] = NAN
    x[0, 1, 2, 2] = x[0, 1, 3, 3] = NAN
    x[1, 0, 4:6, 0:2] = -INF
    x[1, 1, 0, 6] = INF
    x[1, 1, 5, 5] = NAN
    return x


POOLS = [dict(kernel=2, stride=2), dict(kernel=3, stride=1, pad=1),
         dict(kernel=3, stride=2, pad=1, ceil_mode=True)]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("pool", range(len(POOLS)))
def test_pooling(ctx, pool, mode, direction):
    opts = POOLS[pool]
    x = _planes()
    k, s, p, c = opts["kernel"], opts["stride"], opts.get("pad", 0), opts.get("ceil_mode", False)
    f = (lambda t: F.max_pool2d(t, k, s, p, ceil_mode=c)) if mode == "max" else \
        (lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=c, count_include_pad=False))
    dy = np.random.default_rng(4).standard_normal(f(torch.tensor(x)).shape).astype(np.float32)
    layer = create(ctx, "Pooling2D", "pool", dict(opts, mode=mode))
    check_layer(ctx, layer, x, f, direction, dy=dy)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_global_pooling(ctx, mode, direction):
    f = (lambda t: F.adaptive_max_pool2d(t, 1)) if mode == "max" else (lambda t: t.mean((2, 3), True))
    layer = create(ctx, "GlobalPooling", "gp", {"mode": mode})
    check_layer(ctx, layer, _planes(), f, direction, dy=np.full((2, 2, 1, 1), 0.5, np.float32))


def _rows(n):
    """Rows of length ``n``: one NaN, NaN only, -inf only, +inf with NaN, plain."""
    x = np.random.default_rng(n).standard_normal((5, n)).astype(np.float32)
    x[0, n // 2] = NAN
    x[1] = NAN
    x[2] = -INF
    x[3, 0], x[3, -1] = INF, NAN
    return x


SIZES = [1, 33, 65, 20000]  # work-group edges, and long rows reduced in two passes


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", ["max", "min", "sum", "mean", "sumsq", "abssum"])
def test_reduce(ctx, op, n):
    x = _rows(n)
    t = torch.tensor(x)
    want = {"max": lambda: t.amax(1), "min": lambda: t.amin(1), "sum": lambda: t.sum(1),
            "mean": lambda: t.mean(1), "sumsq": lambda: (t * t).sum(1),
            "abssum": lambda: t.abs().sum(1)}[op]()
    y = place(ctx, np.zeros(5, np.float32))
    Reduce(ctx, x.shape, 1, op)(place(ctx, x), y)
    same(y.numpy(), want.numpy(), op)


@pytest.mark.parametrize("n", SIZES)
def test_argmax_answers_the_first_nan(ctx, n):
    x = _rows(n)
    x[4, n - 1] = NAN
    y = place(ctx, np.zeros(5, np.int32))
    ArgMax(ctx, x.shape, 1)(place(ctx, x), y)
    np.testing.assert_array_equal(y.numpy(), torch.tensor(x).argmax(1).numpy())


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("method", ["sum", "mean", "sumsq", "abssum"])
def test_reduction_layer(ctx, method, direction):
    f = {"sum": lambda t: t.sum(1), "mean": lambda t: t.mean(1),
         "sumsq": lambda t: (t * t).sum(1), "abssum": lambda t: t.abs().sum(1)}[method]
    x = _rows(33)
    layer = create(ctx, "Reduction", "r", {"method": method, "dims": [1], "keep_dim": False})
    check_layer(ctx, layer, x, f, direction, dy=np.full(5, 0.5, np.float32))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_elementwise_max_min(ctx, op, direction):
    a = np.array([1, NAN, 3, NAN, INF, -INF, 2, -1], np.float32)
    b = np.array([NAN, 2, 1, NAN, 0, 5, -INF, INF], np.float32)  # no ties
    f = torch.maximum if op == "max" else torch.minimum
    res = run_layer(ctx, create(ctx, "Elementwise", "e", {"operation": op}), [a, b],
                    dy=[np.full(8, 0.5, np.float32)])
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y = f(ta, tb)
    y.backward(torch.full((8,), 0.5))
    if direction == "forward":
        same(res.y[0], y.detach().numpy(), op)
    else:
        same(res.dx[0], ta.grad.numpy(), op + " da")
        same(res.dx[1], tb.grad.numpy(), op + " db")


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(5, 33), (5, 6, 3)])  # rows kernel, strided kernel
def test_softmax(ctx, shape, log, direction):
    x = _rows(6 if len(shape) == 3 else 33)
    x = x.reshape(5, 6, 1).repeat(3, 2) if len(shape) == 3 else x
    f = (lambda t: torch.log_softmax(t, 1)) if log else (lambda t: torch.softmax(t, 1))
    dy = np.random.default_rng(5).standard_normal(x.shape).astype(np.float32)
    check_layer(ctx, create(ctx, "Softmax", "s", {"log": log}), x, f, direction, dy=dy)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", ["SoftmaxWithLoss", "NLLLoss"])
def test_loss(ctx, kind, direction):
    x = _rows(33)
    label = np.array([16, 0, 1, 2, 3], np.int32)  # row 0's label points at its NaN
    f = F.cross_entropy if kind == "SoftmaxWithLoss" else F.nll_loss
    for rows in (slice(4, 5), slice(0, 5)):  # the plain row alone, then all
        res = run_layer(ctx, create(ctx, kind, "loss"), [x[rows], label[rows]],
                        dy=[np.ones(1, np.float32)], want_dx=[True, False])
        t = torch.tensor(x[rows], requires_grad=True)
        loss = f(t, torch.tensor(label[rows]).long())
        loss.backward()
        if direction == "forward":
            same(res.y[0], loss.detach().numpy().reshape(1), kind)
        else:
            same(res.dx[0], t.grad.numpy(), kind)


def _net(ctx, fused):
    """conv - relu - max pool - conv (+relu) - global avg - softmax loss, relu standalone or
    fused into the first convolution."""
    cfg = dp.NetConfig()
    cfg.add_input("data", [2, 3, 8, 8])
    cfg.add_input("label", [2], dtype="int")
    cfg.add("Convolution2D", name="conv1", options={"channels_out": 4, "kernel": 3, "pad": 1,
                                                    "activation": "relu" if fused else "identity"})
    if not fused:
        cfg.add("Activation", name="relu", options={"activation": "relu"}, inplace=True)
    cfg.add("Pooling2D", name="pool", options={"kernel": 2, "stride": 2, "mode": "max"})
    cfg.add("Convolution2D", name="conv2", options={"channels_out": 3, "kernel": 1,
                                                    "activation": "relu"})
    cfg.add("GlobalPooling", name="gp", options={"mode": "avg"})
    cfg.add("Flatten", name="flat")
    cfg.add("SoftmaxWithLoss", name="loss", inputs=["flat", "label"])
    cfg.set_outputs(["loss"])
    return dp.Net(ctx, cfg, mode=dp.TRAIN)


@pytest.mark.parametrize("fused", [False, True])
def test_net_fed_a_nan_shows_a_nan_loss(ctx, fused):
    net = _net(ctx, fused)
    x = np.random.default_rng(6).standard_normal((2, 3, 8, 8)).astype(np.float32)
    label = np.array([0, 2], np.int32)
    assert np.isfinite(net(data=x, label=label)["loss"]).all()
    x[1, 2, 5, 3] = NAN
    assert np.isnan(net(data=x, label=label)["loss"]).all()
    net.backward()
    assert np.isnan(net.param_diff("conv1.0").to_host()).any()
