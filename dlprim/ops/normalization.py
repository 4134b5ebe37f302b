"""The normalization operators (declarations: see ops/declare.py)."""
from .declare import declare  # noqa: F401

FAMILY = "normalization"
