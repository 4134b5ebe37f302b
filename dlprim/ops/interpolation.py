"""The interpolation operators (declarations: see ops/declare.py)."""
from .declare import declare

FAMILY = "interpolation"

_T = "dlprim.torch.ops_conv."

declare("upsample_nearest", FAMILY, "launcher",
        "1-D to 3-D nearest resampling (F.interpolate mode 'nearest') and its gradient",
        dtypes=("float", "int"),
        aten=("upsample_nearest1d", "upsample_nearest1d_backward", "upsample_nearest2d",
              "upsample_nearest2d_backward", "upsample_nearest3d",
              "upsample_nearest3d_backward"), onnx="Resize", launch=_T + "_resample")
declare("upsample_nearest_exact", FAMILY, "launcher",
        "1-D to 3-D nearest-exact resampling (pixel centres) and its gradient",
        dtypes=("float", "int"),
        aten=("_upsample_nearest_exact1d", "_upsample_nearest_exact1d_backward",
              "_upsample_nearest_exact2d", "_upsample_nearest_exact2d_backward",
              "_upsample_nearest_exact3d", "_upsample_nearest_exact3d_backward"),
        launch=_T + "_resample")
declare("upsample_linear", FAMILY, "launcher",
        "linear, bilinear and trilinear resampling (align_corners, scale factors) and its "
        "gradient", dtypes=("float",),
        aten=("upsample_linear1d", "upsample_linear1d_backward", "upsample_bilinear2d",
              "upsample_bilinear2d_backward", "upsample_trilinear3d",
              "upsample_trilinear3d_backward"), launch=_T + "_resample")
declare("upsample_bicubic", FAMILY, "launcher",
        "bicubic resampling (A = -0.75, edges clamped) and its gradient", dtypes=("float",),
        aten=("upsample_bicubic2d", "upsample_bicubic2d_backward"), launch=_T + "_resample")
declare("upsample_antialias", FAMILY, "launcher",
        "antialiased bilinear and bicubic resampling (interpolate's antialias=True: the "
        "filter stretched when shrinking) and its gradient", dtypes=("float",),
        aten=("_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa_backward",
              "_upsample_bicubic2d_aa", "_upsample_bicubic2d_aa_backward"),
        launch=_T + "_resample")
declare("grid_sampler", FAMILY, "launcher",
        "F.grid_sample of 4-D and 5-D inputs (bilinear/trilinear, nearest; zeros, border, "
        "reflection padding) and its gradient", dtypes=("float",),
        aten=("grid_sampler_2d", "grid_sampler_2d_backward", "grid_sampler_3d",
              "grid_sampler_3d_backward"), onnx="GridSample", launch=_T + "_grid_sampler")
declare("affine_grid_generator", FAMILY, "launcher",
        "F.affine_grid: the sampling grid of 2-D or 3-D affine matrices (one batched GEMM "
        "with the output's base coordinates)", dtypes=("float",),
        aten=("affine_grid_generator",), launch=_T + "_affine_grid_generator")
