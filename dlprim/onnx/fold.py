"""Constant folding: a node whose inputs are all known at import is evaluated with onnx's
numpy reference implementation, so shape arithmetic (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape) and constant subgraphs become plain arrays."""
import numpy as np

from .errors import OnnxImportError

__all__ = ["evaluate", "constant_value", "foldable", "RANDOM"]


def constant_value(node):
    """The array a Constant node holds."""
    a = node.attrs
    for key, conv in (("value", np.asarray), ("value_float", np.float32),
                      ("value_floats", lambda v: np.asarray(v, np.float32)),
                      ("value_int", np.int64), ("value_ints", lambda v: np.asarray(v, np.int64))):
        if key in a:
            return np.asarray(conv(a[key]))
    raise OnnxImportError("Constant '%s': no supported value attribute (has %s)"
                          % (node.name, ", ".join(a) or "none"))


def evaluate(node, values, opsets):
    """Outputs of ``node`` (list of arrays) from input arrays ``values`` (None = absent)."""
    if node.op_type == "Constant":
        return [constant_value(node)]
    if node.op_type == "Identity":
        return [values[0]]
    if node.op_type in OWN:
        return OWN[node.op_type](node, values)
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    names = [n if v is not None else "" for n, v in zip(node.inputs, values)]
    ins = [helper.make_tensor_value_info(n, 0, None) for n in dict.fromkeys(names) if n]
    outs = [helper.make_tensor_value_info(n, 0, None) for n in node.outputs if n]
    graph = helper.make_graph([node.proto], "fold", ins, outs)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid(d, v) for d, v in opsets.items()])
    feeds = {n: v for n, v in zip(node.inputs, values) if n and v is not None}
    try:
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as err:
        raise OnnxImportError("%s '%s': constant folding failed: %s"
                              % (node.op_type, node.name, err)) from None
    return [np.asarray(r) for r in results]


def _gather_elements(node, values):
    """GatherElements as its definition reads: onnx's reference takes indices of the data's
    full size along the other axes, and fails on smaller ones (BERT's token types picked
    by position ids: data (1, 512), indices (1, L))."""
    data, idx = np.asarray(values[0]), np.asarray(values[1])
    axis = int(node.attrs.get("axis", 0)) % max(data.ndim, 1)
    if idx.ndim != data.ndim or any(i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape))
                                    if k != axis):
        raise OnnxImportError("GatherElements '%s': indices of shape %s do not fit data of "
                              "shape %s" % (node.name, idx.shape, data.shape))
    n = data.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise OnnxImportError("GatherElements '%s': an index is outside [-%d, %d)"
                              % (node.name, n, n))
    region = tuple(slice(0, i) if k != axis else slice(None) for k, i in enumerate(idx.shape))
    return [np.take_along_axis(data[region], np.where(idx < 0, idx + n, idx), axis=axis)]


# operators folded here rather than by onnx's reference evaluator (where it is wrong)
OWN = {"GatherElements": _gather_elements}


def foldable(node):
    """Whether ``node`` may be evaluated at import when its inputs are constant: not random,
    and an ONNX node (a pattern folded by ``rewrite`` has no proto to evaluate)."""
    return node.op_type not in RANDOM and (node.proto is not None or
                                           node.op_type in ("Constant", "Identity"))


RANDOM = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
          "Multinomial", "Bernoulli")
