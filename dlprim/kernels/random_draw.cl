<%include file="common.h"/>
## Draws from a distribution, on the Philox-4x32-10 stream of random.cl: one work-item
## turns counter ``offset + block`` into four 32-bit words and those into PER values
## (4, or 2 where a value takes two words: 64-bit integers).
## DIST: uniform | normal | log_normal | exponential | cauchy | geometric | bernoulli |
##       integer (lo + word % span; span 0 stands for 2**64);  STORE: the storage type;  DIGITS: the mantissa bits
##       of the stored float type (a uniform in [0, 1) that rounds to 1 would leave it);
##       WIDE: integer draws over a span of 2**32 or more take two words per value.
#pragma OPENCL FP_CONTRACT OFF

<%include file="philox.h"/>
<% PER = 2 if WIDE else 4 %>

// DIGITS random bits -> [0, 1), every value exactly representable in the stored type
inline float unit_closed_open(uint w)
{
    return (float)(w & ((1u << ${DIGITS}) - 1u)) * (1.0f / (float)(1u << ${DIGITS}));
}

// 24 random bits -> [0, 1)
inline float unit24(uint w)
{
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

// 24 random bits -> (0, 1): log() of it stays finite
inline float unit_open(uint w)
{
    return ((float)(w >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

__kernel void random_draw(ulong n, __global ${STORE} *y, ulong y_offset, ulong seed,
                          ulong offset, float p0, float p1, long lo, ulong span)
{
    ulong block = get_global_id(0);
    ulong first = block * ${PER};
    if (first >= n)
        return;
    ulong counter = offset + block;
    uint4 r = philox4x32_10((uint4)((uint)counter, (uint)(counter >> 32), 0, 0),
                            (uint2)((uint)seed, (uint)(seed >> 32)));
    uint w[4] = {r.x, r.y, r.z, r.w};
% if DIST in ("normal", "log_normal"):
    // Box-Muller on word pairs (Box & Muller, 1958)
    float v[4];
    for (int j = 0; j < 4; j += 2) {
        float radius = sqrt(-2.0f * log(unit_open(w[j])));
        float theta = 6.283185307179586f * unit24(w[j + 1]);
        v[j] = p0 + p1 * (radius * cos(theta));
        v[j + 1] = p0 + p1 * (radius * sin(theta));
    }
% endif
    for (int j = 0; j < ${PER}; j++) {
        if (first + j >= n)
            break;
% if DIST == "uniform":
        // from + (to - from) * u: PyTorch's rule (p1 = to - from)
        float value = p0 + p1 * unit_closed_open(w[j]);
% elif DIST == "normal":
        float value = v[j];
% elif DIST == "log_normal":
        float value = exp(v[j]);
% elif DIST == "exponential":
        // inverse CDF: -log(1 - u) / lambda, u in [0, 1) (p0 = lambda)
        float value = -log1p(-unit24(w[j])) / p0;
% elif DIST == "cauchy":
        // median + sigma * tan(pi (u - 1/2)) (p0 = median, p1 = sigma)
        float value = p0 + p1 * tan(3.14159265358979f * (unit_open(w[j]) - 0.5f));
% elif DIST == "geometric":
        // the number of Bernoulli(p) trials up to the first success: ceil(log u / log(1 - p))
        float value = fmax(ceil(log(unit_open(w[j])) / log1p(-p0)), 1.0f);
% elif DIST == "bernoulli":
        float value = unit_open(w[j]) < p0 ? 1.0f : 0.0f;
% elif DIST == "integer":
%   if WIDE:
        ulong bits = (ulong)w[2 * j] | ((ulong)w[2 * j + 1] << 32);
%   else:
        ulong bits = w[j];
%   endif
        long value = span ? lo + (long)(bits % span) : (long)bits;  // span 0: all 2**64
% endif
% if STORE in ("half", "bfloat16"):
        ST_${STORE}(y + y_offset, first + j, (float)value);
% else:
        y[y_offset + first + j] = (${STORE})value;
% endif
    }
}
