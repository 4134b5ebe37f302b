<%include file="common.h"/>
## One statement string over many tensors in one launch (see dlprim/core/multi_tensor.py).
## G groups per launch; group g has inputs xp<i>_<g>, outputs yp<i>_<g> and n<g> elements
## (dimension 1 of the grid picks the group). XS, YS: (storage type, compute type);
## X_ONE[i]: input i holds one element per group, read for every element; WS: the
## compute types of the scalar params; IT: index type. CPU: a work-item walks a
## contiguous chunk of its group (the compiler vectorises it); else items stride by the
## grid's size so that neighbours read neighbours.
<%def name="load(i, idx)">${'vload_half(%s, xp%d)' % (idx, i) if XS[i][0] == 'half' else 'xp%d[%s]' % (i, idx)}</%def>
<%def name="store(i, idx, value)">${'vstore_half_rte(%s, %s, yp%d)' % (value, idx, i) if YS[i][0] == 'half' else 'yp%d[%s] = %s' % (i, idx, value)};</%def>
__kernel void ${NAME}(${IT} dlp_chunk
% for g in range(G):
    , ${IT} dlp_n${g}
    % for i, (st, ct) in enumerate(XS):
    , __global const ${st} *xp${i}_${g}, ulong xo${i}_${g}
    % endfor
    % for i, (st, ct) in enumerate(YS):
    , __global ${st} *yp${i}_${g}, ulong yo${i}_${g}
    % endfor
% endfor
% for i, wt in enumerate(WS):
    , ${wt} w${i}
% endfor
    )
{
    ${IT} dlp_n = 0;
% for i, (st, ct) in enumerate(XS):
    __global const ${st} *xp${i} = 0;
% endfor
% for i, (st, ct) in enumerate(YS):
    __global ${st} *yp${i} = 0;
% endfor
    switch (get_global_id(1)) {
% for g in range(G):
    case ${g}:
        dlp_n = dlp_n${g};
    % for i in range(len(XS)):
        xp${i} = xp${i}_${g} + xo${i}_${g};
    % endfor
    % for i in range(len(YS)):
        yp${i} = yp${i}_${g} + yo${i}_${g};
    % endfor
        break;
% endfor
    }
% if CPU:
    ${IT} dlp_first = get_global_id(0) * dlp_chunk;
    ${IT} dlp_end = min(dlp_first + dlp_chunk, dlp_n);
    for (${IT} dlp_i = dlp_first; dlp_i < dlp_end; dlp_i++) {
% else:
    for (${IT} dlp_i = get_global_id(0); dlp_i < dlp_n; dlp_i += get_global_size(0)) {
% endif
% for i, (st, ct) in enumerate(XS):
        ${ct} x${i} = ${load(i, '0' if X_ONE[i] else 'dlp_i')};
% endfor
% for i, (st, ct) in enumerate(YS):
        ${ct} y${i};
% endfor
        {
${CODE}
        }
% for i in range(len(YS)):
        ${store(i, 'dlp_i', 'y%d' % i)}
% endfor
    }
}
