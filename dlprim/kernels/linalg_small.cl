<%include file="common.h"/>
## Small dense linear algebra, one work-group per matrix of a batch (n <= MAX_N): LU with
## partial pivoting and Cholesky in local memory (Golub & Van Loan, "Matrix
## Computations", algorithms 3.4.1 and 4.2.1, right-looking), and the triangular solves
## that use them, one work-item per right-hand column. Matrices are row-major and
## contiguous; pivots are LAPACK's (1-based int32: row k was swapped with row piv[k] - 1).
## T: the storage type; C: the compute type.
#pragma OPENCL FP_CONTRACT OFF

#define AT(m, i, j) (m)[(i) * n + (j)]

// A = P L U of each rows x n matrix: lu gets L (unit diagonal, not stored) and U, piv the
// min(rows, n) row swaps, info the first zero pivot (1-based, 0 if none; LAPACK's getrf),
// and stats (det, sign of det, log |det|: square matrices) per matrix
__kernel void lu_factor(ulong rows, ulong n, __global const ${T} *a, ulong a_offset,
                        __global ${T} *lu, ulong lu_offset, __global int *piv, ulong piv_offset,
                        __global int *info, ulong info_offset,
                        __global ${C} *stats, ulong stats_offset)
{
    __local ${C} m[${MAX_N} * ${MAX_N}];
    __local int pivot_row;
    ulong b = get_group_id(0);
    int lid = get_local_id(0), ls = get_local_size(0);
    ulong steps = min(rows, n);
    a += a_offset + b * rows * n;
    piv += piv_offset + b * steps;
    for (ulong e = lid; e < rows * n; e += ls)
        m[e] = LD_${T}(a, e);
    barrier(CLK_LOCAL_MEM_FENCE);
    int first_zero = 0;
    for (ulong k = 0; k < steps; k++) {
        if (lid == 0) {
            ulong p = k;
            ${C} best = fabs(AT(m, k, k));
            for (ulong i = k + 1; i < rows; i++) {
                ${C} v = fabs(AT(m, i, k));
                if (v > best || (isnan(v) && !isnan(best))) {
                    best = v;
                    p = i;
                }
            }
            pivot_row = (int)p;
            piv[k] = (int)p + 1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        ulong p = pivot_row;
        for (ulong j = lid; j < n && p != k; j += ls) {
            ${C} t = AT(m, k, j);
            AT(m, k, j) = AT(m, p, j);
            AT(m, p, j) = t;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        ${C} d = AT(m, k, k);
        if (d == 0) {
            if (!first_zero)
                first_zero = (int)k + 1;
        } else {
            for (ulong i = k + 1 + lid; i < rows; i += ls) {
                ${C} l = AT(m, i, k) / d;
                AT(m, i, k) = l;
                for (ulong j = k + 1; j < n; j++)
                    AT(m, i, j) -= l * AT(m, k, j);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (ulong e = lid; e < rows * n; e += ls)
        ST_${T}(lu + lu_offset + b * rows * n, e, m[e]);
    if (lid == 0) {
        info[info_offset + b] = first_zero;
        ${C} sign = 1, logabs = 0, det = 1;
        for (ulong k = 0; k < steps; k++) {
            ${C} d = AT(m, k, k);
            det *= d;
            logabs += log(fabs(d));
            if (d < 0)
                sign = -sign;
            if (piv[k] != (int)k + 1) {
                sign = -sign;
                det = -det;
            }
        }
        if (first_zero)
            sign = 0;
        stats += stats_offset + b * 3;
        stats[0] = det;
        stats[1] = sign;
        stats[2] = logabs;
    }
}

// P, L, U with A = P L U from lu_factor's lu and piv of a rows x n matrix (k = min(rows,
// n)): P rows x rows, L rows x k (unit lower), U k x n (upper)
__kernel void lu_unpack(ulong rows, ulong n, __global const ${T} *lu, ulong lu_offset,
                        __global const int *piv, ulong piv_offset, __global ${T} *p,
                        ulong p_offset, __global ${T} *l, ulong l_offset,
                        __global ${T} *u, ulong u_offset)
{
    __local int perm[${MAX_N}];  // perm[i]: the row of A at row i of P^T A
    ulong b = get_group_id(0), steps = min(rows, n);
    int lid = get_local_id(0), ls = get_local_size(0);
    if (lid == 0) {
        for (ulong i = 0; i < rows; i++)
            perm[i] = (int)i;
        for (ulong k = 0; k < steps; k++) {
            int q = piv[piv_offset + b * steps + k] - 1, t = perm[k];
            perm[k] = perm[q];
            perm[q] = t;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    lu += lu_offset + b * rows * n;
    p += p_offset + b * rows * rows;
    l += l_offset + b * rows * steps;
    u += u_offset + b * steps * n;
    for (ulong e = lid; e < rows * rows; e += ls)
        ST_${T}(p, e, (${C})(perm[e % rows] == (int)(e / rows)));
    for (ulong e = lid; e < rows * steps; e += ls) {
        ulong i = e / steps, j = e % steps;
        ST_${T}(l, e, i > j ? (${C})LD_${T}(lu, i * n + j) : (${C})(i == j));
    }
    for (ulong e = lid; e < steps * n; e += ls) {
        ulong i = e / n, j = e % n;
        ST_${T}(u, e, j >= i ? (${C})LD_${T}(lu, i * n + j) : (${C})0);
    }
}

// x = A^-1 b (ADJOINT: A^-T b) for the nrhs columns of b, A = P L U from lu_factor;
// IDENTITY: b is the identity (the inverse). b and x: n x nrhs, row-major.
__kernel void lu_solve(ulong n, ulong nrhs, int adjoint, int identity,
                       __global const ${T} *lu, ulong lu_offset,
                       __global const int *piv, ulong piv_offset,
                       __global const ${T} *b, ulong b_offset, __global ${T} *x, ulong x_offset)
{
    ulong mat = get_group_id(1);
    ulong j = get_global_id(0);
    if (j >= nrhs)
        return;
    lu += lu_offset + mat * n * n;
    piv += piv_offset + mat * n;
    b += b_offset + mat * n * nrhs;
    x += x_offset + mat * n * nrhs;
    // the column lives in x (global) while it is solved; values computed in C
#define X(i) LD_${T}(x, (i) * nrhs + j)
#define SET(i, v) ST_${T}(x, (i) * nrhs + j, (v))
#define LU(i, k) LD_${T}(lu, (i) * n + (k))
    for (ulong i = 0; i < n; i++)
        SET(i, identity ? (${C})(i == j) : (${C})LD_${T}(b, i * nrhs + j));
    if (!adjoint) {
        for (ulong k = 0; k < n; k++) {  // b <- P^T b
            ulong p = piv[k] - 1;
            if (p != k) {
                ${C} t = X(k);
                SET(k, X(p));
                SET(p, t);
            }
        }
        for (ulong i = 1; i < n; i++) {  // L y = b
            ${C} s = X(i);
            for (ulong k = 0; k < i; k++)
                s -= LU(i, k) * X(k);
            SET(i, s);
        }
        for (ulong i = n; i-- > 0;) {  // U x = y
            ${C} s = X(i);
            for (ulong k = i + 1; k < n; k++)
                s -= LU(i, k) * X(k);
            SET(i, s / LU(i, i));
        }
    } else {
        for (ulong i = 0; i < n; i++) {  // U^T y = b
            ${C} s = X(i);
            for (ulong k = 0; k < i; k++)
                s -= LU(k, i) * X(k);
            SET(i, s / LU(i, i));
        }
        for (ulong i = n; i-- > 0;) {  // L^T z = y
            ${C} s = X(i);
            for (ulong k = i + 1; k < n; k++)
                s -= LU(k, i) * X(k);
            SET(i, s);
        }
        for (ulong k = n; k-- > 0;) {  // x = P z
            ulong p = piv[k] - 1;
            if (p != k) {
                ${C} t = X(k);
                SET(k, X(p));
                SET(p, t);
            }
        }
    }
}

// x = A^-1 b for triangular A (UPPER or lower; UNIT: ones on the diagonal, not read)
__kernel void tri_solve(ulong n, ulong nrhs, int upper, int unit,
                        __global const ${T} *a, ulong a_offset,
                        __global const ${T} *b, ulong b_offset, __global ${T} *x, ulong x_offset)
{
    ulong mat = get_group_id(1);
    ulong j = get_global_id(0);
    if (j >= nrhs)
        return;
    a += a_offset + mat * n * n;
    b += b_offset + mat * n * nrhs;
    x += x_offset + mat * n * nrhs;
    for (ulong i = 0; i < n; i++)
        SET(i, (${C})LD_${T}(b, i * nrhs + j));
    for (ulong step = 0; step < n; step++) {
        ulong i = upper ? n - 1 - step : step;
        ${C} s = X(i);
        ulong lo = upper ? i + 1 : 0, hi = upper ? n : i;
        for (ulong k = lo; k < hi; k++)
            s -= LD_${T}(a, i * n + k) * X(k);
        SET(i, unit ? s : s / LD_${T}(a, i * n + i));
    }
}

// A = L L^T from A's lower triangle: l gets L (zeros above the diagonal); info the first
// minor that is not positive definite (1-based, 0 if none; LAPACK's potrf)
__kernel void cholesky(ulong n, __global const ${T} *a, ulong a_offset,
                       __global ${T} *l, ulong l_offset, __global int *info, ulong info_offset)
{
    __local ${C} m[${MAX_N} * ${MAX_N}];
    __local int failed;
    ulong b = get_group_id(0);
    int lid = get_local_id(0), ls = get_local_size(0);
    a += a_offset + b * n * n;
    for (ulong e = lid; e < n * n; e += ls)
        m[e] = LD_${T}(a, e);
    if (lid == 0)
        failed = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (ulong k = 0; k < n; k++) {  // every work-item leaves at the same barrier
        if (lid == 0) {
            ${C} d = AT(m, k, k);
            if (!(d > 0))
                failed = (int)k + 1;
            else
                AT(m, k, k) = sqrt(d);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (failed)
            break;
        ${C} d = AT(m, k, k);
        for (ulong i = k + 1 + lid; i < n; i += ls)
            AT(m, i, k) /= d;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (ulong i = k + 1 + lid; i < n; i += ls)
            for (ulong j = k + 1; j <= i; j++)
                AT(m, i, j) -= AT(m, i, k) * AT(m, j, k);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (ulong e = lid; e < n * n; e += ls)
        ST_${T}(l + l_offset + b * n * n, e, (e % n) <= (e / n) ? m[e] : (${C})0);
    if (lid == 0)
        info[info_offset + b] = failed;
}
