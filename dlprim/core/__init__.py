"""Launchers: kernels prepared for given shapes, usable without a Net.

Each operation is a class configured once with what is fixed (shapes, dtypes, options;
kernels are built here) whose ``launches(...)`` returns prepared ``program.Launch``
objects over given tensors, and whose ``__call__`` enqueues them at once.
"""
