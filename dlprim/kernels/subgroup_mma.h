## Intel's subgroup matrix products (cl_intel_subgroup_matrix_multiply_accumulate, the
## XMX engines of Arc, Data Center GPU Max and newer integrated GPUs), for
## gemm_subgroup_mma.cl. A subgroup of SG work-items (8 or 16, the device's smallest)
## multiplies an 8 x 16 block of A by a 16 x SG block of B into float sums:
## - A: component r of a work-item's operand holds its share of row r: 16 / SG values,
##   those at k = (16 / SG) lane ... (two halves packed in a uint for SG 8, the lower k in
##   the low bits; one in a ushort for SG 16);
## - B: work-item lane holds column lane, its 16 values of K as 8 uints of pairs (the
##   lower k in the low bits);
## - the sums: component r of a work-item's float8 is row r of column lane.
## KIND: "f16" or "bf16". SUBGROUP_MMA_EMULATE (tests): the products in OpenCL C, the
## subgroup's operands exchanged through local memory (scratch: 16 words an item), so
## that the kernel's operand logic runs on any device.
<% SG_KIND = context.get("KIND", "f16") %>
% if context.get("SUBGROUP_MMA_EMULATE", False):
inline float sg_value(uint bits)
{
% if SG_KIND == "f16":
    return half_bits((ushort)bits);
% else:
    return as_float(bits << 16);
% endif
}
// acc + A (8 x 16) B (16 x SG) for the item at lane; a: its 8 rows' shares (low 16 bits
// only where SG is 16), b: its column's 8 pairs
inline float8 sg_mad_emulated(uint8 a, uint8 b, float8 acc, __local uint *scratch, int lane,
                              int SG)
{
    __local uint *mine = scratch + 16 * lane;
    vstore8(a, 0, mine);
    vstore8(b, 0, mine + 8);
    barrier(CLK_LOCAL_MEM_FENCE);
    float sums[8];
    vstore8(acc, 0, sums);
    const int per = 16 / SG;  // K values of a row each item gives
    for (int r = 0; r < 8; r++) {
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) {
            const uint wa = scratch[16 * (k / per) + r];
            const uint wb = mine[8 + k / 2];
            sum = mad(sg_value((wa >> (16 * (k % per))) & 0xffffu),
                      sg_value((wb >> (16 * (k % 2))) & 0xffffu), sum);
        }
        sums[r] += sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return vload8(0, sums);
}
#define SG_MAD(a, b, acc) sg_mad_emulated(convert_uint8(a), b, acc, sg_scratch + 16 * ${context.get("SUBGROUP", 8)} * get_local_id(1), lane, ${context.get("SUBGROUP", 8)})
% else:
#pragma OPENCL EXTENSION cl_intel_subgroup_matrix_multiply_accumulate : enable
% if context.get("SUBGROUP", 8) == 8:
#define SG_MAD(a, b, acc) intel_sub_group_${SG_KIND}_${SG_KIND}_matrix_mad_k16(as_int8(a), as_int8(b), acc)
% else:
#define SG_MAD(a, b, acc) intel_sub_group_${SG_KIND}_${SG_KIND}_matrix_mad_k16(as_short8(a), as_int8(b), acc)
% endif
% endif
// a work-item's share of A's 8 rows: two halves a uint for SG 8, one a ushort for SG 16
#define SG_A_TYPE ${"uint8" if context.get("SUBGROUP", 8) == 8 else "ushort8"}
