## A vector staged in local memory for a team of TEAM work-items that each multiply 8 of its
## values a step (kernels/gemv.cl STAGE, kernels/decoder_layer.cl): the includer defines TEAM.
// Where the staged vector keeps element i: in each block of 8 x TEAM values, value j of
// work-item l's 8 (element 8 l + j) at j TEAM + l. A team's 8 loads of a step then each hit
// the 32 banks once; kept in order (32-byte vload8s), each load took 8 passes of the banks
// (a decoder block's products took 67 us, 16 their bytes' worth, in local-memory loads).
#define PERM(i) (((i) & ~(8 * TEAM - 1)) | (((i) & 7) * TEAM) | (((i) >> 3) & (TEAM - 1)))
// the 8 values a work-item multiplies from vp = vector + PERM(k)
inline float8 vstaged(__local const float *vp)
{
    return (float8)(vp[0], vp[TEAM], vp[2 * TEAM], vp[3 * TEAM], vp[4 * TEAM], vp[5 * TEAM],
                    vp[6 * TEAM], vp[7 * TEAM]);
}
