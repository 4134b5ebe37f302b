"""ONNXModel: DLPrimitives' Python spelling of ONNX import, over dlprim's importer.

    model = dp.ONNXModel()
    model.load("resnet.onnx")        # the inputs and their dynamic axes are known now
    model.set_batch(8)               # or model.set_dynamic_axis("data", 0, 8)
    model.build()                    # the dlprim graph and weights
    net = dp.Net(ctx); net.mode = dp.PREDICT; net.load_model(model)

A dimension the model leaves symbolic reads 0 in ``input_shapes`` and is listed in
``dynamic_axes`` (by input name) until it is given a size, as in DLPrimitives. The
importer itself is ``dlprim.onnx.to_netconfig``'s; it loads only when a model does.
"""
from typing import Any, Dict, List

from ..utils import is_int
from .errors import OnnxImportError

__all__ = ["ONNXModel"]


class ONNXModel:
    """An ONNX model on its way to a Net: ``load``, fix the dynamic axes, ``build``, then
    ``net.load_model(model)`` (or read ``network`` and ``parameters``)."""

    def __init__(self) -> None:
        self._source = None
        self._info = None     # the model as read, until a build converts it
        self._dtypes = {}     # input name -> numpy dtype
        self._shapes = {}     # input name -> sizes, 0 where a dynamic axis has none yet
        self._dynamic = {}    # input name -> the axes the model leaves symbolic
        self._built = None    # (NetConfig, {parameter name: array}) once built

    def load(self, path: Any) -> None:
        """Read the model (a file path, bytes or an ``onnx.ModelProto``); once per object."""
        if self._source is not None:
            raise OnnxImportError("ONNXModel.load: a model is loaded already; make a new "
                                  "ONNXModel for another one")
        from .model_reader import read_model
        info = read_model(path)
        shapes, dtypes, dynamic = {}, {}, {}
        for name, shape, dtype in info.inputs:
            if shape is None:
                raise OnnxImportError("model input '%s' has no shape" % name)
            shapes[name] = [0 if d is None else int(d) for d in shape]
            dtypes[name] = dtype
            axes = [i for i, d in enumerate(shape) if d is None]
            if axes:
                dynamic[name] = axes
        self._shapes, self._dtypes, self._dynamic = shapes, dtypes, dynamic
        self._source, self._info = path, info

    @property
    def input_shapes(self) -> Dict[str, List[int]]:
        """{input name: sizes}, 0 for a dynamic axis not given a size yet."""
        self._loaded("input_shapes")
        return {name: list(shape) for name, shape in self._shapes.items()}

    @property
    def dynamic_axes(self) -> Dict[str, List[int]]:
        """{input name: the axes the model leaves symbolic}, for inputs that have any."""
        self._loaded("dynamic_axes")
        return {name: list(axes) for name, axes in self._dynamic.items()}

    def set_dynamic_axis(self, name: str, axis: int, limit: int) -> None:
        """Give dynamic axis ``axis`` of input ``name`` the size ``limit``; a built network
        is dropped (call ``build`` again)."""
        self._loaded("set_dynamic_axis")
        if axis not in self._dynamic.get(name, ()):
            raise OnnxImportError(
                "set_dynamic_axis: axis %r of input '%s' is not dynamic; the dynamic axes are %s"
                % (axis, name, self._dynamic or "none"))
        if not is_int(limit) or limit < 1:
            raise OnnxImportError("set_dynamic_axis('%s', %d): the size must be an integer "
                                  ">= 1, got %r" % (name, axis, limit))
        self._shapes[name][axis] = int(limit)
        self._built = None

    def set_batch(self, size: int) -> None:
        """Size the first axis of every input whose first dynamic axis is axis 0."""
        self._loaded("set_batch")
        for name, axes in self._dynamic.items():
            if axes[0] == 0:
                self.set_dynamic_axis(name, 0, size)

    def build(self) -> None:
        """Convert the model into a dlprim graph and weights (once every dynamic axis has
        a size); an operator dlprim cannot run is an ``UnsupportedModelError``."""
        self._loaded("build")
        if self._built is not None:
            return
        unsized = ["'%s' axes %s" % (name, [a for a in axes if self._shapes[name][a] == 0])
                   for name, axes in self._dynamic.items()
                   if any(self._shapes[name][a] == 0 for a in axes)]
        if unsized:
            raise OnnxImportError("build: dynamic axes without a size: input %s; call "
                                  "set_batch(n) or set_dynamic_axis(name, axis, size) first"
                                  % ", input ".join(unsized))
        from .importer import Importer
        from .model_reader import ModelInfo, read_model
        # the importer may rewrite the nodes it is given: a later build reads the model anew
        info, self._info = self._info or read_model(self._source), None
        inputs = [(name, list(self._shapes[name]), self._dtypes[name]) for name, _, _ in info.inputs]
        fixed = ModelInfo(info.opsets, info.initializers, inputs, info.outputs, info.nodes)
        self._built = Importer(fixed).run()

    @property
    def network(self) -> str:
        """The built network as DLPrimitives JSON text."""
        return self._ready("network")[0].to_str()

    @property
    def parameters(self) -> Dict[str, Any]:
        """{parameter name: numpy array} of the built network."""
        return dict(self._ready("parameters")[1])

    def _loaded(self, what):
        if self._source is None:
            raise OnnxImportError("ONNXModel.%s: no model loaded; call load(path) first" % what)

    def _ready(self, what):
        self._loaded(what)
        if self._built is None:
            raise OnnxImportError("ONNXModel.%s: the model is not built; call build() first"
                                  % what)
        return self._built

    def __repr__(self):
        state = ("empty" if self._source is None else "built" if self._built is not None
                 else "loaded")
        return "ONNXModel(%s, inputs %s)" % (state, self.input_shapes if self._source else {})
