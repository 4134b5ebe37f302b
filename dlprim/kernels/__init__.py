"""OpenCL kernel sources (Mako templates) and the program cache that builds them."""
from . import program  # noqa: F401
