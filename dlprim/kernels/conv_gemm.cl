<%include file="common.h"/>
% if MMA:
<%include file="mma.h"/>
% endif
## Implicit-GEMM convolution: the im2col (or col2im) gather is fused into the tile loads,
## so no column buffer exists. One template, three products (per group g):
##   forward          Y[k, (b,oh,ow)]   = sum_(c,r,s)   W[k, (c,r,s)] * X[(c,r,s), (b,oh,ow)]
##   backward_data    dX[c, (b,ih,iw)]  = sum_(k,r,s)   W[k, c, r, s] * dY[(k,r,s), (b,ih,iw)]
##                    (gather: oh = (ih + ph - r*dh) / sh where that divides exactly)
##   backward_data with PHASES (stride > 1, no dilation): per stride phase (ih % sh,
##                    iw % sw) only the taps r = r0 + r'*sh reach such rows, so no tap is
##                    wasted: oh = ih' + qh - r' with ih = ih'*sh + ph. A phase that no tap
##                    reaches (taps = 0; rh, rw then 1) only writes its epilogue.
##   backward_filter  dW[k, (c,r,s)]    = sum_(b,oh,ow) dY[k, (b,oh,ow)] * X[(b,oh,ow), (c,r,s)]
## MERGED (GPUs, geometry baked): every stride phase in one launch; get_group_id(2) picks
## the phase, whose sizes are compile-time constants (a switch over PHASE_LIST), so the
## loads divide by constants and the phases share the device instead of queueing. Past
## MERGED_SWITCH_MAX phases the sizes come from a constant table instead: the switch
## builds the GEMM body once per phase, and the build time grows with them.
## SPLIT (split-K): each work-group sums a k_per_split slice of the reduction and writes
## its raw sum (no beta, bias or activation) to a partial buffer (out + split * split_stride); conv_split_reduce adds the
## partials and applies beta, bias and the activation.
## Tiles: TM x TN outputs per work-group, TK deep, WM x WN per work-item, strided so that
## neighbouring work-items touch neighbouring columns. Geometry is either baked in
## (GEOM_BAKED, faster index arithmetic) or passed as kernel arguments (one build serves
## every shape, used where builds are slow).
## MMA ("tf32", "f16" or "bf16"; NVIDIA): the tile's products run on tensor cores (mma.h).
## The loads stay as they are; the local tiles hold TF32 words or 16-bit values (half or
## bfloat16), K-major as above,
## and the WG_M x WG_N work-items are WARPS_M x WARPS_N warps, each a (TM / WARPS_M) x
## (TN / WARPS_N) block of fragments. Rows pad by 8 values, so a warp's fragment reads
## are conflict-free: TF32 lanes t read rows t and t + 4, 8 words apart in banks; 16-bit
## fragments come through ldmatrix .trans (mma.h), whose 8 rows of 16 bytes each lie 4
## words apart (tiles stored as rows of K instead, without .trans, where the loads run
## along K: A_ROWS, B_ROWS). Forward and backward-data write their outputs through local
## memory (STAGED), in the bytes the tiles used.
## TAPS (16-bit products): the reduction runs tap by tap, channels within a tap, each
## tap's channels padded to a whole number of tiles (CP for x's, KP for dy's; backward-
## data per stride phase: the phase's taps). A tile's
## tap is then fixed: each work-item finds its gather's row, column and bounds once a tile
## and adds one channel stride per value, where the (c, r, s) order pays divisions and
## bound checks per value. The weights come from a copy in that order (ConvGemm's
## weights_copy: [OUT_C][KHW][CP], 16-bit, zeros past CG), read 8 values at a time; backward-filter
## orders its columns (tap, c) with CG padded to TN (CPN) and writes dW in its own order.
## K_RUN (tap-major backward-filter, 16-bit activations stored as the products take
## them; core/conv_gemm.py picks it): each work-item loads runs of K_RUN neighbouring
## pixels of one image (K_RUN divides OUT_HW, runs start at multiples of it) instead of
## one pixel per row: dy's rows, and x's where the layer is a stride-1 unpadded 1x1
## (X_RUNS: a pixel is then its input position), come as one 4- to 16-byte load per run
## where the tensor's offset keeps runs aligned (else as K_RUN values) and reach the
## tiles, rows of K, as one store; the index arithmetic is paid once per run.
## N_RUN (tap-major forward and backward-data of a stride-1 unpadded 1x1, 16-bit
## activations as the products take them): each work-item loads runs of N_RUN
## neighbouring columns (pixels of one image) of B, x's or dy's rows, the same way.
<%
    WG_M = TM // WM
    WG_N = TN // WN
    GEOM = ["IN_C", "OUT_C", "GROUPS", "IN_H", "IN_W", "OUT_H", "OUT_W",
            "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW"]
    geom_params = "".join("int %s, " % g for g in GEOM) if not GEOM_BAKED else ""
    PAD = 4 if VEC == 4 else 1
    # storage of the operands: ACT_T is the activations' (x, y and their gradients: float
    # or half), the weights and their gradient stay float; split partial sums are float
    A_T = ACT_T if MODE == "backward_filter" else "float"
    B_T = ACT_T
    O_T = "float" if MODE == "backward_filter" else ACT_T
    GEMM_O_T = "float" if SPLIT else O_T
    TAPS = context.get("TAPS", False)
    K_RUN = context.get("K_RUN", 1)
    X_RUNS = context.get("X_RUNS", False)
    N_RUN = context.get("N_RUN", 1)
    RUN = max(K_RUN, N_RUN)
    RUN_T = {2: "uint", 4: "uint2", 8: "uint4"}.get(RUN)
    assert K_RUN == 1 or (TAPS and MODE == "backward_filter" and ACT_T != "float")
    assert N_RUN == 1 or (TAPS and MODE != "backward_filter" and not PHASES and ACT_T != "float")
    assert not X_RUNS or K_RUN > 1
    assert not TAPS or MMA in ("f16", "bf16"), "tap-major tiles hold 16-bit products"
    # tap-major forward and backward-data read the weights' 16-bit copy, 8 values a load
    A_COPY = TAPS and MODE != "backward_filter"
    if A_COPY:
        A_T = "ushort"
    # 16-bit tiles stored as rows of K ([d][k], ldmatrix without .trans) where the loads
    # run along K: the weights' copy, and both of backward-filter's operands, whose lanes
    # then store neighbouring values (K-major, their stores would fall 4 to a bank)
    FILTER_ROWS = MMA in ("f16", "bf16") and MODE == "backward_filter"
    A_ROWS = (A_COPY and MODE == "forward") or FILTER_ROWS
    B_ROWS = FILTER_ROWS
    if MMA:
        LOCAL_T = "uint" if MMA == "tf32" else "ushort"
        LDA, LDB = TM + 8, TN + 8
        WTM, WTN = TM // WARPS_M, TN // WARPS_N
        MI, NI = WTM // 16, WTN // 8
        assert MMA == "tf32" or NI % 2 == 0, "ldmatrix loads B's fragments two blocks of 8 at a time"
    else:
        LOCAL_T, LDA, LDB = "float", TM + PAD, TN + PAD
        WTM = WTN = MI = NI = 0
    # forward and backward-data on tensor cores write their outputs through local memory
    # (the epilogue); backward-filter's dW is small and its columns scatter over (c, r, s)
    STAGED = bool(MMA) and MODE != "backward_filter"
    assert not STAGED or WTN % 32 == 0, "the staged epilogue gives each lane whole columns"

    # the emulated products (mma.h, tests) exchange fragments through barriers: unrolled,
    # they multiply the barrier regions a CPU runtime's compiler must handle
    UNROLL = "#pragma unroll 1" if context.get("MMA_EMULATE", False) else "#pragma unroll"

    def tile_ld(tile):
        """The row stride of a local tile: K + 8 for rows of K, else its width + pad."""
        if (A_ROWS if tile == "As" else B_ROWS):
            return TK + 8
        return LDA if tile == "As" else LDB

    def to_local(tile, k, d, v, T):
        """The statement storing a loaded operand value (raw bits of T) at reduction
        index k, row or column d of its local tile, as the tile holds it; float to half
        through vstore_half, straight into the tile (no private copy whose bits another
        type then reads)."""
        row, col = (d, k) if (A_ROWS if tile == "As" else B_ROWS) else (k, d)
        if MMA == "f16" and T != "half":
            ld = tile_ld(tile)
            return "vstore_half_rte(WIDEN_%s(%s), (%s) * %d + (%s), (__local half *)%s)" % (
                T, v, row, ld, col, tile)
        if not MMA:
            value = "WIDEN_%s(%s)" % (T, v)
        elif MMA == "tf32":
            value = "tf32(WIDEN_%s(%s))" % (T, v)
        elif MMA == "bf16" and T != "bfloat16":
            value = "bfloat16_bits(WIDEN_%s(%s))" % (T, v)
        else:
            value = v  # the operand's own 16-bit type: its bits
        return "%s[%s][%s] = %s" % (tile, row, col, value)

    def run_counts():
        """Runs per row of a tile (of K: K_RUN; of B's N columns: N_RUN), then each
        work-item's runs of A and B."""
        wg = (TM // WM) * (TN // WN)
        runs_row = TK // K_RUN if K_RUN > 1 else TN // N_RUN
        assert RUN == 1 or (wg % runs_row == 0 and TM * TK % (RUN * wg) == 0
                            and TN * TK % (RUN * wg) == 0)
        return runs_row, TM * TK // (RUN * wg), TN * TK // (RUN * wg)

    def load_column():
        """B's column this work-item loads (N_RUN: its run's first), past n0."""
        return "tid %% %d" % TN if N_RUN == 1 else "(tid %% %d) * %d" % (TN // N_RUN, N_RUN)

    def run_load(x, at, aligned):
        """The RUN 16-bit values of operand x from element ``at`` as one RUN_T: one load
        where ``aligned`` (the offset keeps every run aligned), else value by value."""
        p = "((__global const ushort *)%s + (%s))" % (x, at)
        return "(%s ? *(__global const %s *)%s : as_%s(vload%d(0, %s)))" % (
            aligned, RUN_T, p, RUN_T, RUN, p)
%>
% if GEOM_BAKED:
%   for name in GEOM:
#define ${name} ${GEOM_BAKED[name]}
%   endfor
% endif
#define CG (IN_C / GROUPS)
#define KG (OUT_C / GROUPS)
#define KHW (KH * KW)
#define IN_HW (IN_H * IN_W)
#define OUT_HW (OUT_H * OUT_W)
% if TAPS:
#define CP (((CG + ${TK - 1}) / ${TK}) * ${TK})
#define KP (((KG + ${TK - 1}) / ${TK}) * ${TK})
#define CPN (((CG + ${TN - 1}) / ${TN}) * ${TN})
% endif
#define W_ROW (CG * KHW)
% if MODE == "forward":
#define OUT_STEP OUT_HW
% elif MODE == "backward_data":
#define OUT_STEP IN_HW
% endif
% if TAPS and MODE == "forward":
#define GEMM_M KG
#define GEMM_N (batch * OUT_HW)
#define GEMM_K (KHW * CP)
% elif TAPS and MODE == "backward_data" and PHASES:
#define GEMM_M CG
#define GEMM_N (batch * ihp * iwp)
#define GEMM_K (taps * KP)
% elif TAPS and MODE == "backward_data":
#define GEMM_M CG
#define GEMM_N (batch * IN_HW)
#define GEMM_K (KHW * KP)
% elif TAPS:
#define GEMM_M KG
#define GEMM_N (KHW * CPN)
#define GEMM_K (batch * OUT_HW)
% elif MODE == "forward":
#define GEMM_M KG
#define GEMM_N (batch * OUT_HW)
#define GEMM_K (CG * KHW)
% elif MODE == "backward_data" and PHASES:
#define GEMM_M CG
#define GEMM_N (batch * ihp * iwp)
#define GEMM_K (KG * taps)
% elif MODE == "backward_data":
#define GEMM_M CG
#define GEMM_N (batch * IN_HW)
#define GEMM_K (KG * KHW)
% else:
#define GEMM_M KG
#define GEMM_N (CG * KHW)
#define GEMM_K (batch * OUT_HW)
% endif

## ---- global -> registers for the tile starting at reduction index k0
<%def name="load_tile(k0)">
<%
    WG = (TM // WM) * (TN // WN)
    A_PER = TM * TK // WG
    B_PER = TK * TN // WG
    A_VECS = TM * TK // 8 // WG
    RUNS_ROW, A_RUNS, B_RUNS = run_counts()
%>
    {
% if TAPS and MODE == "forward":
        // the tile's tap, and where x's rows and columns lie for it
        const int tap = ${k0} / CP, c0 = ${k0} - tap * CP;
        for (int i = 0; i < ${A_VECS}; i++) {  // 8 of a weight row's values a load
            const int m = m0 + tid / ${TK // 8} + i * ${WG // (TK // 8)};
            a_vec[i] = m < GEMM_M ? *(__global const uint4 *)(a + m * GEMM_K + ${k0} + (tid % ${TK // 8}) * 8)
                                  : (uint4)0;
        }
        const int r = tap / KW, s = tap - r * KW;
        const int ih = ih0 + r * DH, iw = iw0 + s * DW;
        const bool ok = n_ok && (uint)ih < (uint)IN_H && (uint)iw < (uint)IN_W;
        const int at = x_base + ih * IN_W + iw;
% if N_RUN > 1:
        for (int i = 0; i < ${B_RUNS}; i++) {
            const int c = c0 + tid / ${RUNS_ROW} + i * ${WG // RUNS_ROW};
            b_run[i] = ok && c < CG ? ${run_load("b", "at + c * IN_HW", "b_runs_aligned")} : (${RUN_T})0;
        }
% else:
        for (int i = 0; i < ${B_PER}; i++) {
            const int c = c0 + tid / ${TN} + i * ${WG // TN};
            b_ld[i] = ok && c < CG ? RAW_${B_T}(b, at + c * IN_HW) : (REG_${B_T})0;
        }
% endif
% elif TAPS and MODE == "backward_data":
% if PHASES:
        // the phase's tap tp (of rh x rw) is the filter's (r, s); dy's row and column
        // for it are the same for every k
        const int tp = ${k0} / KP, k0t = ${k0} - tp * KP;
        const int dr = tp / rw, ds = tp - dr * rw;
        const int tap = (r0 + dr * SH) * KW + s0 + ds * SW;
        const int oh = oh0 - dr, ow = ow0 - ds;
% else:
        // stride 1: dy's row and column for this tile's tap are the same for every k
        const int tap = ${k0} / KP, k0t = ${k0} - tap * KP;
        const int r = tap / KW, s = tap - r * KW;
        const int oh = th0 - r * DH, ow = tw0 - s * DW;
% endif
        for (int i = 0; i < ${A_VECS}; i++) {  // 8 of the copy's channels a load
            const int k = k0t + tid / ${TM // 8} + i * ${WG // (TM // 8)};
            const int m = m0 + (tid % ${TM // 8}) * 8;
            a_vec[i] = k < KG && m < CP ? *(__global const uint4 *)(a + (k * KHW + tap) * CP + m)
                                        : (uint4)0;
        }
        const bool ok = n_ok && (uint)oh < (uint)OUT_H && (uint)ow < (uint)OUT_W;
        const int at = dy_base + oh * OUT_W + ow;
% if N_RUN > 1:
        for (int i = 0; i < ${B_RUNS}; i++) {
            const int k = k0t + tid / ${RUNS_ROW} + i * ${WG // RUNS_ROW};
            b_run[i] = ok && k < KG ? ${run_load("b", "at + k * OUT_HW", "b_runs_aligned")} : (${RUN_T})0;
        }
% else:
        for (int i = 0; i < ${B_PER}; i++) {
            const int k = k0t + tid / ${TN} + i * ${WG // TN};
            b_ld[i] = ok && k < KG ? RAW_${B_T}(b, at + k * OUT_HW) : (REG_${B_T})0;
        }
% endif
% elif MODE == "forward":
        for (int i = 0; i < ${A_PER}; i++) {
            const int m = m0 + tid / ${TK} + i * ${WG // TK};
            const int kk = ${k0} + tid % ${TK};
            a_ld[i] = (m < GEMM_M && kk < k_end) ? RAW_${A_T}(a, m * GEMM_K + kk) : (REG_${A_T})0;
        }
        for (int i = 0; i < ${B_PER}; i++) {
            const int kk = ${k0} + tid / ${TN} + i * ${WG // TN};
            const int c = kk / KHW, rs = kk - c * KHW;
            const int r = rs / KW, s = rs - r * KW;
            const int ih = ih0 + r * DH, iw = iw0 + s * DW;
            const bool ok = n_ok && kk < k_end && ih >= 0 && ih < IN_H && iw >= 0 && iw < IN_W;
            b_ld[i] = ok ? RAW_${B_T}(b, x_base + (c * IN_H + ih) * IN_W + iw) : (REG_${B_T})0;
        }
% elif MODE == "backward_data" and PHASES:
        for (int i = 0; i < ${A_PER}; i++) {
            const int m = m0 + tid % ${TM};
            const int kk = ${k0} + tid / ${TM} + i * ${WG // TM};
            const int k = kk / (rh * rw), rs = kk - k * (rh * rw);
            const int r = r0 + (rs / rw) * SH, s = s0 + (rs % rw) * SW;
            a_ld[i] = (m < GEMM_M && kk < k_end) ? RAW_${A_T}(a, (k * CG + m) * KHW + r * KW + s) : (REG_${A_T})0;
        }
        for (int i = 0; i < ${B_PER}; i++) {
            const int kk = ${k0} + tid / ${TN} + i * ${WG // TN};
            const int k = kk / (rh * rw), rs = kk - k * (rh * rw);
            const int oh = oh0 - rs / rw, ow = ow0 - rs % rw;
            const bool ok = n_ok && kk < k_end && oh >= 0 && oh < OUT_H && ow >= 0 && ow < OUT_W;
            b_ld[i] = ok ? RAW_${B_T}(b, dy_base + (k * OUT_H + oh) * OUT_W + ow) : (REG_${B_T})0;
        }
% elif MODE == "backward_data":
        for (int i = 0; i < ${A_PER}; i++) {
            const int m = m0 + tid % ${TM};
            const int kk = ${k0} + tid / ${TM} + i * ${WG // TM};
            const int k = kk / KHW, rs = kk - k * KHW;
            a_ld[i] = (m < GEMM_M && kk < k_end) ? RAW_${A_T}(a, (k * CG + m) * KHW + rs) : (REG_${A_T})0;
        }
        for (int i = 0; i < ${B_PER}; i++) {
            const int kk = ${k0} + tid / ${TN} + i * ${WG // TN};
            const int k = kk / KHW, rs = kk - k * KHW;
            const int r = rs / KW, s = rs - r * KW;
            const int th = th0 - r * DH, tw = tw0 - s * DW;
            bool ok = n_ok && kk < k_end && th >= 0 && tw >= 0;
            const int oh = ok ? th / SH : 0, ow = ok ? tw / SW : 0;
            ok = ok && oh * SH == th && ow * SW == tw && oh < OUT_H && ow < OUT_W;
            b_ld[i] = ok ? RAW_${B_T}(b, dy_base + (k * OUT_H + oh) * OUT_W + ow) : (REG_${B_T})0;
        }
% else:
% if K_RUN > 1:
        {   // runs of K_RUN pixels: a run's rows of dy (and of x: X_RUNS)
            const int kk = ${k0} + (tid % ${RUNS_ROW}) * ${K_RUN};
            const bool k_ok = kk < k_end;
            const int bk = kk / OUT_HW, pk = kk - bk * OUT_HW;
            for (int i = 0; i < ${A_RUNS}; i++) {
                const int m = m0 + tid / ${RUNS_ROW} + i * ${WG // RUNS_ROW};
                a_run[i] = m < GEMM_M && k_ok ? ${run_load("a", "(bk * OUT_C + g * KG + m) * OUT_HW + pk", "a_runs_aligned")} : (${RUN_T})0;
            }
% if X_RUNS:
            for (int i = 0; i < ${B_RUNS}; i++) {
                const int c = c0_n + tid / ${RUNS_ROW} + i * ${WG // RUNS_ROW};
                b_run[i] = c < CG && k_ok ? ${run_load("b", "(bk * IN_C + g * CG + c) * IN_HW + pk", "b_runs_aligned")} : (${RUN_T})0;
            }
% endif
        }
% endif
% if not X_RUNS:
        // the reduction index (b, oh, ow) is shared by this work-item's A and B loads
        // (TAPS: the work-group's tap (tap_n, r_n, s_n) by all of its columns)
        const int kk = ${k0} + tid % ${TK};
        const bool k_ok = kk < k_end;
        const int bk = kk / OUT_HW, pk = kk - bk * OUT_HW;
        const int ohk = pk / OUT_W, owk = pk - ohk * OUT_W;
% if K_RUN == 1:
        for (int i = 0; i < ${A_PER}; i++) {
            const int m = m0 + tid / ${TK} + i * ${WG // TK};
            a_ld[i] = (m < GEMM_M && k_ok) ? RAW_${A_T}(a, (bk * OUT_C + g * KG + m) * OUT_HW + pk) : (REG_${A_T})0;
        }
% endif
% if TAPS:
        const int ih = ohk * SH - PH + r_n * DH, iw = owk * SW - PW + s_n * DW;
        const bool ok = k_ok && (uint)ih < (uint)IN_H && (uint)iw < (uint)IN_W;
        const int at = ((bk * IN_C + g * CG) * IN_H + ih) * IN_W + iw;
        for (int i = 0; i < ${B_PER}; i++) {
            const int c = c0_n + tid / ${TK} + i * ${WG // TK};
            b_ld[i] = ok && c < CG ? RAW_${B_T}(b, at + c * IN_HW) : (REG_${B_T})0;
        }
% else:
        for (int i = 0; i < ${B_PER}; i++) {
            const int n = n0 + tid / ${TK} + i * ${WG // TK};
            const int c = n / KHW, rs = n - c * KHW;
            const int r = rs / KW, s = rs - r * KW;
            const int ih = ohk * SH - PH + r * DH, iw = owk * SW - PW + s * DW;
            const bool ok = k_ok && n < GEMM_N && ih >= 0 && ih < IN_H && iw >= 0 && iw < IN_W;
            b_ld[i] = ok ? RAW_${B_T}(b, ((bk * IN_C + g * CG + c) * IN_H + ih) * IN_W + iw) : (REG_${B_T})0;
        }
% endif
% endif
% endif
    }
</%def>


## ---- registers -> the local tiles As, Bs
<%def name="store_tiles()">
<%
    WG = (TM // WM) * (TN // WN)
    A_PER = TM * TK // WG
    B_PER = TK * TN // WG
    RUNS_ROW, A_RUNS, B_RUNS = run_counts()
%>
% if A_COPY and MODE == "forward":
        for (int i = 0; i < ${TM * TK // 8 // WG}; i++)
            *(__local uint4 *)&As[tid / ${TK // 8} + i * ${WG // (TK // 8)}][(tid % ${TK // 8}) * 8] = a_vec[i];
% elif A_COPY:
        for (int i = 0; i < ${TM * TK // 8 // WG}; i++)
            *(__local uint4 *)&As[tid / ${TM // 8} + i * ${WG // (TM // 8)}][(tid % ${TM // 8}) * 8] = a_vec[i];
% elif K_RUN > 1:
        for (int i = 0; i < ${A_RUNS}; i++)
            *(__local ${RUN_T} *)&As[tid / ${RUNS_ROW} + i * ${WG // RUNS_ROW}][(tid % ${RUNS_ROW}) * ${K_RUN}] = a_run[i];
% else:
        for (int i = 0; i < ${A_PER}; i++)
% if MODE == "backward_data":
            ${to_local("As", "tid / %d + i * %d" % (TM, WG // TM), "tid %% %d" % TM, "a_ld[i]", A_T)};
% else:
            ${to_local("As", "tid %% %d" % TK, "tid / %d + i * %d" % (TK, WG // TK), "a_ld[i]", A_T)};
% endif
% endif
% if X_RUNS or N_RUN > 1:
        for (int i = 0; i < ${B_RUNS}; i++)
            *(__local ${RUN_T} *)&Bs[tid / ${RUNS_ROW} + i * ${WG // RUNS_ROW}][(tid % ${RUNS_ROW}) * ${RUN}] = b_run[i];
% else:
        for (int i = 0; i < ${B_PER}; i++)
% if MODE == "backward_filter":
            ${to_local("Bs", "tid %% %d" % TK, "tid / %d + i * %d" % (TK, WG // TK), "b_ld[i]", B_T)};
% else:
            ${to_local("Bs", "tid / %d + i * %d" % (TN, WG // TN), "tid %% %d" % TN, "b_ld[i]", B_T)};
% endif
% endif
</%def>


## ---- the output: base and step of column n (row m at base + m * step), then one value
<%def name="out_column()">
% if MODE == "forward":
        const int bo = n / OUT_HW, po = n - bo * OUT_HW;
        const int base = (bo * OUT_C + g * KG) * OUT_HW + po, step = OUT_HW;
% elif MODE == "backward_data" and PHASES:
        const int bo = n / (ihp * iwp), po = n - bo * (ihp * iwp);
        const int ih = (po / iwp) * SH + ph, iw = (po % iwp) * SW + pw;
        const int base = (bo * IN_C + g * CG) * IN_HW + ih * IN_W + iw, step = IN_HW;
% elif MODE == "backward_data":
        const int bo = n / IN_HW, po = n - bo * IN_HW;
        const int base = (bo * IN_C + g * CG) * IN_HW + po, step = IN_HW;
% elif TAPS:
        const int tap_o = n / CPN, c_o = n - tap_o * CPN;  // dW's own (c, r, s) order
        if (c_o >= CG)
            continue;
        const int base = c_o * KHW + tap_o, step = W_ROW;
% else:
        const int base = n, step = GEMM_N;
% endif
</%def>
<%def name="out_write(value)">
            const int idx = base + m * step;
% if SPLIT:
            out[idx] = ${value};  // a partial sum: conv_split_reduce finishes it
% else:
            float v = alpha * ${value};
            if (beta != 0.0f)
                v += beta * LD_${O_T}(out, idx);
% if BIAS:
            v += bias[bias_offset + g * GEMM_M + m];
% endif
            ST_${O_T}(out, idx, ${"ACT_" + ACTIVATION}(v));
% endif
</%def>

% if MERGED and len(PHASE_LIST) > MERGED_SWITCH_MAX:
// the stride phases' sizes (ph, pw, ihp, iwp, r0, s0, rh, rw, qh, qw, taps), one row each
__constant int phase_sizes[${len(PHASE_LIST)}][11] = {
%   for row in PHASE_LIST:
    {${", ".join(str(v) for v in row)}},
%   endfor
};
% endif
__kernel __attribute__((reqd_work_group_size(${WG_N}, ${WG_M}, 1)))
void conv_gemm(int batch, ${geom_params}int splits, int k_per_split,
% if PHASES and not MERGED:
               int ph, int pw, int ihp, int iwp, int r0, int s0, int rh, int rw, int qh, int qw,
               int taps,
% endif
               __global const ${A_T} *a, ulong a_offset,
               __global const ${B_T} *b, ulong b_offset,
               __global ${GEMM_O_T} *out, ulong out_offset, ulong split_stride,
% if BIAS:
               __global const float *bias, ulong bias_offset,
% endif
               float alpha, float beta)
{
    // VEC = 4: each work-item owns runs of 4 rows/columns, read as float4 from local
    // memory (rows padded by 4 to keep them 16-byte aligned); VEC = 1: single strided
    // rows/columns, rows padded by 1 against bank conflicts
<%
    A_ROWS_N, B_ROWS_N = (TM if A_ROWS else TK), (TN if B_ROWS else TK)
    T_SIZE = 4 if LOCAL_T in ("float", "uint") else 2
    A_BYTES = (A_ROWS_N * tile_ld("As") * T_SIZE + 15) // 16 * 16
    B_BYTES = B_ROWS_N * tile_ld("Bs") * T_SIZE
    STAGE_BYTES = WG_M * WG_N // 32 * 16 * (WTN + 8) * 4 if STAGED else 0
%>
    // the tiles, and after the main loop the epilogue's rows (STAGED) in the same bytes
    __local uint4 tiles[${(max(A_BYTES + B_BYTES, STAGE_BYTES) + 15) // 16}];
    __local ${LOCAL_T} (*As)[${tile_ld("As")}] = (__local ${LOCAL_T} (*)[${tile_ld("As")}])tiles;
    __local ${LOCAL_T} (*Bs)[${tile_ld("Bs")}] =
        (__local ${LOCAL_T} (*)[${tile_ld("Bs")}])(tiles + ${A_BYTES // 16});
% if STAGED:
    __local float *stage = (__local float *)tiles;
% endif
% if MMA and context.get("MMA_EMULATE", False):
    __local uint mma_scratch[${WG_M * WG_N // 32 * 192}];  // mma.h's emulated products
% endif
    const int tid_n = get_local_id(0), tid_m = get_local_id(1);
    const int tid = tid_m * ${WG_N} + tid_n;
    const int m0 = get_group_id(1) * ${TM}, n0 = get_group_id(0) * ${TN};
<%def name="gemm_body()">
<%
    WG_M, WG_N = TM // WM, TN // WN
    WG = WG_M * WG_N
    A_PER, B_PER = TM * TK // WG, TK * TN // WG
    act = "ACT_" + ACTIVATION

    def col_of(tid, idx, wg):
        """The tile row/column of a work-item's idx-th accumulator (see VEC)."""
        if VEC == 4:
            return "%s * 4 + (%s & 3) + (%s >> 2) * %d" % (tid, idx, idx, wg * 4)
        return "%s + %s * %d" % (tid, idx, wg)
%>
    // z = (phase * GROUPS + g) * splits + split
    const int z = get_group_id(2)${" % (GROUPS * splits)" if MERGED else ""};
    const int g = z / splits, split = z % splits;
    const int k_begin = split * k_per_split;
    const int k_end = min((int)GEMM_K, k_begin + k_per_split);
    a += a_offset;
    b += b_offset;
    out += out_offset + split * split_stride;

% if MODE == "forward":
    a += g * KG * GEMM_K;                         // W rows of this group: [KG][CG*KHW]
    // this work-item always loads B column n0 + tid % TN (a run's first: N_RUN), so
    // decompose it once
    const int n_ld = n0 + ${load_column()};
    const bool n_ok = n_ld < GEMM_N;
    const int bn = n_ld / OUT_HW, pn = n_ld - bn * OUT_HW;
    const int ohn = pn / OUT_W, own = pn - ohn * OUT_W;
    const int ih0 = ohn * SH - PH, iw0 = own * SW - PW;
    const int x_base = (bn * IN_C + g * CG) * IN_HW;
% elif MODE == "backward_data" and PHASES:
    a += g * KG * ${"KHW * CP" if TAPS else "CG * KHW"};      // this group's weights (or their copy)
    const int n_ld = n0 + tid % ${TN};
    const bool n_ok = n_ld < GEMM_N;
    const int bn = n_ld / (ihp * iwp), pn = n_ld - bn * (ihp * iwp);
    const int ihn = pn / iwp, iwn = pn - ihn * iwp;   // position within the phase
    const int oh0 = ihn + qh, ow0 = iwn + qw;
    const int dy_base = (bn * OUT_C + g * KG) * OUT_HW;
% elif MODE == "backward_data":
    a += g * KG * ${"KHW * CP" if TAPS else "CG * KHW"};      // this group's W[k][c][r][s] (or their copy)
    const int n_ld = n0 + ${load_column()};
    const bool n_ok = n_ld < GEMM_N;
    const int bn = n_ld / IN_HW, pn = n_ld - bn * IN_HW;
    const int ihn = pn / IN_W, iwn = pn - ihn * IN_W;
    const int th0 = ihn + PH, tw0 = iwn + PW;
    const int dy_base = (bn * OUT_C + g * KG) * OUT_HW;
% elif TAPS:
    out += g * KG * W_ROW;                        // dW rows of this group
    const int tap_n = n0 / CPN, c0_n = n0 - tap_n * CPN;  // this work-group's tap
    const int r_n = tap_n / KW, s_n = tap_n - r_n * KW;
% else:
    out += g * KG * GEMM_N;                       // dW rows of this group
% endif

% if A_COPY:
    uint4 a_vec[${TM * TK // 8 // WG}];  // 8 16-bit values each
% elif K_RUN > 1:
    ${RUN_T} a_run[${run_counts()[1]}];  // K_RUN 16-bit values each
% else:
    REG_${A_T} a_ld[${A_PER}];  // raw bits until they are stored to local memory
% endif
% if X_RUNS or N_RUN > 1:
    ${RUN_T} b_run[${run_counts()[2]}];
% else:
    REG_${B_T} b_ld[${B_PER}];
% endif
% if K_RUN > 1:
    const bool a_runs_aligned = a_offset % ${RUN} == 0;  // whole-run loads of a
% endif
% if X_RUNS or N_RUN > 1:
    const bool b_runs_aligned = b_offset % ${RUN} == 0;  // whole-run loads of b
% endif
% if MMA:
    const int lane = tid & 31, warp = tid >> 5;
    const int lg = lane >> 2, lt = lane & 3;  // the fragments' row group and column
    const int wm = (warp / ${WARPS_N}) * ${WTM}, wn = (warp % ${WARPS_N}) * ${WTN};
    float acc[${MI}][${NI}][4];
    #pragma unroll
    for (int i = 0; i < ${MI}; i++) {
        #pragma unroll
        for (int j = 0; j < ${NI}; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    }
% else:
    float acc[${WM}][${WN}];
    for (int i = 0; i < ${WM}; i++)
        for (int j = 0; j < ${WN}; j++)
            acc[i][j] = 0.0f;
% endif


    ${load_tile("k_begin")}
    for (int k0 = k_begin; k0 < k_end; k0 += ${TK}) {
        barrier(CLK_LOCAL_MEM_FENCE);
${store_tiles()}
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + ${TK} < k_end)
            ${load_tile("(k0 + %d)" % TK)}
% if MMA == "tf32":
        ${UNROLL}
        for (int k8 = 0; k8 < ${TK}; k8 += 8) {
            uint af[${MI}][4], bf[${NI}][2];
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++) {
                const int m = wm + i * 16 + lg;
                af[i][0] = As[k8 + lt][m];
                af[i][1] = As[k8 + lt][m + 8];
                af[i][2] = As[k8 + lt + 4][m];
                af[i][3] = As[k8 + lt + 4][m + 8];
            }
            ${UNROLL}
            for (int j = 0; j < ${NI}; j++) {
                const int n = wn + j * 8 + lg;
                bf[j][0] = Bs[k8 + lt][n];
                bf[j][1] = Bs[k8 + lt + 4][n];
            }
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++) {
                ${UNROLL}
                for (int j = 0; j < ${NI}; j++)
                    MMA_TF32(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0], bf[j][1]);
            }
        }
% elif MMA:
        ${UNROLL}
        for (int k16 = 0; k16 < ${TK}; k16 += 16) {
            uint af[${MI}][4], bf[${NI}][2];
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++)
                A_FRAGMENTS(af[i], &As[0][0], wm + i * 16, k16, ${tile_ld("As")}, ${int(not A_ROWS)});
            ${UNROLL}
            for (int j = 0; j < ${NI}; j += 2) {
                uint v[4];
                B_FRAGMENTS(v, &Bs[0][0], wn + j * 8, k16, ${tile_ld("Bs")}, ${int(not B_ROWS)});
                bf[j][0] = v[0]; bf[j][1] = v[1]; bf[j + 1][0] = v[2]; bf[j + 1][1] = v[3];
            }
            ${UNROLL}
            for (int i = 0; i < ${MI}; i++) {
                ${UNROLL}
                for (int j = 0; j < ${NI}; j++)
                    ${"MMA_BF16" if MMA == "bf16" else "MMA_F16"}(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3],
                                                                bf[j][0], bf[j][1]);
            }
        }
% else:
        for (int kk = 0; kk < ${TK}; kk++) {
            float ar[${WM}], br[${WN}];
% if VEC == 4:
            for (int i = 0; i < ${WM // 4}; i++) {
                const float4 v = *(__local const float4 *)&As[kk][tid_m * 4 + i * ${WG_M * 4}];
                ar[4 * i] = v.s0; ar[4 * i + 1] = v.s1; ar[4 * i + 2] = v.s2; ar[4 * i + 3] = v.s3;
            }
            for (int j = 0; j < ${WN // 4}; j++) {
                const float4 v = *(__local const float4 *)&Bs[kk][tid_n * 4 + j * ${WG_N * 4}];
                br[4 * j] = v.s0; br[4 * j + 1] = v.s1; br[4 * j + 2] = v.s2; br[4 * j + 3] = v.s3;
            }
% else:
            for (int i = 0; i < ${WM}; i++)
                ar[i] = As[kk][tid_m + i * ${WG_M}];
            for (int j = 0; j < ${WN}; j++)
                br[j] = Bs[kk][tid_n + j * ${WG_N}];
% endif
            for (int i = 0; i < ${WM}; i++)
                for (int j = 0; j < ${WN}; j++)
                    acc[i][j] = mad(ar[i], br[j], acc[i][j]);
        }
% endif
    }

    // C = act(alpha * acc + beta * C + bias)
% if STAGED:
    // through local memory, 16 rows of each warp's block at a time: a lane then stores
    // along a row of the output (a warp's stores coalesce, where the fragments' own order
    // scatters them over 8 rows) and finds its columns' place in the output once.
    // Fragment value e of (i, j) is row lg (+8 for e >= 2), column 2 lt (+1 for odd e);
    // rows lie WTN + 8 floats apart, so a half-warp's float2 stores hit distinct banks.
    __local float *staged = stage + warp * ${16 * (WTN + 8)};
    int column_at[${WTN // 32}];
    #pragma unroll
    for (int q = 0; q < ${WTN // 32}; q++) {
        const int n = n0 + wn + q * 32 + lane;
        column_at[q] = -1;
        if (n < GEMM_N) {
${out_column()}
            column_at[q] = base;
        }
    }
    #pragma unroll
    for (int i = 0; i < ${MI}; i++) {
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int j = 0; j < ${NI}; j++) {
            #pragma unroll
            for (int h = 0; h < 2; h++)
                *(__local float2 *)(staged + (lg + 8 * h) * ${WTN + 8} + j * 8 + 2 * lt) =
                    (float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int q = 0; q < ${WTN // 32}; q++) {
            const int base = column_at[q], step = OUT_STEP;
            if (base < 0)
                continue;
            for (int row = 0; row < 16; row++) {
                const int m = m0 + wm + i * 16 + row;
                if (m >= GEMM_M)
                    break;
${out_write("staged[row * %d + q * 32 + lane]" % (WTN + 8))}
            }
        }
    }
% elif MMA:
    // fragment value e of (i, j) is row lg (+8 for e >= 2), column 2 lt (+1 for odd e)
    #pragma unroll
    for (int j = 0; j < ${NI}; j++) {
        #pragma unroll
        for (int w = 0; w < 2; w++) {
            const int n = n0 + wn + j * 8 + 2 * lt + w;
            if (n >= GEMM_N)
                continue;
${out_column()}
            #pragma unroll
            for (int i = 0; i < ${MI}; i++) {
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int m = m0 + wm + i * 16 + lg + 8 * h;
                    if (m >= GEMM_M)
                        continue;
${out_write("acc[i][j][2 * h + w]")}
                }
            }
        }
    }
% else:
    for (int j = 0; j < ${WN}; j++) {
        const int n = n0 + ${col_of("tid_n", "j", WG_N)};
        if (n >= GEMM_N)
            continue;
${out_column()}
        for (int i = 0; i < ${WM}; i++) {
            const int m = m0 + ${col_of("tid_m", "i", WG_M)};
            if (m >= GEMM_M)
                continue;
${out_write("acc[i][j]")}
        }
    }
% endif
</%def>
% if MERGED and len(PHASE_LIST) > MERGED_SWITCH_MAX:
    // this work-group's stride phase, its sizes read from the table: one GEMM body for
    // all of them (a case each would build a body per phase: 256 for a 16x16 stride-16
    // patch embedding, over a minute of one build)
    {
        __constant const int *p = phase_sizes[get_group_id(2) / (GROUPS * splits)];
        const int ph = p[0], pw = p[1], ihp = p[2], iwp = p[3], r0 = p[4], s0 = p[5];
        const int rh = p[6], rw = p[7], qh = p[8], qw = p[9], taps = p[10];
        if (n0 >= GEMM_N)
            return;
        ${gemm_body()}
    }
% elif MERGED:
    // this work-group's stride phase, its sizes as constants
    switch (get_group_id(2) / (GROUPS * splits)) {
%   for i, (ph, pw, ihp, iwp, r0, s0, rh, rw, qh, qw, taps) in enumerate(PHASE_LIST):
    case ${i}: {
        const int ph = ${ph}, pw = ${pw}, ihp = ${ihp}, iwp = ${iwp}, r0 = ${r0}, s0 = ${s0};
        const int rh = ${rh}, rw = ${rw}, qh = ${qh}, qw = ${qw}, taps = ${taps};
        if (n0 >= GEMM_N)
            return;
        ${gemm_body()}
        break;
    }
%   endfor
    }
% else:
    ${gemm_body()}
% endif
}

// out = act(beta * out + sum over splits of the partials in ws + bias[(i / plane) % channels])
__kernel void conv_split_reduce(int n, int splits, int plane, int channels,
                                __global const float *ws, ulong ws_offset,
                                __global ${O_T} *out, ulong out_offset,
% if BIAS:
                                __global const float *bias, ulong bias_offset,
% endif
                                float beta)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    ws += ws_offset + i;
    float sum = 0.0f;
    for (int s = 0; s < splits; s++)
        sum += ws[s * n];
    out += out_offset;
    float v = beta == 0.0f ? sum : beta * LD_${O_T}(out, i) + sum;
% if BIAS:
    v += bias[bias_offset + (i / plane) % channels];
% endif
    ST_${O_T}(out, i, ${"ACT_" + ACTIVATION}(v));
}
