<%include file="common.h"/>
## y[b, n, m] = alpha * x[b, m, n] + beta * y[b, n, m] through a TILE x TILE local tile
## (padded by one column against bank conflicts): reads and writes both coalesced.
## STORE: storage type; COMPUTE: float for float/half/bfloat16, else the integer type.
<%def name="load(p, idx)">${'LD_%s(%s + %s_offset, %s)' % (STORE, p, p, idx) if STORE in ('half', 'bfloat16') else '%s[%s_offset + %s]' % (p, p, idx)}</%def>
__kernel __attribute__((reqd_work_group_size(${TILE}, ${ROWS}, 1)))
void transpose_tiled(ulong M, ulong N, __global const ${STORE} *x, ulong x_offset,
                     __global ${STORE} *y, ulong y_offset, float alpha, float beta)
{
    __local ${COMPUTE} tile[${TILE}][${TILE + 1}];
    ulong base = get_group_id(2) * M * N;
    ulong n0 = get_group_id(0) * ${TILE}, m0 = get_group_id(1) * ${TILE};
    int tx = get_local_id(0), ty = get_local_id(1);
    for (int k = ty; k < ${TILE}; k += ${ROWS}) {
        ulong m = m0 + k, n = n0 + tx;
        if (m < M && n < N)
            tile[k][tx] = ${load('x', 'base + m * N + n')};
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = ty; k < ${TILE}; k += ${ROWS}) {
        ulong n = n0 + k, m = m0 + tx;
        if (n < N && m < M) {
            ulong d = base + n * M + m;
            ${COMPUTE} v = tile[tx][k];
% if COMPUTE == 'float':
            v *= alpha;
            if (beta != 0)
                v += beta * ${load('y', 'd')};
% else:
            if (alpha != 1.0f)
                v = (${COMPUTE})(alpha * v);
            if (beta != 0) {
                ${COMPUTE} old = y[y_offset + d];
                v += (beta == 1.0f) ? old : (${COMPUTE})(beta * old);
            }
% endif
% if STORE in ('half', 'bfloat16'):
            ST_${STORE}(y + y_offset, d, v);
% else:
            y[y_offset + d] = v;
% endif
        }
    }
}
