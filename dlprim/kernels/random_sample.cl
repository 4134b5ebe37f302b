<%include file="common.h"/>
## Sampling without a distribution formula, on the Philox-4x32-10 stream of random.cl:
## randperm (indices sorted by random 64-bit keys, a bitonic sort over a power of two,
## Batcher 1968) and multinomial (inverse CDF with replacement; without replacement the
## largest log(u) / p, Efraimidis & Spirakis 2006, taken one at a time).
## T: the probabilities' storage type; STORE: randperm's output storage type.
#pragma OPENCL FP_CONTRACT OFF

<%include file="philox.h"/>

inline uint4 words_at(ulong seed, ulong counter)
{
    return philox4x32_10((uint4)((uint)counter, (uint)(counter >> 32), 0, 0),
                         (uint2)((uint)seed, (uint)(seed >> 32)));
}

// 24 random bits -> (0, 1)
inline float unit_open(uint w)
{
    return ((float)(w >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

% if MODE == "perm":
// keys[i]: a random 64-bit key for i < n, past n the largest (the padding sorts last)
__kernel void perm_keys(ulong n, ulong padded, __global ulong *keys, ulong keys_offset,
                        __global ulong *idx, ulong idx_offset, ulong seed)
{
    ulong i = get_global_id(0);
    if (i >= padded)
        return;
    uint4 r = words_at(seed, i);
    keys[keys_offset + i] = i < n ? ((ulong)r.x | ((ulong)r.y << 32)) : ~(ulong)0;
    idx[idx_offset + i] = i;
}

// one compare-exchange step of the bitonic sort of (key, index) pairs
__kernel void perm_bitonic_step(ulong padded, __global ulong *keys, ulong keys_offset,
                                __global ulong *idx, ulong idx_offset, ulong j, ulong k)
{
    ulong i = get_global_id(0);
    ulong l = i ^ j;
    if (i >= padded || l <= i)
        return;
    __global ulong *key = keys + keys_offset, *ix = idx + idx_offset;
    ulong ki = key[i], kl = key[l], xi = ix[i], xl = ix[l];
    int greater = ki > kl || (ki == kl && xi > xl);
    if (greater == ((i & k) == 0)) {  // out of order for this half's direction
        key[i] = kl;
        key[l] = ki;
        ix[i] = xl;
        ix[l] = xi;
    }
}

__kernel void perm_store(ulong n, __global ulong *idx, ulong idx_offset,
                         __global ${STORE} *y, ulong y_offset)
{
    ulong i = get_global_id(0);
    if (i >= n)
        return;
% if STORE in ("half", "bfloat16"):
    ST_${STORE}(y + y_offset, i, (float)idx[idx_offset + i]);
% else:
    y[y_offset + i] = (${STORE})idx[idx_offset + i];
% endif
}
% else:
// cdf[row, c]: the running sum of row's probabilities (one work-item per row)
__kernel void multinomial_cdf(ulong rows, ulong cats, __global const ${T} *p, ulong p_offset,
                              __global float *cdf, ulong cdf_offset)
{
    ulong row = get_global_id(0);
    if (row >= rows)
        return;
    float total = 0.0f;
    for (ulong c = 0; c < cats; c++) {
        total += LD_${T}(p + p_offset, row * cats + c);
        cdf[cdf_offset + row * cats + c] = total;
    }
}

// with replacement: the first category whose cdf passes u * total (a binary search)
__kernel void multinomial_replace(ulong rows, ulong cats, ulong samples,
                                  __global const float *cdf, ulong cdf_offset,
                                  __global long *y, ulong y_offset, ulong seed)
{
    ulong id = get_global_id(0);
    if (id >= rows * samples)
        return;
    ulong row = id / samples;
    __global const float *c = cdf + cdf_offset + row * cats;
    float target = unit_open(words_at(seed, id).x) * c[cats - 1];
    ulong lo = 0, hi = cats;
    while (lo < hi) {
        ulong mid = (lo + hi) / 2;
        if (c[mid] > target)
            hi = mid;
        else
            lo = mid + 1;
    }
    // rounding may leave u * total at the total: the last category with weight
    while (lo >= cats || (lo > 0 && c[lo] == c[lo - 1]))
        lo--;
    y[y_offset + id] = (long)lo;
}

// without replacement: key log(u) / p per category, then the largest keys in order
__kernel void multinomial_no_replace(ulong rows, ulong cats, ulong samples,
                                     __global const ${T} *p, ulong p_offset,
                                     __global float *keys, ulong keys_offset,
                                     __global long *y, ulong y_offset, ulong seed)
{
    ulong row = get_global_id(0);
    if (row >= rows)
        return;
    __global float *key = keys + keys_offset + row * cats;
    for (ulong c = 0; c < cats; c++) {
        float w = LD_${T}(p + p_offset, row * cats + c);
        key[c] = w > 0.0f ? log(unit_open(words_at(seed, row * cats + c).x)) / w : -INFINITY;
    }
    for (ulong s = 0; s < samples; s++) {
        ulong best = 0;
        float best_key = -INFINITY;
        int found = 0;
        for (ulong c = 0; c < cats; c++) {
            if (!isnan(key[c]) && (!found || key[c] > best_key)) {
                best = c;
                best_key = key[c];
                found = 1;
            }
        }
        key[best] = NAN;  // taken
        y[y_offset + row * samples + s] = (long)best;
    }
}
% endif
