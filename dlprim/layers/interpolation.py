"""Interpolation: resize (N, C, H, W) to a fixed size or by a scale factor.

``method`` nearest, nearest-exact or bilinear (``align_corners`` only for bilinear), as
PyTorch's ``F.interpolate``. Give either ``out_h`` and ``out_w`` or ``scale_y`` and
``scale_x`` (then OH = int(H * scale_y), OW = int(W * scale_x)). Backward is the
adjoint of the resampling: each input pixel sums the weighted output gradients that
read it.
"""
from ..core.interpolation import METHODS, Interpolate2D
from ..utils import is_int
from .base import Layer, Setup, TensorSpec, register


@register("Interpolation")
class Interpolation(Layer):
    """Resizes (N, C, H, W) maps: nearest or bilinear, to a size or by scale factors."""
    OPTIONS = {"method": None, "out_h": -1, "out_w": -1, "scale_y": -1.0, "scale_x": -1.0,
               "align_corners": False}
    BACKWARD_READS_INPUTS = False

    def __init__(self, ctx, name=None, **options):
        super().__init__(ctx, name, **options)
        o = self.options
        if o["method"] is None:
            self.fail("option 'method' is required: one of %s" % ", ".join(METHODS))
        if o["method"] not in METHODS:
            self.fail("option 'method' must be one of %s, got %r" % (", ".join(METHODS), o["method"]))
        for key in ("out_h", "out_w"):
            if not is_int(o[key]):
                self.fail("option %r must be an integer, got %r" % (key, o[key]))
        for key in ("scale_y", "scale_x"):
            if not isinstance(o[key], (int, float)) or isinstance(o[key], bool):
                self.fail("option %r must be a number, got %r" % (key, o[key]))
        sizes = (o["out_h"] > 0, o["out_w"] > 0)
        scales = (o["scale_y"] > 0, o["scale_x"] > 0)
        if sizes[0] != sizes[1]:
            self.fail("options 'out_h' and 'out_w' must be given together, got %r, %r"
                      % (o["out_h"], o["out_w"]))
        if scales[0] != scales[1]:
            self.fail("options 'scale_y' and 'scale_x' must be given together, got %r, %r"
                      % (o["scale_y"], o["scale_x"]))
        if sizes[0] == scales[0]:
            self.fail("give either options 'out_h'/'out_w' or 'scale_y'/'scale_x' (exactly one pair)")
        if not isinstance(o["align_corners"], bool):
            self.fail("option 'align_corners' must be true or false, got %r" % (o["align_corners"],))
        if o["align_corners"] and o["method"] != "bilinear":
            self.fail("option 'align_corners' applies only to method 'bilinear'")

    def out_size(self, h, w):
        """The output (height, width) for an input of ``h`` x ``w``."""
        o = self.options
        if o["out_h"] > 0:
            return o["out_h"], o["out_w"]
        return int(h * o["scale_y"]), int(w * o["scale_x"])

    def build(self, in_specs):
        spec = self.single_input(in_specs, "(N, C, H, W)", ndims=(4,))
        oh, ow = self.out_size(spec.shape[2], spec.shape[3])
        if oh < 1 or ow < 1:
            self.fail("output size %dx%d from input %s is empty; use a larger scale"
                      % (oh, ow, spec.shape))
        o = self.options
        scale = (o["scale_y"], o["scale_x"]) if o["scale_y"] > 0 else (-1.0, -1.0)
        self.op = Interpolate2D(self.ctx, spec.shape, (oh, ow), o["method"], scale,
                                o["align_corners"])
        return Setup([TensorSpec(self.op.out_shape, spec.dtype)])

    def forward(self, x, y, params, ws, saved):
        return self.op.launches(x[0], y[0])

    def backward(self, x, dx, y, dy, params, dparams, ws, saved, accumulate):
        if dx[0] is None:
            return []
        return self.op.backward_launches(dy[0], dx[0], beta=float(accumulate[0]))
