"""The random operators (declarations: see ops/declare.py). Every draw is made on the
device from dlprim's Philox stream, keyed by PyTorch's generator."""
from .declare import declare

FAMILY = "random"
_T = "dlprim.torch.ops_random."

declare("uniform", FAMILY, "launcher", "fill with uniform values in [from, to)",
        dtypes=("float",), aten=("uniform", "uniform_", "rand_like"), onnx="RandomUniform",
        launch=_T + "_uniform_")
declare("normal", FAMILY, "launcher", "fill with normal values (mean, std: numbers or tensors)",
        dtypes=("float",), aten=("normal", "normal_", "randn_like"), onnx="RandomNormal",
        launch=_T + "_normal_")
declare("log_normal", FAMILY, "launcher", "fill with exp of normal values",
        dtypes=("float",), aten=("log_normal", "log_normal_"), launch=_T + "_log_normal_")
declare("exponential", FAMILY, "launcher", "fill with exponential values of rate lambda",
        dtypes=("float",), aten=("exponential", "exponential_"), launch=_T + "_exponential_")
declare("cauchy", FAMILY, "launcher", "fill with Cauchy values (median, sigma)",
        dtypes=("float",), aten=("cauchy", "cauchy_"), launch=_T + "_cauchy_")
declare("geometric", FAMILY, "launcher", "fill with the trials up to a success of probability p",
        dtypes=("float", "int"), aten=("geometric", "geometric_"), launch=_T + "_geometric_")
declare("bernoulli", FAMILY, "launcher", "fill with 1 at probability p (a number or a tensor)",
        dtypes=("float", "int", "bool"), aten=("bernoulli", "bernoulli_"),
        onnx="Bernoulli", launch=_T + "_bernoulli_tensor_")
declare("random", FAMILY, "launcher", "fill with integers drawn uniformly from [from, to)",
        dtypes=("float", "int", "bool"), aten=("random", "random_", "randint_like"),
        launch=_T + "_random_from_")
declare("randperm", FAMILY, "launcher", "a random permutation of 0 .. n-1",
        dtypes=("float", "int"), aten=("randperm",), launch=_T + "_randperm_into")
declare("multinomial", FAMILY, "launcher", "category indices drawn from rows of weights",
        dtypes=("float",), aten=("multinomial",), onnx="Multinomial",
        launch=_T + "_multinomial")
declare("dropout", FAMILY, "launcher",
        "each element zeroed with probability p, the rest scaled by 1 / (1 - p)",
        dtypes=("float",), aten=("native_dropout", "native_dropout_backward"),
        onnx="Dropout", layer="Dropout", launch="dlprim.torch.ops_nn._native_dropout")
declare("sample_next_tokens", FAMILY, "launcher",
        "a decoder's next tokens: repetition penalty, temperature, top-k, top-p, then the "
        "largest score or a draw", dtypes=("float",),
        aten=(), launch="dlprim.core.sampling.TokenSampler")
