"""The linalg operators (declarations: see ops/declare.py): matrix products on Gemm,
matrix-vector products and dot as reductions, and small dense factorizations (one
work-group per matrix of at most 64 x 64)."""
from .declare import declare

FAMILY = "linalg"
_T = "dlprim.torch.ops_linalg."
_FLOAT = ("float",)

declare("mm", FAMILY, "launcher", "matrix product (16-bit floats on their own Gemm)",
        dtypes=_FLOAT, aten=("mm",), onnx="MatMul", launch=_T + "_mm")
declare("bmm", FAMILY, "launcher", "batched matrix product", dtypes=_FLOAT, aten=("bmm",),
        launch=_T + "_bmm")
declare("addmm", FAMILY, "launcher", "beta * c + alpha * a @ b", dtypes=_FLOAT,
        aten=("addmm",), onnx="Gemm", launch=_T + "_addmm")
declare("grouped_mm", FAMILY, "launcher",
        "matrix products of groups of rows, columns or of the inner dim, cut by offsets "
        "(a mixture of experts' layers)", dtypes=_FLOAT, aten=("_grouped_mm",),
        launch=_T + "_grouped_mm")
declare("baddbmm", FAMILY, "launcher", "beta * c + alpha * a @ b, batched", dtypes=_FLOAT,
        aten=("baddbmm",), launch=_T + "_baddbmm")
declare("addbmm", FAMILY, "launcher", "beta * c + alpha * the sum of a batch of products",
        dtypes=_FLOAT, aten=("addbmm",), launch=_T + "_addbmm")
declare("dot", FAMILY, "launcher", "inner product of two vectors", dtypes=("float", "int"),
        aten=("dot", "vdot"), launch=_T + "_dot")
declare("mv", FAMILY, "launcher", "matrix-vector product", dtypes=("float", "int"),
        aten=("mv",), launch=_T + "_mv")
declare("addmv", FAMILY, "launcher", "beta * c + alpha * m @ v", dtypes=("float", "int"),
        aten=("addmv",), launch=_T + "_addmv")
declare("addr", FAMILY, "launcher", "beta * c + alpha * the outer product of two vectors",
        dtypes=("float", "int", "bool"), aten=("addr",), launch=_T + "_addr")
declare("trace", FAMILY, "launcher", "sum of the main diagonal", dtypes=("float", "int"),
        aten=("trace",), launch=_T + "_trace")
declare("linalg_cross", FAMILY, "launcher", "cross product along a dimension of length 3",
        dtypes=("float", "int"), aten=("linalg_cross",), launch=_T + "_cross")
declare("linalg_lu_factor", FAMILY, "launcher", "LU with partial pivoting (m, n <= 64)",
        dtypes=_FLOAT, aten=("linalg_lu_factor_ex",), launch=_T + "_lu_factor_ex")
declare("linalg_lu", FAMILY, "launcher", "P, L, U of an LU factorization (n <= 64)",
        dtypes=_FLOAT, aten=("linalg_lu", "lu_unpack"), launch=_T + "_linalg_lu")
declare("linalg_lu_solve", FAMILY, "launcher", "solve from an LU factorization",
        dtypes=_FLOAT, aten=("linalg_lu_solve",), launch=_T + "_lu_solve")
declare("linalg_solve", FAMILY, "launcher", "solve A X = B (n <= 64)", dtypes=_FLOAT,
        aten=("_linalg_solve_ex",), launch=_T + "_solve_ex")
declare("linalg_inv", FAMILY, "launcher", "matrix inverse (n <= 64)", dtypes=_FLOAT,
        aten=("linalg_inv_ex",), launch=_T + "_inv_ex")
declare("linalg_det", FAMILY, "launcher", "determinant (n <= 64)", dtypes=_FLOAT,
        aten=("_linalg_det",), onnx="Det", launch=_T + "_det")
declare("linalg_slogdet", FAMILY, "launcher", "sign and log of |determinant| (n <= 64)",
        dtypes=_FLOAT, aten=("_linalg_slogdet",), launch=_T + "_slogdet")
declare("linalg_cholesky", FAMILY, "launcher", "Cholesky factor (n <= 64)", dtypes=_FLOAT,
        aten=("linalg_cholesky_ex",), launch=_T + "_cholesky_ex")
declare("linalg_solve_triangular", FAMILY, "launcher", "solve with a triangular matrix",
        dtypes=_FLOAT, aten=("linalg_solve_triangular",), launch=_T + "_solve_triangular")
declare("linalg_check_errors", FAMILY, "launcher", "raise LinAlgError from LAPACK info codes",
        dtypes=("int",), aten=("_linalg_check_errors",), launch=_T + "_linalg_check_errors")
declare("cholesky_solve", FAMILY, "launcher", "solve from a Cholesky factor",
        dtypes=_FLOAT, aten=("cholesky_solve",), launch=_T + "_cholesky_solve")
declare("cholesky_inverse", FAMILY, "launcher", "inverse from a Cholesky factor",
        dtypes=_FLOAT, aten=("cholesky_inverse",), launch=_T + "_cholesky_inverse")
