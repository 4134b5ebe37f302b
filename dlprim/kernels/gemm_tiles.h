## Mako defs shared by the GEMM templates (gemm.cl: float32 FMAs, gemm_mma.cl: tensor
## cores, gemm_cpu.cl: the signature only), imported with
## <%namespace name="tiles" file="gemm_tiles.h"/>; nothing here renders by itself. A tile of an operand is TD rows (M or N) by TK values of K,
## loaded as float4 pieces by THREADS work items (piece l of the tile is item l % THREADS,
## LOADS pieces each); CK: the operand is read along K in global memory.

## the walk over C's tiles in bands of GROUP tile rows, so concurrent groups share A and
## B in cache: remaps (gm, gn), the work-group's tile row and column
<%def name="band_order(GROUP)">
% if GROUP > 1:
    {   // walk the tiles in bands of ${GROUP} tile rows so concurrent groups share A and B in cache
        const int tiles_n = get_num_groups(0), tiles_m = get_num_groups(1);
        const int pid = gm * tiles_n + gn;
        const int band = ${GROUP} * tiles_n;
        const int first_m = (pid / band) * ${GROUP};
        const int rows = min(tiles_m - first_m, ${GROUP});
        gm = first_m + (pid % band) % rows;
        gn = (pid % band) / rows;
    }
% endif
</%def>

## where this item's pieces of W values (float4 loads: 4) of the x tile sit: row d, k
## inside the tile, and the offset from the tile's corner in global memory (leading
## dimension ld)
<%def name="positions(x, TD, TK, CK, LOADS, THREADS, ld, W=4)">
    // this thread's pieces of ${W} values of the ${x} tile: row d (M or N) and k inside it
    int ${x}_d[${LOADS}], ${x}_k[${LOADS}], ${x}_off[${LOADS}];
    % for r in range(LOADS):
    {
        int l = lid + ${r * THREADS};
        % if CK:
        ${x}_k[${r}] = (l % ${TK // W}) * ${W};
        ${x}_d[${r}] = l / ${TK // W};
        ${x}_off[${r}] = ${x}_d[${r}] * ${ld} + ${x}_k[${r}];
        % else:
        ${x}_d[${r}] = (l % ${TD // W}) * ${W};
        ${x}_k[${r}] = l / ${TD // W};
        ${x}_off[${r}] = ${x}_k[${r}] * ${ld} + ${x}_d[${r}];
        % endif
    }
    % endfor
</%def>

## cp.async of this item's CHUNKS 16-byte chunks (V values each) of the x tile, from x_ptr
## (kc: the tile's K offset) into the local tile at S (a pointer of the values' type), the
## chunk of row d, value k at offset ``at`` (an expression in d and k); the bytes past
## the matrix's edge (D rows, K) are zero-filled, not read
<%def name="copy_chunks(x, S, CK, CHUNKS, D, V, at)">
    % for r in range(CHUNKS):
    {
        const int d = ${x}_d[${r}], k = ${x}_k[${r}];
        % if CK:
        const int left = ${x}_d0 + d < ${D} ? K - (kc + k) : 0;
        % else:
        const int left = kc + k < K ? ${D} - (${x}_d0 + d) : 0;
        % endif
        const int bytes = ${16 // V} * clamp(left, 0, ${V});
        COPY_ASYNC((__local ushort *)((${S}) + ${at}),
                   (__global const ushort *)(${x}_ptr + (bytes ? ${x}_off[${r}] : 0)), bytes);
    }
    % endfor
</%def>

## the registers' type for an operand of storage T: float4, or ushort4 of raw half or
## bfloat16 bits (widened where they are stored to local memory: reg4/widened4, common.h
## says why)
<%def name="reg4(T)">${"ushort4" if T in ("half", "bfloat16") else "float4"}</%def>
<%def name="widened4(v, T)">${{"half": "half_bits4(%s)", "bfloat16": "bfloat16_bits4_value(%s)"}.get(T, "%s") % v}</%def>

## global -> registers x_reg; the guarded path (not full_x) zero-fills whatever lies
## outside the matrix (D rows, K); NV pieces in all (items past NV load nothing); T: the
## operand's storage (half stays raw bits in x_reg, see reg4)
<%def name="load(x, X, CK, NV, LOADS, THREADS, D, ALIGNED, T='float')">
    // global -> registers; the guarded path zero-fills whatever lies outside the matrix
    if (full_${x}) {
    % for r in range(LOADS):
        % if NV % THREADS:
        if (lid + ${r * THREADS} < ${NV})
        % endif
        % if T in ("half", "bfloat16") and ALIGNED:
        ${x}_reg[${r}] = *(__global const ushort4 *)(${X} + ${x}_off[${r}]);
        % elif T in ("half", "bfloat16"):
        ${x}_reg[${r}] = vload4(0, (__global const ushort *)(${X} + ${x}_off[${r}]));
        % elif ALIGNED:
        ${x}_reg[${r}] = *(__global const float4 *)(${X} + ${x}_off[${r}]);
        % else:
        ${x}_reg[${r}] = vload4(0, ${X} + ${x}_off[${r}]);
        % endif
    % endfor
    } else {
    % for r in range(LOADS):
        % for c in range(4):
        <%
        if CK:
            inside = "%s_d0 + %s_d[%d] < %s && k0 + %s_k[%d] + %d < K" % (x, x, r, D, x, r, c)
        else:
            inside = "%s_d0 + %s_d[%d] + %d < %s && k0 + %s_k[%d] < K" % (x, x, r, c, D, x, r)
        if NV % THREADS:
            inside = "lid + %d < %d && " % (r * THREADS, NV) + inside
        %>
        ${x}_reg[${r}].s${c} = (${inside}) ? RAW_${T}(${X}, ${x}_off[${r}] + ${c}) : (REG_${T})0;
        % endfor
    % endfor
    }
</%def>

## the work-group's tile of C (a_d0, b_d0: its first row and column), its batch entry and
## K slice (split-K), and a_ptr / b_ptr at the corners of its first A and B tiles
<%def name="tile_origin(GROUP, TILE_M, TILE_N, A_CK, B_CK, A_T='float', B_T='float')">
    int gn = get_group_id(0), gm = get_group_id(1);
${band_order(GROUP)}
    const int a_d0 = gm * ${TILE_M}, b_d0 = gn * ${TILE_N};
    // split-K: z = batch * splits + part; part sums k in [part * k_chunk, +k_chunk) and
    // writes its own C (a workspace that gemm_reduce sums); splits = 1 is a plain GEMM
    const ulong z = get_global_id(2);
    const ulong batch = z / splits;
    const int k_begin = (int)(z % splits) * k_chunk;
    K = min(K - k_begin, k_chunk);

    __global const ${A_T} *a_ptr = A + a_offset + batch * stride_a
% if A_CK:
        + (ulong)a_d0 * lda + k_begin;
% else:
        + a_d0 + (ulong)k_begin * lda;
% endif
    __global const ${B_T} *b_ptr = B + b_offset + batch * stride_b
% if B_CK:
        + (ulong)b_d0 * ldb + k_begin;
% else:
        + b_d0 + (ulong)k_begin * ldb;
% endif
</%def>

## a_ptr and b_ptr on to the next TK values of K
<%def name="advance(A_CK, B_CK, TK)">
% if A_CK:
            a_ptr += ${TK};
% else:
            a_ptr += (ulong)${TK} * lda;
% endif
% if B_CK:
            b_ptr += ${TK};
% else:
            b_ptr += (ulong)${TK} * ldb;
% endif
</%def>

## the kernel's name and arguments, as core/gemm.py passes them (A_T, B_T, C_T: the
## operands' storage, float or half)
<%def name="signature(A_T='float', B_T='float', C_T='float')">
void gemm(int M, int N, int K, int k_chunk, int splits,
          __global const ${A_T} *A, ulong a_offset, int lda, ulong stride_a,
          __global const ${B_T} *B, ulong b_offset, int ldb, ulong stride_b,
          __global ${C_T} *C, ulong c_offset, int ldc, ulong stride_c,
          __global const float *bias, ulong bias_offset,
          float alpha, float beta)
</%def>

## the row m of C the epilogue writes (c_row) and, for a "row" bias, its bias (bias_m)
<%def name="row_of_c(m, BIAS, C_T='float')">
        __global ${C_T} *c_row = c_ptr + (ulong)(${m}) * ldc;
% if BIAS == "row":
        const float bias_m = bias[bias_offset + ${m}];
% endif
</%def>

## one value of C: alpha * value + beta * C (C unread where beta is 0) + the bias
## (bias_m, the row's, in scope for "row"), then the activation, stored at c_row[col]
<%def name="store_c(value, col, BIAS, ACTIVATION, C_T='float')">
    float v = alpha * ${value};
    if (beta != 0.0f)
        v += beta * LD_${C_T}(c_row, ${col});
% if BIAS == "row":
    v += bias_m;
% elif BIAS == "col":
    v += bias[bias_offset + ${col}];
% endif
    ST_${C_T}(c_row, ${col}, ACT_${ACTIVATION}(v));
</%def>

## four values of C at columns col .. col + 3 (a float4 ``value``, C's row 4-aligned, beta
## 0): store_c's epilogue, one vector store
<%def name="store_c4(value, col, BIAS, ACTIVATION, C_T='float')">
    float4 v = alpha * ${value};
% if BIAS == "row":
    v += bias_m;
% elif BIAS == "col":
    v += (float4)(bias[bias_offset + ${col}], bias[bias_offset + ${col} + 1],
                  bias[bias_offset + ${col} + 2], bias[bias_offset + ${col} + 3]);
% endif
    ST4_${C_T}(((float4)(ACT_${ACTIVATION}(v.x), ACT_${ACTIVATION}(v.y),
                         ACT_${ACTIVATION}(v.z), ACT_${ACTIVATION}(v.w))), c_row + ${col});
</%def>
