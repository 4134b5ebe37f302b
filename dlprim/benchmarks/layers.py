"""Layers on the pointwise generator and the pooling kernels, forward and backward (FP32).

    dlprim-benchmark layers [--device gpu] [--repeat 50] [name filter ...]

Each layer is set up alone, its planned forward and backward launch lists are timed with
OpenCL profiling events (median over ``--repeat`` runs after a warm-up, all launches of a
pass summed). When PyTorch with CUDA is importable the same layer is timed with CUDA
events: its forward, and its backward alone (``autograd.grad`` over a kept graph).
"""

from .harness import layer_table

BIG, MID = (16, 64, 112, 112), (16, 64, 56, 56)


def cases():
    """(title, JSON type, options, input specs [(shape, dtype)], torch function)."""
    try:
        import torch.nn.functional as F
    except ImportError:
        F = None
    f32 = lambda *shapes: [(s, "float32") for s in shapes]
    return [
        ("BatchNorm train 16x64x112x112", "BatchNorm", {}, f32(BIG),
         lambda x: F.batch_norm(x, None, None, training=True)),
        ("MaxPool 3x3/2 pad 1 16x64x112x112", "Pooling2D", {"kernel": 3, "stride": 2, "pad": 1}, f32(BIG),
         lambda x: F.max_pool2d(x, 3, 2, 1)),
        ("AvgPool 2x2/2 16x64x112x112", "Pooling2D", {"mode": "avg", "kernel": 2, "stride": 2}, f32(BIG),
         lambda x: F.avg_pool2d(x, 2, 2)),
        ("GlobalPooling avg 16x512x7x7", "GlobalPooling", {"mode": "avg"}, f32((16, 512, 7, 7)),
         lambda x: x.mean((2, 3), keepdim=True)),
        ("ReLU 16x64x112x112", "Activation", {"activation": "relu"}, f32(BIG), lambda x: F.relu(x)),
        ("GELU 16x64x112x112", "Activation", {"activation": "gelu"}, f32(BIG), lambda x: F.gelu(x)),
        ("Elementwise sum+relu 16x64x56x56", "Elementwise", {"activation": "relu"}, f32(MID, MID),
         lambda a, b: F.relu(a + b)),
        ("Elementwise prod, b (64,1,1)", "Elementwise", {"operation": "prod"}, f32(MID, (64, 1, 1)),
         lambda a, b: a * b),
        ("Dropout 0.5 16x64x112x112", "Dropout", {}, f32(BIG), lambda x: F.dropout(x, 0.5, True)),
    ]


def main(argv=None):
    """Time every case and print the table."""
    layer_table(__doc__.splitlines()[0], cases, argv)


if __name__ == "__main__":
    main()
