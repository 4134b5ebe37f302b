<%include file="common.h"/>
## Sorting along one axis (see dlprim/core/sort.py): a bitonic network (Batcher, AFIPS
## 1968) over each row padded to a power of two P, keys with their original index. The
## index breaks ties, which makes every key unique and the sort stable; a NaN sorts as the
## largest value (last ascending, first descending: PyTorch's order); padding (index >= n)
## sorts after everything. T: storage type of the values; K: the type keys compare in;
## LOCAL_N: the most elements a work-group sorts in local memory.
<%def name="load(p, i)">${'LD_%s(%s, %s)' % (T, p, i) if T in ('half', 'bfloat16') else '%s[%s]' % (p, i)}</%def>
<%def name="store(p, i, v)">${'ST_%s(%s, %s, %s)' % (T, p, i, v) if T in ('half', 'bfloat16') else '%s[%s] = (%s)(%s)' % (p, i, T, v)}</%def>

// whether (a, ia) goes before (b, ib)
inline int before(${K} a, int ia, ${K} b, int ib, int n, int desc)
{
    if (ib >= n)
        return ia < n || ia < ib;
    if (ia >= n)
        return 0;
    const int a_nan = a != a, b_nan = b != b;
    if (a_nan || b_nan)
        return (a_nan && b_nan) ? ia < ib : (a_nan == desc);
    if (a == b)
        return ia < ib;
    return desc ? a > b : a < b;
}

// one compare-and-swap of the network: pair p of stage (k, j) in arrays of one row
#define PAIR(p, j) (2 * (p) - ((p) & ((j) - 1)))

// x (outer, n, inner) -> the work rows (rows, P) of keys and indices, padded
__kernel void sort_fill(ulong n, ulong inner, ulong P,
                        __global const ${T} *x, ulong x_offset,
                        __global ${K} *keys, ulong keys_offset,
                        __global int *idx, ulong idx_offset)
{
    const ulong g = get_global_id(0), row = get_global_id(1);
    if (g >= P)
        return;
    const ulong at = row * P + g;
    if (g < n)
        keys[keys_offset + at] = (${K})${load('x', 'x_offset + (row / inner) * n * inner + row % inner + g * inner')};
    else
        keys[keys_offset + at] = 0;
    idx[idx_offset + at] = (int)g;
}

// the first n of each work row -> y (values) and yi (int64 indices) of (outer, n, inner)
__kernel void sort_unfill(ulong n, ulong inner, ulong P,
                          __global const ${K} *keys, ulong keys_offset,
                          __global const int *idx, ulong idx_offset,
                          __global ${T} *y, ulong y_offset,
                          __global long *yi, ulong yi_offset)
{
    const ulong g = get_global_id(0), row = get_global_id(1);
    if (g >= n)
        return;
    const ulong at = row * P + g;
    const ulong to = (row / inner) * n * inner + row % inner + g * inner;
    ${store('y', 'y_offset + to', 'keys[keys_offset + at]')};
    yi[yi_offset + to] = idx[idx_offset + at];
}

// stages k = k_lo .. k_hi (powers of two), each with steps j < B, on blocks of
// B = min(P, LOCAL_N or less) elements in local memory: the whole sort of a row that fits
// (k_lo = 2, k_hi = P), else the first stages (k_hi = B) and the tail of a later one
__kernel void sort_block(ulong P, int n, int desc, uint B, uint k_lo, uint k_hi,
                         __global ${K} *keys, ulong keys_offset,
                         __global int *idx, ulong idx_offset)
{
    __local ${K} lk[${LOCAL_N}];
    __local int li[${LOCAL_N}];
    const ulong start = get_group_id(0) * (ulong)B;  // blocks of all rows, one after another
    const uint first = (uint)(start % P);            // the block's place in its row
    const uint lid = get_local_id(0), items = get_local_size(0);
    keys += keys_offset + start;
    idx += idx_offset + start;
    for (uint e = lid; e < B; e += items) {
        lk[e] = keys[e];
        li[e] = idx[e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = k_lo; k <= k_hi; k <<= 1) {
        for (uint j = min(k >> 1, B >> 1); j > 0; j >>= 1) {
            for (uint p = lid; p < B / 2; p += items) {
                const uint i = PAIR(p, j), l = i + j;
                const int up = ((first + i) & k) == 0;
                const ${K} a = lk[i], b = lk[l];
                const int ia = li[i], ib = li[l];
                if (up ? before(b, ib, a, ia, n, desc) : before(a, ia, b, ib, n, desc)) {
                    lk[i] = b; lk[l] = a;
                    li[i] = ib; li[l] = ia;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    for (uint e = lid; e < B; e += items) {
        keys[e] = lk[e];
        idx[e] = li[e];
    }
}

// one step (k, j) of the network in global memory (j >= LOCAL_N): one pair per item
__kernel void sort_step(ulong P, int n, int desc, uint k, uint j, ulong pairs,
                        __global ${K} *keys, ulong keys_offset,
                        __global int *idx, ulong idx_offset)
{
    const ulong g = get_global_id(0);
    if (g >= pairs)
        return;
    const ulong row = g / (P / 2), p = g % (P / 2);
    const ulong i = 2 * p - (p & (j - 1)), l = i + j;
    const int up = (i & k) == 0;
    keys += keys_offset + row * P;
    idx += idx_offset + row * P;
    const ${K} a = keys[i], b = keys[l];
    const int ia = idx[i], ib = idx[l];
    if (up ? before(b, ib, a, ia, n, desc) : before(a, ia, b, ib, n, desc)) {
        keys[i] = b; keys[l] = a;
        idx[i] = ib; idx[l] = ia;
    }
}

// unique, after a sort (or as it is, for unique_consecutive): v the values in order,
// perm where each came from, cum the inclusive count of group starts (a start: the first
// element, or one that differs from the one before it). Each element's group is
// cum[i] - 1: it is the inverse of the element it came from; a group's first element
// gives the group's value and where it starts.
__kernel void unique_scatter(ulong N,
                             __global const ${T} *v, ulong v_offset,
                             __global const long *perm, ulong perm_offset,
                             __global const long *cum, ulong cum_offset,
                             __global ${T} *out, ulong out_offset,
                             __global long *inverse, ulong inverse_offset,
                             __global long *starts, ulong starts_offset)
{
    const ulong i = get_global_id(0);
    if (i >= N)
        return;
    const long g = cum[cum_offset + i] - 1;
    inverse[inverse_offset + perm[perm_offset + i]] = g;
    if (i == 0 || cum[cum_offset + i - 1] != cum[cum_offset + i]) {
        ${store('out', 'out_offset + g', capture(load, 'v', 'v_offset + i'))};
        starts[starts_offset + g] = (long)i;
    }
}

// counts[g] = the start of group g + 1 (N after the last) - the start of group g
__kernel void unique_counts(ulong U, ulong N,
                            __global const long *starts, ulong starts_offset,
                            __global long *counts, ulong counts_offset)
{
    const ulong g = get_global_id(0);
    if (g >= U)
        return;
    const long next = g + 1 < U ? starts[starts_offset + g + 1] : (long)N;
    counts[counts_offset + g] = next - starts[starts_offset + g];
}

// searchsorted: for each value, how many of its row of the sorted sequence go before it
// (left: the elements < v; right: <= v), with PyTorch's comparisons, under which a NaN
// value goes after everything and a NaN in the sequence counts as larger. seq: rows of
// L (one row for all values when rows_shared), values in rows of m; sorter (when given):
// the order of each row (indices into it).
__kernel void search_sorted(ulong total, ulong m, ulong L, int rows_shared, int right,
                            int use_sorter,
                            __global const ${T} *seq, ulong seq_offset,
                            __global const long *sorter, ulong sorter_offset,
                            __global const ${T} *values, ulong values_offset,
                            __global long *out, ulong out_offset)
{
    const ulong g = get_global_id(0);
    if (g >= total)
        return;
    const ulong row = rows_shared ? 0 : g / m;
    const ${K} v = (${K})${load('values', 'values_offset + g')};
    ulong lo = 0, hi = L;
    while (lo < hi) {
        const ulong mid = lo + (hi - lo) / 2;
        const ulong at = use_sorter ? (ulong)sorter[sorter_offset + row * L + mid] : mid;
        const ${K} s = (${K})${load('seq', 'seq_offset + row * L + at')};
        if (right ? !(s > v) : !(s >= v))
            lo = mid + 1;
        else
            hi = mid;
    }
    out[out_offset + g] = (long)lo;
}

// CPU drivers: a row per work-item, a bottom-up merge sort (stable) between two buffers
// (a work-group's barriers cost more there than the whole sort). The keys are first
// mapped to unsigned integers in the same order (NaN largest, -0 = +0; inverted for
// descending), so a comparison is one integer compare; runs of RUN are insertion-sorted
// before the merges. The values are then read from x at the sorted indices.
% if K in ("long", "double"):
typedef ulong okey;
% else:
typedef uint okey;
% endif
#define RUN 16

inline okey order_key(${K} v, int desc)
{
    okey k;
% if K == "float":
    const uint b = as_uint(v);
    k = v != v ? 0xffffffffu : (v == 0 ? 0x80000000u : ((b >> 31) ? ~b : (b | 0x80000000u)));
% elif K == "double":
    const ulong b = as_ulong(v);
    k = v != v ? ~(ulong)0 : (v == 0 ? (ulong)1 << 63 : ((b >> 63) ? ~b : (b | (ulong)1 << 63)));
% elif K in ("char", "short", "int"):
    k = (uint)((int)v) ^ 0x80000000u;
% elif K == "long":
    k = (ulong)v ^ ((ulong)1 << 63);
% else:
    k = (uint)v;
% endif
    return desc ? ~k : k;
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void sort_rows(ulong rows, ulong n, ulong inner, int desc,
               __global const ${T} *x, ulong x_offset,
               __global ${T} *y, ulong y_offset,
               __global long *yi, ulong yi_offset,
               __global okey *keys, ulong keys_offset,
               __global int *idx, ulong idx_offset,
               __global okey *keys2, ulong keys2_offset,
               __global int *idx2, ulong idx2_offset)
{
    const ulong row = get_global_id(0);
    if (row >= rows)
        return;
    const ulong base = (row / inner) * n * inner + row % inner;
    __global okey *ak = keys + keys_offset + row * n, *bk = keys2 + keys2_offset + row * n;
    __global int *ai = idx + idx_offset + row * n, *bi = idx2 + idx2_offset + row * n;
    for (ulong i = 0; i < n; i++) {
        ak[i] = order_key((${K})${load('x', 'x_offset + base + i * inner')}, desc);
        ai[i] = (int)i;
    }
    for (ulong lo = 0; lo < n; lo += RUN) {  // insertion sort of each run (stable)
        const ulong hi = min(lo + RUN, n);
        for (ulong i = lo + 1; i < hi; i++) {
            const okey k = ak[i];
            const int id = ai[i];
            ulong j = i;
            for (; j > lo && ak[j - 1] > k; j--) {
                ak[j] = ak[j - 1];
                ai[j] = ai[j - 1];
            }
            ak[j] = k;
            ai[j] = id;
        }
    }
    for (ulong width = RUN; width < n; width *= 2) {  // merges: the left run wins ties
        for (ulong lo = 0; lo < n; lo += 2 * width) {
            const ulong mid = min(lo + width, n), hi = min(lo + 2 * width, n);
            ulong l = lo, r = mid, o = lo;
            while (l < mid && r < hi) {
                const int right = ak[r] < ak[l];
                const ulong from = right ? r++ : l++;
                bk[o] = ak[from];
                bi[o++] = ai[from];
            }
            for (; l < mid; l++, o++) {
                bk[o] = ak[l];
                bi[o] = ai[l];
            }
            for (; r < hi; r++, o++) {
                bk[o] = ak[r];
                bi[o] = ai[r];
            }
        }
        __global okey *tk = ak; ak = bk; bk = tk;
        __global int *ti = ai; ai = bi; bi = ti;
    }
    for (ulong i = 0; i < n; i++) {
        const ulong from = ai[i];
        ${store('y', 'y_offset + base + i * inner', capture(load, 'x', 'x_offset + base + from * inner'))};
        yi[yi_offset + base + i * inner] = from;
    }
}
