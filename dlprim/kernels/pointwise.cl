<%include file="common.h"/>
<%
    # the operator library's helper functions (kernels/mathfun.h), for the real types
    # the expressions call them in, and only where they do
    import re
    _code = CODE + REDUCE + REDUCE_INIT
    _calls = set(re.findall(r"dlp_(?!sf_)\w+?_(float|double|char|uchar|short|ushort|int|uint|long|ulong)\b",
                            _code))
    MATH_REALS = sorted(_calls & {"float", "double"})
    MATH_INTS = sorted(_calls - {"float", "double"})
    SPECIAL_REALS = sorted(set(re.findall(r"dlp_sf_\w+?_(float|double)\b", _code)))
%>\
% if _calls:
<%include file="mathfun.h" args="MATH_REALS=MATH_REALS, MATH_INTS=MATH_INTS"/>
% endif
% if SPECIAL_REALS:
<%include file="specialfun.h" args="MATH_REALS=SPECIAL_REALS"/>
% endif
## Pointwise-broadcast-reduce generator (see dlprim/core/pointwise.py).
## XS, YS: lists of (storage type, compute type); WS: compute types of the scalar params.
## IT: index type. Pointwise: DIMS dims of the output shape, X_FULL[i] when x i is the
## whole output (indexed linearly). Reduce: KEPT / RED dims, L0 x L1 work-groups with
## REDUCE_DIM0 telling which local dimension walks the reduction (the contiguous one).
% if IT == "uint":
#define DLP_DIV(x, n) DLP_DIV_U32(x, n)  // (common.h)
% else:
#define DLP_DIV(x, n) ((x) / (n))
% endif
<%def name="load(i, idx)">${'LD_%s(xp%d + xp%d_offset, %s)' % (XS[i][0], i, i, idx) if XS[i][0] in ('half', 'bfloat16') else 'xp%d[xp%d_offset + %s]' % (i, i, idx)}</%def>
<%def name="xargs(strides)">
% for i, (st, ct) in enumerate(XS):
    , __global const ${st} *xp${i}, ulong xp${i}_offset
    % for k in strides:
    , ${IT} xs${i}_${k}
    % endfor
% endfor
</%def>
<%def name="yargs()">
% for i, (st, ct) in enumerate(YS):
    , __global ${st} *yp${i}, ulong yp${i}_offset
% endfor
</%def>
<%def name="wargs()">
% for i, wt in enumerate(WS):
    , ${wt} w${i}
% endfor
</%def>
## a reduction's alpha and beta: double where an output computes in double (a float
## 1 / count would round a float64 mean off by 1e-8)
<%def name="scale_type()">${"double" if any(ct == "double" for _, ct in YS) else "float"}</%def>
<%def name="yload(i, idx)">${'LD_%s(yp%d + yp%d_offset, %s)' % (YS[i][0], i, i, idx) if YS[i][0] in ('half', 'bfloat16') else 'yp%d[yp%d_offset + %s]' % (i, i, idx)}</%def>
<%def name="ystore(i, idx, value)">
% if YS[i][0] in ('half', 'bfloat16'):
ST_${YS[i][0]}(yp${i} + yp${i}_offset, ${idx}, ${value});
% else:
yp${i}[yp${i}_offset + ${idx}] = ${value};
% endif
</%def>
<%def name="row_offsets(dim, stride, index, ndims, moves)">
## CPU kernels: split linear index ``index`` (in dlp_rest) over dims dlp_<dim>0..; add each
## coordinate times x i's stride xs<i>_<stride><k> to dlp_xo<i> where moves[i]; dlp_len =
## how far the row of the innermost dim runs from there (capped at dlp_end)
% for k in reversed(range(ndims)):
        {
            ${IT} dlp_q = DLP_DIV(dlp_rest, dlp_${dim}${k});
            ${IT} dlp_c = dlp_rest - dlp_q * dlp_${dim}${k};
            dlp_rest = dlp_q;
    % if k == ndims - 1:
            dlp_len = min(dlp_end - ${index}, dlp_${dim}${k} - dlp_c);
    % endif
    % for i in range(len(XS)):
        % if moves[i]:
            dlp_xo${i} += dlp_c * xs${i}_${stride}${k};
        % endif
    % endfor
        }
% endfor
</%def>
<%def name="reduce_args()">${IT} dlp_O, ${IT} dlp_R, ${IT} dlp_chunk, ${IT} dlp_chunks
% for k in range(KEPT):
    , ${IT} dlp_k${k}, uint dlp_k${k}_m, uint dlp_k${k}_l
% endfor
% for k in range(RED):
    , ${IT} dlp_r${k}, uint dlp_r${k}_m, uint dlp_r${k}_l
% endfor
${xargs(['k%d' % k for k in range(KEPT)] + ['r%d' % k for k in range(RED)])}${yargs()}
% for i, (st, ct) in enumerate(YS):
    , __global ${ct} *dlp_ws${i}, ulong dlp_ws${i}_offset
% endfor
${wargs()}, ${scale_type()} dlp_alpha, ${scale_type()} dlp_beta</%def>
<%def name="reduced_offsets(xo)">
## reductions: split the reduced index in dlp_rest over the RED dims dlp_r<k>, adding each
## coordinate times x i's stride xs<i>_r<k> to its offset ``xo % i``
% for k in reversed(range(RED)):
        {
    % if k > 0:
            ${IT} dlp_q = DLP_DIV(dlp_rest, dlp_r${k});
            ${IT} dlp_c = dlp_rest - dlp_q * dlp_r${k};
            dlp_rest = dlp_q;
    % else:
            ${IT} dlp_c = dlp_rest;
    % endif
    % for i in range(len(XS)):
            ${xo % i} += dlp_c * xs${i}_r${k};
    % endfor
        }
% endfor
</%def>
<%def name="kept_offsets()">
    // each x's offset of output dlp_o (its kept coordinates): dlp_xb0.., and dlp_rest
% for i in range(len(XS)):
    ${IT} dlp_xb${i} = 0;
% endfor
    ${IT} dlp_rest = dlp_o;
% for k in reversed(range(KEPT)):
    {
        ${IT} dlp_q = DLP_DIV(dlp_rest, dlp_k${k});
        ${IT} dlp_c = dlp_rest - dlp_q * dlp_k${k};
        dlp_rest = dlp_q;
    % for i in range(len(XS)):
        dlp_xb${i} += dlp_c * xs${i}_k${k};
    % endfor
    }
% endfor
</%def>
## the signature of the pointwise kernels (the GPU shape and the CPU vector shape): the
## output's size and dims, each x with its strides, each y, a beta per y, the params
<%def name="pointwise_signature()">
__kernel void ${NAME}(${IT} dlp_total
% for k in range(DIMS):
    , ${IT} dlp_n${k}, uint dlp_n${k}_m, uint dlp_n${k}_l
% endfor
${xargs(range(DIMS))}${yargs()}
% for i in range(len(YS)):
    , float dlp_beta${i}
% endfor
${wargs()})</%def>
% if MODE == "pointwise":
${pointwise_signature()}
{
    // ELEMS elements per work-item, a global size apart (coalesced); every load is
    // issued before any store so that several are in flight
    ${IT} dlp_first = get_global_id(0), dlp_step = get_global_size(0);
% for j in range(ELEMS):
    ${IT} dlp_i${j} = dlp_first + ${j} * dlp_step;
    % for i in range(len(XS)):
    ${IT} dlp_xo${i}_${j} = ${'dlp_i%d' % j if X_FULL[i] else '0'};
    % endfor
    % if not all(X_FULL):
    {
        ${IT} dlp_rest = dlp_i${j};
        % for k in reversed(range(DIMS)):
        {
            ${IT} dlp_q = DLP_DIV(dlp_rest, dlp_n${k});
            ${IT} dlp_c = dlp_rest - dlp_q * dlp_n${k};
            dlp_rest = dlp_q;
            % for i in range(len(XS)):
                % if not X_FULL[i]:
            dlp_xo${i}_${j} += dlp_c * xs${i}_${k};
                % endif
            % endfor
        }
        % endfor
    }
    % endif
    % for i, (st, ct) in enumerate(XS):
    ${ct} dlp_x${i}_${j} = (dlp_i${j} < dlp_total) ? ${load(i, 'dlp_xo%d_%d' % (i, j))} : 0;
    % endfor
    ## y = code + beta * y, the old y read only where beta != 0 (else it may hold garbage):
    ## y0 with the inputs (its own store is the only one to its element), later outputs
    ## when stored, after those before them, so that outputs sharing memory (the
    ## gradients of x op x) add up
    ${YS[0][1]} dlp_old_${j} = (dlp_beta0 != 0 && dlp_i${j} < dlp_total) ? ${yload(0, 'dlp_i%d' % j)} : 0;
% endfor
% for j in range(ELEMS):
    if (dlp_i${j} < dlp_total) {
    % for i, (st, ct) in enumerate(XS):
        ${ct} x${i} = dlp_x${i}_${j};
    % endfor
    % for i, (st, ct) in enumerate(YS):
        ${ct} y${i};
    % endfor
        {
${CODE}
        }
    % for i, (st, ct) in enumerate(YS):
<% old = 'dlp_old_%d' % j if i == 0 else capture(yload, i, 'dlp_i%d' % j) %>\
        if (dlp_beta${i} != 0)
        % if ct == 'float':
            y${i} += dlp_beta${i} * ${old};
        % else:
            y${i} += (dlp_beta${i} == 1.0f) ? ${old} : (${ct})(dlp_beta${i} * ${old});
        % endif
        ${ystore(i, 'dlp_i%d' % j, 'y%d' % i)}
    % endfor
    }
% endfor
}
% elif MODE == "pointwise_vector":
## CPU drivers, a statement that calls a transcendental function over whole float32
## tensors (every x the output's shape, contiguous): a work-item computes VW contiguous
## values as one float<VW> vector (the driver's vector math library takes the whole
## vector), the last short piece one value at a time. CODE_VECTOR is CODE with its
## float locals declared as vectors (core/pointwise.py checks that it reads the same).
<% _vw = context.get("VW", 0); VT = "float%d" % _vw %>
${pointwise_signature()}
{
    const ${IT} dlp_i = (${IT})get_global_id(0) * ${_vw};
    if (dlp_i + ${_vw} <= dlp_total) {
% for i in range(len(XS)):
        ${VT} x${i} = vload${_vw}(0, xp${i} + xp${i}_offset + dlp_i);
% endfor
% for i in range(len(YS)):
        ${VT} y${i};
% endfor
        {
${context.get("CODE_VECTOR", "")}
        }
% for i in range(len(YS)):
        if (dlp_beta${i} != 0)
            y${i} += dlp_beta${i} * vload${_vw}(0, yp${i} + yp${i}_offset + dlp_i);
        vstore${_vw}(y${i}, 0, yp${i} + yp${i}_offset + dlp_i);
% endfor
        return;
    }
    for (${IT} dlp_e = dlp_i; dlp_e < dlp_total; dlp_e++) {
% for i in range(len(XS)):
        float x${i} = xp${i}[xp${i}_offset + dlp_e];
% endfor
% for i in range(len(YS)):
        float y${i};
% endfor
        {
${CODE}
        }
% for i in range(len(YS)):
        if (dlp_beta${i} != 0)
            y${i} += dlp_beta${i} * yp${i}[yp${i}_offset + dlp_e];
        yp${i}[yp${i}_offset + dlp_e] = y${i};
% endfor
    }
}
% elif MODE == "pointwise_cpu":
## CPU drivers run a work-group's items as a loop in one thread and pay for every
## work-group: here a work-item walks a contiguous chunk of the output, a row of the
## innermost dimension at a time, with the broadcast offsets found once per row and the
## inner loop over plain addresses, which the compiler vectorises. X_LAST[i]: how x i
## moves along that row: "full" (the output's own index), "1", "0" (broadcast) or "s".
<%def name="cpu_load(i)">\
% if X_LAST[i] == "full":
${load(i, 'dlp_i + dlp_e')}\
% elif X_LAST[i] == "1":
${load(i, 'dlp_xo%d + dlp_e' % i)}\
% elif X_LAST[i] == "0":
${load(i, 'dlp_xo%d' % i)}\
% else:
${load(i, 'dlp_xo%d + dlp_e * xs%d_%d' % (i, i, DIMS - 1))}\
% endif
</%def>
<%def name="cpu_loop(with_beta)">
        for (${IT} dlp_e = 0; dlp_e < dlp_len; dlp_e++) {
    % for i, (st, ct) in enumerate(XS):
            ${ct} x${i} = ${cpu_load(i)};
    % endfor
    % for i, (st, ct) in enumerate(YS):
            ${ct} y${i};
    % endfor
            {
${CODE}
            }
    % for i, (st, ct) in enumerate(YS):
        % if with_beta:
            if (dlp_beta${i} != 0)
            % if ct == 'float':
                y${i} += dlp_beta${i} * ${yload(i, 'dlp_i + dlp_e')};
            % else:
                y${i} += (dlp_beta${i} == 1.0f) ? ${yload(i, 'dlp_i + dlp_e')} : (${ct})(dlp_beta${i} * ${yload(i, 'dlp_i + dlp_e')});
            % endif
        % endif
            ${ystore(i, 'dlp_i + dlp_e', 'y%d' % i)}
    % endfor
        }
</%def>
__kernel void ${NAME}(${IT} dlp_total
% for k in range(DIMS):
    , ${IT} dlp_n${k}, uint dlp_n${k}_m, uint dlp_n${k}_l
% endfor
${xargs(range(DIMS))}${yargs()}, ${IT} dlp_chunk
% for i in range(len(YS)):
    , float dlp_beta${i}
% endfor
${wargs()})
{
    ${IT} dlp_i = (${IT})get_global_id(0) * dlp_chunk;
    ${IT} dlp_end = min(dlp_i + dlp_chunk, dlp_total);
    const int dlp_reads = ${" || ".join("dlp_beta%d != 0" % i for i in range(len(YS)))};
    while (dlp_i < dlp_end) {
        ${IT} dlp_rest = dlp_i, dlp_len;
% for i in range(len(XS)):
    % if X_LAST[i] != "full":
        ${IT} dlp_xo${i} = 0;
    % endif
% endfor
${row_offsets("n", "", "dlp_i", DIMS, [x != "full" for x in X_LAST])}
        if (dlp_reads) {
${cpu_loop(True)}
        } else {
${cpu_loop(False)}
        }
        dlp_i += dlp_len;
    }
}
% else:
<% LR = L0 if REDUCE_DIM0 else L1 %>
<%def name="final_store(i, idx)">
% if YS[i][1] == 'float':
    {
        float dlp_v = dlp_alpha * reduce_y${i};
        if (dlp_beta != 0)
            dlp_v += dlp_beta * ${yload(i, idx)};
        ${ystore(i, idx, 'dlp_v')}
    }
% else:
    {
        ${YS[i][1]} dlp_v = (dlp_alpha == 1.0f) ? reduce_y${i} : (${YS[i][1]})(dlp_alpha * reduce_y${i});
        if (dlp_beta != 0) {
            ${YS[i][1]} dlp_old = yp${i}[yp${i}_offset + ${idx}];
            dlp_v += (dlp_beta == 1.0f) ? dlp_old : (${YS[i][1]})(dlp_beta * dlp_old);
        }
        yp${i}[yp${i}_offset + ${idx}] = dlp_v;
    }
% endif
</%def>
## one value of a reduction: each x loaded at ``index(i)``, the code, then the reduce
<%def name="reduce_body(index)">
% for i, (st, ct) in enumerate(XS):
                ${ct} x${i} = ${load(i, index(i))};
% endfor
% for i, (st, ct) in enumerate(YS):
                ${ct} y${i};
% endfor
                {
${CODE}
                }
                {
${REDUCE}
                }
</%def>
<%def name="reduce_step(j)">{
<% e = "(dlp_e + %d)" % j if j else "dlp_e" %>\
${reduce_body(lambda i: {"1": "dlp_xo%d + %s" % (i, e), "0": "dlp_xo%d" % i}.get(R_LAST[i], "dlp_xo%d + %s * xs%d_r%d" % (i, e, i, RED - 1)))}
            }</%def>
% if REDUCE_CPU and context.get("COLS", 0):
## CPU drivers, the innermost dimension kept (a column sum such as a bias gradient): a
## work-item takes COLS outputs side by side on that dimension and walks its chunk of the
## reduction once, the COLS values of each reduced index contiguous (a loop the compiler
## vectorises), where one output a work-item strides down the rows a value at a time.
## K_LAST[i]: how x i moves along the block ("1", or "0" broadcast). reduce_y<i> names the
## block's accumulator of the output at hand (a macro) in REDUCE_INIT, REDUCE and the store.
<% _cols = context.get("COLS", 0); _klast = context.get("K_LAST", ()) %>
__kernel void ${NAME}(${reduce_args()})
{
    const ${IT} dlp_k_last = dlp_k${KEPT - 1};
    const ${IT} dlp_blocks = (dlp_k_last + ${_cols - 1}) / ${_cols};
    const ${IT} dlp_blk = get_global_id(0), dlp_chunk_id = get_global_id(2);
    const ${IT} dlp_line = dlp_blk / dlp_blocks;
    const ${IT} dlp_o = dlp_line * dlp_k_last + (dlp_blk - dlp_line * dlp_blocks) * ${_cols};
    if (dlp_line * dlp_k_last >= dlp_O)
        return;
    const int dlp_n = (int)min((${IT})${_cols}, dlp_line * dlp_k_last + dlp_k_last - dlp_o);
% for i, (st, ct) in enumerate(YS):
    ${ct} dlp_acc${i}[${_cols}];
% endfor
% for i in range(len(YS)):
#define reduce_y${i} dlp_acc${i}[dlp_b]
% endfor
    for (int dlp_b = 0; dlp_b < ${_cols}; dlp_b++) {
${REDUCE_INIT}
    }
${kept_offsets()}
    const ${IT} dlp_end = min(dlp_chunk_id * dlp_chunk + dlp_chunk, dlp_R);
    for (${IT} dlp_r = dlp_chunk_id * dlp_chunk; dlp_r < dlp_end; dlp_r++) {
% for i in range(len(XS)):
        ${IT} dlp_xo${i} = dlp_xb${i};
% endfor
        dlp_rest = dlp_r;
${reduced_offsets("dlp_xo%d")}
        for (int dlp_b = 0; dlp_b < dlp_n; dlp_b++) {
${reduce_body(lambda i: "dlp_xo%d + dlp_b" % i if _klast[i] == "1" else "dlp_xo%d" % i)}
        }
    }
    for (int dlp_b = 0; dlp_b < dlp_n; dlp_b++) {
        if (dlp_chunks > 1) {
% for i in range(len(YS)):
            dlp_ws${i}[dlp_ws${i}_offset + dlp_chunk_id * dlp_O + dlp_o + dlp_b] = reduce_y${i};
% endfor
            continue;
        }
% for i in range(len(YS)):
    ${final_store(i, 'dlp_o + dlp_b')}
% endfor
    }
% for i in range(len(YS)):
#undef reduce_y${i}
% endfor
}
% elif REDUCE_CPU:
## CPU drivers: one work-item per (output, chunk of the reduction), no local memory; the
## reduced index walks rows of the innermost reduced dimension, offsets found once per
## row. R_LAST[i]: how x i moves along that row ("1", "0" broadcast, "s" strided).
__kernel void ${NAME}(${reduce_args()})
{
    ${IT} dlp_o = get_global_id(0), dlp_chunk_id = get_global_id(2);
% for i, (st, ct) in enumerate(YS):
    ${ct} reduce_y${i};
% endfor
    {
${REDUCE_INIT}
    }
${kept_offsets()}
% for i, (st, ct) in enumerate(YS):
    ${ct} dlp_part${i}[${ELEMS}];
% endfor
% for j in range(ELEMS):
    {
    % for i, (st, ct) in enumerate(YS):
        ${ct} reduce_y${i};
    % endfor
        {
${REDUCE_INIT}
        }
    % for i in range(len(YS)):
        dlp_part${i}[${j}] = reduce_y${i};
    % endfor
    }
% endfor
    ${IT} dlp_end = min(dlp_chunk_id * dlp_chunk + dlp_chunk, dlp_R);
    for (${IT} dlp_r = dlp_chunk_id * dlp_chunk; dlp_r < dlp_end; ) {
        ${IT} dlp_len;
% for i in range(len(XS)):
        ${IT} dlp_xo${i} = dlp_xb${i};
% endfor
        dlp_rest = dlp_r;
% if RED == 0:
        dlp_len = dlp_end - dlp_r;
% endif
${row_offsets("r", "r", "dlp_r", RED, [True] * len(XS))}
        // element e goes to partial result e % ${ELEMS}: independent chains that the core
        // overlaps, combined in a fixed order below (the result stays deterministic)
        ${IT} dlp_e = 0;
        for (; dlp_e + ${ELEMS} <= dlp_len; dlp_e += ${ELEMS}) {
% for j in range(ELEMS):
            {
    % for i, (st, ct) in enumerate(YS):
                ${ct} reduce_y${i} = dlp_part${i}[${j}];
    % endfor
                ${reduce_step(j)}
    % for i in range(len(YS)):
                dlp_part${i}[${j}] = reduce_y${i};
    % endfor
            }
% endfor
        }
        for (; dlp_e < dlp_len; dlp_e++) {
            ${reduce_step(0)}
        }
        dlp_r += dlp_len;
    }
% for j in range(ELEMS):
    {
    % for i, (st, ct) in enumerate(YS):
        ${ct} y${i} = dlp_part${i}[${j}];
    % endfor
        {
${REDUCE}
        }
    }
% endfor
    if (dlp_o >= dlp_O)
        return;
    if (dlp_chunks > 1) {
% for i in range(len(YS)):
        dlp_ws${i}[dlp_ws${i}_offset + dlp_chunk_id * dlp_O + dlp_o] = reduce_y${i};
% endfor
        return;
    }
% for i in range(len(YS)):
    ${final_store(i, 'dlp_o')}
% endfor
}
% else:
__kernel __attribute__((reqd_work_group_size(${L0}, ${L1}, 1)))
void ${NAME}(${reduce_args()})
{
    // output groups run along dimension 0 only (other dimensions have small limits)
% if REDUCE_DIM0:
    int dlp_lr = get_local_id(0), dlp_lo = get_local_id(1);
% else:
    int dlp_lo = get_local_id(0), dlp_lr = get_local_id(1);
% endif
    ${IT} dlp_o = (${IT})get_group_id(0) * ${L0 * L1 // LR} + dlp_lo;
    ${IT} dlp_chunk_id = get_global_id(2);
% for i, (st, ct) in enumerate(YS):
    ${ct} reduce_y${i};
% endfor
    {
${REDUCE_INIT}
    }
    if (dlp_o < dlp_O) {
${kept_offsets()}
        ${IT} dlp_end = min(dlp_chunk_id * dlp_chunk + dlp_chunk, dlp_R);
        // ELEMS loads in flight per pass, then the code and reduce in index order
        for (${IT} dlp_r = dlp_chunk_id * dlp_chunk + dlp_lr; dlp_r < dlp_end;
             dlp_r += ${ELEMS * LR}) {
% for j in range(ELEMS):
    % for i in range(len(XS)):
            ${IT} dlp_xo${i}_${j} = dlp_xb${i};
    % endfor
            dlp_rest = dlp_r + ${j * LR};
${reduced_offsets("dlp_xo%%d_%d" % j)}
    % for i, (st, ct) in enumerate(XS):
            ${ct} dlp_x${i}_${j} = (dlp_r + ${j * LR} < dlp_end) ? ${load(i, 'dlp_xo%d_%d' % (i, j))} : 0;
    % endfor
% endfor
% for j in range(ELEMS):
            if (dlp_r + ${j * LR} < dlp_end) {
    % for i, (st, ct) in enumerate(XS):
                ${ct} x${i} = dlp_x${i}_${j};
    % endfor
    % for i, (st, ct) in enumerate(YS):
                ${ct} y${i};
    % endfor
                {
${CODE}
                }
                {
${REDUCE}
                }
            }
% endfor
        }
    }
    // deterministic tree over the LR threads that share an output
    int dlp_lid = dlp_lo * ${LR} + dlp_lr;
% for i, (st, ct) in enumerate(YS):
    __local ${ct} dlp_l${i}[${L0 * L1}];
    dlp_l${i}[dlp_lid] = reduce_y${i};
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int dlp_s = ${LR // 2}; dlp_s > 0; dlp_s >>= 1) {
        if (dlp_lr < dlp_s) {
% for i, (st, ct) in enumerate(YS):
            ${ct} y${i} = dlp_l${i}[dlp_lid + dlp_s];
% endfor
            {
${REDUCE}
            }
% for i in range(len(YS)):
            dlp_l${i}[dlp_lid] = reduce_y${i};
% endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (dlp_lr != 0 || dlp_o >= dlp_O)
        return;
    if (dlp_chunks > 1) {
% for i in range(len(YS)):
        dlp_ws${i}[dlp_ws${i}_offset + dlp_chunk_id * dlp_O + dlp_o] = reduce_y${i};
% endfor
        return;
    }
% for i in range(len(YS)):
    ${final_store(i, 'dlp_o')}
% endfor
}

% endif
// second pass: a work-group of ${FINISH_WG} per output combines its chunks' partial
// results (thread t takes chunks t, t + ${FINISH_WG}, ...), then a tree as above
__kernel __attribute__((reqd_work_group_size(${FINISH_WG}, 1, 1)))
void ${NAME}_finish(${IT} dlp_O, ${IT} dlp_chunks
% for i, (st, ct) in enumerate(YS):
    , __global ${ct} *dlp_ws${i}, ulong dlp_ws${i}_offset
% endfor
${yargs()}, ${scale_type()} dlp_alpha, ${scale_type()} dlp_beta)
{
    int dlp_t = get_local_id(0);
    ${IT} dlp_o = get_group_id(0);
% for i, (st, ct) in enumerate(YS):
    ${ct} reduce_y${i};
% endfor
    {
${REDUCE_INIT}
    }
    for (${IT} dlp_c = dlp_t; dlp_c < dlp_chunks; dlp_c += ${FINISH_WG}) {
% for i, (st, ct) in enumerate(YS):
        ${ct} y${i} = dlp_ws${i}[dlp_ws${i}_offset + dlp_c * dlp_O + dlp_o];
% endfor
        {
${REDUCE}
        }
    }
% for i, (st, ct) in enumerate(YS):
    __local ${ct} dlp_f${i}[${FINISH_WG}];
    dlp_f${i}[dlp_t] = reduce_y${i};
% endfor
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int dlp_s = ${FINISH_WG // 2}; dlp_s > 0; dlp_s >>= 1) {
        if (dlp_t < dlp_s) {
% for i, (st, ct) in enumerate(YS):
            ${ct} y${i} = dlp_f${i}[dlp_t + dlp_s];
% endfor
            {
${REDUCE}
            }
% for i in range(len(YS)):
            dlp_f${i}[dlp_t] = reduce_y${i};
% endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (dlp_t != 0)
        return;
% for i in range(len(YS)):
    ${final_store(i, 'dlp_o')}
% endfor
}
% endif
