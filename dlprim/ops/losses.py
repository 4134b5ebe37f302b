"""The losses operators (declarations: see ops/declare.py). Each runs on the ocl device
through its ``launch``: dlprim/torch/ops_loss.py (dlprim's row kernel for nll_loss, the
margin losses from their formulas) or, for the losses PyTorch gives a reference
decomposition of, that decomposition over ocl operators (``torch._decomp``, ``torch._refs``).
The composite losses (cross_entropy, kl_div, l1_loss, poisson_nll_loss, the embedding and
ranking losses ...) are decomposed by PyTorch above the device and need no declaration."""
from .declare import declare

FAMILY = "losses"
_OCL = "dlprim.torch.ops_loss."
_REF = "torch._decomp.decompositions."


def _loss(name, doc, launch, aten=None, onnx=None):
    """A loss and its backward packet (``<name>_backward`` unless ``aten`` says)."""
    return declare(name, FAMILY, "launcher", doc, dtypes=("float",),
                   aten=aten or (name, name + "_backward"), onnx=onnx, launch=launch)


_loss("nll_loss", "negative log-likelihood of integer labels (class weights, ignore_index, "
      "(N, C, d1 ..) scores)", _OCL + "_register_nll",
      aten=("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
            "nll_loss2d_backward"), onnx="NegativeLogLikelihoodLoss")
_loss("mse_loss", "mean squared error", _REF + "mse_loss")
_loss("smooth_l1_loss", "squared below beta, absolute above", _REF + "smooth_l1_loss")
_loss("huber_loss", "squared below delta, delta-scaled absolute above",
      "torch._refs.nn.functional.huber_loss")
_loss("binary_cross_entropy", "binary cross-entropy of probabilities (element weights)",
      _REF + "binary_cross_entropy")
_loss("binary_cross_entropy_with_logits", "binary cross-entropy of logits (pos_weight), "
      "log-sigmoid stable", _REF + "binary_cross_entropy_with_logits",
      aten=("binary_cross_entropy_with_logits",))
_loss("soft_margin_loss", "log(1 + exp(-y x)) averaged over elements", _REF + "soft_margin_loss")
_loss("multi_margin_loss", "multi-class hinge loss (p 1 or 2, margin, class weights)",
      _OCL + "_multi_margin_loss")
_loss("multilabel_margin_loss", "multi-label hinge loss over the labels before the first -1",
      _OCL + "_multilabel_margin_loss_forward",
      aten=("multilabel_margin_loss_forward", "multilabel_margin_loss_backward"))
_loss("embedding_bag", "sums, means or maxima of bags of embedding rows (offsets, "
      "per-sample weights, padding_idx)", "dlprim.torch.ops_embedding_bag._embedding_bag",
      aten=("_embedding_bag", "_embedding_bag_forward_only", "_embedding_bag_backward",
            "_embedding_bag_dense_backward", "_embedding_bag_per_sample_weights_backward"))
_loss("ctc_loss", "connectionist temporal classification: the negative log-likelihood of "
      "each target over every alignment (blank, padded or concatenated targets, "
      "zero_infinity); its gradient by the alpha and beta recursions (core/ctc.py)",
      "dlprim.torch.ops_ctc._ctc_loss", aten=("_ctc_loss", "_ctc_loss_backward"))
