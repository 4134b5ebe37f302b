<%page args="values=8"/>
## A vector staged in local memory for a team of TEAM work-items that each multiply
## ``values`` (8, 16 or 32) of its values a step (kernels/gemv.cl STAGE,
## kernels/decoder_layer.cl): the includer defines TEAM.
// Where the staged vector keeps element i: in each block of ${values} x TEAM values, value
// j of work-item l's ${values} (element ${values} l + j) at j TEAM + l. A team's loads of a
// step then each hit the 32 banks once; kept in order (32-byte vload8s), each load took 8
// passes of the banks (a decoder block's products took 67 us, 16 their bytes' worth, in
// local-memory loads).
#define PERM(i) (((i) & ~(${values} * TEAM - 1)) | (((i) & ${values - 1}) * TEAM) \
                 | (((i) >> ${values.bit_length() - 1}) & (TEAM - 1)))
// 8 values a work-item multiplies from vp = vector + PERM(k) + 8 s TEAM (its values
// k + 8 s ... k + 8 s + 7)
inline float8 vstaged(__local const float *vp)
{
    return (float8)(vp[0], vp[TEAM], vp[2 * TEAM], vp[3 * TEAM], vp[4 * TEAM], vp[5 * TEAM],
                    vp[6 * TEAM], vp[7 * TEAM]);
}
