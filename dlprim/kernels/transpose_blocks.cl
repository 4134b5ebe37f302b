<%
# y[b, n, m] = x[b, m, n] on CPUs, bit for bit (WORD: an unsigned type of the elements'
# size): each work-item moves a BLOCK x BLOCK block as BLOCK vector loads of x's rows and
# BLOCK vector stores of y's, the transpose between them in registers, so both sides
# read and write whole cache lines with no local memory and no barrier (transpose.cl's
# tiles were 2-17x slower on CPU runtimes, which run a work-group's barrier by splitting
# its loops). HINT: vec_type_hint says the vectors are the work-item's own, not lanes
# of a vectorised group (Intel's runtime: 1.2-3x faster with it). Partial blocks at the
# edges go value by value.
B = BLOCK
LANES = "0123456789abcdef"
%>
__kernel ${"__attribute__((vec_type_hint(%s%d)))" % (WORD, B) if HINT else ""}
void transpose_blocks(ulong M, ulong N, __global const ${WORD} *x, ulong x_offset,
                      __global ${WORD} *y, ulong y_offset)
{
    const ulong n0 = get_global_id(0) * ${B}, m0 = get_global_id(1) * ${B};
    const ulong base = get_global_id(2) * M * N;
    x += x_offset + base;
    y += y_offset + base;
    if (m0 + ${B} <= M && n0 + ${B} <= N) {
        ${WORD} r[${B}][${B}];
        for (int i = 0; i < ${B}; i++) {
            const ${WORD}${B} v = vload${B}(0, x + (m0 + i) * N + n0);
            ${" ".join("r[i][%d] = v.s%s;" % (c, LANES[c]) for c in range(B))}
        }
        for (int c = 0; c < ${B}; c++)
            vstore${B}((${WORD}${B})(${", ".join("r[%d][c]" % i for i in range(B))}), 0,
                       y + (n0 + c) * M + m0);
        return;
    }
    for (ulong i = m0; i < min(m0 + ${B}, M); i++)
        for (ulong c = n0; c < min(n0 + ${B}, N); c++)
            y[c * M + i] = x[i * N + c];
}
