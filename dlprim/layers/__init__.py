"""Graph operators. Each family module registers its layers by JSON "type"; importing
this package imports every family (a new family module is added to the list below)."""
from .base import (Layer, LayerError, LayerFlags, ParamSpec, REGISTRY, Setup,  # noqa: F401
                   TensorSpec, PREDICT, TRAIN, create, register, run)
from . import (activation, attention, batchnorm, cast, concat, conv, dropout, elementwise,  # noqa: F401
               embedding, inner_product, interpolation, loss, lrn, matmul, normalization,
               parameter, pointwise_op, pooling, recurrent, reduction, shape, softmax,
               transpose)
from . import broadcast, grid_sample, index_map, kv_cache, pooling_nd, rotary, scan, sort  # noqa: F401,E402
