# %% [markdown]
# # dlprim quickstart: devices, tensors and a kernel of your own
#
# dlprim runs neural networks on any OpenCL device: a GPU from any vendor, or the CPU
# through PoCL. This notebook shows the three things everything else is built on:
#
# 1. a **Context**: one device, its queue and its memory;
# 2. **Tensors**: device memory with a shape and a dtype, to and from numpy;
# 3. **kernels**: here written in one line with the pointwise generator, the same tool
#    dlprim's own activations, elementwise layers and optimizers are made with.
#
# It needs dlprim installed (`pip install -e .` in the repository) and an OpenCL driver
# (see docs/getting-started.md).

# %%
import numpy as np
import dlprim as dp

# %% [markdown]
# ## Devices
# `dp.list_devices()` gives every OpenCL device as `(platform, device, ...)`; the string
# `"P:D"` selects one. `dp.Context()` with no argument takes `DLPRIM_DEVICE` if it is set,
# else the first GPU, else the first CPU. `"cpu"`, `"gpu"` and an index work too.

# %%
for p, d, platform, device in dp.list_devices():
    print("%d:%d  %s  (%s)" % (p, d, device.name.strip(), platform.name.strip()))

ctx = dp.Context()
ctx

# %% [markdown]
# The context read the device's facts once; kernels are generated from them
# (work-group sizes, local memory, whether fp16 or float atomics exist).

# %%
f = ctx.facts
print("compute units:", f.compute_units, "| local memory:", f.local_mem // 1024, "KiB",
      "| max work-group:", f.max_work_group, "| fp64:", f.fp64)

# %% [markdown]
# ## Tensors
# A `Tensor` is a buffer on the device with a shape and a dtype. Copies between host and
# device are explicit: `Tensor.from_numpy`, `to_device`, `to_host` / `numpy()`.
# `reshape` gives a view of the same memory.

# %%
x = dp.Tensor.from_numpy(ctx, np.arange(12, dtype=np.float32).reshape(3, 4))
print(x)
print(x.numpy())

y = x.reshape(4, 3)          # same buffer, new shape
print(y.numpy())

x.to_device(np.ones((3, 4), np.float32))
print(y.numpy()[0])          # the view sees the write

# %% [markdown]
# Shapes and dtypes are checked on every copy, and the error says what was wrong:

# %%
try:
    x.to_device(np.zeros((4, 4), np.float32))
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# ## A kernel of your own: the pointwise generator
# `pointwise(ctx, inputs, outputs, code, params)` generates, compiles (once) and runs an
# OpenCL kernel from a single statement. Inside the code `x0, x1, ...` are the inputs
# at the current element, `y0, ...` the outputs and `w0, ...` scalar parameters.
# Inputs broadcast like numpy. Here is the SiLU activation `y = x * sigmoid(x)`:

# %%
from dlprim.core.pointwise import pointwise, pointwise_reduce

a = np.linspace(-4, 4, 9, dtype=np.float32)
x = dp.Tensor.from_numpy(ctx, a)
y = dp.Tensor.zeros(ctx, x.shape)
pointwise(ctx, [x], [y], "y0 = x0 / (1.0f + exp(-x0));")
print(y.numpy())
print("max error vs numpy:", np.abs(y.numpy() - a / (1 + np.exp(-a))).max())

# %% [markdown]
# Broadcasting and a scalar parameter: `y = w0 * x + b` with a bias per column,
# and a second output computed in the same kernel.

# %%
m = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
bias = np.array([1, 2, 3], np.float32)
x = dp.Tensor.from_numpy(ctx, m)
b = dp.Tensor.from_numpy(ctx, bias)
y = dp.Tensor.zeros(ctx, (5, 3))
relu = dp.Tensor.zeros(ctx, (5, 3))
pointwise(ctx, [x, b], [y, relu], "y0 = w0 * x0 + x1; y1 = max(y0, 0.0f);", [np.float32(0.5)])
assert np.allclose(y.numpy(), 0.5 * m + bias, atol=1e-6)
assert np.allclose(relu.numpy(), np.maximum(0.5 * m + bias, 0), atol=1e-6)
print(relu.numpy())

# %% [markdown]
# The same generator also reduces: outputs whose shape has size 1 on some axes are
# summed (or max-ed, ...) over those axes. Sum of squares per row:

# %%
sumsq = dp.Tensor.zeros(ctx, (5, 1))
pointwise_reduce(ctx, [x], [sumsq], "y0 = x0 * x0;")
print(sumsq.numpy().ravel())
print((m.astype(np.float64) ** 2).sum(axis=1))

# %% [markdown]
# Each distinct kernel is built once per context and then reused; a new shape with the
# same code reuses it too, because shapes are kernel arguments. The class form,
# `PointwiseBroadcast`, prepares the launch once for a fixed set of tensors, which is how
# layers put kernels into a network's execution plan (see docs/core.md).
#
# Next: **02_train_cnn.ipynb** builds a CNN and trains it on MNIST.
