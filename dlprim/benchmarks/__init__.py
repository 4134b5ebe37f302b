"""Kernel micro-benchmarks beside PyTorch CUDA where it is importable: GEMM, convolution,
pointwise/copy/random, and layers timed alone. Each module is a program,
``dlprim-benchmark <name>`` or ``python -m dlprim.benchmarks.<name>``; ``harness`` holds
their shared timing code. Figures and commands are in docs/benchmarks.md.
"""
