<%include file="common.h"/>
## One statement string over many tensors in one launch (see dlprim/core/multi_tensor.py).
## G groups per launch; group g has inputs xp<i>_<g>, outputs yp<i>_<g> and n<g> elements,
## cut into chunks of dlp_chunk elements, one work-group per chunk: group g owns the
## work-groups from b<g> on (ascending), so big and small tensors share the device
## evenly. XS, YS: (storage type, compute type); X_ONE[i]: input i holds one element per
## group, read for every element; WS: the compute types of the scalar params; IT: index
## type. CPU: one work-item per work-group walks its chunk, VW values a vector where VW
## (float32 storage and CODE_VECTOR), then one by one;
## else the work-group's items stride through it so that neighbours read neighbours,
## UNROLL elements a pass.
<%def name="load(i, idx)">${'LD_%s(xp%d, %s)' % (XS[i][0], i, idx) if XS[i][0] in ('half', 'bfloat16') else 'xp%d[%s]' % (i, idx)}</%def>
<%def name="store(i, idx, value)">${'ST_%s(yp%d, %s, %s)' % (YS[i][0], i, idx, value) if YS[i][0] in ('half', 'bfloat16') else 'yp%d[%s] = %s' % (i, idx, value)};</%def>
## one element at ``index``: the inputs' values (``value_of(i)``), CODE, the outputs stored
<%def name="element(index, value_of)">
% for i, (st, ct) in enumerate(XS):
        ${ct} x${i} = ${value_of(i)};
% endfor
% for i, (st, ct) in enumerate(YS):
        ${ct} y${i};
% endfor
        {
${CODE}
        }
% for i in range(len(YS)):
        ${store(i, index, 'y%d' % i)}
% endfor
</%def>
__kernel void ${NAME}(${IT} dlp_chunk
% for g in range(G):
    , ${IT} dlp_n${g}, uint dlp_b${g}
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
    uint dlp_block = get_group_id(0);
    int dlp_g = 0;
% for g in range(1, G):
    if (dlp_block >= dlp_b${g})
        dlp_g = ${g};
% endfor
    ${IT} dlp_n = 0;
    uint dlp_first_block = 0;
% for i, (st, ct) in enumerate(XS):
    __global const ${st} *xp${i} = 0;
% endfor
% for i, (st, ct) in enumerate(YS):
    __global ${st} *yp${i} = 0;
% endfor
    switch (dlp_g) {
% for g in range(G):
    case ${g}:
        dlp_n = dlp_n${g};
        dlp_first_block = dlp_b${g};
    % for i in range(len(XS)):
        xp${i} = xp${i}_${g} + xo${i}_${g};
    % endfor
    % for i in range(len(YS)):
        yp${i} = yp${i}_${g} + yo${i}_${g};
    % endfor
        break;
% endfor
    }
    ${IT} dlp_start = (${IT})(dlp_block - dlp_first_block) * dlp_chunk;
    ${IT} dlp_end = min(dlp_start + dlp_chunk, dlp_n);
    // single-element inputs read once, before the loop: what the code computes from them
    // alone (an optimizer's bias corrections from its step) then stays out of it too
% for i, (st, ct) in enumerate(XS):
    % if X_ONE[i]:
    ${ct} dlp_one${i} = ${load(i, '0')};
    % endif
% endfor
% if CPU:
    ${IT} dlp_i = dlp_start;
    % if VW:
    // whole vectors of VW values first (CODE_VECTOR: CODE on float<VW> locals, which
    // core/pointwise.py's vector_code found to read the same), the rest one by one
    for (; dlp_i + ${VW} <= dlp_end; dlp_i += ${VW}) {
        % for i in range(len(XS)):
        float${VW} x${i} = ${'(float%d)(dlp_one%d)' % (VW, i) if X_ONE[i] else 'vload%d(0, xp%d + dlp_i)' % (VW, i)};
        % endfor
        % for i in range(len(YS)):
        float${VW} y${i};
        % endfor
        {
${CODE_VECTOR}
        }
        % for i in range(len(YS)):
        vstore${VW}(y${i}, 0, yp${i} + dlp_i);
        % endfor
    }
    % endif
    for (; dlp_i < dlp_end; dlp_i++) {
% else:
    // UNROLL elements a pass, loaded before any is computed: that many loads in flight
    // per work-item (one at a time, a step's optimizer lists ran at half the bandwidth)
    for (${IT} dlp_pass = dlp_start + get_local_id(0); dlp_pass < dlp_end;
         dlp_pass += ${UNROLL} * get_local_size(0)) {
    % for u in range(UNROLL):
        const ${IT} dlp_i${u} = dlp_pass + ${u} * get_local_size(0);
        % for i, (st, ct) in enumerate(XS):
            % if not X_ONE[i]:
        const ${ct} dlp_x${i}_${u} = dlp_i${u} < dlp_end ? ${load(i, 'dlp_i%d' % u)} : 0;
            % endif
        % endfor
    % endfor
    % for u in range(UNROLL):
        if (dlp_i${u} < dlp_end) {
${element('dlp_i%d' % u, lambda i: 'dlp_one%d' % i if X_ONE[i] else 'dlp_x%d_%d' % (i, u))}
        }
    % endfor
    }
% endif
% if CPU:
${element('dlp_i', lambda i: 'dlp_one%d' % i if X_ONE[i] else capture(load, i, 'dlp_i'))}
    }
% endif
}
