"""The detection operators: torchvision's ``torch.ops.torchvision`` operators on the ocl
device (declarations: see ops/declare.py). They are no ATen operators: the ocl device
registers them by their qualified names once torchvision defines them."""
from .declare import declare

FAMILY = "detection"

_T = "dlprim.torch.ops_detection."

declare("nms", FAMILY, "launcher",
        "torchvision.nms: non-maximum suppression (IoU > threshold, boxes by descending "
        "score; an IoU bitmask, then one work-group walks it); batched_nms through it",
        dtypes=("float",), aten=(), launch=_T + "nms")
declare("roi_align", FAMILY, "launcher",
        "torchvision.roi_align and _roi_align_backward: bilinear RoIAlign (aligned, "
        "sampling_ratio, spatial_scale) and its gradient", dtypes=("float",), aten=(),
        launch=_T + "roi_align")
declare("roi_pool", FAMILY, "launcher",
        "torchvision.roi_pool and _roi_pool_backward: RoIPool (max over bins of rounded "
        "rois, with argmax) and its gradient", dtypes=("float",), aten=(),
        launch=_T + "roi_pool")
