<%include file="common.h"/>
// Index writes that combine with what is there (core/indexing.py): dst[o, idx, k] op=
// src[o, i, k] over (outer, n, inner) / (outer, m, inner) as in indexing.cl, for
// index_add, scatter_add, scatter_reduce, index_put(accumulate=True). Repeated indices
// meet in an atomic compare-and-swap loop, so every contribution lands (in no fixed
// order, as with atomics anywhere). T: the type combined in (float, double, int, long;
// narrower types are combined in a wider one by the caller); I: the index type.
% if T in ("long", "double"):
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
<% U, CAS = "ulong", "atom_cmpxchg" %>
% else:
<% U, CAS = "uint", "atomic_cmpxchg" %>
% endif
<% FLOAT = T in ("float", "double") %>

#define OP_ADD 0
#define OP_MUL 1
#define OP_MAX 2
#define OP_MIN 3

inline ${T} combined(uint op, ${T} a, ${T} v)
{
    switch (op) {
    case OP_ADD: return a + v;
    case OP_MUL: return a * v;
% if FLOAT:
    // a NaN on either side wins, as in PyTorch's scatter_reduce
    case OP_MAX: return (isnan(v) || v > a) ? v : a;
    default: return (isnan(v) || v < a) ? v : a;
% else:
    case OP_MAX: return v > a ? v : a;
    default: return v < a ? v : a;
% endif
    }
}

// Each try starts from the value the last compare-and-swap saw, the first from a guess of
// 0: a plain read of *p beside other work-items' atomics would be a data race.
inline void atomic_combine(volatile __global ${T} *p, ${T} v, uint op)
{
    union { ${U} u; ${T} t; } old, next;
    ${U} seen = 0;
    do {
        old.u = seen;
        next.t = combined(op, old.t, v);
        seen = ${CAS}((volatile __global ${U} *)p, old.u, next.u);
    } while (seen != old.u);
}

// dst[o, idx, k] op= src[o, i, k] (src_step 1) or src[0] (src_step 0); the index skip
// (embedding's padding row) combines nothing; a bad index is reported as in indexing.cl
__kernel void put_reduce(ulong total, ulong n, ulong m, ulong inner, uint per_element,
                         uint wrap, ulong src_step, uint op, long skip,
                         __global const ${T} *src, ulong src_offset,
                         __global const ${I} *idx, ulong idx_offset,
                         __global ${T} *dst, ulong dst_offset,
                         __global long *err, ulong err_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    long j = idx[idx_offset + (per_element ? g : (g / inner) % m)];
    long w = (j < 0 && wrap) ? j + (long)n : j;
    if (w < 0 || w >= (long)n) {
        err[err_offset + 1] = j;
        err[err_offset] = 1;
        return;
    }
    if (w == skip)
        return;
    ulong k = g % inner, o = g / inner / m;
    atomic_combine(dst + dst_offset + (o * n + w) * inner + k, src[src_offset + g * src_step], op);
}
