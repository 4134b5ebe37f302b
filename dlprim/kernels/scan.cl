<%include file="common.h"/>
% if A == "double":
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
## Inclusive scans along one axis (see dlprim/core/scan.py). A tensor is seen as
## (outer, n, inner) around the axis; a row is one (outer, inner) pair, its n elements
## `inner` apart. One work-group scans one row: each of its WG items folds a contiguous
## chunk of the row, the chunk totals are scanned in local memory, and each item scans its
## chunk again from the total of the chunks before it. WG = 1 (CPU drivers) is a plain loop.
## T: the storage type (the caller converts the input to the output's dtype first);
## A: the type the scan is computed in;
## OP: sum, prod, logsumexp, max, min (max and min also give the index, PyTorch's cummax:
## the last of equal values, a NaN sticks); WG: work-group size (a power of two).
## A is double for float32 where the device has fp64 (PyTorch's CPU accumulates so).
<% INDEXED = OP in ("max", "min") %>
<%def name="load(p, i)">${'LD_%s(%s, %s)' % (T, p, i) if T in ('half', 'bfloat16') else '%s[%s]' % (p, i)}</%def>
<%def name="store(p, i, v)">${'ST_%s(%s, %s, %s)' % (T, p, i, v) if T in ('half', 'bfloat16') else '%s[%s] = (%s)(%s)' % (p, i, T, v)}</%def>

% if OP == "logsumexp":
// log(exp(a) + exp(b)), exact for two equal infinities (PyTorch's _log_add_exp_helper)
inline ${A} log_add_exp(${A} a, ${A} b)
{
    ${A} lo = a < b ? a : b, hi = a < b ? b : a;
    if (a != a || b != b)
        return a + b;
    if (lo != hi || isfinite(lo))
        return hi + log1p(exp(lo - hi));
    return a;
}
% endif

// v (with index i) followed by w (index j): the scan's combining step
inline void combine(${A} *v, long *i, ${A} w, long j)
{
% if OP == "sum":
    *v += w;
% elif OP == "prod":
    *v *= w;
% elif OP == "logsumexp":
    *v = log_add_exp(*v, w);
% else:
    if (w != w || (*v == *v && w ${">=" if OP == "max" else "<="} *v)) {
        *v = w;
        *i = j;
    }
% endif
}

__kernel __attribute__((reqd_work_group_size(${WG}, 1, 1)))
void scan(ulong n, ulong inner,
          __global const ${T} *x, ulong x_offset,
          __global ${T} *y, ulong y_offset,
          __global long *yi, ulong yi_offset)
{
    const ulong row = get_group_id(0);
    const ulong base = (row / inner) * n * inner + row % inner;
    x += x_offset + base;
    y += y_offset + base;
    yi += yi_offset + base;
    const ulong chunk = (n + ${WG} - 1) / ${WG};
    const ulong lid = get_local_id(0);
    const ulong first = lid * chunk;
    const ulong last = min(first + chunk, n);
    ${A} carry = 0;
    long carry_i = 0;
    int has_carry = 0;
% if WG > 1:
    // the chunk's total, then the totals of the chunks before this one (local memory)
    __local ${A} totals[${WG}];
    __local long totals_i[${WG}];
    __local int filled[${WG}];
    {
        ${A} v = 0;
        long vi = (long)first;
        if (first < last)
            v = (${A})${load('x', 'first * inner')};
        for (ulong k = first + 1; k < last; k++)
            combine(&v, &vi, (${A})${load('x', 'k * inner')}, (long)k);
        totals[lid] = v;
        totals_i[lid] = vi;
        filled[lid] = first < last;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Hillis-Steele inclusive scan of the totals: after the step of `d`, item l holds the
    // combination of items l-2d+1 .. l
    for (uint d = 1; d < ${WG}; d <<= 1) {
        ${A} v = totals[lid];
        long vi = totals_i[lid];
        int f = filled[lid];
        if (lid >= d && filled[lid - d]) {
            ${A} w = totals[lid - d];
            long wi = totals_i[lid - d];
            if (f)
                combine(&w, &wi, v, vi);
            v = w;
            vi = wi;
            f = 1;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        totals[lid] = v;
        totals_i[lid] = vi;
        filled[lid] = f;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid > 0 && filled[lid - 1]) {
        carry = totals[lid - 1];
        carry_i = totals_i[lid - 1];
        has_carry = 1;
    }
% endif
    for (ulong k = first; k < last; k++) {
        ${A} w = (${A})${load('x', 'k * inner')};
        long wi = (long)k;
        if (has_carry) {
            combine(&carry, &carry_i, w, wi);
        } else {
            carry = w;
            carry_i = wi;
            has_carry = 1;
        }
        ${store('y', 'k * inner', 'carry')};
% if INDEXED:
        yi[k * inner] = carry_i;
% endif
    }
}
