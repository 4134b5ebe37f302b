"""Softmax, cross-entropy, interpolation, concat/slice/transpose layers, forward and backward (FP32).

    dlprim-benchmark softmax_loss_interp [--device gpu] [--repeat 50] [name filter ...]

Each layer is set up alone and its forward and backward launch lists are timed with
OpenCL profiling events (median over ``--repeat`` runs after a warm-up, all launches of
a pass summed). With PyTorch and CUDA the same operation is timed with CUDA events.
Labels of loss layers are int32 class indices.
"""

from .harness import layer_table

MID = (16, 64, 56, 56)


def cases():
    """(title, JSON type, options, input specs [(shape, dtype)], torch function)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = F = None
    cuda = torch is not None and torch.cuda.is_available()
    labels = torch.randint(0, 1000, (1024,), device="cuda") if cuda else None
    f32 = lambda *shapes: [(s, "float32") for s in shapes]
    return [
        ("Softmax 1024x1000", "Softmax", {}, f32((1024, 1000)), lambda x: F.softmax(x, 1)),
        ("Softmax 256x32000", "Softmax", {}, f32((256, 32000)), lambda x: F.softmax(x, 1)),
        ("Softmax log 16x21x128x128", "Softmax", {"log": True}, f32((16, 21, 128, 128)),
         lambda x: F.log_softmax(x, 1)),
        ("SoftmaxWithLoss 1024x1000", "SoftmaxWithLoss", {}, [((1024, 1000), "float32"), ((1024,), "int32")],
         lambda x: F.cross_entropy(x, labels)),
        ("Interpolation nearest x2 16x64x56x56", "Interpolation",
         {"method": "nearest", "scale_y": 2.0, "scale_x": 2.0}, f32(MID),
         lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest")),
        ("Interpolation bilinear x2 16x64x56x56", "Interpolation",
         {"method": "bilinear", "scale_y": 2.0, "scale_x": 2.0}, f32(MID),
         lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear")),
        ("Concat 2x 16x64x56x56", "Concat", {}, f32(MID, MID), lambda a, b: torch.cat([a, b], 1)),
        ("Slice channels 16:48 of 16x64x56x56", "Slice", {"begin": 16, "end": 48}, f32(MID),
         lambda x: x[:, 16:48].contiguous()),
        ("Transpose NCHW->NHWC 16x64x56x56", "Transpose", {"dims": [0, 2, 3, 1]}, f32(MID),
         lambda x: x.permute(0, 2, 3, 1).contiguous()),
        ("Reduction mean over HW 16x64x56x56", "Reduction", {"method": "mean", "dims": [2, 3]},
         f32(MID), lambda x: x.mean((2, 3), keepdim=True)),
    ]



def main(argv=None):
    """Time every case and print the table."""
    layer_table(__doc__.splitlines()[0], cases, argv)


if __name__ == "__main__":
    main()
