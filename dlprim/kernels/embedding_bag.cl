<%include file="common.h"/>
// EmbeddingBag (PyTorch's _embedding_bag): bag b holds the indices [offsets[b], offsets[b+1])
// (the last one runs to the end of the indices where the offsets do not carry its end);
// its rows of the weight, leaving out padding_idx, are summed (each times its
// per-sample weight where PSW), averaged or max-reduced. An index outside [0, rows) reads
// as NaN, so a bad index shows in the result rather than reading other memory.
// T: the weight's storage type (computed in float, float64 in double: real_t); I: the
// index type. MODE: 0 sum, 1 mean, 2 max.
#define real_t ${"double" if T == "double" else "float"}

inline real_t embedding_value(__global const ${T} *w, ulong w_offset, long j, ulong rows,
                             ulong dim, ulong d)
{
    return (j >= 0 && (ulong)j < rows) ? LD_${T}(w, w_offset + (ulong)j * dim + d) : NAN;
}

// one work-item per (bag, column): y[b, d], and for d = 0 the bag's size (its indices
// other than padding_idx); MODE 2 also writes which row gave the maximum (0 for an empty
// bag, as PyTorch's CPU)
__kernel void embedding_bag_forward(ulong bags, ulong dim, ulong rows, ulong n_idx, ulong n_off,
                                    long padding_idx,
                                    __global const ${T} *w, ulong w_offset,
                                    __global const ${I} *idx, ulong idx_offset,
                                    __global const ${I} *off, ulong off_offset,
                                    __global const ${T} *psw, ulong psw_offset,
                                    __global ${T} *y, ulong y_offset,
                                    __global ${I} *bag_size, ulong bag_size_offset,
                                    __global ${I} *argmax, ulong argmax_offset)
{
    ulong g = get_global_id(0);
    if (g >= bags * dim)
        return;
    ulong b = g / dim, d = g % dim;
    long start = off[off_offset + b];
    long end = b + 1 < n_off ? (long)off[off_offset + b + 1] : (long)n_idx;
    real_t acc = 0.0f;
    long count = 0, best = 0;
    for (long i = max(start, 0L); i < min(end, (long)n_idx); ++i) {
        long j = idx[idx_offset + i];
        if (j == padding_idx)
            continue;
        real_t v = embedding_value(w, w_offset, j, rows, dim, d);
% if PSW:
        v *= LD_${T}(psw, psw_offset + i);
% endif
% if MODE == 2:
        // the first of equal maxima wins, and a NaN never replaces a number (CPU's rule)
        if (count == 0 || v > acc) {
            acc = v;
            best = j;
        }
% else:
        acc += v;
% endif
        ++count;
    }
% if MODE == 1:
    if (count > 0)
        acc /= (real_t)count;
% endif
    ST_${T}(y, y_offset + g, acc);
    if (d == 0)
        bag_size[bag_size_offset + b] = (${I})count;
% if MODE == 2:
    argmax[argmax_offset + g] = (${I})best;
% endif
}

// offset2bag[i] = the bag index i belongs to: the last b with offsets[b] <= i (a binary
// search: empty bags repeat an offset), at most bags - 1
__kernel void embedding_bag_offset2bag(ulong n_idx, ulong n_off, ulong bags,
                                       __global const ${I} *off, ulong off_offset,
                                       __global ${I} *bag, ulong bag_offset)
{
    ulong i = get_global_id(0);
    if (i >= n_idx)
        return;
    ulong lo = 0, hi = n_off;  // the answer is in [lo, hi)
    while (hi - lo > 1) {
        ulong mid = (lo + hi) / 2;
        if ((long)off[off_offset + mid] <= (long)i)
            lo = mid;
        else
            hi = mid;
    }
    bag[bag_offset + i] = (${I})min(lo, bags - 1);
}
