"""The creation operators (declarations: see ops/declare.py). Each runs on the ocl device
through its ``launch`` in dlprim/torch/ops_creation.py (value sequences on
core/sequence.py's kernel); the functional factories reach the device as the ``out=``
overloads declared here."""
from .declare import declare

FAMILY = "creation"
_AT = "dlprim.torch.ops_creation."


def _op(name, doc, launch, dtypes=("float", "int"), aten=None, onnx=None):
    return declare(name, FAMILY, "launcher", doc, dtypes=dtypes, aten=aten or (name,),
                   onnx=onnx, launch=_AT + launch)


_op("arange", "start, start + step, ... below end (integers exact, floats stepped in double)",
    "_arange_out", onnx="Range")
_op("linspace", "steps values evenly spaced from start to end, both ends exact",
    "_linspace_out")
_op("logspace", "base ** linspace(start, end, steps)", "_logspace_out")
_op("eye", "an n x m matrix with ones on the diagonal", "_eye_out",
    dtypes=("float", "int", "bool"), onnx="EyeLike")
_op("tril_indices", "the (row, column) pairs of a lower triangle, row-major",
    "_tril_indices", dtypes=("int",))
_op("triu_indices", "the (row, column) pairs of an upper triangle, row-major",
    "_triu_indices", dtypes=("int",))
