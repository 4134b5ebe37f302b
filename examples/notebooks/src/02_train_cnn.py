# %% [markdown]
# # Train a CNN on MNIST
#
# We build a small convolutional network with `NetConfig`, train it for one epoch on the
# 4,000-digit MNIST subset that ships with the repository (`examples/mnist/data`), watch
# the loss in a progress bar, plot the curves, and save the model. On a laptop CPU
# through PoCL the epoch takes well under a minute; on a GPU a second or two.
#
# The same training, driven by a config file instead of Python, is one command:
# `dlprim-train examples/mnist/config.json` (see docs/train.md).

# %%
import os
import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import dlprim as dp
import dlprim.plot
from dlprim.data import BatchLoader, MnistSource, Normalize

ctx = dp.Context()
print(ctx.name)

# %% [markdown]
# ## The data
# `MnistSource` reads the idx files MNIST is distributed in (gzip or plain) and gives
# float images in [0, 1] with int labels. `BatchLoader` shuffles, applies transforms and
# prefetches batches in a background thread.

# %%
DATA = os.path.join("..", "mnist", "data")
train = MnistSource(os.path.join(DATA, "train-images-idx3-ubyte.gz"),
                    os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
val = MnistSource(os.path.join(DATA, "val-images-idx3-ubyte.gz"),
                  os.path.join(DATA, "val-labels-idx1-ubyte.gz"))
print(len(train), "training and", len(val), "validation digits of shape", train.shape)

fig, axes = plt.subplots(1, 8, figsize=(8, 1.3))
for ax, i in zip(axes, range(8)):
    image, label = train[i]
    ax.imshow(image[0], cmap="gray")
    ax.set_title(str(label))
    ax.axis("off")

# %% [markdown]
# ## The network
# `NetConfig.add(type, name=..., options=...)` appends an operator; it reads the previous
# operator's output unless `inputs` says otherwise. The operator types and options are
# DLPrimitives' JSON net format (every one is listed in docs/operators.md). Convolutions
# and inner products fuse their activation.
#
# Outputs: `loss` (a name starting with "loss" marks a loss, where backward starts) and
# the logits `fc2`, so that we can read them to count correct answers.

# %%
BATCH = 64
cfg = dp.NetConfig()
cfg.add_input("data", [BATCH, 1, 28, 28])
cfg.add_input("label", [BATCH], dtype="int")
cfg.add("Convolution2D", name="conv1", inputs="data",
        options={"channels_out": 16, "kernel": 5, "pad": 2, "activation": "relu"})
cfg.add("Pooling2D", name="pool1", options={"mode": "max", "kernel": 2, "stride": 2})
cfg.add("Convolution2D", name="conv2",
        options={"channels_out": 32, "kernel": 5, "pad": 2, "activation": "relu"})
cfg.add("Pooling2D", name="pool2", options={"mode": "max", "kernel": 2, "stride": 2})
cfg.add("InnerProduct", name="fc1", options={"outputs": 128, "activation": "relu"})
cfg.add("InnerProduct", name="fc2", options={"outputs": 10})
cfg.add("SoftmaxWithLoss", name="loss", inputs=["fc2", "label"])
cfg.set_outputs(["loss", "fc2"])
for op in cfg.operators:  # cfg.to_json() is the whole net in the JSON format
    print("%-6s %-16s %s -> %s  %s" % (op["name"], op["type"], op["inputs"], op["outputs"],
                                       op.get("options", "")))

# %% [markdown]
# `dp.Net(ctx, cfg)` infers every shape, plans the memory, builds the kernels and
# initialises the parameters (PyTorch's defaults, from `seed`). In a notebook the net
# shows itself as a table: per operator its output shape, parameters, work and memory.

# %%
net = dp.Net(ctx, cfg, mode="train", seed=1)
net

# %% [markdown]
# ## Training
# One step: `zero_grad`, forward (`net(data=..., label=...)` copies the numpy batch in
# and returns the outputs as numpy), `backward`, and the solver's `step`. The last batch
# of the epoch is smaller; the net re-plans for it by itself (no kernel is rebuilt).

# %%
opt = dp.Adam(net, lr=2e-3)
loader = BatchLoader(train, BATCH, transforms=[Normalize(0.1307, 0.3081)], seed=1)
rows = []
bar = tqdm(loader, desc="epoch 1", unit="batch")
for step, (x, y) in enumerate(bar):
    opt.zero_grad()
    out = net(data=x, label=y)
    net.backward()
    opt.step()
    loss, acc = float(out["loss"][0]), float(np.mean(out["fc2"].argmax(1) == y))
    rows.append({"step": step + 1, "train_loss": loss, "train_acc": acc})
    bar.set_postfix(loss="%.3f" % loss, acc="%.2f" % acc)

# %% [markdown]
# ## Validation
# In `PREDICT` mode layers such as BatchNorm and Dropout behave as at inference time
# and no memory is kept for backward.

# %%
def evaluate(net, source, batch=250):
    net.mode = dp.PREDICT
    loss, correct = 0.0, 0
    for x, y in BatchLoader(source, batch, shuffle=False, transforms=[Normalize(0.1307, 0.3081)]):
        out = net(data=x, label=y)
        loss += float(out["loss"][0]) * len(y)
        correct += int(np.sum(out["fc2"].argmax(1) == y))
    net.mode = dp.TRAIN
    return loss / len(source), correct / len(source)


val_loss, val_acc = evaluate(net, val)
rows.append({"step": rows[-1]["step"], "val_loss": val_loss, "val_acc": val_acc})
print("validation: loss %.4f, accuracy %.4f" % (val_loss, val_acc))

# %% [markdown]
# `dlprim.plot.training_curves` draws loss and accuracy from such rows (or from the
# `metrics.csv` that `dlprim-train` writes). The validation point sits at the last step.

# %%
dlprim.plot.training_curves(rows, title="LeNet on 4,000 MNIST digits, one epoch")

# %% [markdown]
# ## Save, and use the model
# `save_parameters` writes a `.dlp` file (DLPrimitives' format); the graph is the JSON
# of `cfg`. Together they are the model.

# %%
os.makedirs("runs", exist_ok=True)
net.save_parameters("runs/mnist_cnn.dlp")
cfg.save("runs/mnist_cnn.json")

net.mode = dp.PREDICT
x, y = next(iter(BatchLoader(val, 8, shuffle=False, transforms=[Normalize(0.1307, 0.3081)])))
predicted = net(data=x, label=y)["fc2"].argmax(1)
fig, axes = plt.subplots(1, 8, figsize=(8, 1.3))
for ax, image, p, t in zip(axes, x, predicted, y):
    ax.imshow(image[0], cmap="gray")
    ax.set_title("%d%s" % (p, "" if p == t else " (%d)" % t), color="black" if p == t else "red")
    ax.axis("off")
assert val_acc > 0.85, val_acc

# %% [markdown]
# Next: **04_finetune.ipynb** loads saved weights, freezes layers and trains a new head;
# **03_onnx.ipynb** imports a model from PyTorch through ONNX.
