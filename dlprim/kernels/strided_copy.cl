<%include file="common.h"/>
## dst[i] = alpha * src[i] + beta * dst[i] over an index space of DIMS dims with element
## strides for each side (slices, concat, transposes and their gradients).
## IT: index type (uint when every index fits). STORE: storage type; COMPUTE: float for float/half, else the integer type itself.
<%def name="load(p, idx)">${'vload_half(%s, %s + %s_offset)' % (idx, p, p) if STORE == 'half' else '%s[%s_offset + %s]' % (p, p, idx)}</%def>
__kernel void strided_copy(${IT} dlp_total
% for k in range(DIMS):
    , ${IT} n${k}, ${IT} ss${k}, ${IT} ds${k}
% endfor
    , __global const ${STORE} *src, ulong src_offset, __global ${STORE} *dst, ulong dst_offset,
    float alpha, float beta)
{
    ${IT} i = get_global_id(0);
    if (i >= dlp_total)
        return;
    ${IT} rest = i, s = 0, d = 0;
% for k in reversed(range(DIMS)):
    {
    % if k > 0:
        ${IT} c = rest % n${k};
        rest /= n${k};
    % else:
        ${IT} c = rest;
    % endif
        s += c * ss${k};
        d += c * ds${k};
    }
% endfor
    ${COMPUTE} v = ${load('src', 's')};
% if COMPUTE == 'float':
    v *= alpha;
    if (beta != 0)
        v += beta * ${load('dst', 'd')};
% else:
    if (alpha != 1.0f)
        v = (${COMPUTE})(alpha * v);
    if (beta != 0) {
        ${COMPUTE} old = dst[dst_offset + d];
        v += (beta == 1.0f) ? old : (${COMPUTE})(beta * old);
    }
% endif
% if STORE == 'half':
    vstore_half_rte(v, d, dst + dst_offset);
% else:
    dst[dst_offset + d] = v;
% endif
}
