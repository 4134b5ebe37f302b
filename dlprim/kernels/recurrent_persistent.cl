<%include file="common.h"/>
% if ASYNC:
<%include file="mma.h"/>
% endif
// One recurrent layer in one direction over every time step in one launch (GPUs): P
// work-groups stay resident for the whole sequence, each owning U hidden units, and meet
// at a grid barrier once per step. A step per launch costs two launches and their host
// time (tens of microseconds on NVIDIA's driver), more than the step's arithmetic.
//
// Work-group p owns units u0 = p U .. u0 + U - 1; work-item (kp, ng, uu) of it owns unit
// u0 + uu of batch rows ng, ng + NG, ... (NB of them) and part kp of KSPLIT of the
// columns of a step's product (the parts summed through local memory). A unit's own
// state (c, the GRU's h, the gradients dh and dc) stays in part 0's registers; only h
// (forward) and gradients (backward) cross work-groups, through global memory read back
// past the L1 cache (not coherent between SMs).
//
// Forward: hg = h_prev W_hh^T + b_hh for the work-group's G x U rows of W_hh (WEIGHTS
// "local": held in local memory; "stream": staged with h round by round),
// h_prev staged KC columns a round; then the gate formulas of kernels/recurrent.cl, the
// same saved gates (N x 4H per step).
// Backward: dG of the step from dh and dc (recurrent.cl's formulas), a grid barrier, then
// dh_prev = dhg W_hh: SUMS, each work-group's own N x G U gradients times its own G U
// rows of W_hh, written as the units' owners' blocks and summed by them after the
// barrier; else the N x G H gradients staged as the forward stages h, over the
// work-group's U columns of W_hh.
//
// CELL lstm | gru, G gates; N rows and H units; U units per work-group; NB rows per
// work-item; KC columns staged per round. ASYNC (the forward, W_hh's slice local, rows of
// h on 16 bytes): the rounds copied by cp.async (mma.h; emulated elsewhere), ASYNC stages
// of them, ASYNC - 1 rounds in flight while one is multiplied, instead of one round held in
// registers.
<%
    G = 4 if CELL == "lstm" else 3
    H4 = (H + 3) // 4 * 4
    GH = G * H
    GH4 = (GH + 3) // 4 * 4
    HS = H4 + 4         # local row strides: float4-aligned, rows 4 banks apart
    GHS = GH4 + 4
    KS = KC + 4
    SPT = (N * KC + THREADS - 1) // THREADS   # staged values per work-item and round
    WSPT_F = (G * U * KC + THREADS - 1) // THREADS   # staged weights ("stream")
    WSPT_B = (U * KC + THREADS - 1) // THREADS
    DGS = (G * U + 3) // 4 * 4 + 4   # row stride of the backward's own gradients (SUMS)
    # the backward's shares written by teams of SH_R x U work-items, one owner's block at
    # a time: SH_R rows of its U units a store, so that a store fills a 32-byte sector
    # (8 floats; more rows a team read more distinct rows of the gradients from local
    # memory: 7.7 us a step at 8 floats, 8.2 at 32, LSTM 64 x 512, H200)
    SH_R = max(1, min(8 // U, THREADS // U, N))
    SH_TEAM = SH_R * U
    SH_TEAMS = max(1, THREADS // SH_TEAM)
    # the staged rows' memory also takes the column parts' sums
    XS = max(max(1, ASYNC) * N * KS, ((KSPLIT - 1) * U * NG * NB * G + 3) // 4 * 4)
    XSB = max(4, ((KSPLIT - 1) * U * NG * NB + 3) // 4 * 4) if SUMS else XS
    NVIDIA = getattr(facts, "vendor_id", "") == "nvidia"
%>
#define G ${G}
#define N ${N}
#define H ${H}
#define U ${U}
#define NB ${NB}
#define KC ${KC}
#define KS ${KS}
#define SPT ${SPT}
#define NG ${NG}
#define KSPLIT ${KSPLIT}
#define CELL_GRU ${int(CELL == "gru")}

<%include file="recurrent.h"/>
<%include file="global_fence.h" args="ptx=NVIDIA"/>

// Every work-group's global writes so far visible to every other work-group after it.
// A work-group that waits longer than ``spins`` reads of the counter (work-groups not all
// resident: the launch was too large for the device) marks the launch failed in sync[1]
// and stops waiting; its results are then NaN (never a plausible value).

inline int grid_sync(volatile __global uint *sync, uint target, uint spins, __local int *failed)
{
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        global_fence();
        atomic_inc(sync);
        uint n = 0;
        while (sync[0] < target && !*failed) {
            if (++n > spins || sync[1]) {
                atomic_or(sync + 1, 1u);
                *failed = 1;
            }
        }
        global_fence();
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    return *failed;
}

// Loads of what other work-groups wrote in this launch: past the L1 cache (not coherent
// between SMs), yet pipelined (NVIDIA: ld.global.cg; elsewhere a volatile load)
% if NVIDIA:
inline float load_fresh(__global const float *p)
{
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
% else:
inline float load_fresh(__global const float *p)
{
    return *(volatile __global const float *)p;
}
% endif

// TIMING (benchmarks/rnn_step_phases.py, NVIDIA): work-item 0 of each work-group
// writes the SM's clock at a step's phases to times[(group L + s) 8 + i]
% if TIMING:
#define STAMP(s, i) \
    if (lid == 0) { \
        ulong c_; \
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)); \
        times[times_offset + ((ulong)get_group_id(0) * L + (s)) * 8 + (i)] = c_; \
    }
#define TIMES_ARG __global ulong *times, ulong times_offset,
% else:
#define STAMP(s, i)
#define TIMES_ARG
% endif

// acc[i][r] += sum_k XP[n_i, k] w(r, k) over K columns of the rows XP (global, row stride
// XROW, written by other work-groups) against the R weight rows of this work-item.
// Rounds of KC columns: every work-item holds SPT of the next round's values in
// registers, loaded while the current round computes from local memory (the loads'
// latency, not the arithmetic, bounds a round). Columns past K stage as 0, and the weight
// rows are zero past their end up to a multiple of 4, so the products go 4 columns at a
// time (float4 loads from local memory). WROW4(r, k0, k) gives weight row r's columns
// k0 + k .. k0 + k + 3. Weights too many for local memory ("stream") are staged with the
// rows, round by round: W_PRE, W_LOAD and W_STORE do it, nothing otherwise.
// A work-item stages the same (row, column) places every round: sn[q], sk[q] (sk = KC for
// a place past the N x KC of a round), worked out once per launch
#define STAGE_PLACES \
    int sn[SPT], sk[SPT]; \
    for (int q = 0; q < SPT; q++) { \
        int e = lid + q * ${THREADS}; \
        sn[q] = min(e / KC, N - 1); \
        sk[q] = e < N * KC ? e - (e / KC) * KC : KC; \
    }

#define STAGE_LOAD(pre, XP, XROW, K, k0) \
    for (int q = 0; q < SPT; q++) \
        pre[q] = sk[q] < KC && (k0) + sk[q] < (K) ? \
            load_fresh((XP) + (ulong)sn[q] * (XROW) + (k0) + sk[q]) : 0.0f;

// acc[i][r] of the KSPLIT work-items sharing a unit and rows, summed into part 0's
#define SUM_PARTS(R) \
    if (KSPLIT > 1) { \
        barrier(CLK_LOCAL_MEM_FENCE); \
        if (kp > 0) \
            for (int i = 0; i < NB; i++) \
                for (int r = 0; r < (R); r++) \
                    xs[(((kp - 1) * U * NG + own) * NB + i) * (R) + r] = acc[i][r]; \
        barrier(CLK_LOCAL_MEM_FENCE); \
        if (kp == 0) \
            for (int q = 1; q < KSPLIT; q++) \
                for (int i = 0; i < NB; i++) \
                    for (int r = 0; r < (R); r++) \
                        acc[i][r] += xs[(((q - 1) * U * NG + own) * NB + i) * (R) + r]; \
    }

// acc[i][r] += a round's products: the staged rows XQ (N x KS, from column k0 of K) by
// the weight rows, this work-item's part of the columns, 4 at a time
#define ROUND_PRODUCT(XQ, K, k0, R, WROW4) { \
    const int kend = min(KC, ((K) - (k0) + 3) / 4 * 4); \
    for (int k = 4 * kp; k < kend; k += 4 * KSPLIT) { \
        float4 xv[NB]; \
        for (int i = 0; i < NB; i++) \
            xv[i] = (XQ)[(min(ng + i * NG, N - 1) * KS + k) / 4]; \
        for (int r = 0; r < (R); r++) { \
            float4 w = WROW4(r, k0, k); \
            for (int i = 0; i < NB; i++) { \
                acc[i][r] = fma(xv[i].x, w.x, acc[i][r]); \
                acc[i][r] = fma(xv[i].y, w.y, acc[i][r]); \
                acc[i][r] = fma(xv[i].z, w.z, acc[i][r]); \
                acc[i][r] = fma(xv[i].w, w.w, acc[i][r]); \
            } \
        } \
    } \
}

#define STAGED_PRODUCT(K, XP, XROW, R, WROW4) { \
    float pre[SPT]; \
    W_PRE \
    STAGE_LOAD(pre, XP, XROW, K, 0) \
    W_LOAD(0) \
    for (int k0 = 0; k0 < (K); k0 += KC) { \
        barrier(CLK_LOCAL_MEM_FENCE); \
        for (int q = 0; q < SPT; q++) \
            if (sk[q] < KC) \
                xs[sn[q] * KS + sk[q]] = pre[q]; \
        W_STORE \
        barrier(CLK_LOCAL_MEM_FENCE); \
        if (k0 + KC < (K)) { \
            STAGE_LOAD(pre, XP, XROW, K, k0 + KC) \
            W_LOAD(k0 + KC) \
        } \
        ROUND_PRODUCT(xs4, K, k0, R, WROW4) \
    } \
    SUM_PARTS(R) \
}

% if ASYNC:
// STAGED_PRODUCT with the rounds copied into ASYNC stages of N x KS by cp.async: round q
// into stage q % ASYNC, issued ASYNC - 1 rounds ahead of its products (each work-item's
// copies of a round are one group, waited for before the barrier that publishes it);
// columns past K copy as zeros
#define STAGE_ASYNC(XP, XROW, K, q) \
    for (int e = lid; e < N * (KC / 4); e += ${THREADS}) { \
        const int n = e / (KC / 4), k = (q) * KC + (e - n * (KC / 4)) * 4; \
        __global const float *src_ = (XP) + (ulong)n * (XROW) + (k < (K) ? k : 0); \
        COPY_ASYNC((__local ushort *)(xs + ((q) % ${ASYNC}) * N * KS + n * KS + k - (q) * KC), \
                   (__global const ushort *)src_, k < (K) ? 16 : 0); \
    }

#define STAGED_PRODUCT_ASYNC(K, XP, XROW, R, WROW4) { \
    const int rounds = ((K) + KC - 1) / KC; \
    for (int q = 0; q < ${ASYNC - 1}; q++) { \
        if (q < rounds) \
            STAGE_ASYNC(XP, XROW, K, q) \
        COPY_ASYNC_COMMIT(); \
    } \
    for (int q = 0; q < rounds; q++) { \
        COPY_ASYNC_WAIT(${ASYNC - 2});  /* this work-item's copies of round q */ \
        barrier(CLK_LOCAL_MEM_FENCE);  /* everyone's; and round q - 1's stage is free */ \
        if (q + ${ASYNC - 1} < rounds) \
            STAGE_ASYNC(XP, XROW, K, q + ${ASYNC - 1}) \
        COPY_ASYNC_COMMIT(); \
        ROUND_PRODUCT(xs4 + (q % ${ASYNC}) * (N * KS / 4), K, q * KC, R, WROW4) \
    } \
    SUM_PARTS(R) \
}
% endif

// Who a work-item is (see the top), the places it stages, the launch's sync counter and
// W_hh
#define WORK_ITEM \
    __local int failed; \
    const int lid = get_local_id(0), kp = lid / (U * NG), own = lid - kp * U * NG; \
    const int uu = own % U, ng = own / U, u = get_group_id(0) * U + uu; \
    STAGE_PLACES \
    const int P = get_num_groups(0); \
    const bool unit = u < H; \
    const int uc = min(u, H - 1); /* a unit to read for work-items past the last one */ \
    sync += sync_offset; \
    w_hh += w_hh_offset; \
    if (lid == 0) \
        failed = 0;

// The work-group's G x U rows of W_hh into local memory (gate g of unit v at row g U + v,
// rows zero past H up to a multiple of 4)
#define OWN_ROWS(wl) \
    for (int e = lid; e < G * U * ${H4}; e += get_local_size(0)) { \
        int row = e / ${H4}, k = e - row * ${H4}; \
        int g = row / U, v = min((int)get_group_id(0) * U + row - g * U, H - 1); \
        wl[row * ${HS} + k] = k < H ? w_hh[(ulong)(g * H + v) * H + k] : 0.0f; \
    }

#define W_PRE
#define W_LOAD(k0)
#define W_STORE

__kernel __attribute__((reqd_work_group_size(${THREADS}, 1, 1)))
void ${CELL}_persistent_forward(int L, int reverse, uint spins,
        __global const float *xg, ulong xg_offset, ulong xg_base, ulong xg_step, ulong xg_row,
        __global const float *w_hh, ulong w_hh_offset,
% if BIAS:
        __global const float *b_hh, ulong b_hh_offset,
% endif
        __global const float *h0, ulong h0_offset,
% if CELL == "lstm":
        __global const float *c0, ulong c0_offset,
        __global float *cells, ulong cells_offset, int cells_full,
% endif
        __global float *y, ulong y_offset, ulong y_base, ulong y_step, ulong y_row,
% if SAVE:
        __global float *gates, ulong gates_offset,
% endif
        TIMES_ARG
        volatile __global uint *sync, ulong sync_offset)
{
    __local float4 xs4[${XS // 4}];  // float4: 16-byte local loads
    __local float *xs = (__local float *)xs4;
    WORK_ITEM
    xg += xg_offset + xg_base;
    y += y_offset + y_base;
% if WEIGHTS == "local":
    // the work-group's G x U rows of W_hh: gate g of unit uu at row g U + uu
    __local float4 wl4[G * U * ${HS // 4}];
    __local float *wl = (__local float *)wl4;
    OWN_ROWS(wl)
    #define WROW4(r, k0, k) wl4[(((r) * U + uu) * ${HS} + (k0) + (k)) / 4]
% else:
    // the same rows, KC columns a round beside the staged h
    __local float4 wl4[G * U * KS / 4];
    __local float *wl = (__local float *)wl4;
    #undef W_PRE
    #undef W_LOAD
    #undef W_STORE
    #define W_PRE float wpre[${WSPT_F}];
    #define W_LOAD(k0) \
        for (int q = 0; q < ${WSPT_F}; q++) { \
            int e = lid + q * ${THREADS}, row = e / KC, k = e - row * KC; \
            int g = row / U, v = min((int)get_group_id(0) * U + row - g * U, H - 1); \
            wpre[q] = e < G * U * KC && (k0) + k < H ? w_hh[(ulong)(g * H + v) * H + (k0) + k] \
                                                     : 0.0f; \
        }
    #define W_STORE \
        for (int q = 0; q < ${WSPT_F}; q++) { \
            int e = lid + q * ${THREADS}, row = e / KC; \
            if (e < G * U * KC) \
                wl[row * KS + e - row * KC] = wpre[q]; \
        }
    #define WROW4(r, k0, k) wl4[(((r) * U + uu) * KS + (k)) / 4]
% endif
    float bias[G];  // b_hh of the unit's gates, added by part 0 of the columns
    for (int r = 0; r < G; r++)
% if BIAS:
        bias[r] = kp == 0 ? b_hh[b_hh_offset + r * H + uc] : 0.0f;
% else:
        bias[r] = 0.0f;
% endif
    float state[NB];  // c for the LSTM, h for the GRU
    for (int i = 0; i < NB; i++) {
        int n = min(ng + i * NG, N - 1);
% if CELL == "lstm":
        state[i] = c0[c0_offset + (ulong)n * H + uc];
% else:
        state[i] = h0[h0_offset + (ulong)n * H + uc];
% endif
    }
    // the input projection's values of the unit's rows, loaded a step ahead: they do not
    // depend on h, and read when the product is done they cost a memory latency a row
    // (1.6 of 13 us a step at 64 x 512, 6.1 us with 4 rows a work-item; H200)
    float xin[NB][G];
    #define X_LOAD(s_) \
        if (kp == 0) \
            for (int i = 0; i < NB; i++) { \
                __global const float *x_ = xg + (reverse ? L - 1 - (s_) : (s_)) * xg_step \
                                           + min(ng + i * NG, N - 1) * xg_row + uc; \
                for (int g = 0; g < G; g++) \
                    xin[i][g] = x_[g * H]; \
            }
    X_LOAD(0)
    for (int s = 0; s < L; s++) {
        const int t = reverse ? L - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        __global const float *hp = s == 0 ? h0 + h0_offset : y + tp * y_step;
        const ulong hp_row = s == 0 ? H : y_row;
        STAMP(s, 0)
        float acc[NB][G];
        for (int i = 0; i < NB; i++)
            for (int r = 0; r < G; r++)
                acc[i][r] = bias[r];
% if ASYNC:
        STAGED_PRODUCT_ASYNC(H, hp, hp_row, G, WROW4)
% else:
        STAGED_PRODUCT(H, hp, hp_row, G, WROW4)
% endif
        STAMP(s, 1)
        const int bad = failed;
        for (int i = 0; i < NB; i++) {
            int n = ng + i * NG;
            if (!unit || n >= N || kp)
                continue;
            float v[4];
% if CELL == "lstm":
            float cell = lstm_gates(xin[i][0] + acc[i][0], xin[i][1] + acc[i][1],
                                    xin[i][2] + acc[i][2], xin[i][3] + acc[i][3], state[i], v);
            state[i] = cell;
            ulong slot = cells_full ? t : s % 2;
            cells[cells_offset + (slot * N + n) * H + u] = bad ? NAN : cell;
            y[t * y_step + n * y_row + u] = bad ? NAN : v[3] * tanh(cell);
% else:
            state[i] = gru_gates(xin[i][0], xin[i][1], xin[i][2], acc[i][0], acc[i][1],
                                 acc[i][2], state[i], v);
            y[t * y_step + n * y_row + u] = bad ? NAN : state[i];
% endif
% if SAVE:
            __global float *sv = gates + gates_offset + ((ulong)t * N + n) * 4 * H + u;
            for (int q = 0; q < 4; q++)
                sv[q * H] = v[q];
% endif
        }
        STAMP(s, 2)
        if (s + 1 < L) {
            X_LOAD(s + 1)
            grid_sync(sync, (uint)(s + 1) * P, spins, &failed);
        }
        STAMP(s, 3)
    }
    #undef X_LOAD
    #undef WROW4
% if WEIGHTS == "stream":
    #undef W_PRE
    #undef W_LOAD
    #undef W_STORE
    #define W_PRE
    #define W_LOAD(k0)
    #define W_STORE
% endif
}

// dh (N x H) and dc hold the gradients of the last step's h and c on entry (the launcher
// fills them) and those of the initial states on return. dxg (and for the GRU dhg) get the
// pre-activation gradients of every step, N x G H per step, as kernels/recurrent.cl's
// backward writes them.
__kernel __attribute__((reqd_work_group_size(${THREADS}, 1, 1)))
void ${CELL}_persistent_backward(int L, int reverse, uint spins,
% if DY:
        __global const float *dy, ulong dy_offset, ulong dy_base, ulong dy_step, ulong dy_row,
% endif
        __global const float *w_hh, ulong w_hh_offset,
        __global float *dh, ulong dh_offset,
% if CELL == "lstm":
        __global float *dc, ulong dc_offset,
        __global const float *cells, ulong cells_offset,
        __global const float *c0, ulong c0_offset,
% else:
        __global const float *hseq, ulong hseq_offset, ulong hseq_base, ulong hseq_step,
        ulong hseq_row,
        __global const float *h0, ulong h0_offset,
        __global float *dhg, ulong dhg_offset,
% endif
        __global const float *gates, ulong gates_offset,
        __global float *dxg, ulong dxg_offset,
% if SUMS:
        __global float *parts, ulong parts_offset,
% endif
        TIMES_ARG
        volatile __global uint *sync, ulong sync_offset)
{
    __local float4 xs4[${XSB // 4}];  // float4: 16-byte local loads
    __local float *xs = (__local float *)xs4;
    WORK_ITEM
    dxg += dxg_offset;
% if CELL == "lstm":
    __global float *dhg = dxg;  // the LSTM's hidden part is its whole gradient
% else:
    dhg += dhg_offset;
% endif
% if SUMS:
    // the work-group's own G x U rows of W_hh (gate g of unit v at row g U + v), and its
    // gradients of those rows for the step, N x G U
    __local float4 wl4[G * U * ${HS // 4}];
    __local float *wl = (__local float *)wl4;
    OWN_ROWS(wl)
    __local float4 dgl4[N * ${DGS // 4}];
    __local float *dgl = (__local float *)dgl4;
    parts += parts_offset;
% elif WEIGHTS == "local":
    // the work-group's U columns of W_hh, transposed: column uu at row uu
    __local float4 wl4[U * ${GHS // 4}];
    __local float *wl = (__local float *)wl4;
    for (int e = lid; e < U * ${GH4}; e += get_local_size(0)) {
        int v = e / ${GH4}, j = e - v * ${GH4};
        wl[v * ${GHS} + j] = j < ${GH} ?
            w_hh[(ulong)j * H + min((int)get_group_id(0) * U + v, H - 1)] : 0.0f;
    }
    #define WCOL4(r, j0, j) wl4[(uu * ${GHS} + (j0) + (j)) / 4]
% else:
    // the same columns, KC rows of W_hh a round beside the staged gradients
    __local float4 wl4[U * KS / 4];
    __local float *wl = (__local float *)wl4;
    #undef W_PRE
    #undef W_LOAD
    #undef W_STORE
    #define W_PRE float wpre[${WSPT_B}];
    #define W_LOAD(j0) \
        for (int q = 0; q < ${WSPT_B}; q++) { \
            int e = lid + q * ${THREADS}, j = e / U, v = e - j * U; \
            wpre[q] = e < U * KC && (j0) + j < ${GH} ? \
                w_hh[(ulong)((j0) + j) * H + min((int)get_group_id(0) * U + v, H - 1)] : 0.0f; \
        }
    #define W_STORE \
        for (int q = 0; q < ${WSPT_B}; q++) { \
            int e = lid + q * ${THREADS}, j = e / U; \
            if (e < U * KC) \
                wl[(e - j * U) * KS + j] = wpre[q]; \
        }
    #define WCOL4(r, j0, j) wl4[(uu * KS + (j)) / 4]
% endif
    float dh_r[NB];
% if CELL == "lstm":
    float dc_r[NB];
% endif
    for (int i = 0; i < NB; i++) {
        ulong k = (ulong)min(ng + i * NG, N - 1) * H + uc;
        dh_r[i] = dh[dh_offset + k];
% if CELL == "lstm":
        dc_r[i] = dc[dc_offset + k];
% endif
    }
    // what a step's gate gradients read besides dh (saved gates, cells or h_prev, dy),
    // loaded a step ahead: none of it depends on dh, and read when dh is there it costs
    // a memory latency a row
    float ld_v[NB][4], ld_b[NB], ld_dy[NB];
% if CELL == "lstm":
    float ld_a[NB];
% endif
    #define BACK_LOAD(s_) \
        if (kp == 0) { \
            const int t_ = reverse ? L - 1 - (s_) : (s_), tp_ = reverse ? t_ + 1 : t_ - 1; \
            for (int i = 0; i < NB; i++) { \
                const int n = min(ng + i * NG, N - 1); \
                __global const float *sv = gates + gates_offset + ((ulong)t_ * N + n) * 4 * H \
                                           + uc; \
                for (int q = 0; q < 4; q++) \
                    ld_v[i][q] = sv[q * H]; \
                BACK_LOAD_CELL(s_, t_, tp_, n) \
                BACK_LOAD_DY(t_, n) \
            } \
        }
% if CELL == "lstm":
    // ld_a: c of the step, ld_b: c of the step before
    #define BACK_LOAD_CELL(s_, t_, tp_, n) \
        ld_a[i] = cells[cells_offset + ((ulong)(t_) * N + (n)) * H + uc]; \
        ld_b[i] = (s_) == 0 ? c0[c0_offset + (ulong)(n) * H + uc] \
                            : cells[cells_offset + ((ulong)(tp_) * N + (n)) * H + uc];
% else:
    // ld_b: h of the step before
    #define BACK_LOAD_CELL(s_, t_, tp_, n) \
        ld_b[i] = (s_) == 0 ? h0[h0_offset + (ulong)(n) * H + uc] \
                            : hseq[hseq_offset + hseq_base + (tp_) * hseq_step \
                                   + (n) * hseq_row + uc];
% endif
% if DY:
    #define BACK_LOAD_DY(t_, n) \
        ld_dy[i] = dy[dy_offset + dy_base + (t_) * dy_step + (n) * dy_row + uc];
% else:
    #define BACK_LOAD_DY(t_, n) ld_dy[i] = 0.0f;
% endif
    BACK_LOAD(L - 1)
    for (int s = L - 1; s >= 0; s--) {
        const int t = reverse ? L - 1 - s : s;
        STAMP(s, 0)
        float keep[NB];  // the GRU's direct part of dh_prev, dh z
        for (int i = 0; i < NB; i++) {
            int n = ng + i * NG;
            keep[i] = 0.0f;
% if SUMS:
            if (!unit && n < N && !kp)  // a unit past H: no gradient
                for (int g = 0; g < G; g++)
                    dgl[n * ${DGS} + g * U + uu] = 0.0f;
% endif
            if (!unit || n >= N || kp)
                continue;
            float dh_t = dh_r[i] + ld_dy[i], d[G];
% if CELL == "lstm":
            dc_r[i] = lstm_grads(dh_t, dc_r[i], ld_v[i], ld_a[i], ld_b[i], d);
% else:
            keep[i] = gru_grads(dh_t, ld_v[i], ld_b[i], d);
% endif
            const float *v = ld_v[i];
            // the input parts' gradients; the hidden parts' (the GRU's n block times r)
            // go on to dh_prev
            __global float *dx = dxg + ((ulong)t * N + n) * G * H + u;
            __global float *dq = dhg + ((ulong)t * N + n) * G * H + u;
            for (int g = 0; g < G; g++) {
                float hidden = CELL_GRU && g == 2 ? d[2] * v[0] : d[g];
                dx[g * H] = d[g];
                if (CELL_GRU)  // (the LSTM's dhg is dxg itself)
                    dq[g * H] = hidden;
% if SUMS:
                dgl[n * ${DGS} + g * U + uu] = hidden;
% endif
            }
        }
        if (s > 0)
            BACK_LOAD(s - 1)
% if SUMS:
        // this work-group's share of dh_prev for every unit: its G U gradient columns
        // times its G U rows of W_hh, written as the block [parity][owner][this][n][v]
        // of the unit's owner; after the barrier each work-group adds up its units' P
        // blocks (two parities: a work-group a step ahead writes the other one). A team
        // of work-items writes an owner's block SH_R rows at a time, a work-item a column:
        // with fewer than 8 units a work-group, a work-item a column for every row wrote
        // pieces of half a sector (13.4 against 7.7 us a step, LSTM 64 x 512, H200)
        STAMP(s, 1)
        barrier(CLK_LOCAL_MEM_FENCE);
        __global float *mine = parts + (ulong)((s & 1) * P) * P * N * U;
        const int team = lid / ${SH_TEAM}, team_row = lid % ${SH_TEAM} / U, team_v = lid % U;
        for (int o = team < ${SH_TEAMS} ? team : P; o < P; o += ${SH_TEAMS}) {
            const int c = min(o * U + team_v, H - 1);
            float wc[G * U];
            for (int r = 0; r < G * U; r++)
                wc[r] = wl[r * ${HS} + c];
            __global float *block = mine + ((ulong)o * P + get_group_id(0)) * N * U + team_v;
            for (int n = team_row; n < N; n += ${SH_R}) {
                float sum = 0.0f;
                for (int r = 0; r < G * U; r += 4) {
                    float4 g4 = dgl4[(n * ${DGS} + r) / 4];
                    sum = fma(g4.x, wc[r], sum);
                    sum = r + 1 < G * U ? fma(g4.y, wc[r + 1], sum) : sum;
                    sum = r + 2 < G * U ? fma(g4.z, wc[r + 2], sum) : sum;
                    sum = r + 3 < G * U ? fma(g4.w, wc[r + 3], sum) : sum;
                }
                block[n * U] = sum;
            }
        }
        STAMP(s, 2)
        grid_sync(sync, (uint)(L - s) * P, spins, &failed);
        STAMP(s, 3)
        float acc[NB][1];
        __global const float *blocks = mine + (ulong)get_group_id(0) * P * N * U;
        for (int i = 0; i < NB; i++) {
            int n = min(ng + i * NG, N - 1);
            float sum = kp == 0 ? keep[i] : 0.0f;
            for (int q = kp; q < P; q += KSPLIT)
                sum += load_fresh(blocks + ((ulong)q * N + n) * U + uu);
            acc[i][0] = sum;
        }
        SUM_PARTS(1)
        STAMP(s, 4)
% else:
        STAMP(s, 1)
        STAMP(s, 2)
        grid_sync(sync, (uint)(L - s) * P, spins, &failed);
        float acc[NB][1];
        for (int i = 0; i < NB; i++)
            acc[i][0] = keep[i];
        STAMP(s, 3)
        STAGED_PRODUCT(G * H, dhg + (ulong)t * N * G * H, G * H, 1, WCOL4)
        STAMP(s, 4)
% endif
        for (int i = 0; i < NB; i++)
            dh_r[i] = acc[i][0];
    }
    #undef WCOL4
    #undef BACK_LOAD
    #undef BACK_LOAD_CELL
    #undef BACK_LOAD_DY
    const int bad = failed;
    for (int i = 0; i < NB; i++) {
        int n = ng + i * NG;
        if (!unit || n >= N || kp)
            continue;
        ulong k = (ulong)n * H + u;
        dh[dh_offset + k] = bad ? NAN : dh_r[i];
% if CELL == "lstm":
        dc[dc_offset + k] = bad ? NAN : dc_r[i];
% endif
    }
}
