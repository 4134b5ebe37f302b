<%include file="common.h"/>
// One recurrent layer in one direction over every time step in one launch (GPUs): P
// work-groups stay resident for the whole sequence, each owning U hidden units, and meet
// at a grid barrier once per step. A step per launch costs two launches and their host
// time (tens of microseconds on NVIDIA's driver), more than the step's arithmetic.
//
// Work-group p owns units u0 = p U .. u0 + U - 1; work-item (uu, ng) of it owns unit
// u0 + uu of batch rows ng, ng + NG, ... (NB of them, NG = local size / U). A unit's own
// state (c, the GRU's h, the gradients dh and dc) stays in its work-item's registers; only
// h (forward) and the pre-activation gradients (backward) cross work-groups, through
// global memory read back with volatile loads (past the L1 cache, which another SM's
// writes do not update).
//
// Forward: hg = h_prev W_hh^T + b_hh for the work-group's G x U rows of W_hh (held in
// local memory when they fit: WLOCAL), h_prev staged KC columns at a time; then the gate
// formulas of kernels/recurrent.cl, the same saved gates (N x 4H per step).
// Backward: dG of the step from dh and dc (recurrent.cl's formulas), a grid barrier, then
// dh_prev = dhg W_hh over the work-group's U columns of W_hh.
//
// CELL lstm | gru, G gates; N rows and H units; U units per work-group; NB rows per
// work-item; KC columns staged per round.
<%
    G = 4 if CELL == "lstm" else 3
    HS = H + 1          # local row stride of the forward's weight rows (no bank conflict)
    GH = G * H
    KS = KC + 1         # local row stride of the staged rows
    NVIDIA = getattr(facts, "vendor_id", "") == "nvidia"
%>
#define G ${G}
#define N ${N}
#define H ${H}
#define U ${U}
#define NB ${NB}
#define KC ${KC}
#define KS ${KS}

inline float rnn_sigmoid(float x)
{
    return 1.0f / (1.0f + exp(-x));
}

// Every work-group's global writes so far visible to every other work-group after it.
// A work-group that waits longer than ``spins`` reads of the counter (work-groups not all
// resident: the launch was too large for the device) marks the launch failed in sync[1]
// and stops waiting; its results are then NaN (never a plausible value).
inline void global_fence(void)
{
% if NVIDIA:
    asm volatile("membar.gl;");
% else:
    mem_fence(CLK_GLOBAL_MEM_FENCE);
% endif
}

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

// acc[i][r] += sum_k x[n_i, k] w(r, k) over K columns of rows x (global, row stride
// x_row, read volatile) against R weight rows per work-item, staged KC columns a round.
// ``WROW(r, k)`` reads weight row r of this work-item at column k.
#define STAGED_PRODUCT(K, x, x_row, R, WROW) \
    for (int k0 = 0; k0 < (K); k0 += KC) { \
        barrier(CLK_LOCAL_MEM_FENCE); \
        for (int e = lid; e < N * KC; e += get_local_size(0)) { \
            int n = e / KC, k = e - n * KC; \
            xs[n * KS + k] = k0 + k < (K) ? (x)[(ulong)n * (x_row) + k0 + k] : 0.0f; \
        } \
        barrier(CLK_LOCAL_MEM_FENCE); \
        int kend = min(KC, (K) - k0); \
        for (int k = 0; k < kend; k++) { \
            float xv[NB]; \
            for (int i = 0; i < NB; i++) \
                xv[i] = xs[min(ng + i * NG, N - 1) * KS + k]; \
            for (int r = 0; r < (R); r++) { \
                float w = WROW(r, k0 + k); \
                for (int i = 0; i < NB; i++) \
                    acc[i][r] = fma(xv[i], w, acc[i][r]); \
            } \
        } \
    }

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
        volatile __global uint *sync, ulong sync_offset)
{
    __local float xs[N * KS];
    __local int failed;
    const int lid = get_local_id(0), NG = get_local_size(0) / U;
    const int uu = lid % U, ng = lid / U, u = get_group_id(0) * U + uu;
    const int P = get_num_groups(0);
    const bool unit = u < H;
    const int uc = min(u, H - 1);  // a unit to read for work-items past the last one
    sync += sync_offset;
    xg += xg_offset + xg_base;
    w_hh += w_hh_offset;
    y += y_offset + y_base;
    if (lid == 0)
        failed = 0;
% if WLOCAL:
    // the work-group's G x U rows of W_hh: gate g of unit uu at row g U + uu
    __local float wl[G * U * ${HS}];
    for (int e = lid; e < G * U * H; e += get_local_size(0)) {
        int row = e / H, k = e - row * H;
        int g = row / U, v = min((int)get_group_id(0) * U + row - g * U, H - 1);
        wl[row * ${HS} + k] = w_hh[(ulong)(g * H + v) * H + k];
    }
    #define WROW(r, k) wl[((r) * U + uu) * ${HS} + (k)]
% else:
    #define WROW(r, k) w_hh[(ulong)((r) * H + uc) * H + (k)]
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
    for (int s = 0; s < L; s++) {
        const int t = reverse ? L - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        volatile __global const float *hp = s == 0 ? (volatile __global const float *)(h0 + h0_offset)
                                                   : (volatile __global const float *)(y + tp * y_step);
        const ulong hp_row = s == 0 ? H : y_row;
        float acc[NB][G];
        for (int i = 0; i < NB; i++)
            for (int r = 0; r < G; r++)
% if BIAS:
                acc[i][r] = b_hh[b_hh_offset + r * H + uc];
% else:
                acc[i][r] = 0.0f;
% endif
        STAGED_PRODUCT(H, hp, hp_row, G, WROW)
        const int bad = failed;
        for (int i = 0; i < NB; i++) {
            int n = ng + i * NG;
            if (!unit || n >= N)
                continue;
            __global const float *x = xg + t * xg_step + n * xg_row + u;
% if CELL == "lstm":
            float ig = rnn_sigmoid(x[0] + acc[i][0]);
            float fg = rnn_sigmoid(x[H] + acc[i][1]);
            float gg = tanh(x[2 * H] + acc[i][2]);
            float og = rnn_sigmoid(x[3 * H] + acc[i][3]);
            float cell = fg * state[i] + ig * gg;
            state[i] = cell;
            ulong slot = cells_full ? t : s % 2;
            cells[cells_offset + (slot * N + n) * H + u] = bad ? NAN : cell;
            y[t * y_step + n * y_row + u] = bad ? NAN : og * tanh(cell);
% if SAVE:
            __global float *sv = gates + gates_offset + ((ulong)t * N + n) * 4 * H + u;
            sv[0] = ig;
            sv[H] = fg;
            sv[2 * H] = gg;
            sv[3 * H] = og;
% endif
% else:
            float r = rnn_sigmoid(x[0] + acc[i][0]);
            float z = rnn_sigmoid(x[H] + acc[i][1]);
            float hn = acc[i][2];
            float nn = tanh(x[2 * H] + r * hn);
            float h = (1.0f - z) * nn + z * state[i];
            state[i] = h;
            y[t * y_step + n * y_row + u] = bad ? NAN : h;
% if SAVE:
            __global float *sv = gates + gates_offset + ((ulong)t * N + n) * 4 * H + u;
            sv[0] = r;
            sv[H] = z;
            sv[2 * H] = nn;
            sv[3 * H] = hn;
% endif
% endif
        }
        if (s + 1 < L)
            grid_sync(sync, (uint)(s + 1) * P, spins, &failed);
    }
    #undef WROW
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
        volatile __global uint *sync, ulong sync_offset)
{
    __local float xs[N * KS];
    __local int failed;
    const int lid = get_local_id(0), NG = get_local_size(0) / U;
    const int uu = lid % U, ng = lid / U, u = get_group_id(0) * U + uu;
    const int P = get_num_groups(0);
    const bool unit = u < H;
    const int uc = min(u, H - 1);
    sync += sync_offset;
    w_hh += w_hh_offset;
    dxg += dxg_offset;
% if CELL == "lstm":
    __global float *dhg = dxg;  // the LSTM's hidden part is its whole gradient
% else:
    dhg += dhg_offset;
% endif
    if (lid == 0)
        failed = 0;
% if WLOCAL:
    // the work-group's U columns of W_hh, transposed: column uu at row uu
    __local float wl[U * ${GH + 1}];
    for (int e = lid; e < U * ${GH}; e += get_local_size(0)) {
        int v = e / ${GH}, j = e - v * ${GH};
        wl[v * ${GH + 1} + j] = w_hh[(ulong)j * H + min((int)get_group_id(0) * U + v, H - 1)];
    }
    #define WCOL(r, j) wl[uu * ${GH + 1} + (j)]
% else:
    #define WCOL(r, j) w_hh[(ulong)(j) * H + uc]
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
    for (int s = L - 1; s >= 0; s--) {
        const int t = reverse ? L - 1 - s : s, tp = reverse ? t + 1 : t - 1;
        float keep[NB];  // the GRU's direct part of dh_prev, dh z
        for (int i = 0; i < NB; i++) {
            int n = ng + i * NG;
            keep[i] = 0.0f;
            if (!unit || n >= N)
                continue;
            float dh_t = dh_r[i];
% if DY:
            dh_t += dy[dy_offset + dy_base + t * dy_step + n * dy_row + u];
% endif
            __global const float *sv = gates + gates_offset + ((ulong)t * N + n) * 4 * H + u;
            __global float *d = dxg + ((ulong)t * N + n) * G * H + u;
% if CELL == "lstm":
            float ig = sv[0], fg = sv[H], gg = sv[2 * H], og = sv[3 * H];
            float tc = tanh(cells[cells_offset + ((ulong)t * N + n) * H + u]);
            float c_prev = s == 0 ? c0[c0_offset + (ulong)n * H + u]
                                  : cells[cells_offset + ((ulong)tp * N + n) * H + u];
            float dc_t = dc_r[i] + dh_t * og * (1.0f - tc * tc);
            d[0] = dc_t * gg * ig * (1.0f - ig);
            d[H] = dc_t * c_prev * fg * (1.0f - fg);
            d[2 * H] = dc_t * ig * (1.0f - gg * gg);
            d[3 * H] = dh_t * tc * og * (1.0f - og);
            dc_r[i] = dc_t * fg;
% else:
            float r = sv[0], z = sv[H], nn = sv[2 * H], hn = sv[3 * H];
            float hp = s == 0 ? h0[h0_offset + (ulong)n * H + u]
                              : hseq[hseq_offset + hseq_base + tp * hseq_step + n * hseq_row + u];
            float dn = dh_t * (1.0f - z) * (1.0f - nn * nn);
            float dz = dh_t * (hp - nn) * z * (1.0f - z);
            float dr = dn * hn * r * (1.0f - r);
            __global float *e = dhg + ((ulong)t * N + n) * G * H + u;
            d[0] = dr;
            d[H] = dz;
            d[2 * H] = dn;
            e[0] = dr;
            e[H] = dz;
            e[2 * H] = dn * r;
            keep[i] = dh_t * z;
% endif
        }
        grid_sync(sync, (uint)(L - s) * P, spins, &failed);
        float acc[NB][1];
        for (int i = 0; i < NB; i++)
            acc[i][0] = keep[i];
        volatile __global const float *rows = (volatile __global const float *)(dhg + (ulong)t * N * G * H);
        STAGED_PRODUCT(G * H, rows, G * H, 1, WCOL)
        for (int i = 0; i < NB; i++)
            dh_r[i] = acc[i][0];
    }
    #undef WCOL
    const int bad = failed;
    for (int i = 0; i < NB; i++) {
        int n = ng + i * NG;
        if (!unit || n >= N)
            continue;
        ulong k = (ulong)n * H + u;
        dh[dh_offset + k] = bad ? NAN : dh_r[i];
% if CELL == "lstm":
        dc[dc_offset + k] = bad ? NAN : dc_r[i];
% endif
    }
}
