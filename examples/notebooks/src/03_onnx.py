# %% [markdown]
# # Import an ONNX model
#
# ONNX is the common exchange format of deep-learning frameworks. dlprim imports ONNX
# models of CNNs (convolutions, batch norm, pooling, activations, residual additions,
# concatenation, fully connected layers ...) into its own JSON net format and weights,
# and runs them on any OpenCL device.
#
# Here we make a small digit classifier in PyTorch, train it for a few seconds, export
# it to ONNX, import it into dlprim, classify images, and check the answers against
# onnxruntime. Without PyTorch the notebook builds an (untrained) model with the `onnx`
# package instead, and the comparison works the same way.
#
# Needs the `onnx` extra (`pip install 'dlprim[onnx]'`) and, for the comparison,
# `onnxruntime`.

# %%
import os
import warnings
import numpy as np
import matplotlib.pyplot as plt
import onnx
import onnxruntime

import dlprim as dp
import dlprim.onnx
from dlprim.data import MnistSource

ctx = dp.Context()
DATA = os.path.join("..", "mnist", "data")
train = MnistSource(os.path.join(DATA, "train-images-idx3-ubyte.gz"),
                    os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
val = MnistSource(os.path.join(DATA, "val-images-idx3-ubyte.gz"),
                  os.path.join(DATA, "val-labels-idx1-ubyte.gz"))
images = (val.images.astype(np.float32) / 255 - 0.1307) / 0.3081  # (1000, 1, 28, 28)
labels = val.labels
os.makedirs("runs", exist_ok=True)
MODEL = "runs/digits.onnx"

# %% [markdown]
# ## 1. An ONNX file
# With PyTorch: a small CNN with batch norm, trained for one pass over the 4,000
# training digits, then `torch.onnx.export`. The softmax is part of the exported model,
# so it outputs probabilities.

# %%
try:
    import torch
except ImportError:
    torch = None


def torch_model():
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    x = torch.from_numpy((train.images.astype(np.float32) / 255 - 0.1307) / 0.3081)
    y = torch.from_numpy(train.labels.astype(np.int64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for i in torch.randperm(len(x)).split(64):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        opt.step()
    return nn.Sequential(model, nn.Softmax(dim=1)).eval()


if torch is not None:
    model = torch_model()
    # dynamo=False: the TorchScript exporter, which needs no further package (the newer
    # exporter needs onnxscript); it is deprecated, so we silence its warning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, torch.zeros(1, 1, 28, 28), MODEL, input_names=["image"],
                          output_names=["prob"], opset_version=17, dynamo=False)
    print("exported from PyTorch", torch.__version__)

# %% [markdown]
# Without PyTorch, the same kind of graph can be written node by node with
# `onnx.helper`: a convolution, ReLU, max pooling, global average pooling, a fully
# connected layer (`Gemm`) and a softmax, with random weights.

# %%
def onnx_model(path, seed=0):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    weights = {"w1": rng.normal(0, 0.3, (8, 1, 3, 3)), "b1": rng.normal(0, 0.1, 8),
               "w2": rng.normal(0, 0.5, (10, 8)), "b2": rng.normal(0, 0.1, 10)}
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p1"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1)]
    graph = helper.make_graph(
        nodes, "digits",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()])
    # IR version 8 goes with opset 17 (a newer onnx package would write one that an
    # older onnxruntime cannot read)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)


if torch is None:
    onnx_model(MODEL)
    print("built with onnx", onnx.__version__, "(random weights: its answers are arbitrary)")

# %% [markdown]
# ## 2. Import
# `dlprim.onnx.to_netconfig` translates the model into a `NetConfig` and a dict of
# weights without touching a device; `dlprim.onnx.load` does that and builds a ready
# `Net`. Operators keep their ONNX names. PyTorch's exporter has already folded the
# batch norms into the convolutions, and the importer fused each ReLU into the
# convolution before it.

# %%
cfg, weights = dlprim.onnx.to_netconfig(MODEL)
for op in cfg.operators:
    print("%-24s %-14s %s -> %s" % (op["name"], op["type"], op["inputs"], op["outputs"]))

net = dlprim.onnx.load(MODEL, ctx, batch=1)
net

# %% [markdown]
# ## 3. Classify an image
# The net's input and output keep the ONNX names (`image`, `prob`).

# %%
x = images[:1]
prob = net(image=x)["prob"][0]
print("predicted %d (probability %.3f), label %d" % (prob.argmax(), prob.max(), labels[0]))
fig, (ax_img, ax_prob) = plt.subplots(1, 2, figsize=(7, 2.5))
ax_img.imshow(x[0, 0], cmap="gray")
ax_img.axis("off")
ax_prob.bar(range(10), prob)
ax_prob.set(xticks=range(10), xlabel="digit", ylabel="probability")

# %% [markdown]
# ## 4. Compare with onnxruntime
# The same 1,000 validation digits through both; a batch of another size just re-plans
# the net (no kernel is rebuilt).

# %%
session = onnxruntime.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
ours = np.concatenate([net(image=images[i:i + 100])["prob"] for i in range(0, 1000, 100)])
theirs = np.concatenate([session.run(None, {"image": images[i:i + 1]})[0]
                         for i in range(len(images))])  # the file fixes the batch at 1
print("largest difference in probability: %.2e" % np.abs(ours - theirs).max())
print("same top class: %.1f%% of the images" % (100 * np.mean(ours.argmax(1) == theirs.argmax(1))))
print("accuracy: dlprim %.3f, onnxruntime %.3f" % (np.mean(ours.argmax(1) == labels),
                                                   np.mean(theirs.argmax(1) == labels)))
assert np.abs(ours - theirs).max() < 1e-4

# %% [markdown]
# ## 5. And back to ONNX
# `net.to_onnx(path)` (or `dlprim.onnx.save(net, path)`) exports a dlprim net with its
# current weights, so a model trained with dlprim can go to any ONNX runtime.

# %%
net.to_onnx("runs/digits_from_dlprim.onnx")
exported = onnxruntime.InferenceSession("runs/digits_from_dlprim.onnx",
                                        providers=["CPUExecutionProvider"])
feed = {exported.get_inputs()[0].name: images[:100]}
print("input:", exported.get_inputs()[0].name, exported.get_inputs()[0].shape)
difference = np.abs(exported.run(None, feed)[0] - ours[:100]).max()
print("largest difference: %.2e" % difference)
assert difference < 1e-4

# %% [markdown]
# The imported model is an ordinary dlprim net: `cfg.save("digits.json")` and
# `net.save_parameters("digits.dlp")` store it in the DLPrimitives formats, and it can be
# trained further (load it with `mode="train"` and add a loss, as in 04_finetune).
# docs/onnx.md lists the supported operators.
