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
