# %% [markdown]
# # Fine-tuning: load weights, freeze layers, train a new head
#
# Transfer learning in miniature. We train a small CNN on the MNIST digits 0-4, save
# it, and then reuse its convolutional features for a new task, the digits 5-9: the
# loaded convolutions are **frozen** (the JSON flag `"frozen": true`), a new
# classification head replaces the old one, and only the fully connected layers train.
# Finally the model is saved and reloaded.

# %%
import json
import os
import numpy as np

import dlprim as dp
import dlprim.plot
from dlprim.data import ArraySource, BatchLoader, MnistSource, Normalize

ctx = dp.Context()
DATA = os.path.join("..", "mnist", "data")
mnist = {part: MnistSource(os.path.join(DATA, part + "-images-idx3-ubyte.gz"),
                           os.path.join(DATA, part + "-labels-idx1-ubyte.gz"))
         for part in ("train", "val")}
NORMALIZE = [Normalize(0.1307, 0.3081)]
os.makedirs("runs", exist_ok=True)


def digits(part, first):
    """The images of digits first..first+4, labelled 0..4."""
    src = mnist[part]
    keep = (src.labels >= first) & (src.labels < first + 5)
    return ArraySource(src.images[keep], src.labels[keep] - first, num_classes=5)


def train(net, source, epochs=1, lr=2e-3, batch=64):
    """Adam over ``source`` for some epochs; returns one row per step for plotting."""
    opt, rows = dp.Adam(net, lr=lr), []
    loader = BatchLoader(source, batch, seed=0, transforms=NORMALIZE)
    for epoch in range(epochs):
        for x, y in loader:  # each pass over the loader is the next epoch, newly shuffled
            opt.zero_grad()
            out = net(data=x, label=y)
            net.backward()
            opt.step()
            rows.append({"step": len(rows) + 1, "train_loss": float(out["loss"][0]),
                         "train_acc": float(np.mean(out["logits"].argmax(1) == y))})
    return rows


def accuracy(net, source):
    net.mode = dp.PREDICT
    correct = sum(int(np.sum(net(data=x, label=y)["logits"].argmax(1) == y))
                  for x, y in BatchLoader(source, 250, shuffle=False, transforms=NORMALIZE))
    net.mode = dp.TRAIN
    return correct / len(source)


# %% [markdown]
# ## 1. A base model for the digits 0-4
# The same LeNet-style net as in 02_train_cnn, written directly as the JSON that
# `NetConfig` produces. Its classifier is the operator `fc2`; its output tensor is
# named `logits` and listed as a net output, so that we can read it.

# %%
graph = {
    "inputs": [{"name": "data", "shape": [64, 1, 28, 28]},
               {"name": "label", "shape": [64], "dtype": "int"}],
    "outputs": ["loss", "logits"],
    "operators": [
        {"name": "conv1", "type": "Convolution2D", "inputs": ["data"], "outputs": ["conv1"],
         "options": {"channels_out": 16, "kernel": 5, "pad": 2, "activation": "relu"}},
        {"name": "pool1", "type": "Pooling2D", "inputs": ["conv1"], "outputs": ["pool1"],
         "options": {"kernel": 2, "stride": 2}},
        {"name": "conv2", "type": "Convolution2D", "inputs": ["pool1"], "outputs": ["conv2"],
         "options": {"channels_out": 32, "kernel": 5, "pad": 2, "activation": "relu"}},
        {"name": "pool2", "type": "Pooling2D", "inputs": ["conv2"], "outputs": ["pool2"],
         "options": {"kernel": 2, "stride": 2}},
        {"name": "fc1", "type": "InnerProduct", "inputs": ["pool2"], "outputs": ["fc1"],
         "options": {"outputs": 128, "activation": "relu"}},
        {"name": "fc2", "type": "InnerProduct", "inputs": ["fc1"], "outputs": ["logits"],
         "options": {"outputs": 5}},
        {"name": "loss", "type": "SoftmaxWithLoss", "inputs": ["logits", "label"],
         "outputs": ["loss"]},
    ],
}
base = dp.Net(ctx, graph, seed=1)
base_rows = train(base, digits("train", 0))
print("digits 0-4, validation accuracy: %.3f" % accuracy(base, digits("val", 0)))
base.save_parameters("runs/base.dlp")
with open("runs/base.json", "w") as f:
    json.dump(graph, f)
sorted(base.get_parameters())  # parameter names: "<operator>.<index>" unless "params" names them

# %% [markdown]
# ## 2. Freeze the features, replace the head
# We edit the JSON: the convolutions get `"frozen": true` (they compute no parameter
# gradients and the solver leaves their parameters alone; nothing runs backward through
# them at all, as nothing before them trains). `fc1` stays trainable, and the head gets
# a new name, so the base model's `fc2` weights do not load into it and it starts
# from a fresh initialisation. `strict=False` permits exactly that: parameters the
# file does not have keep their initial values, and the file's `fc2` weights, which the
# net no longer has, are left out (by default both would be errors naming them).

# %%
with open("runs/base.json") as f:
    ft_graph = json.load(f)
for op in ft_graph["operators"]:
    if op["name"] in ("conv1", "conv2"):
        op["frozen"] = True
    if op["name"] == "fc2":
        op["name"] = "head"

net = dp.Net(ctx, ft_graph, seed=2)
net.load_parameters("runs/base.dlp", strict=False)
sizes = {name: (int(np.prod(shape)), trainable)
         for name, (_, shape, trainable) in net.param_layout.items()}
print("trainable:", [name for name, (_, t) in sizes.items() if t])
print("parameters: %d trainable of %d" % (sum(n for n, t in sizes.values() if t),
                                          sum(n for n, _ in sizes.values())))
print("before training, digits 5-9: %.3f" % accuracy(net, digits("val", 5)))

# %% [markdown]
# Two epochs over the digits 5-9. The frozen convolutions must come out unchanged.

# %%
ft_rows = train(net, digits("train", 5), epochs=2)
acc = accuracy(net, digits("val", 5))
print("after training fc1 and the head, digits 5-9: %.3f" % acc)

frozen_before = base.get_parameters()
frozen_after = net.get_parameters()
for name in ("conv1.0", "conv1.1", "conv2.0", "conv2.1"):
    assert np.array_equal(frozen_before[name], frozen_after[name]), name
print("frozen layers unchanged")
dlprim.plot.training_curves(ft_rows, title="fine-tuning on the digits 5-9")

# %% [markdown]
# ## 3. Save and reload
# The model is its graph and its weights. To use it we load both into a fresh net in
# predict mode, here the DLPrimitives way (load, setup, load parameters), and check
# that it gives the same answers.

# %%
net.save_parameters("runs/finetuned.dlp")
with open("runs/finetuned.json", "w") as f:
    json.dump(ft_graph, f)

loaded = dp.Net(ctx)
loaded.mode = dp.PREDICT
loaded.load_from_json_file("runs/finetuned.json")
loaded.setup()
loaded.load_parameters("runs/finetuned.dlp")

x, y = next(iter(BatchLoader(digits("val", 5), 64, shuffle=False, transforms=NORMALIZE)))
net.mode = dp.PREDICT
a = net(data=x, label=y)["logits"]
b = loaded(data=x, label=y)["logits"]
print("largest difference:", np.abs(a - b).max())
print("predicted digits:", (b.argmax(1) + 5)[:16])
print("true digits:     ", (y + 5)[:16])
assert np.array_equal(a, b) and acc > 0.8
