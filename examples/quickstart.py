"""A first look at dlprim: pick a device, move arrays to it and back, run a kernel."""
import numpy as np

import dlprim as dp
from dlprim.kernels import program


def main():
    ctx = dp.Context()  # DLPRIM_DEVICE, else the first GPU, else the first CPU
    print("device:", ctx.name)
    x = dp.Tensor.from_numpy(ctx, np.arange(8, dtype=np.float32))
    print("round trip:", x.numpy())
    prg = program.get(ctx, "fill", dtype="float")
    program.Launch(prg, "fill", (8,), None, [np.uint64(8), x, np.float32(3.0)])(ctx.queue)
    print("after a fill kernel:", x.numpy())


if __name__ == "__main__":
    main()
