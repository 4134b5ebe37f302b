## The lanes of a vector accumulator added up, for the CPU kernels that keep sums in
## vectors: lanes_sum(width) writes the function float lanes_sum(float<width>), pairwise,
## halves first (width a power of two, at least 2).
<%def name="lanes_sum(width)">
inline float lanes_sum(float${width} h${width})
{
<% n = width %>\
% while n > 2:
    const float${n // 2} h${n // 2} = h${n}.lo + h${n}.hi;
<% n //= 2 %>\
% endwhile
    return h2.s0 + h2.s1;
}
</%def>

## The mean and M2 (the sum of squared deviations from the mean) of the ``length`` floats
## at ``p`` (expressions), in two passes of float<width> vectors while they are in cache
## (the most accurate order there is), the last length % width one by one: declares float
## ``mean`` and ``m2`` (names); ``centred`` False: the mean is 0 and m2 the sum of squares
## (one pass). Uses lanes_sum(width).
<%def name="row_moments(width, p, length, mean, m2, centred=True)">
    float ${mean}, ${m2};
    {
        const uint rm_full = ${length} / ${width} * ${width};
        float${width} rm_acc = 0.0f;
% if centred:
        for (uint i = 0; i < rm_full; i += ${width})
            rm_acc += vload${width}(0, ${p} + i);
        float rm_sum = lanes_sum(rm_acc);
        for (uint i = rm_full; i < ${length}; i++)
            rm_sum += ${p}[i];
        ${mean} = rm_sum / ${length};
        rm_acc = 0.0f;
% else:
        ${mean} = 0.0f;
% endif
        for (uint i = 0; i < rm_full; i += ${width}) {
            const float${width} d = vload${width}(0, ${p} + i) - ${mean};
            rm_acc += d * d;
        }
        ${m2} = lanes_sum(rm_acc);
        for (uint i = rm_full; i < ${length}; i++)
            ${m2} += (${p}[i] - ${mean}) * (${p}[i] - ${mean});
    }
</%def>
