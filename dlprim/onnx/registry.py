"""The table of ONNX operator converters, filled by the ``ops_*`` modules.

A converter is ``fn(b, node)`` with ``b`` the importer (``dlprim.onnx.importer``): it
reads inputs through ``b.const``/``b.value``/``b.shape`` and appends dlprim operators with
``b.add``. It raises ``Unsupported(reason)`` for a variant dlprim cannot run (a mode, an
attribute value); the importer then lists the node among the unsupported ones.
"""

__all__ = ["CONVERTERS", "Unsupported", "converts"]

CONVERTERS = {}


class Unsupported(Exception):
    """This node's variant has no dlprim equivalent; the message says why."""


def converts(*op_types):
    def wrap(fn):
        for t in op_types:
            if t in CONVERTERS:
                raise ValueError("ONNX operator %r has two converters" % t)
            CONVERTERS[t] = fn
        return fn
    return wrap
