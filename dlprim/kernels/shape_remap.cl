<%include file="common.h"/>
// Data movement along one axis of a contiguous tensor seen as (outer, n, inner): output
// position j of the axis reads input position map(j). The modes share one map so that
// reflection / replication / circular padding (and crops: negative pads), flip and roll
// are one kernel; the backward kernel sums, for each input position, every output
// position that read it (the adjoint of the gather), without atomics.
//   REFLECT (0): i = j - lo reflected at both ends without repeating the edge
//   REPLICATE (1): i = j - lo clamped to [0, n)
//   CIRCULAR (2): i = (j - lo) mod n (roll by lo is circular with n_out == n)
//   FLIP (3): i = n - 1 - j
% if BITS:
// forward: BITS is an unsigned integer of the element's size (values move as bits, so
// one build serves every dtype of that size)
inline long source_index(long j, long n, long lo, int mode)
{
    long i = j - lo;
    if (mode == 0) {
        if (i < 0)
            i = -i;
        if (i >= n)
            i = 2 * (n - 1) - i;
    } else if (mode == 1) {
        i = clamp(i, 0L, n - 1);
    } else if (mode == 2) {
        i = ((i % n) + n) % n;
    } else {
        i = n - 1 - j;
    }
    return i;
}

__kernel void remap_axis(ulong total, ulong n_out, ulong inner, ulong n_in, long lo, int mode,
                         __global const ${BITS} *x, ulong x_offset,
                         __global ${BITS} *y, ulong y_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, r = g / inner;
    ulong j = r % n_out, o = r / n_out;
    long i = source_index((long)j, (long)n_in, lo, mode);
    y[y_offset + g] = x[x_offset + (o * n_in + (ulong)i) * inner + k];
}
% endif
% if STORE:
<% COMPUTE = "float" if STORE in ("float", "half", "bfloat16") else STORE %>
<%def name="load(idx)"><% wide = STORE not in ("half", "bfloat16") %>\
${("dy[dy_offset + %s]" % idx) if wide else ("LD_%s(dy + dy_offset, %s)" % (STORE, idx))}</%def>
// backward: dx[o, i, k] = sum of dy[o, j, k] over the j with map(j) == i
__kernel void remap_axis_backward(ulong total, ulong n_in, ulong inner, ulong n_out, long lo,
                                  int mode, __global const ${STORE} *dy, ulong dy_offset,
                                  __global ${STORE} *dx, ulong dx_offset)
{
    ulong g = get_global_id(0);
    if (g >= total)
        return;
    ulong k = g % inner, r = g / inner;
    long i = (long)(r % n_in), n = (long)n_in, m = (long)n_out;
    ulong base = (r / n_in) * n_out * inner + k;
    ${COMPUTE} s = 0;
    if (mode == 0) {
        long j = i + lo;            // the position itself, then its two mirror images
        if (j >= 0 && j < m)
            s += ${load('base + j * inner')};
        j = lo - i;
        if (i > 0 && j >= 0 && j < m)
            s += ${load('base + j * inner')};
        j = lo + 2 * (n - 1) - i;
        if (i < n - 1 && j >= 0 && j < m)
            s += ${load('base + j * inner')};
    } else if (mode == 1) {
        long first = (i == 0) ? 0 : i + lo, last = (i == n - 1) ? m - 1 : i + lo;
        for (long j = max(first, 0L); j <= min(last, m - 1); ++j)
            s += ${load('base + j * inner')};
    } else if (mode == 2) {
        for (long j = (((i + lo) % n) + n) % n; j < m; j += n)
            s += ${load('base + j * inner')};
    } else {
        s = ${load('base + (n - 1 - i) * inner')};
    }
% if STORE in ("half", "bfloat16"):
    ST_${STORE}(dx + dx_offset, g, s);
% else:
    dx[dx_offset + g] = s;
% endif
}
% endif
