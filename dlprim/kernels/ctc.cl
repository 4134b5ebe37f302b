<%include file="common.h"/>
// Connectionist temporal classification (PyTorch's _ctc_loss and _ctc_loss_backward):
// sequence n's extended labels l'(s), s < 2 L_n + 1, are the blank at even s and target
// (s - 1) / 2 at odd s; log_alpha / log_beta (N, T, W) hold the forward / backward
// variables in log space, W = 2 max(L) + 1, -inf where s or t is past sequence n's own.
// T: the storage and compute type of the log-probabilities (float or double); I: the
// targets' index type. log_probs is (T, N, C) with rows of C values (strides tt, tn).
#define real_t ${T}

inline real_t ctc_lse(real_t a, real_t b)
{
    real_t m = fmax(a, b);
    return m == -INFINITY ? m : m + log(exp(a - m) + exp(b - m));
}

inline long ctc_label(__global const ${I} *tg, long off, int s, long blank)
{
    return (s & 1) ? (long)tg[off + (s >> 1)] : blank;
}

// one work-group per sequence n: t steps in turn, its work-items across s; the sequence's
// negative log-likelihood into nll[n] (infinite where no alignment exists: the caller's
// zero_infinity applies later, as PyTorch's)
__kernel void ctc_alpha(int TT, int W, int C, long tt, long tn,
                        __global const real_t *lp, ulong lp_offset,
                        __global const ${I} *tg, ulong tg_offset,
                        __global const long *info, ulong info_offset,
                        long blank, __global real_t *la, ulong la_offset,
                        __global real_t *nll, ulong nll_offset)
{
    const int n = get_group_id(0), lid = get_local_id(0), ls = get_local_size(0);
    lp += lp_offset + n * tn;
    tg += tg_offset;
    info += info_offset + 3 * n;  // input length, target length, target offset
    la += la_offset + (ulong)n * TT * W;
    const int len = (int)info[0], L = (int)info[1];
    const long off = info[2];
    const int S = 2 * L + 1;
    for (int t = 0; t < TT; t++) {
        for (int s = lid; s < W; s += ls) {
            real_t v = -INFINITY;
            if (t < len && s < S) {
                const long c = ctc_label(tg, off, s, blank);
                if (t == 0) {
                    v = s < 2 ? lp[c] : -INFINITY;
                } else {
                    __global const real_t *prev = la + (t - 1) * W;
                    real_t a = prev[s];
                    if (s > 0)
                        a = ctc_lse(a, prev[s - 1]);
                    if (s > 1 && c != ctc_label(tg, off, s - 2, blank))
                        a = ctc_lse(a, prev[s - 2]);
                    v = a + lp[t * tt + c];
                }
            }
            la[t * W + s] = v;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
    if (lid == 0) {
        real_t ll;
        if (len == 0)
            ll = L == 0 ? 0.0f : -INFINITY;
        else {
            __global const real_t *last = la + (len - 1) * W;
            ll = L > 0 ? ctc_lse(last[S - 1], last[S - 2]) : last[0];
        }
        nll[nll_offset + n] = -ll;
    }
}

// the backward variables, one work-group per sequence, from its last step back
__kernel void ctc_beta(int TT, int W, int C, long tt, long tn,
                       __global const real_t *lp, ulong lp_offset,
                       __global const ${I} *tg, ulong tg_offset,
                       __global const long *info, ulong info_offset,
                       long blank, __global real_t *lb, ulong lb_offset)
{
    const int n = get_group_id(0), lid = get_local_id(0), ls = get_local_size(0);
    lp += lp_offset + n * tn;
    tg += tg_offset;
    info += info_offset + 3 * n;
    lb += lb_offset + (ulong)n * TT * W;
    const int len = (int)info[0], L = (int)info[1];
    const long off = info[2];
    const int S = 2 * L + 1;
    for (int t = TT - 1; t >= 0; t--) {
        for (int s = lid; s < W; s += ls) {
            real_t v = -INFINITY;
            if (t < len && s < S) {
                const long c = ctc_label(tg, off, s, blank);
                if (t == len - 1) {
                    v = s >= S - 2 ? lp[t * tt + c] : -INFINITY;
                } else {
                    __global const real_t *next = lb + (t + 1) * W;
                    real_t b = next[s];
                    if (s < S - 1)
                        b = ctc_lse(b, next[s + 1]);
                    if (s < S - 2 && c != ctc_label(tg, off, s + 2, blank))
                        b = ctc_lse(b, next[s + 2]);
                    v = b + lp[t * tt + c];
                }
            }
            lb[t * W + s] = v;
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

// one work-item per (t, n): the gradient row of log_probs (rows of C, strides gt, gn):
// (exp(lp) - exp(log(sum over s with l'(s) = c of alpha beta) + nll - lp)) * grad[n],
// 0 past the sequence's input length and where zero_infinity drops an infinite loss
__kernel void ctc_grad(int TT, int N, int W, int C, long tt, long tn, long gt, long gn,
                       __global const real_t *lp, ulong lp_offset,
                       __global const ${I} *tg, ulong tg_offset,
                       __global const long *info, ulong info_offset,
                       long blank, int zero_infinity,
                       __global const real_t *la, ulong la_offset,
                       __global const real_t *lb, ulong lb_offset,
                       __global const real_t *nll, ulong nll_offset,
                       __global const real_t *grad, ulong grad_offset, long grad_stride,
                       __global real_t *out, ulong out_offset)
{
    const int g = get_global_id(0);
    if (g >= TT * N)
        return;
    const int t = g / N, n = g % N;
    info += info_offset + 3 * n;
    const int len = (int)info[0], L = (int)info[1];
    const long off = info[2];
    __global real_t *row = out + out_offset + t * gt + n * gn;
    __global const real_t *lpr = lp + lp_offset + t * tt + n * tn;
    const real_t loss = nll[nll_offset + n];
    if (t >= len || (zero_infinity && isinf(loss))) {
        for (int c = 0; c < C; c++)
            row[c] = 0.0f;
        return;
    }
    for (int c = 0; c < C; c++)
        row[c] = -INFINITY;
    __global const real_t *a = la + la_offset + ((ulong)n * TT + t) * W;
    __global const real_t *b = lb + lb_offset + ((ulong)n * TT + t) * W;
    tg += tg_offset;
    for (int s = 0; s < 2 * L + 1; s++) {
        const long c = ctc_label(tg, off, s, blank);
        row[c] = ctc_lse(row[c], a[s] + b[s]);
    }
    const real_t gr = grad[grad_offset + n * grad_stride];
    for (int c = 0; c < C; c++)
        row[c] = (exp(lpr[c]) - exp(row[c] + loss - lpr[c])) * gr;
}
