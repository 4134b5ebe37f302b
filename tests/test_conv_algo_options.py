"""The convolution layers' algorithm options, DLPrimitives' fwd_algo / bwd_data_algo /
bwd_filter_algo: accepted as it spells them, honoured per pass, a pass they cannot serve
left to gemm, bad values refused naming the option."""
import numpy as np
import pytest

from dlprim.core.conv import ALGORITHMS, algorithm_name
from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, run_layer


def _layer(ctx, type_name="Convolution2D", **options):
    opts = dict(channels_out=4, kernel=3, pad=1)
    opts.update(options)
    return create(ctx, type_name, "c", opts)


def _algos(layer):
    data_op, filter_op = layer._backward_ops()
    return layer._forward_op().algo, data_op.algo, filter_op.algo


def test_names():
    assert algorithm_name("depthwise_separable") == "depthwise"
    assert all(algorithm_name(a) == a for a in ALGORITHMS)
    with pytest.raises(ValueError, match="fft"):
        algorithm_name("fft")


def test_each_pass_takes_its_option(ctx):
    layer = _layer(ctx, fwd_algo="winograd", bwd_data_algo="gemm", bwd_filter_algo="winograd2")
    layer.setup([TensorSpec((2, 3, 8, 8))])
    assert _algos(layer) == ("winograd", "gemm", "winograd2")
    assert layer.algo is None  # the passes differ


def test_transposed_options_name_the_convolution_passes(ctx):
    """As in DLPrimitives: the transposed layer's forward is the convolution's
    backward-data (bwd_data_algo), its backward-data the convolution's forward."""
    layer = _layer(ctx, "TransposedConvolution2D", fwd_algo="gemm", bwd_data_algo="winograd",
                   bwd_filter_algo="gemm")
    layer.setup([TensorSpec((2, 3, 8, 8))])
    assert layer._forward_op().algo == "winograd"
    assert layer._backward_ops()[0].algo == "gemm"


def test_depthwise_separable_and_fallback(ctx, rng):
    """depthwise_separable runs the depthwise kernels where every group has one input
    channel; winograd forced on a 1x1 layer runs gemm there, as DLPrimitives substitutes
    its GEMM, and computes the same convolution."""
    dw = _layer(ctx, channels_out=6, groups=6, **{k: "depthwise_separable" for k in
                                                 ("fwd_algo", "bwd_data_algo", "bwd_filter_algo")})
    dw.setup([TensorSpec((2, 6, 7, 7))])
    assert _algos(dw) == ("depthwise",) * 3
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    layer = _layer(ctx, kernel=1, pad=0, bias=False, fwd_algo="winograd",
                   bwd_data_algo="winograd", bwd_filter_algo="winograd")
    res = run_layer(ctx, layer, [x], params=[w], dy=[dy])
    assert _algos(layer) == ("gemm",) * 3
    w2 = w[:, :, 0, 0].astype(np.float64)
    assert_close(res.y[0], np.einsum("kc,nchw->nkhw", w2, x), what="y")
    assert_close(res.dx[0], np.einsum("kc,nkhw->nchw", w2, dy), what="dx")
    assert_close(res.dparams[0][:, :, 0, 0], np.einsum("nkhw,nchw->kc", dy, x), what="dw")


def test_bad_value_names_the_option(ctx):
    with pytest.raises(LayerError, match="bwd_filter_algo.*'fft'"):
        _layer(ctx, bwd_filter_algo="fft")
    with pytest.raises(LayerError, match="fwd_algo"):
        _layer(ctx, fwd_algo=3)


def test_config_round_trip(ctx):
    """A forced option is kept as written; unforced ones stay out of the JSON."""
    assert "fwd_algo" not in _layer(ctx).config()
    config = _layer(ctx, fwd_algo="depthwise_separable").config()
    assert config["fwd_algo"] == "depthwise_separable" and "bwd_data_algo" not in config
    again = _layer(ctx, **config)
    assert again.config() == config and again.algos["forward"] == "depthwise"
