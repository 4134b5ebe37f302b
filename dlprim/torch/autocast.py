"""``torch.autocast("ocl", dtype=torch.float16 | torch.bfloat16)``: CUDA's autocast policy
on the ocl device.

PyTorch applies autocast as a dispatch key per device (AutocastCUDA, AutocastCPU, ...)
whose kernels cast the arguments and call the operator again below the key. It ships
those kernels for its own devices only; here they are registered for the ocl device's
key (AutocastPrivateUse1), with CUDA's lists, so that a model runs in the same dtypes as
under ``torch.autocast("cuda")``:

- matrix products, convolutions, linear layers, recurrent cells and attention run in the
  autocast dtype;
- operators whose range or precision needs it (exp, log, pow, norms, losses, softmax,
  sums, upsampling ...) run in float32;
- operators of several floating inputs (addcmul, cat-like ones, index_put ...) run in the
  widest input dtype;
- every other operator runs on what it is given.

Only floating ocl tensors other than float64 are cast, as PyTorch does. Outputs are not
cast back.
"""
import torch

__all__ = ["register"]

_KEY = "AutocastPrivateUse1"

# CUDA's lists (torch/csrc/autograd autocast registrations), by policy
LOWER = """_convolution _convolution.deprecated conv1d conv2d conv3d conv_tbc conv_transpose1d
    conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul
    einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot
    _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell
    _scaled_dot_product_flash_attention scaled_dot_product_attention""".split()
FLOAT32 = """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan
    pow.Tensor_Scalar pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm
    group_norm rms_norm frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity
    poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div
    l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss
    soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits
    dist pdist cdist renorm logsumexp norm.Scalar norm.ScalarOpt_dim upsample_nearest1d
    upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d _upsample_nearest_exact2d
    _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d upsample_trilinear3d
    upsample_bicubic2d _upsample_bilinear2d_aa _upsample_bicubic2d_aa""".split()
# float32 only where the caller did not choose an output dtype
FLOAT32_UNLESS_DTYPE = """prod prod.dim_int softmax.int log_softmax.int cumprod cumsum
    linalg_vector_norm linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList""".split()
WIDEST = """addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put scatter_add
    tensordot""".split()
REFUSED = {"binary_cross_entropy": (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
    "(as on CUDA): use binary_cross_entropy_with_logits / BCEWithLogitsLoss, which combine "
    "the sigmoid and the loss safely")}


def _eligible(t):
    return (isinstance(t, torch.Tensor) and t.device.type == "ocl" and t.is_floating_point()
            and t.dtype is not torch.float64)


def _cast(obj, dtype):
    if _eligible(obj):
        return obj if obj.dtype is dtype else obj.to(dtype)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast(x, dtype) for x in obj)
    return obj


def _leaves(obj):
    if isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _leaves(x)
    elif _eligible(obj):
        yield obj


def _below(op, args, kwargs):
    """op called again under the autocast key (the next key's kernel runs it)."""
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
        return op(*args, **kwargs)


def _to(op, dtype_of):
    def kernel(*args, **kwargs):
        dtype = dtype_of()
        return _below(op, _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()})
    return kernel


def _float32_unless_dtype(op):
    at = [a.name for a in op._schema.arguments].index("dtype")

    def kernel(*args, **kwargs):
        if args and _eligible(args[0]):
            if len(args) > at:
                if args[at] is None:
                    args = args[:at] + (torch.float32,) + args[at + 1:]
            elif kwargs.get("dtype") is None:
                kwargs = dict(kwargs, dtype=torch.float32)
        return _below(op, args, kwargs)
    return kernel


def _widest(op):
    def kernel(*args, **kwargs):
        dtypes = [t.dtype for t in _leaves([args, list(kwargs.values())])]
        if len(set(dtypes)) > 1:
            widest = torch.float32 if torch.float32 in dtypes else dtypes[0]
            args = _cast(args, widest)
            kwargs = {k: _cast(v, widest) for k, v in kwargs.items()}
        return _below(op, args, kwargs)
    return kernel


def _refused(name, why):
    def kernel(*args, **kwargs):
        raise RuntimeError("%s (torch.autocast on ocl)" % why)
    return kernel


def _overload(name):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def register(lib_fallback, lib_aten):
    """The autocast key's kernels for the ocl device: a fallthrough for every operator not
    listed (it runs below unchanged), the policies for the listed ones."""
    lib_fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    autocast_dtype = lambda: torch.get_autocast_dtype("ocl")  # noqa: E731
    for names, make in ((LOWER, lambda op: _to(op, autocast_dtype)),
                        (FLOAT32, lambda op: _to(op, lambda: torch.float32)),
                        (FLOAT32_UNLESS_DTYPE, _float32_unless_dtype),
                        (WIDEST, _widest)):
        for name in names:
            lib_aten.impl(name, make(_overload(name)), _KEY)
    for name, why in REFUSED.items():
        lib_aten.impl(name, _refused(name, why), _KEY)
