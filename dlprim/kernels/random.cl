<%include file="common.h"/>
## Counter-based Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
## 1, 2, 3", SC'11). One work-item turns one counter into four values.
## DIST: "bits" (raw uint32 stored as int), "uniform" or "normal"; STORE: storage type.
#pragma OPENCL FP_CONTRACT OFF

<%include file="philox.h"/>

// 24 random bits -> [0, 1) exactly representable in float
inline float philox_unit(uint v)
{
    return (float)(v >> 8) * (1.0f / 16777216.0f);
}

<%def name="store(idx, value)">
% if STORE in ('half', 'bfloat16'):
ST_${STORE}(y + y_offset, ${idx}, ${value});
% else:
y[y_offset + ${idx}] = ${value};
% endif
</%def>
__kernel void random_fill(ulong n, __global ${STORE} *y, ulong y_offset,
                          ulong seed, ulong offset, float p0, float p1)
{
    ulong block = get_global_id(0);
    ulong first = block * 4;
    if (first >= n)
        return;
    ulong counter = offset + block;
    uint4 r = philox4x32_10((uint4)((uint)counter, (uint)(counter >> 32), 0, 0),
                            (uint2)((uint)seed, (uint)(seed >> 32)));
    uint words[4] = {r.x, r.y, r.z, r.w};
% if DIST == "normal":
    // Box-Muller on (words 0,1) and (words 2,3); u1 in (0, 1] keeps log finite
    float v[4];
    for (int j = 0; j < 4; j += 2) {
        float u1 = (float)((words[j] >> 8) + 1) * (1.0f / 16777216.0f);
        float u2 = philox_unit(words[j + 1]);
        float radius = sqrt(-2.0f * log(u1));
        float theta = 6.283185307179586f * u2;
        v[j] = p0 + p1 * (radius * cos(theta));
        v[j + 1] = p0 + p1 * (radius * sin(theta));
    }
% endif
    for (int j = 0; j < 4; j++) {
        if (first + j < n) {
% if DIST == "bits":
            ${store('first + j', 'as_int(words[j])')}
% elif DIST == "uniform":
            // low + (high - low) * u, both roundings in float as the numpy reference
            float u = p0 + p1 * philox_unit(words[j]);
            ${store('first + j', 'u')}
% else:
            ${store('first + j', 'v[j]')}
% endif
        }
    }
}
