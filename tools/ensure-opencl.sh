#!/usr/bin/env bash
# Checks that dlprim finds an OpenCL device that compiles, and says how to get one when it
# does not. dlprim's `cpu` extra brings the CPU's drivers from pip, so neither root nor apt
# is needed:
#     pip install "dlprim[cpu]"    (PoCL, and Intel's CPU runtime, which dlprim registers
#                                   itself; make demo / make test install it already)
# GPUs need their vendor's driver (NVIDIA, AMD ROCm, Intel compute-runtime).
# With ENSURE_OPENCL_APT=1, as root on a Debian-like system, it also installs Debian's
# PoCL (pocl-opencl-icd), a newer LLVM than pip's PoCL: one more way, never the only one.
set -eu
python="${PYTHON:-python3}"
check() { "$python" -c "import dlprim; print(dlprim.Context())"; }
if check >/dev/null 2>&1; then
    exit 0
fi
if [ "${ENSURE_OPENCL_APT:-0}" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "ensure-opencl: installing Debian's PoCL (pocl-opencl-icd)" >&2
    apt-get update -q >&2 && apt-get install -y -q pocl-opencl-icd >&2
    check >/dev/null 2>&1 && exit 0
fi
echo "ensure-opencl: dlprim finds no OpenCL device that compiles:" >&2
check 2>&1 | grep -v "^Traceback\|^  " >&2 || true
echo "For the CPU: pip install \"dlprim[cpu]\" (drivers from pip, no root); with root on" \
     "Debian/Ubuntu also: ENSURE_OPENCL_APT=1 bash tools/ensure-opencl.sh; for a GPU, its" \
     "vendor's OpenCL driver." >&2
exit 1
