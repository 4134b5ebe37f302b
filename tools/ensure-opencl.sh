#!/usr/bin/env bash
# Says how to get an OpenCL platform when there is none. dlprim's `cpu` extra brings
# PoCL (a CPU driver) from pip, so neither root nor apt is needed:
#     pip install "dlprim[cpu]"          (make demo / make test install it already)
# GPUs need their vendor's driver (NVIDIA, AMD ROCm, Intel compute-runtime).
set -eu
python="${PYTHON:-python3}"
if "$python" -c "import pyopencl as cl; assert cl.get_platforms()" >/dev/null 2>&1; then
    exit 0
fi
echo "No OpenCL platform found. For the CPU: pip install \"dlprim[cpu]\" (PoCL from pip," \
     "no root needed); for a GPU, its vendor's OpenCL driver." >&2
exit 1
