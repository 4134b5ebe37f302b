"""Model builders: classic nets as NetConfigs, with torchvision's parameter names.

Every classifier builder (``BUILDERS``) takes ``batch``, ``classes`` and ``train``; the
image nets also take ``image_size``. ``gpt`` builds a decoder language model instead. ``train=True`` adds an int ``label`` input and a ``SoftmaxWithLoss``
named ``loss``; ``train=False`` ends with a ``Softmax`` named ``prob``. The layers match
DLPrimitives' benchmark nets operator for operator (same types and options), and each
operator's ``params`` carry torchvision's state-dict names ("conv1.weight",
"layer1.0.bn1.running_mean", "fc.bias", ...), so PyTorch weights map one to one.
As in those nets, dropout is left out (it is inactive at inference; ``dropout=True``
puts it back where torchvision has it).
"""
from .net.netconfig import NetConfig

__all__ = ["lenet", "mlp", "alexnet", "vgg16", "resnet18", "resnet34", "resnet50",
           "mobilenet_v2", "gpt", "BUILDERS"]

BN_OPTIONS = {"eps": 1e-5, "momentum": 0.1}


class _Builder:
    def __init__(self, batch, channels, image_size):
        self.cfg = NetConfig()
        self.cfg.add_input("data", [batch, channels, image_size, image_size])
        self.batch, self.size, self.channels = batch, image_size, channels

    def conv(self, name, cout, kernel, stride=1, pad=0, groups=1, bias=False, act=None, src=None):
        opts = {"bias": bias, "groups": groups, "kernel": [kernel, kernel], "stride": [stride, stride],
                "dilate": [1, 1], "pad": [pad, pad], "channels_out": cout, "channels_in": self.channels}
        if act:
            opts["activation"] = act
        params = [name + ".weight"] + ([name + ".bias"] if bias else [])
        out = self.cfg.add("Convolution2D", name=name, inputs=src, options=opts, params=params)
        self.channels = cout
        self.size = (self.size + 2 * pad - kernel) // stride + 1
        return out

    def bn(self, name):
        return self.cfg.add("BatchNorm", name=name, options=dict(BN_OPTIONS),
                            params=[name + "." + p for p in ("running_mean", "running_var",
                                                             "weight", "bias")])

    def act(self, name, kind="relu"):
        return self.cfg.add("Activation", name=name, options={"activation": kind}, inplace=True)

    def pool(self, name, kernel, stride, pad=0, mode="max"):
        self.size = (self.size + 2 * pad - kernel) // stride + 1
        return self.cfg.add("Pooling2D", name=name, options={
            "kernel": [kernel, kernel], "stride": [stride, stride], "pad": [pad, pad],
            "count_include_pad": False, "mode": mode})

    def adaptive_avg(self, name, target):
        """torchvision's AdaptiveAvgPool2d(target) where it is a plain pooling."""
        if self.size % target:
            return None  # no fixed pooling equals it; the classifier then takes what there is
        k = self.size // target
        return self.pool(name, k, k, mode="avg")

    def fc(self, name, outputs, act=None):
        inputs = self.channels * self.size * self.size
        opts = {"bias": True, "outputs": outputs, "inputs": inputs}
        if act:
            opts["activation"] = act
        out = self.cfg.add("InnerProduct", name=name, options=opts,
                           params=[name + ".weight", name + ".bias"])
        self.channels, self.size = outputs, 1
        return out

    def dropout(self, name, ratio):
        return self.cfg.add("Dropout", name=name, options={"ratio": ratio}, inplace=True)

    def finish(self, train):
        logits = self.cfg.last
        if train:
            self.cfg.add_input("label", [self.batch], dtype="int")
            self.cfg.add("SoftmaxWithLoss", name="loss", inputs=[logits, "label"], outputs=["loss"])
            self.cfg.set_outputs(["loss"])
        else:
            self.cfg.add("Softmax", name="prob", inputs=[logits], outputs=["prob"])
            self.cfg.set_outputs(["prob"])
        return self.cfg


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


def mlp(batch=64, inputs=784, hidden=(256, 128), classes=10, train=True):
    """Fully connected layers with ReLU; input ``data`` is (batch, inputs)."""
    b = _Builder(batch, inputs, 1)
    b.cfg.inputs[0]["shape"] = [batch, inputs]
    for i, width in enumerate(hidden):
        b.fc("fc%d" % (i + 1), width, act="relu")
    b.fc("fc%d" % (len(hidden) + 1), classes)
    return b.finish(train)


def alexnet(batch=16, image_size=224, classes=1000, train=True, dropout=False):
    """torchvision's AlexNet: five convolutions with ReLU, three max poolings, three FCs."""
    b = _Builder(batch, 3, image_size)
    b.conv("features.0", 64, 11, 4, 2, bias=True, act="relu")
    b.pool("features.2", 3, 2)
    b.conv("features.3", 192, 5, 1, 2, bias=True, act="relu")
    b.pool("features.5", 3, 2)
    b.conv("features.6", 384, 3, 1, 1, bias=True, act="relu")
    b.conv("features.8", 256, 3, 1, 1, bias=True, act="relu")
    b.conv("features.10", 256, 3, 1, 1, bias=True, act="relu")
    b.pool("features.12", 3, 2)
    b.adaptive_avg("avgpool", 6)
    if dropout:
        b.dropout("classifier.0", 0.5)
    b.fc("classifier.1", 4096, act="relu")
    if dropout:
        b.dropout("classifier.3", 0.5)
    b.fc("classifier.4", 4096, act="relu")
    b.fc("classifier.6", classes)
    return b.finish(train)


def vgg16(batch=16, image_size=224, classes=1000, train=True, dropout=False):
    """torchvision's VGG-16 (configuration D): thirteen 3x3 convolutions, three FCs."""
    b = _Builder(batch, 3, image_size)
    index = 0
    for stage, (width, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]):
        for _ in range(convs):
            b.conv("features.%d" % index, width, 3, 1, 1, bias=True, act="relu")
            index += 2
        b.pool("features.%d" % index, 2, 2)
        index += 1
    b.adaptive_avg("avgpool", 7)
    b.fc("classifier.0", 4096, act="relu")
    if dropout:
        b.dropout("classifier.2", 0.5)
    b.fc("classifier.3", 4096, act="relu")
    if dropout:
        b.dropout("classifier.5", 0.5)
    b.fc("classifier.6", classes)
    return b.finish(train)


def _resnet(blocks, bottleneck, batch, image_size, classes, train):
    b = _Builder(batch, 3, image_size)
    b.conv("conv1", 64, 7, 2, 3)
    b.bn("bn1")
    b.act("relu")
    x = b.pool("maxpool", 3, 2, 1)
    expansion = 4 if bottleneck else 1
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(count):
            p = "layer%d.%d" % (stage + 1, i)
            stride = 2 if (i == 0 and stage > 0) else 1
            cin, size_in = b.channels, b.size
            if bottleneck:
                b.conv(p + ".conv1", width, 1, src=x)
                b.bn(p + ".bn1")
                b.act(p + ".relu1")
                b.conv(p + ".conv2", width, 3, stride, 1)
                b.bn(p + ".bn2")
                b.act(p + ".relu2")
                b.conv(p + ".conv3", width * 4, 1)
                main = b.bn(p + ".bn3")
            else:
                b.conv(p + ".conv1", width, 3, stride, 1, src=x)
                b.bn(p + ".bn1")
                b.act(p + ".relu1")
                b.conv(p + ".conv2", width, 3, 1, 1)
                main = b.bn(p + ".bn2")
            shortcut = x
            if stride != 1 or cin != width * expansion:
                cout, size_out = b.channels, b.size
                b.channels, b.size = cin, size_in
                b.conv(p + ".downsample.0", width * expansion, 1, stride, src=x)
                shortcut = b.bn(p + ".downsample.1")
                b.channels, b.size = cout, size_out
            x = b.cfg.add("Elementwise", name=p + ".add", inputs=[main, shortcut],
                          options={"operation": "sum", "activation": "relu"})
    b.cfg.add("GlobalPooling", name="avgpool", options={"mode": "avg"})
    b.size = 1
    b.fc("fc", classes)
    return b.finish(train)


def resnet18(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's ResNet-18: basic residual blocks [2, 2, 2, 2] with BatchNorm."""
    return _resnet([2, 2, 2, 2], False, batch, image_size, classes, train)


def resnet34(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's ResNet-34: basic residual blocks [3, 4, 6, 3] with BatchNorm."""
    return _resnet([3, 4, 6, 3], False, batch, image_size, classes, train)


def resnet50(batch=16, image_size=224, classes=1000, train=True):
    """torchvision's ResNet-50: bottleneck blocks [3, 4, 6, 3] with BatchNorm."""
    return _resnet([3, 4, 6, 3], True, batch, image_size, classes, train)


def mobilenet_v2(batch=16, image_size=224, classes=1000, train=True, dropout=False):
    """torchvision's MobileNetV2 (width 1.0): inverted residuals with ReLU6."""
    b = _Builder(batch, 3, image_size)
    b.conv("features.0.0", 32, 3, 2, 1)
    b.bn("features.0.1")
    x = b.act("features.0.2", "relu6")
    index = 1
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            p = "features.%d.conv" % index
            cin, hidden = b.channels, b.channels * t
            layer = 0
            src = x
            if t != 1:
                b.conv("%s.%d.0" % (p, layer), hidden, 1, src=src)
                b.bn("%s.%d.1" % (p, layer))
                b.act("%s.%d.2" % (p, layer), "relu6")
                layer, src = layer + 1, None
            b.conv("%s.%d.0" % (p, layer), hidden, 3, stride, 1, groups=hidden, src=src)
            b.bn("%s.%d.1" % (p, layer))
            b.act("%s.%d.2" % (p, layer), "relu6")
            b.conv("%s.%d" % (p, layer + 1), c, 1)
            out = b.bn("%s.%d" % (p, layer + 2))
            if stride == 1 and cin == c:
                out = b.cfg.add("Elementwise", name="features.%d.add" % index, inputs=[x, out],
                                options={"operation": "sum"})
            x = out
            index += 1
    b.conv("features.18.0", 1280, 1)
    b.bn("features.18.1")
    b.act("features.18.2", "relu6")
    b.cfg.add("GlobalPooling", name="avgpool", options={"mode": "avg"})
    b.size = 1
    if dropout:
        b.dropout("classifier.0", 0.2)
    b.fc("classifier.1", classes)
    return b.finish(train)


def gpt(vocab=65, context=64, layers=4, heads=4, dim=128, batch=16, train=True):
    """A GPT-style decoder (Radford et al. 2019, as nanoGPT lays it out): token embedding
    plus a learned position table, ``layers`` pre-norm blocks of causal multi-head
    attention and a 4x GELU MLP with residual sums, a final LayerNorm and a linear head.

    Input ``tokens`` (batch, context) int64; ``train=True`` adds ``targets`` of the same
    shape and a mean cross-entropy over every position (``loss``), else the output is
    ``logits`` (batch * context, vocab). Parameter names follow nanoGPT's state dict
    ("transformer.h.0.attn.c_attn.weight", ...; the head is not tied to the embedding).
    The position table starts at zeros (Parameter's initialisation); every Linear as
    PyTorch's.
    """
    if dim % heads:
        raise ValueError("gpt: dim %d is not a multiple of heads %d" % (dim, heads))
    cfg = NetConfig()
    tokens = cfg.add_input("tokens", [batch, context], dtype="int64")
    rows, width = [-1, dim], dim // heads

    def linear(name, x, inputs, outputs):
        flat = cfg.add("Reshape", name=name + "/rows", inputs=[x], options={"dims": rows[:1] + [inputs]})
        y = cfg.add("InnerProduct", name=name, inputs=[flat], params=[name + ".weight", name + ".bias"],
                    options={"outputs": outputs, "inputs": inputs, "bias": True})
        return cfg.add("Reshape", name=name + "/seq", inputs=[y],
                       options={"dims": [-1, context, outputs]})

    def norm(name, x):
        return cfg.add("LayerNorm", name=name, inputs=[x], params=[name + ".weight", name + ".bias"])

    emb = cfg.add("Embedding", name="transformer.wte", inputs=[tokens], params=["transformer.wte.weight"],
                  options={"num_embeddings": vocab, "embedding_dim": dim})
    pos = cfg.add("Parameter", name="transformer.wpe", inputs=[], params=["transformer.wpe.weight"],
                  options={"shape": [context, dim]})
    x = cfg.add("Elementwise", name="embed", inputs=[emb, pos], options={"operation": "sum"})
    for i in range(layers):
        p = "transformer.h.%d." % i
        qkv = linear(p + "attn.c_attn", norm(p + "ln_1", x), dim, 3 * dim)
        parts = []
        for j, part in enumerate("qkv"):
            t = cfg.add("Slice", name=p + "attn." + part, inputs=[qkv],
                        options={"dim": 2, "begin": j * dim, "end": (j + 1) * dim})
            t = cfg.add("Reshape", name=p + "attn." + part + "/heads", inputs=[t],
                        options={"dims": [-1, context, heads, width]})
            parts.append(cfg.add("Transpose", name=p + "attn." + part + "/bhld", inputs=[t],
                                 options={"dims": [0, 2, 1, 3]}))
        a = cfg.add("ScaledDotProductAttention", name=p + "attn", inputs=parts,
                    options={"causal": True})
        a = cfg.add("Transpose", name=p + "attn/blhd", inputs=[a], options={"dims": [0, 2, 1, 3]})
        a = cfg.add("Reshape", name=p + "attn/merge", inputs=[a], options={"dims": [-1, context, dim]})
        a = linear(p + "attn.c_proj", a, dim, dim)
        x = cfg.add("Elementwise", name=p + "attn/residual", inputs=[x, a], options={"operation": "sum"})
        h = linear(p + "mlp.c_fc", norm(p + "ln_2", x), dim, 4 * dim)
        h = cfg.add("Activation", name=p + "mlp.gelu", inputs=[h], options={"activation": "gelu"})
        h = linear(p + "mlp.c_proj", h, 4 * dim, dim)
        x = cfg.add("Elementwise", name=p + "mlp/residual", inputs=[x, h], options={"operation": "sum"})
    x = norm("transformer.ln_f", x)
    flat = cfg.add("Reshape", name="lm_head/rows", inputs=[x], options={"dims": [-1, dim]})
    logits = cfg.add("InnerProduct", name="lm_head", inputs=[flat], outputs=["logits"],
                     params=["lm_head.weight", "lm_head.bias"],
                     options={"outputs": vocab, "inputs": dim, "bias": True})
    if train:
        targets = cfg.add_input("targets", [batch, context], dtype="int64")
        labels = cfg.add("Reshape", name="targets/rows", inputs=[targets], options={"dims": [-1]})
        cfg.add("SoftmaxWithLoss", name="loss", inputs=[logits, labels], outputs=["loss"])
        cfg.set_outputs(["loss"])
    else:
        cfg.set_outputs([logits])
    return cfg


BUILDERS = {"lenet": lenet, "mlp": mlp, "alexnet": alexnet, "vgg16": vgg16, "resnet18": resnet18,
            "resnet34": resnet34, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2}
