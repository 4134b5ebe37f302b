<%include file="common.h"/>
## dst[i] = alpha * src[i] + beta * dst[i] over an index space of DIMS dims with element
## strides for each side (slices, concat, transposes and their gradients).
## IT: index type (uint when every index fits). STORE: src's storage type, DST_STORE dst's;
## COMPUTE / DST_COMPUTE: the types their values are computed in (float for float, half and
## bfloat16, else the storage type itself); CAST: the C expression converting a src value
## ``v`` to DST_COMPUTE (PyTorch's rules, dtypes.cl_cast; "v" when no conversion).
% if IT == "uint":
#define DLP_DIV(x, n) DLP_DIV_U32(x, n)  // (common.h)
% else:
#define DLP_DIV(x, n) ((x) / (n))
% endif
## the source and destination offsets (s, d) of flat index ``rest`` over dims 0..dims-1
<%def name="walk(s, d, dims)">
    % for k in reversed(range(dims)):
        {
        % if k > 0:
            ${IT} q = DLP_DIV(rest, n${k});
            ${IT} c = rest - q * n${k};
            rest = q;
        % else:
            ${IT} c = rest;
        % endif
            ${s} += c * ss${k};
            ${d} += c * ds${k};
        }
    % endfor
</%def>
<%def name="store(idx)">
    % if COMPUTE in ('float', 'double'):
        v *= alpha;
    % else:
        if (alpha != 1.0f)
            v = (${COMPUTE})(alpha * v);
    % endif
        ${DST_COMPUTE} y = ${CAST};
    % if DST_COMPUTE in ('float', 'double'):
        if (beta != 0)
            y += beta * ${load('dst', idx, DST_STORE)};
    % else:
        if (beta != 0) {
            ${DST_COMPUTE} old = dst[dst_offset + ${idx}];
            y += (beta == 1.0f) ? old : (${DST_COMPUTE})(beta * old);
        }
    % endif
        ST_${DST_STORE}(dst + dst_offset, ${idx}, y);
</%def>
<%def name="load(p, idx, T=None)"><% T = T or STORE %>${'LD_%s(%s + %s_offset, %s)' % (T, p, p, idx) if T in ('half', 'bfloat16') else '%s[%s_offset + %s]' % (p, p, idx)}</%def>
% if ROWS:
## CPUs (ROWS): a work-item copies rows_per_item rows of the innermost dimension, each
## row's two starts found once and its elements walked by a plain loop (contiguous on both
## sides where INNER is 1, which the compiler vectorizes), where the index arithmetic of
## every element cost more than the copy
__kernel void strided_copy_rows(${IT} dlp_rows, ${IT} rows_per_item
% for k in range(DIMS):
    , ${IT} n${k}, uint n${k}_m, uint n${k}_l, ${IT} ss${k}, ${IT} ds${k}
% endfor
    , __global const ${STORE} *src, ulong src_offset, __global ${DST_STORE} *dst, ulong dst_offset,
    float alpha, float beta)
{
    ${IT} r0 = (${IT})get_global_id(0) * rows_per_item;
    ${IT} r1 = min(r0 + rows_per_item, dlp_rows);
<% L = DIMS - 1 %>
    for (${IT} r = r0; r < r1; r++) {
        ${IT} s = 0, d = 0, rest = r;
${walk("s", "d", L)}
    % if INNER:
        for (${IT} e = 0; e < n${L}; e++) {
            ${COMPUTE} v = ${load('src', 's + e')};
${store('d + e')}
        }
    % else:
        for (${IT} e = 0; e < n${L}; e++) {
            ${COMPUTE} v = ${load('src', 's + e * ss%d' % L)};
${store('d + e * ds%d' % L)}
        }
    % endif
    }
}
% endif

__kernel void strided_copy(${IT} dlp_total
% for k in range(DIMS):
    , ${IT} n${k}, uint n${k}_m, uint n${k}_l, ${IT} ss${k}, ${IT} ds${k}
% endfor
    , __global const ${STORE} *src, ulong src_offset, __global ${DST_STORE} *dst, ulong dst_offset,
    float alpha, float beta)
{
    // ELEMS elements per work-item, a global size apart; loads first (several in flight)
    ${IT} first = get_global_id(0), step = get_global_size(0);
% for j in range(ELEMS):
    ${IT} s${j} = 0, d${j} = 0;
    {
        ${IT} rest = first + ${j} * step;
${walk("s%d" % j, "d%d" % j, DIMS)}
    }
    ${COMPUTE} v${j} = (first + ${j} * step < dlp_total) ? ${load('src', 's%d' % j)} : 0;
% endfor
% for j in range(ELEMS):
    if (first + ${j} * step < dlp_total) {
        ${COMPUTE} v = v${j};
        ${IT} d = d${j};
${store('d')}
    }
% endfor
}
