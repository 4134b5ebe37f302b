"""The net of a training config as a graph dict, and its deploy (inference) version."""
import copy
import json

LOSS_TYPES = {"SoftmaxWithLoss", "NLLLoss", "MSELoss"}


def training_graph(net_cfg, batch):
    """The graph dict named by the config's ``net`` entry (path, inline graph, or model)."""
    if "path" in net_cfg:
        with open(net_cfg["path"]) as f:
            graph = json.load(f)
    elif "graph" in net_cfg:
        graph = copy.deepcopy(net_cfg["graph"])
    else:
        from .. import models
        spec = net_cfg["model"]
        args = dict(spec.get("args", {}))
        args.setdefault("batch", batch)
        graph = getattr(models, spec["name"])(**args)
    if hasattr(graph, "to_dict"):
        graph = graph.to_dict()
    return graph


def _output_name(o):
    return o if isinstance(o, str) else o["name"]


def loss_parts(graph):
    """(data input, label input, logits tensor, loss output) of a classification graph."""
    losses = [_output_name(o) for o in graph["outputs"]
              if not isinstance(o, str) and "loss_weight" in o or _output_name(o).startswith("loss")]
    if not losses:
        raise ValueError("net: no loss output (an output named loss* or with loss_weight)")
    loss = losses[0]
    op = next((op for op in graph["operators"] if loss in op.get("outputs", [])), None)
    if op is None or op["type"] not in LOSS_TYPES:
        raise ValueError("net: the loss output %r is not produced by one of %s"
                         % (loss, ", ".join(sorted(LOSS_TYPES))))
    logits, label = op["inputs"][0], op["inputs"][1]
    inputs = [i["name"] for i in graph["inputs"]]
    while label not in inputs:  # a language model's (N, T) targets reshaped to (N * T,)
        producer = next((o for o in graph["operators"] if label in o.get("outputs", [])), None)
        if producer is None or len(producer.get("inputs", [])) != 1:
            raise ValueError("net: the labels %r of the loss are neither a net input nor "
                             "one input reshaped" % op["inputs"][1])
        label = producer["inputs"][0]
    data = next(i for i in inputs if i != label)
    return data, label, logits, loss


def with_logits_output(graph, logits):
    """The graph with ``logits`` also an output, so the memory plan keeps it readable."""
    g = copy.deepcopy(graph)
    if logits not in [_output_name(o) for o in g["outputs"]]:
        g["outputs"].append(logits)
    return g


def deploy_graph(graph, batch=1):
    """Inference version: loss operators, the label input and what only the label feeds
    (a reshape of a language model's targets) removed, a Softmax "prob" on the logits as
    the output."""
    data, label, logits, _ = loss_parts(graph)
    g = copy.deepcopy(graph)
    from_label = {label}
    kept = []
    for op in g["operators"]:  # in order, so a chain from the label is followed
        if op["type"] in LOSS_TYPES:
            continue
        if op.get("inputs") and all(i in from_label for i in op["inputs"]):
            from_label.update(op.get("outputs", []))
            continue
        kept.append(op)
    g["operators"] = kept
    g["operators"].append({"name": "prob", "type": "Softmax", "inputs": [logits],
                           "outputs": ["prob"]})
    g["inputs"] = [dict(i, shape=[batch] + list(i["shape"][1:])) for i in g["inputs"]
                   if i["name"] != label]
    g["outputs"] = ["prob"]
    return g


RANDOM_TRANSFORMS = {"random_crop", "flip"}  # training-time augmentation, not preprocessing


def deploy_meta(data, weights, data_name, labels=None):
    """The deploy graph's ``meta``: what dlprim-predict needs beside the net to classify
    an image file as validation did. ``data``: the checked config's data section;
    ``weights``: the weights file beside the deploy file; ``labels``: class names.

    ``transforms`` are the validation data's (the training data's without its random
    ones when there is no validation data); ``scale`` is the pixel scale (null: uint8
    pixels / 255)."""
    entry = data.get("val") or data["train"]
    meta = {"weights": weights, "input": data_name, "output": "prob",
            "scale": entry.get("scale"),
            "transforms": [dict(t) for t in entry.get("transforms") or []
                           if t.get("type") not in RANDOM_TRANSFORMS]}
    if labels:
        meta["labels"] = [str(n) for n in labels]
    return meta
