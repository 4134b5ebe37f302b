# %% [markdown]
# # A CNN written in Python: dlprim.nn, fit, evaluate, predict
#
# The model is a Python class in PyTorch's style (`dlprim.nn`), trained with `dlprim.fit`
# on the 4,000-digit MNIST subset that ships with the repository, scored with
# `dlprim.evaluate`, and used with `net.predict`, which needs no labels. Early stopping
# keeps the best epoch. On a laptop CPU through PoCL the whole notebook takes well under
# a minute.

# %%
import os
import numpy as np
import matplotlib.pyplot as plt

import dlprim as dp
import dlprim.plot
from dlprim import nn
from dlprim.data import MnistSource
from dlprim.train import EarlyStopping

ctx = dp.Context()
print(ctx.name)

# %% [markdown]
# ## The data, as numpy arrays
# `fit` takes arrays in memory (or a `BatchLoader`). The digits are scaled to [0, 1] by
# `MnistSource`; we normalise them with MNIST's mean and standard deviation.

# %%
DATA = os.path.join("..", "mnist", "data")


def arrays(kind):
    source = MnistSource(os.path.join(DATA, kind + "-images-idx3-ubyte.gz"),
                         os.path.join(DATA, kind + "-labels-idx1-ubyte.gz"))
    x = np.stack([source[i][0] for i in range(len(source))])
    y = np.array([source[i][1] for i in range(len(source))], dtype=np.int32)
    return (x - 0.1307) / 0.3081, y


x_train, y_train = arrays("train")
x_val, y_val = arrays("val")
print(x_train.shape, y_train.shape, x_val.shape)

# %% [markdown]
# ## The model
# Layers are attributes; `forward` is written on symbolic values, so a residual is `+`.
# Parameter names follow the attribute paths as PyTorch's `state_dict` spells them.

# %%
class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


class SmallNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.block = Block(16)
        self.head = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(16 * 7 * 7, classes))

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


model = SmallNet()
print(model.parameter_names())

# %% [markdown]
# `dp.Net(ctx, model, input_shape=..., loss="cross_entropy")` lowers the model to a net
# with a `data` and a `label` input and a softmax cross-entropy `loss`; the net plans its
# memory and builds its kernels. (`model.netconfig(...)` gives the same graph as a
# `NetConfig`, which saves as DLPrimitives' JSON.)

# %%
net = dp.Net(ctx, model, input_shape=[64, 1, 28, 28], loss="cross_entropy", seed=1)
net

# %% [markdown]
# ## fit
# Adam with PyTorch's defaults unless a solver is given; a progress bar per epoch; the
# validation set scored after each epoch; `EarlyStopping` ends the run when the
# validation loss stops improving and puts the best epoch's weights back.

# %%
history = dp.fit(net, x_train, y_train, epochs=3, batch_size=64,
                 solver=dp.Adam(net, lr=2e-3), validation=(x_val, y_val),
                 callbacks=[EarlyStopping(monitor="val_loss", patience=1)])
for key, values in history.items():
    print("%-13s %s" % (key, " ".join("%.4f" % v for v in values)))

# %%
epochs = range(1, len(history["loss"]) + 1)
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3))
a.plot(epochs, history["loss"], "o-", label="train")
a.plot(epochs, history["val_loss"], "o-", label="validation")
a.set_xlabel("epoch"); a.set_ylabel("loss"); a.legend()
b.plot(epochs, history["accuracy"], "o-", label="train")
b.plot(epochs, history["val_accuracy"], "o-", label="validation")
b.set_xlabel("epoch"); b.set_ylabel("accuracy"); b.legend()
plt.tight_layout()

# %% [markdown]
# ## evaluate and predict
# `evaluate` runs in predict mode (BatchNorm on its running statistics) over every
# sample. `predict` returns the net's outputs that are not losses — here the logits of
# the last Linear — at any batch size, without labels.

# %%
scores = dp.evaluate(net, x_val, y_val, batch_size=250)
print(scores)
assert scores["accuracy"] > 0.9

logits = net.predict(data=x_val[:10])
name, values = next(iter(logits.items()))
print(name, values.shape)
print("predicted:", values.argmax(1))
print("labels:   ", y_val[:10])

# %%
fig, axes = plt.subplots(1, 10, figsize=(10, 1.4))
for ax, image, guess in zip(axes, x_val[:10], values.argmax(1)):
    ax.imshow(image[0], cmap="gray")
    ax.set_title(str(guess))
    ax.axis("off")

# %% [markdown]
# The weights save as `.dlp` (or `.safetensors`), under PyTorch's names.

# %%
os.makedirs("runs", exist_ok=True)
net.save_parameters("runs/small_net.dlp")
model.netconfig([1, 1, 28, 28]).save("runs/small_net.json")
print(sorted(os.listdir("runs")))
