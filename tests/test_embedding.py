"""Embedding against numpy: rows picked, gradients summed into rows (repeated indices,
the padding row), host index checks and option errors."""
import json

import numpy as np
import pytest

from dlprim.errors import InputError
from dlprim.layers import LayerError, TensorSpec, create
from layer_check import assert_close, run_layer


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape,rows,dim,pad", [((2, 35), 11, 7, None), ((300,), 5, 65, 2),
                                                ((3, 4, 5), 9, 1, -1)])
def test_forward_backward(ctx, rng, index_dtype, shape, rows, dim, pad):
    layer = create(ctx, "Embedding", "emb", {"num_embeddings": rows, "embedding_dim": dim,
                                            "padding_idx": pad})
    idx = rng.integers(0, rows, shape).astype(index_dtype)
    table = rng.standard_normal((rows, dim)).astype(np.float32)
    dy = rng.standard_normal(shape + (dim,)).astype(np.float32)
    r = run_layer(ctx, layer, [idx], params=[table], dy=[dy], want_dx=[False])
    assert_close(r.y[0], table[idx], rtol=0, atol=0, what="y")
    want = np.zeros((rows, dim))
    keep = idx != (pad % rows if pad is not None else -1)
    np.add.at(want, idx[keep], dy[keep].astype(np.float64))
    assert_close(r.dparams[0], want, rtol=1e-5, atol=1e-5, what="dweight")


def test_init_zeroes_the_padding_row(ctx, rng):
    layer = create(ctx, "Embedding", "emb", {"num_embeddings": 4, "embedding_dim": 3,
                                            "padding_idx": 1})
    r = run_layer(ctx, layer, [np.array([1, 2], np.int64)], rng=rng)
    assert (r.params[0][1] == 0).all() and (r.params[0][2] != 0).all()
    assert (r.y[0][0] == 0).all()


def test_bad_indices_and_options_are_errors(ctx):
    layer = create(ctx, "Embedding", "emb", {"num_embeddings": 4, "embedding_dim": 3})
    layer.setup([TensorSpec((2, 3), "int64")])
    with pytest.raises(InputError, match="Embedding 'emb': index 4 at position \\(1, 0\\)"):
        layer.check_input_data(0, np.array([[0, 1, 2], [4, 0, 0]]), "tokens")
    with pytest.raises(InputError, match="must be integers"):
        layer.check_input_data(0, np.zeros((2, 3), np.float32), "tokens")
    with pytest.raises(LayerError, match="indices must be int32 or int64"):
        layer.setup([TensorSpec((2, 3), "float32")])
    for opts, match in [({"embedding_dim": 3}, "'num_embeddings' must be a positive int"),
                        ({"num_embeddings": 4, "embedding_dim": 3, "padding_idx": 4},
                         "'padding_idx' must be null or an index")]:
        with pytest.raises(LayerError, match=match):
            create(ctx, "Embedding", "emb", opts)
    again = create(ctx, "Embedding", "emb", json.loads(json.dumps(layer.config())))
    assert again.config() == layer.config()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("rows,dim,count", [(7, 5, 3), (300, 257, 19)])
def test_an_int8_table_gives_its_rows_times_their_scales(ctx, rng, index_dtype, rows, dim,
                                                          count):
    import dlprim as dp
    from dlprim.core.quantize import quantize_rows
    cfg = dp.NetConfig()
    cfg.add_input("ids", [count], np.dtype(index_dtype).name)
    cfg.add("Embedding", name="wte", inputs=["ids"], outputs=["y"],
            params=["wte.weight", "wte.weight_scale"],
            options={"num_embeddings": rows, "embedding_dim": dim, "weights": "int8"})
    cfg.set_outputs(["y"])
    net = dp.Net(ctx, cfg, mode="predict")
    assert net.param("wte.weight").dtype == np.int8  # a quarter of float32's bytes
    q, scale = quantize_rows(rng.standard_normal((rows, dim)).astype(np.float32))
    net.set_parameters({"wte.weight": q, "wte.weight_scale": scale})
    ids = rng.integers(0, rows, count).astype(index_dtype)
    want = q[ids].astype(np.float64) * scale[ids, None]
    np.testing.assert_allclose(net(ids=ids)["y"], want, rtol=1e-6, atol=0)
    with pytest.raises(InputError, match="outside"):
        net(ids=np.full(count, rows, index_dtype))
    with pytest.raises(LayerError, match="inference"):
        dp.Net(ctx, cfg, mode="train")
    cfg.operators[0]["options"]["weights"] = "q4"
    with pytest.raises(LayerError, match="option 'weights'"):
        dp.Net(ctx, cfg, mode="predict")
