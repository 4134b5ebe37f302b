"""Errors of the ONNX importer and the check that the onnx package is installed."""
from ..errors import Error

__all__ = ["OnnxImportError", "UnsupportedModelError", "require_onnx"]


class OnnxImportError(Error, ValueError):
    """A model that cannot be read or converted; the message names the node at fault."""


class UnsupportedModelError(OnnxImportError):
    """The model uses operators (or operator variants) dlprim cannot run.

    ``problems`` lists ``(op_type, node_name, reason)`` for every one of them.
    """

    def __init__(self, problems):
        self.problems = list(problems)
        lines = ["  %s '%s'%s" % (t, n, ": " + r if r else "") for t, n, r in self.problems]
        types = sorted({t for t, _, _ in self.problems})
        super().__init__("the model has %d unsupported operator%s (%s):\n%s" % (
            len(self.problems), "" if len(self.problems) == 1 else "s", ", ".join(types),
            "\n".join(lines)))


def require_onnx():
    """The onnx module, or an ImportError naming the extra to install."""
    try:
        import onnx
    except ImportError:
        raise ImportError("ONNX import and export need the onnx package: "
                          "pip install 'dlprim[onnx]' (or pip install onnx)") from None
    return onnx
