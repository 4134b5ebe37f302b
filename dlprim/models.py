"""Model builders: classic nets as NetConfigs, with torchvision's parameter names.

Every classifier builder (``BUILDERS``) takes ``batch``, ``classes`` and ``train``; the
image nets also take ``image_size``. ``gpt`` (and GPT-2, ``gpt2``) builds a decoder
language model instead; ``bert`` an encoder over token ids (``SEQUENCE_BUILDERS``: the
language models of the benchmarks).
``train=True`` adds an int ``label`` input and a ``SoftmaxWithLoss`` named ``loss``;
``train=False`` ends with a ``Softmax`` named ``prob``. The layers match DLPrimitives'
benchmark nets operator for operator (same types and options), and each operator's
``params`` carry torchvision's state-dict names ("conv1.weight",
"layer1.0.bn1.running_mean", "fc.bias", ...), so PyTorch weights map one to one: mlp,
alexnet, vgg16, the resnets and mobilenet_v2 are dlprim.nn models laid out as
torchvision's classes, whose attribute paths give those names.
As in those nets, dropout is left out (it is inactive at inference; ``dropout=True``
puts it back where torchvision has it).
"""
from collections import OrderedDict

from . import nn
from .net.netconfig import NetConfig
from .nn import functional as F

__all__ = ["lenet", "mlp", "alexnet", "vgg16", "resnet18", "resnet34", "resnet50",
           "mobilenet_v2", "gpt", "gpt2", "bert", "bert_base", "gpt_decoder",
           "vision_transformer", "vit_b_16", "convnext", "convnext_tiny",
           "multi_head_attention", "BUILDERS", "SEQUENCE_BUILDERS"]


class _Builder:
    """A NetConfig written operator by operator, for the nets below that are not written
    with dlprim.nn: lenet (mnist_train.json's spelling leaves options at their defaults
    out, which dlprim.nn always writes) and the transformer builders."""

    def __init__(self, batch, channels, image_size):
        self.cfg = NetConfig()
        self.cfg.add_input("data", [batch, channels, image_size, image_size])
        self.batch, self.size, self.channels = batch, image_size, channels

    def conv(self, name, cout, kernel, stride=1, pad=0, groups=1, bias=False, src=None):
        opts = {"bias": bias, "groups": groups, "kernel": [kernel, kernel], "stride": [stride, stride],
                "dilate": [1, 1], "pad": [pad, pad], "channels_out": cout, "channels_in": self.channels}
        params = [name + ".weight"] + ([name + ".bias"] if bias else [])
        out = self.cfg.add("Convolution2D", name=name, inputs=src, options=opts, params=params)
        self.channels = cout
        self.size = (self.size + 2 * pad - kernel) // stride + 1
        return out

    def fc(self, name, outputs):
        inputs = self.channels * self.size * self.size
        opts = {"bias": True, "outputs": outputs, "inputs": inputs}
        out = self.cfg.add("InnerProduct", name=name, options=opts,
                           params=[name + ".weight", name + ".bias"])
        self.channels, self.size = outputs, 1
        return out

    def finish(self, train):
        return _classifier_end(self.cfg, self.batch, train)


def _classifier_end(cfg, batch, train):
    """End ``cfg`` at its last value, the logits: with ``train`` an int ``label`` input and
    a ``SoftmaxWithLoss`` named ``loss``, else a ``Softmax`` named ``prob``."""
    logits = cfg.last
    if train:
        cfg.add_input("label", [batch], dtype="int")
        cfg.add("SoftmaxWithLoss", name="loss", inputs=[logits, "label"], outputs=["loss"])
        cfg.set_outputs(["loss"])
    else:
        cfg.add("Softmax", name="prob", inputs=[logits], outputs=["prob"])
        cfg.set_outputs(["prob"])
    return cfg


def lenet(batch=64, classes=10, train=True, image_size=28, channels=1):
    """The MNIST net of DLPrimitives' mnist_train.json (two 5x5 convs, two FCs)."""
    b = _Builder(batch, channels, image_size)
    cfg = b.cfg
    cfg.add("Convolution2D", name="conv1", params=["conv1.weight", "conv1.bias"], options={
        "channels_out": 32, "kernel": [5, 5], "pad": [2, 2], "activation": "relu"})
    cfg.add("Pooling2D", name="pool1", options={"kernel": 2, "stride": 2})
    cfg.add("Convolution2D", name="conv2", params=["conv2.weight", "conv2.bias"], options={
        "channels_out": 64, "kernel": [5, 5], "pad": [2, 2], "activation": "relu"})
    cfg.add("Pooling2D", name="pool2", options={"kernel": 2, "stride": 2})
    cfg.add("InnerProduct", name="fc1", params=["fc1.weight", "fc1.bias"],
            options={"outputs": 256, "activation": "relu"})
    cfg.add("InnerProduct", name="fc2", params=["fc2.weight", "fc2.bias"],
            options={"outputs": classes})
    return b.finish(train)


def _finish(model, input_shape, train):
    """The builders' ending: a SoftmaxWithLoss ``loss`` over an int ``label`` to train,
    else a Softmax named ``prob``."""
    if train:
        return model.netconfig(input_shape, loss="cross_entropy")
    cfg = model.netconfig(input_shape)
    cfg.add("Softmax", name="prob", inputs=[cfg.outputs[0]], outputs=["prob"])
    cfg.set_outputs(["prob"])
    return cfg


def _dropout(p, wanted):
    """torchvision's Dropout, or a placeholder that keeps the layer indices."""
    return nn.Dropout(p, inplace=True) if wanted else nn.Identity()


def mlp(batch=64, inputs=784, hidden=(256, 128), classes=10, train=True):
    """Fully connected layers with ReLU; input ``data`` is (batch, inputs)."""
    layers, width = OrderedDict(), inputs
    for i, size in enumerate(hidden):
        layers["fc%d" % (i + 1)] = nn.Linear(width, size)
        layers["relu%d" % (i + 1)] = nn.ReLU(inplace=True)
        width = size
    layers["fc%d" % (len(hidden) + 1)] = nn.Linear(width, classes)
    return _finish(nn.Sequential(layers), [batch, inputs], train)


class _FeaturesClassifier(nn.Module):
    """features, an average pooling (where there is one), classifier: the layout of
    torchvision's AlexNet and VGG."""

    def __init__(self, features, avgpool, classifier):
        super().__init__()
        self.features, self.avgpool, self.classifier = features, avgpool, classifier

    def forward(self, x):
        x = self.features(x)
        if self.avgpool is not None:
            x = self.avgpool(x)
        return self.classifier(x)   # Linear flattens (N, C, H, W) itself


def _adaptive_pool(features, pooled, input_shape):
    """torchvision's AdaptiveAvgPool2d(pooled) after ``features`` where a plain pooling
    equals it, else None (the classifier then takes the features as they are, as in
    DLPrimitives' nets); and the number of features the classifier takes."""
    channels, size = features.output_shape(input_shape)[1:3]
    if size % pooled:
        return None, channels * size * size
    return nn.AdaptiveAvgPool2d(pooled), channels * pooled * pooled


def alexnet(batch=16, image_size=224, classes=1000, train=True, dropout=False):
    """torchvision's AlexNet: five convolutions with ReLU, three max poolings, three FCs."""
    features = nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
    shape = [batch, 3, image_size, image_size]
    avgpool, flat = _adaptive_pool(features, 6, shape)
    classifier = nn.Sequential(
        _dropout(0.5, dropout), nn.Linear(flat, 4096), nn.ReLU(inplace=True),
        _dropout(0.5, dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
        nn.Linear(4096, classes))
    return _finish(_FeaturesClassifier(features, avgpool, classifier), shape, train)


def vgg16(batch=16, image_size=224, classes=1000, train=True, dropout=False):
    """torchvision's VGG-16 (configuration D): thirteen 3x3 convolutions, three FCs."""
    layers, channels = [], 3
    for width, convs in [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]:
        for _ in range(convs):
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
            channels = width
        layers.append(nn.MaxPool2d(2, 2))
    features = nn.Sequential(*layers)
    shape = [batch, 3, image_size, image_size]
    avgpool, flat = _adaptive_pool(features, 7, shape)
    classifier = nn.Sequential(
        nn.Linear(flat, 4096), nn.ReLU(inplace=True), _dropout(0.5, dropout),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), _dropout(0.5, dropout),
        nn.Linear(4096, classes))
    return _finish(_FeaturesClassifier(features, avgpool, classifier), shape, train)


class _BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions with BatchNorm, a shortcut."""
    expansion = 1

    def __init__(self, channels, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = _downsample(channels, width, stride)

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


class _Bottleneck(nn.Module):
    """torchvision's Bottleneck: 1x1 down, 3x3 (with the stride), 1x1 up to 4x, a shortcut."""
    expansion = 4

    def __init__(self, channels, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.downsample = _downsample(channels, width * 4, stride)

    def forward(self, x):
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn3(self.conv3(self.relu2(self.bn2(self.conv2(out)))))
        identity = x if self.downsample is None else self.downsample(x)
        return F.relu(out + identity)


def _downsample(channels, out, stride):
    if stride == 1 and channels == out:
        return None
    return nn.Sequential(nn.Conv2d(channels, out, 1, stride, bias=False), nn.BatchNorm2d(out))


class _ResNet(nn.Module):
    """torchvision's ResNet: a 7x7 stem, four stages of blocks, global pooling, fc."""

    def __init__(self, block, blocks, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        channels = 64
        for stage, count in enumerate(blocks):
            width, layers = 64 * 2 ** stage, []
            for i in range(count):
                layers.append(block(channels, width, 2 if i == 0 and stage > 0 else 1))
                channels = width * block.expansion
            setattr(self, "layer%d" % (stage + 1), nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x))    # Linear flattens (N, C, 1, 1) itself


def _resnet(blocks, bottleneck, batch, image_size, classes, train):
    model = _ResNet(_Bottleneck if bottleneck else _BasicBlock, blocks, classes)
    return _finish(model, [batch, 3, image_size, image_size], train)


def resnet18(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's ResNet-18: basic residual blocks [2, 2, 2, 2] with BatchNorm."""
    return _resnet([2, 2, 2, 2], False, batch, image_size, classes, train)


def resnet34(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's ResNet-34: basic residual blocks [3, 4, 6, 3] with BatchNorm."""
    return _resnet([3, 4, 6, 3], False, batch, image_size, classes, train)


def resnet50(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's ResNet-50: bottleneck blocks [3, 4, 6, 3] with BatchNorm."""
    return _resnet([3, 4, 6, 3], True, batch, image_size, classes, train)


class _ConvBNReLU6(nn.Sequential):
    """torchvision's Conv2dNormActivation as MobileNetV2 uses it."""

    def __init__(self, channels, out, kernel, stride=1, groups=1):
        super().__init__(nn.Conv2d(channels, out, kernel, stride, (kernel - 1) // 2, groups=groups,
                                   bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class _InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion by ``ratio`` (none at 1), 3x3 depthwise, 1x1
    projection without activation; the input added where the shapes agree."""

    def __init__(self, channels, out, stride, ratio):
        super().__init__()
        hidden = channels * ratio
        layers = [_ConvBNReLU6(channels, hidden, 1)] if ratio != 1 else []
        layers += [_ConvBNReLU6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, out, 1, bias=False), nn.BatchNorm2d(out)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and channels == out

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class _MobileNetV2(nn.Module):
    def __init__(self, classes, dropout):
        super().__init__()
        layers, channels = [_ConvBNReLU6(3, 32, 3, 2)], 32
        for ratio, out, count, stride in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2),
                                          (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                                          (6, 320, 1, 1)]:
            for i in range(count):
                layers.append(_InvertedResidual(channels, out, stride if i == 0 else 1, ratio))
                channels = out
        layers.append(_ConvBNReLU6(channels, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(_dropout(0.2, dropout), nn.Linear(1280, classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


def mobilenet_v2(batch=16, image_size=224, classes=1000, train=True, dropout=False):
    """torchvision's MobileNetV2 (width 1.0): inverted residuals with ReLU6."""
    return _finish(_MobileNetV2(classes, dropout), [batch, 3, image_size, image_size], train)


def seq_linear(cfg, name, x, length, inputs, outputs, params=None, batch=None, bias=True,
               weights="float32"):
    """nn.Linear over the last axis of (batch, length, inputs): rows, InnerProduct, back.
    With ``batch`` the batch is fixed and the length left free (``length`` None): a
    decoder's passes of T tokens. Parameters ``params``, else ``name``.weight (and
    ``name``.bias where ``bias``, and ``name``.weight_scale for int8 or q4 ``weights``: the
    InnerProduct's storage of W)."""
    flat = cfg.add("Reshape", name=name + "/rows", inputs=[x], options={"dims": [-1, inputs]})
    y = cfg.add("InnerProduct", name=name, inputs=[flat],
                params=params or linear_params(name, bias, weights),
                options={"outputs": outputs, "inputs": inputs, "bias": bool(bias),
                         "weights": weights})
    dims = [-1, length, outputs] if batch is None else [batch, -1, outputs]
    return cfg.add("Reshape", name=name + "/seq", inputs=[y], options={"dims": dims})


def row_linear(cfg, name, x, inputs, outputs, bias=True, weights="float32", residual=None,
               activation="identity", rms_norm=None, pair=None, layer_norm=None):
    """nn.Linear over rows (N, inputs), parameters as ``linear_params`` names them, and
    ``activation`` applied by the product (GELU and SiLU for inference only). With
    ``residual`` (a value (N, outputs)), residual + Linear(x) written over it: the
    InnerProduct takes the residual as a second input and the output its name, so the
    planner writes it in place and no add of its own runs (inference only). With
    ``rms_norm`` (the name of an RMSNorm, its eps), the Linear of RMSNorm(x), its weight
    ``<name>.weight`` (inference only: the product normalizes the rows on the way);
    ``layer_norm`` likewise with a LayerNorm (``<name>.weight`` and ``.bias``). With
    ``pair`` (a second Linear's name), activation(Linear(x)) * pair(x): a gated MLP's gate
    and up projections as one InnerProduct (inference only)."""
    inputs_ = [x] if residual is None else [x, residual]
    options = {"outputs": outputs, "inputs": inputs, "bias": bool(bias), "weights": weights,
               "activation": activation}
    params = linear_params(name, bias, weights)
    if pair is not None:
        options["gated"] = True
        params += linear_params(pair, bias, weights)
    params += _input_norm(options, rms_norm, layer_norm)
    return cfg.add("InnerProduct", name=name, inputs=inputs_,
                   outputs=[name if residual is None else residual], params=params,
                   options=options)


def _input_norm(options, rms_norm=None, layer_norm=None):
    """An InnerProduct's norm of its input (``rms_norm`` or ``layer_norm``: (the norm's
    name, eps)) set in ``options``; the norm's parameter names."""
    if rms_norm is not None:
        options["input_rms"] = float(rms_norm[1])
        return [rms_norm[0] + ".weight"]
    if layer_norm is not None:
        options["input_ln"] = float(layer_norm[1])
        return [layer_norm[0] + ".weight", layer_norm[0] + ".bias"]
    return []


def _layer_norm(cfg, name, x, eps=1e-5):
    return cfg.add("LayerNorm", name=name, inputs=[x], params=[name + ".weight", name + ".bias"],
                   options={"eps": eps})


def multi_head_attention(cfg, name, x, length, dim, heads, causal=False):
    """Add multi-head self-attention of ``x`` (batch, length, dim) to NetConfig ``cfg``, as
    ``torch.nn.MultiheadAttention(dim, heads, batch_first=True)`` computes it, with its
    parameter names under ``name`` (``name.in_proj_weight``, ``name.in_proj_bias``,
    ``name.out_proj.weight``, ``name.out_proj.bias``), so its state dict loads; returns
    the output's name. The attention runs on the fused kernels."""
    return _self_attention(cfg, name, x, length, dim, heads, causal,
                           [name + ".in_proj_weight", name + ".in_proj_bias"], None)


def _self_attention(cfg, name, x, length, dim, heads, causal, qkv_params, out_params):
    """Multi-head self-attention of (batch, length, dim): one Linear to q, k and v, the
    fused attention over ``heads`` heads, a Linear back (nn.MultiheadAttention's layout).
    The attention reads q, k and v where the Linear wrote them, (batch, length, 3, heads,
    head width), and writes (batch, length, heads, head width): the head split and merge
    are Reshapes (views), with no copies."""
    qkv = seq_linear(cfg, name + ".in_proj", x, length, dim, 3 * dim, qkv_params)
    qkv = cfg.add("Reshape", name=name + ".qkv/heads", inputs=[qkv],
                  options={"dims": [-1, length, 3, heads, dim // heads]})
    a = cfg.add("ScaledDotProductAttention", name=name, inputs=[qkv],
                options={"causal": causal, "layout": "packed"})
    a = cfg.add("Reshape", name=name + "/merge", inputs=[a], options={"dims": [-1, length, dim]})
    return seq_linear(cfg, name + ".out_proj", a, length, dim, dim, out_params)


def _mlp(cfg, name, x, length, dim, hidden, first, second, activation="gelu"):
    h = seq_linear(cfg, name + "." + first, x, length, dim, hidden)
    h = cfg.add("Activation", name=name + ".gelu", inputs=[h], options={"activation": activation})
    return seq_linear(cfg, name + "." + second, h, length, hidden, dim)


def _residual(cfg, name, x, y):
    return cfg.add("Elementwise", name=name, inputs=[x, y], options={"operation": "sum"})


def gpt(vocab=65, context=64, layers=4, heads=4, dim=128, batch=16, train=True,
        activation="gelu", head_bias=True, last_only=False):
    """A GPT-style decoder (Radford et al. 2019, as nanoGPT lays it out): token embedding
    plus a learned position table, ``layers`` pre-norm blocks of causal multi-head
    attention and a 4x GELU MLP with residual sums, a final LayerNorm and a linear head.

    Input ``tokens`` (batch, context) int64; ``train=True`` adds ``targets`` of the same
    shape and a mean cross-entropy over every position (``loss``), else the output is
    ``logits`` (batch * context, vocab), or with ``last_only`` (batch, vocab): the last
    position's alone, all that the next token needs. Parameter names follow nanoGPT's
    state dict ("transformer.h.0.attn.c_attn.weight", ...; the head is not tied to the
    embedding, and has a bias where ``head_bias``). ``activation``: the MLP's ("gelu_tanh"
    for GPT-2). The position table starts at zeros (Parameter's initialisation); every
    Linear as PyTorch's.
    """
    if last_only and train:
        raise ValueError("gpt: last_only is for inference (the loss takes every position)")
    if dim % heads:
        raise ValueError("gpt: dim %d is not a multiple of heads %d" % (dim, heads))
    cfg = NetConfig()
    tokens = cfg.add_input("tokens", [batch, context], dtype="int64")
    emb = cfg.add("Embedding", name="transformer.wte", inputs=[tokens], params=["transformer.wte.weight"],
                  options={"num_embeddings": vocab, "embedding_dim": dim})
    pos = cfg.add("Parameter", name="transformer.wpe", inputs=[], params=["transformer.wpe.weight"],
                  options={"shape": [context, dim]})
    x = cfg.add("Elementwise", name="embed", inputs=[emb, pos], options={"operation": "sum"})
    for i in range(layers):
        p = "transformer.h.%d." % i
        a = _self_attention(cfg, p + "attn", _layer_norm(cfg, p + "ln_1", x), context, dim, heads,
                            True, [p + "attn.c_attn.weight", p + "attn.c_attn.bias"],
                            [p + "attn.c_proj.weight", p + "attn.c_proj.bias"])
        x = _residual(cfg, p + "attn/residual", x, a)
        h = _mlp(cfg, p + "mlp", _layer_norm(cfg, p + "ln_2", x), context, dim, 4 * dim,
                 "c_fc", "c_proj", activation)
        x = _residual(cfg, p + "mlp/residual", x, h)
    x = _layer_norm(cfg, "transformer.ln_f", x)
    if last_only:
        x = cfg.add("Slice", name="lm_head/last", inputs=[x],
                    options={"dim": 1, "begin": context - 1, "end": context})
    flat = cfg.add("Reshape", name="lm_head/rows", inputs=[x], options={"dims": [-1, dim]})
    logits = cfg.add("InnerProduct", name="lm_head", inputs=[flat], outputs=["logits"],
                     params=linear_params("lm_head", head_bias),
                     options={"outputs": vocab, "inputs": dim, "bias": bool(head_bias)})
    if train:
        targets = cfg.add_input("targets", [batch, context], dtype="int64")
        labels = cfg.add("Reshape", name="targets/rows", inputs=[targets], options={"dims": [-1]})
        cfg.add("SoftmaxWithLoss", name="loss", inputs=[logits, labels], outputs=["loss"])
        cfg.set_outputs(["loss"])
    else:
        cfg.set_outputs([logits])
    return cfg


def gpt2(batch=16, context=256, train=True, vocab=50257, layers=12, heads=12, dim=768):
    """GPT-2 (124M) over ``context`` tokens, as transformers' GPT2LMHeadModel computes it:
    ``gpt`` with the tanh GELU and a head without bias. ``train=False`` gives the last
    position's logits (a prompt's pass before generation). Where its weights differ from
    a GPT-2 checkpoint: the position table has ``context`` rows (the checkpoint's first
    ones), the head is a tensor of its own (give it ``transformer.wte.weight``'s values),
    the Linears are (out, in) (transformers' Conv1D keeps (in, out)), and the loss takes
    ``targets`` as given (GPT2LMHeadModel shifts its labels by one itself)."""
    return gpt(vocab, context, layers, heads, dim, batch, train, activation="gelu_tanh",
               head_bias=False, last_only=not train)


def bert(vocab=30522, positions=512, length=128, layers=12, heads=12, dim=768, inner=3072,
         classes=2, batch=16, train=True, eps=1e-12):
    """BERT (Devlin et al. 2019) as a sequence classifier, as transformers'
    BertForSequenceClassification computes it without an attention mask: word, position
    and token-type embeddings summed and normalised, ``layers`` post-norm encoder blocks
    (self-attention, then a GELU MLP, each added to its input and normalised), the
    pooler (tanh of a Linear of the first token) and a Linear classifier.

    Input ``input_ids`` (batch, length) int64, every sequence of one segment (token type
    0, transformers' default). ``train=True`` adds an int ``label`` (batch,) and a
    ``SoftmaxWithLoss`` named ``loss``, else the output is ``prob``. Parameter names are
    transformers' ("bert.encoder.layer.0.attention.output.LayerNorm.weight", ...),
    except that each layer's query, key and value Linears are one,
    ``attention.self.qkv`` (their weights and biases concatenated in that order), so
    that one product computes all three."""
    if dim % heads:
        raise ValueError("bert: dim %d is not a multiple of heads %d" % (dim, heads))
    if not 0 < length <= positions:
        raise ValueError("bert: length %d must be between 1 and positions %d" % (length, positions))
    cfg = NetConfig()
    ids = cfg.add_input("input_ids", [batch, length], dtype="int64")
    e = "bert.embeddings."
    x = cfg.add("Embedding", name=e + "word_embeddings", inputs=[ids],
                params=[e + "word_embeddings.weight"],
                options={"num_embeddings": vocab, "embedding_dim": dim})
    for table, rows, used in (("position_embeddings", positions, length),
                              ("token_type_embeddings", 2, 1)):
        t = cfg.add("Parameter", name=e + table, inputs=[], params=[e + table + ".weight"],
                    options={"shape": [rows, dim]})
        t = cfg.add("Slice", name=e + table + "/used", inputs=[t],
                    options={"dim": 0, "begin": 0, "end": used})
        x = cfg.add("Elementwise", name=e + table + "/sum", inputs=[x, t],
                    options={"operation": "sum"})
    x = _layer_norm(cfg, e + "LayerNorm", x, eps)
    for i in range(layers):
        p = "bert.encoder.layer.%d." % i
        a = _self_attention(cfg, p + "attention", x, length, dim, heads, False,
                            [p + "attention.self.qkv.weight", p + "attention.self.qkv.bias"],
                            [p + "attention.output.dense.weight",
                             p + "attention.output.dense.bias"])
        x = _layer_norm(cfg, p + "attention.output.LayerNorm",
                        _residual(cfg, p + "attention/residual", x, a), eps)
        h = _mlp(cfg, p[:-1], x, length, dim, inner, "intermediate.dense", "output.dense")
        x = _layer_norm(cfg, p + "output.LayerNorm", _residual(cfg, p + "output/residual", x, h),
                        eps)
    x = cfg.add("Slice", name="bert.pooler/first", inputs=[x], options={"dim": 1, "begin": 0, "end": 1})
    x = cfg.add("Reshape", name="bert.pooler/rows", inputs=[x], options={"dims": [-1, dim]})
    x = cfg.add("InnerProduct", name="bert.pooler.dense", inputs=[x],
                params=linear_params("bert.pooler.dense"),
                options={"outputs": dim, "inputs": dim, "bias": True})
    x = cfg.add("Activation", name="bert.pooler.tanh", inputs=[x], options={"activation": "tanh"})
    cfg.add("InnerProduct", name="classifier", inputs=[x], params=linear_params("classifier"),
            options={"outputs": classes, "inputs": dim, "bias": True})
    return _classifier_end(cfg, batch, train)


def bert_base(batch=16, length=128, classes=2, train=True):
    """BERT-base (110M): 12 layers of 12 heads, width 768, MLP 3072, over ``length`` tokens."""
    return bert(length=length, classes=classes, batch=batch, train=train)


def decoder_inputs(batch, tokens, per_sample=False, last_only=False):
    """(NetConfig, tokens, positions, pos) of a decoder over a key/value cache: ``tokens``
    and ``positions`` (batch, T) int64, the pass's tokens and their places, and ``pos``
    int64, how many tokens the cache holds before them: (1,), or (batch,) with
    ``per_sample`` (prompts of different lengths in one batch). ``last_only`` adds input
    ``rows`` (batch,) int64 for ``decoder_logits``."""
    cfg = NetConfig()
    ids = cfg.add_input("tokens", [batch, tokens], dtype="int64")
    places = cfg.add_input("positions", [batch, tokens], dtype="int64")
    pos = cfg.add_input("pos", [batch if per_sample else 1], dtype="int64")
    if last_only:
        cfg.add_input("rows", [batch], dtype="int64")
    return cfg, ids, places, pos


def token_table(cfg, name, ids, vocab, dim, weights="float32"):
    """A decoder's token Embedding ``name`` (parameter ``name``.weight): with int8 or q4
    ``weights`` (the Linears' storage) the table is int8 with a scale a row
    (``name``.weight_scale), so that the largest tensor shrinks with the rest."""
    small = weights in ("int8", "q4")
    return cfg.add("Embedding", name=name, inputs=[ids],
                   params=[name + ".weight"] + ([name + ".weight_scale"] if small else []),
                   options={"num_embeddings": vocab, "embedding_dim": dim,
                            "weights": "int8" if small else "float32"})


def linear_params(name, bias=True, weights="float32"):
    """The parameter names of a Linear ``name`` as HF and PyTorch spell them, and the
    scales of int8 weights (``name``.weight_scale)."""
    return [name + ".weight"] + ([name + ".bias"] if bias else []) + \
        ([name + ".weight_scale"] if weights in ("int8", "q4") else [])


def decoder_logits(cfg, x, dim, vocab, params, bias=False, weights="float32", rms_norm=None,
                   layer_norm=None):
    """The head of a decoder over (batch, T, dim): output ``logits`` (batch * T, vocab);
    where the net has input ``rows`` (``decoder_inputs(last_only=True)``), only the rows
    of the flattened (batch * T) it names, (batch, vocab): each sample's last prompt token
    in a prefill, which is all the next token needs. ``rms_norm`` / ``layer_norm``: the
    final norm (its name, eps), taken by the head (``row_linear``'s)."""
    x = cfg.add("Reshape", name="lm_head/rows", inputs=[x], options={"dims": [-1, dim]})
    if any(i["name"] == "rows" for i in cfg.inputs):
        x = cfg.add("Gather", name="lm_head/picked", inputs=[x, "rows"], options={"axis": 0})
    options = {"outputs": vocab, "inputs": dim, "bias": bool(bias), "weights": weights}
    params = list(params) + _input_norm(options, rms_norm, layer_norm)
    cfg.add("InnerProduct", name="lm_head", inputs=[x], outputs=["logits"], params=params,
            options=options)
    cfg.set_outputs(["logits"])


def gpt_decoder(vocab=65, context=64, layers=4, heads=4, dim=128, batch=1, tokens=1,
                activation="gelu_tanh", head_bias=False, eps=1e-5, per_sample=False,
                last_only=False, inner=None, weights="float32", scales=None):
    """The decoder of ``gpt`` for generation, a pass at a time over a key/value cache: the
    same blocks (GPT-2's and nanoGPT's parameter names), each attention writing this
    pass's keys and values into a ``KVCache`` of ``context`` positions and attending over
    it, so a prompt of T tokens and then one token per step are two plans of one Net
    (``Net.reshape``; the caches and weights shared).

    Inputs ``tokens`` and ``positions`` (batch, T) int64 (the tokens and their places),
    and ``pos`` (1,) int64: how many tokens the cache holds before them (``per_sample``:
    (batch,), one per sample). Output ``logits`` (batch * T, vocab); ``last_only``: input
    ``rows`` picks one row per sample, (batch, vocab) (``decoder_logits``). ``activation``: the MLP's ("gelu_tanh" for GPT-2, "gelu" for
    nanoGPT); ``head_bias``: whether the head has a bias (GPT-2's, tied to the token
    table, has none: give it ``transformer.wte.weight``'s values as ``lm_head.weight``).
    The caches are parameters too (``transformer.h.<i>.attn.cache.keys`` / ``.values``)
    that no weights file holds: load with ``set_parameters(weights, strict=False)`` and
    compare the names left out. ``scales``: each layer's attention scale (default 1 /
    sqrt(the head width)). Inference only."""
    if dim % heads:
        raise ValueError("gpt_decoder: dim %d is not a multiple of heads %d" % (dim, heads))
    if scales is not None and len(scales) != layers:
        raise ValueError("gpt_decoder: %d attention scales for %d layers" % (len(scales), layers))
    width, inner = dim // heads, inner or 4 * dim
    cfg, ids, places, pos = decoder_inputs(batch, tokens, per_sample, last_only)
    emb = token_table(cfg, "transformer.wte", ids, vocab, dim, weights)
    at = cfg.add("Embedding", name="transformer.wpe", inputs=[places],
                 params=["transformer.wpe.weight"],
                 options={"num_embeddings": context, "embedding_dim": dim})
    x = cfg.add("Elementwise", name="embed", inputs=[emb, at], options={"operation": "sum"})
    # the residual stream as rows (batch * T, dim): each block's projections add onto it
    # in place (row_linear's residual)
    x = cfg.add("Reshape", name="embed/rows", inputs=[x], options={"dims": [-1, dim]})

    def linear(name, x, inputs, outputs, residual=None, activation="identity", norm=None):
        return row_linear(cfg, name, x, inputs, outputs, weights=weights, residual=residual,
                          activation=activation,
                          layer_norm=None if norm is None else (norm, eps))

    # (each LayerNorm is taken by the product that reads it: InnerProduct's input_ln, no
    # launch of its own in a step)
    for i in range(layers):
        p = "transformer.h.%d." % i
        qkv = linear(p + "attn.c_attn", x, dim, 3 * dim, norm=p + "ln_1")
        qkv = cfg.add("Reshape", name=p + "attn/heads", inputs=[qkv],
                      options={"dims": [batch, -1, 3, heads, width]})
        # the cache takes the projection as it is and splits off the queries, (batch,
        # heads, T, width) as the caches; the heads merge back by a Transpose, which for
        # one token a pass moves nothing (a view). Attention reads the cached counts
        # (``pos``), not a mask: each query sees the keys up to its own position
        q, keys, values = cfg.add(
            "KVCache", name=p + "attn.cache", inputs=[qkv, pos],
            outputs=[p + "attn/q", p + "attn/keys", p + "attn/values"],
            options={"length": context, "layout": "packed", "mask": False})
        a = cfg.add("ScaledDotProductAttention", name=p + "attn",
                    inputs=[q, keys, values, pos],
                    options={"positions": True, "scale": None if scales is None else scales[i]})
        a = cfg.add("Transpose", name=p + "attn/merge", inputs=[a], options={"dims": [0, 2, 1, 3]})
        a = cfg.add("Reshape", name=p + "attn/merged", inputs=[a], options={"dims": [-1, dim]})
        x = linear(p + "attn.c_proj", a, dim, dim, residual=x)
        h = linear(p + "mlp.c_fc", x, dim, inner, activation=activation,
                   norm=p + "ln_2")  # (the GELU in the product's epilogue)
        x = linear(p + "mlp.c_proj", h, inner, dim, residual=x)
    decoder_logits(cfg, x, dim, vocab, linear_params("lm_head", head_bias, weights), head_bias,
                   weights, layer_norm=("transformer.ln_f", eps))
    return cfg


def vision_transformer(image_size=224, patch_size=16, layers=12, heads=12, hidden=768,
                       mlp=3072, classes=1000, batch=16, train=True):
    """torchvision's VisionTransformer (Dosovitskiy et al. 2021) with its parameter names:
    a patch convolution, a class token and a learned position table, ``layers`` pre-norm
    encoder blocks (self-attention as nn.MultiheadAttention, a GELU MLP), LayerNorm (eps
    1e-6) and a linear head on the class token. ``vit_b_16`` is its default size.

    The class token is (Parameter + 0 x the first patch), so that it has the batch's size
    for the Concat. The position table starts at zeros (Parameter's initialisation), the
    class token too, as torchvision's.
    """
    if image_size % patch_size or hidden % heads:
        raise ValueError("vision_transformer: image_size %d must be a multiple of patch_size "
                         "%d and hidden %d of heads %d" % (image_size, patch_size, hidden, heads))
    b = _Builder(batch, 3, image_size)
    cfg = b.cfg
    length = (image_size // patch_size) ** 2
    x = cfg.add("Convolution2D", name="conv_proj", params=["conv_proj.weight", "conv_proj.bias"],
                options={"channels_out": hidden, "channels_in": 3, "bias": True,
                         "kernel": [patch_size, patch_size], "stride": [patch_size, patch_size]})
    x = cfg.add("Reshape", name="patches", inputs=[x], options={"dims": [-1, hidden, length]})
    x = cfg.add("Transpose", name="patches/seq", inputs=[x], options={"dims": [0, 2, 1]})
    first = cfg.add("Slice", name="class_token/batch", inputs=[x], options={"dim": 1, "begin": 0, "end": 1})
    token = cfg.add("Parameter", name="class_token", inputs=[], params=["class_token"],
                    options={"shape": [1, 1, hidden]})
    token = cfg.add("Elementwise", name="class_token/expand", inputs=[first, token],
                    options={"operation": "sum", "coef1": 0.0, "coef2": 1.0})
    x = cfg.add("Concat", name="tokens", inputs=[token, x], options={"dim": 1})
    length += 1
    pos = cfg.add("Parameter", name="encoder.pos_embedding", inputs=[],
                  params=["encoder.pos_embedding"], options={"shape": [1, length, hidden]})
    x = cfg.add("Elementwise", name="encoder/position", inputs=[x, pos], options={"operation": "sum"})
    for i in range(layers):
        p = "encoder.layers.encoder_layer_%d." % i
        a = multi_head_attention(cfg, p + "self_attention", _layer_norm(cfg, p + "ln_1", x, 1e-6),
                                 length, hidden, heads)
        x = _residual(cfg, p + "attention/residual", x, a)
        h = _mlp(cfg, p + "mlp", _layer_norm(cfg, p + "ln_2", x, 1e-6), length, hidden, mlp,
                 "0", "3")
        x = _residual(cfg, p + "mlp/residual", x, h)
    x = _layer_norm(cfg, "encoder.ln", x, 1e-6)
    x = cfg.add("Slice", name="class_token/out", inputs=[x], options={"dim": 1, "begin": 0, "end": 1})
    x = cfg.add("Reshape", name="class_token/rows", inputs=[x], options={"dims": [-1, hidden]})
    cfg.add("InnerProduct", name="heads.head", inputs=[x], params=["heads.head.weight", "heads.head.bias"],
            options={"outputs": classes, "inputs": hidden, "bias": True})
    return b.finish(train)


def vit_b_16(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's vit_b_16: 16x16 patches, 12 layers of 12 heads, width 768, MLP 3072."""
    return vision_transformer(image_size, 16, 12, 12, 768, 3072, classes, batch, train)


def _layer_norm_2d(cfg, name, x, eps=1e-6):
    """torchvision's LayerNorm2d: LayerNorm over the channels of (N, C, H, W)."""
    t = cfg.add("Transpose", name=name + "/nhwc", inputs=[x], options={"dims": [0, 2, 3, 1]})
    t = _layer_norm(cfg, name, t, eps)
    return cfg.add("Transpose", name=name + "/nchw", inputs=[t], options={"dims": [0, 3, 1, 2]})


def _channels_linear(cfg, name, x, size, inputs, outputs):
    """nn.Linear over the last axis of (N, H, W, inputs)."""
    flat = cfg.add("Reshape", name=name + "/rows", inputs=[x], options={"dims": [-1, inputs]})
    y = cfg.add("InnerProduct", name=name, inputs=[flat], params=[name + ".weight", name + ".bias"],
                options={"outputs": outputs, "inputs": inputs, "bias": True})
    return cfg.add("Reshape", name=name + "/nhwc", inputs=[y],
                   options={"dims": [-1, size, size, outputs]})


def convnext(stages=((96, 3), (192, 3), (384, 9), (768, 3)), batch=16, image_size=224,
             classes=1000, train=True):
    """torchvision's ConvNeXt (Liu et al. 2022) with its parameter names: a 4x4 stride-4
    stem with LayerNorm2d, stages of blocks (7x7 depthwise convolution, LayerNorm over the
    channels, a 4x GELU MLP, a learned per-channel layer scale, a residual sum) joined by
    LayerNorm2d and a 2x2 stride-2 convolution, global average pooling, LayerNorm and a
    linear head. ``stages``: (channels, blocks) each; ``convnext_tiny`` is the default.
    Stochastic depth is left out (it is the identity at inference). The layer scales start
    at zeros (Parameter's initialisation; torchvision's 1e-6).
    """
    b = _Builder(batch, 3, image_size)
    cfg = b.cfg
    width = stages[0][0]
    x = b.conv("features.0.0", width, 4, stride=4, bias=True)
    x = _layer_norm_2d(cfg, "features.0.1", x)
    for i, (width, blocks) in enumerate(stages):
        stage = "features.%d" % (1 + 2 * i)
        for j in range(blocks):
            p = "%s.%d." % (stage, j)
            h = b.conv(p + "block.0", width, 7, pad=3, groups=width, bias=True, src=x)
            h = cfg.add("Transpose", name=p + "block.1", inputs=[h], options={"dims": [0, 2, 3, 1]})
            h = _layer_norm(cfg, p + "block.2", h, 1e-6)
            h = _channels_linear(cfg, p + "block.3", h, b.size, width, 4 * width)
            h = cfg.add("Activation", name=p + "block.4", inputs=[h], options={"activation": "gelu"})
            h = _channels_linear(cfg, p + "block.5", h, b.size, 4 * width, width)
            h = cfg.add("Transpose", name=p + "block.6", inputs=[h], options={"dims": [0, 3, 1, 2]})
            scale = cfg.add("Parameter", name=p + "layer_scale", inputs=[], params=[p + "layer_scale"],
                            options={"shape": [width, 1, 1]})
            h = cfg.add("Elementwise", name=p + "scaled", inputs=[h, scale], options={"operation": "prod"})
            x = _residual(cfg, p + "residual", x, h)
        if i + 1 < len(stages):
            down = "features.%d" % (2 + 2 * i)
            x = _layer_norm_2d(cfg, down + ".0", x)
            x = b.conv(down + ".1", stages[i + 1][0], 2, stride=2, bias=True, src=x)
    x = cfg.add("GlobalPooling", name="avgpool", inputs=[x], options={"mode": "avg"})
    x = cfg.add("Reshape", name="classifier.1", inputs=[x], options={"dims": [-1, width]})
    x = _layer_norm(cfg, "classifier.0", x, 1e-6)
    b.channels, b.size = width, 1
    b.fc("classifier.2", classes)
    return b.finish(train)


def convnext_tiny(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's convnext_tiny: stages of 96, 192, 384 and 768 channels, 3-3-9-3 blocks."""
    return convnext(((96, 3), (192, 3), (384, 9), (768, 3)), batch, image_size, classes, train)


BUILDERS = {"lenet": lenet, "mlp": mlp, "alexnet": alexnet, "vgg16": vgg16, "resnet18": resnet18,
            "resnet34": resnet34, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
            "vit_b_16": vit_b_16, "convnext_tiny": convnext_tiny}
# the language models of the benchmarks: each takes ``batch`` and ``train``
SEQUENCE_BUILDERS = {"gpt2": gpt2, "bert_base": bert_base}
