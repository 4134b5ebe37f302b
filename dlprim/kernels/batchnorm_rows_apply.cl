// BatchNorm's apply on CPUs (float32; core/batchnorm.py): y = act((x - mean) istd gamma +
// beta) over each (image, channel) row, VW values a vector, in the generator's order of
// operations (the same bits), its per-value channel arithmetic gone: 2.4-8x its time on
// a 2-core EPYC. ACT: the activation as an expression of x (a vector or a float alike).
// Work-item (c, n).
__kernel __attribute__((vec_type_hint(float${VW})))
void bn_row_apply(uint C, uint S, __global const float *x, ulong x_offset,
                  __global const float *mean, ulong mean_offset,
                  __global const float *istd, ulong istd_offset,
% if AFFINE:
                  __global const float *gamma, ulong gamma_offset,
                  __global const float *beta, ulong beta_offset,
% endif
                  __global float *y, ulong y_offset)
{
    const uint c = get_global_id(0), n = get_global_id(1);
    const ulong row = ((ulong)n * C + c) * S;
    __global const float *p = x + x_offset + row;
    __global float *q = y + y_offset + row;
    const float m = mean[mean_offset + c], r = istd[istd_offset + c];
% if AFFINE:
    const float g = gamma[gamma_offset + c], b = beta[beta_offset + c];
% endif
    const uint full = S / ${VW} * ${VW};
    for (uint i = 0; i < full; i += ${VW}) {
        const float${VW} x = (vload${VW}(0, p + i) - m) * r${" * g + b" if AFFINE else ""};
        vstore${VW}(${ACT}, 0, q + i);
    }
    for (uint i = full; i < S; i++) {
        const float x = (p[i] - m) * r${" * g + b" if AFFINE else ""};
        q[i] = ${ACT};
    }
}
