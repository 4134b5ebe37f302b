"""The interpolation operators (declarations: see ops/declare.py)."""
from .declare import declare  # noqa: F401

FAMILY = "interpolation"
