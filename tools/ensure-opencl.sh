#!/usr/bin/env bash
# Makes sure an OpenCL platform exists: if the ICD loader has no vendor file, install
# PoCL (the CPU driver) when we may, else say what to install.
set -eu
vendors="${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}"
if ls "$vendors"/*.icd >/dev/null 2>&1; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "No OpenCL driver found; installing PoCL (pocl-opencl-icd) for the CPU." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq pocl-opencl-icd >/dev/null
elif command -v apt-get >/dev/null 2>&1; then
    echo "No OpenCL driver found; installing PoCL with sudo." >&2
    sudo apt-get update -qq && sudo apt-get install -y -qq pocl-opencl-icd >/dev/null
else
    echo "No OpenCL driver found. Install one: PoCL for CPUs (pocl-opencl-icd, or 'pip install pocl-binary-distribution'), or your GPU vendor's driver." >&2
    exit 1
fi
