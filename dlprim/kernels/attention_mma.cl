<%include file="common.h"/>
<%include file="mma.h"/>
% if context.get("WGMMA", 0):
<%include file="wgmma.h"/>
% endif
// Fused scaled dot-product attention on NVIDIA tensor cores, for 16-bit storage (half or
// bfloat16): FlashAttention-2's blocks as attention_tiles.cl, with every product a warp's
// mma.sync m16n8k16 (FP16 or BF16 operands, float32 sums; mma.h). A warp owns MW tiles of
// 16 rows of its work-group's block (query rows in "forward" and "dq", key rows in
// "dkdv") and keeps their operand fragments in registers for the whole walk over the
// other side, whose blocks are staged in local memory as stored (16-bit, rows of W + 8
// values: ldmatrix's eight 16-byte rows fall in distinct banks) and read by ldmatrix.
// Each fragment of the staged block that ldmatrix reads feeds MW products: local memory's
// bandwidth, not the tensor cores, bounds a warp of one tile.
// A product's accumulator holds, in lane 4g + t, rows g and g + 8 by columns 2t, 2t + 1 of
// each block of 8; two such blocks side by side are exactly the A fragment of the next
// product (rows g, g + 8 by 16 of K), so the weights P = exp(S - m) (and dS) go from one
// product to the next in registers, rounded to the storage's 16 bits as FlashAttention
// does. A query row's maximum and sum are reduced across the four lanes t that share it
// (LANES_XOR). Same layouts, mask, causal and dropout semantics as attention.cl
// (attention.h); the score is fl(fl(scale q.k) + mask), q.k summed by the tensor cores.
// dS is multiplied by the scale only when dQ and dK are stored, so that float16's dS
// stays clear of its subnormals.
// PASS: "forward", "dq" or "dkdv"; D, DV: widths, multiples of 16; WARPS warps of 32
// items, MW tiles of 16 rows each, BQ (forward, dq: 16 MW WARPS) query rows and BK (dkdv:
// 16 MW WARPS) key rows per block;
// ACT_T: "half" or "bfloat16"; ALIGNED: every row of q, k, v and dO starts on 16 bytes,
// so blocks are staged with 16-byte loads (else 2-byte ones).
// WGMMA (D and DV multiples of 64): the same kernels on Hopper's warpgroup products
// (wgmma.h), MW = 1 and WARPS a multiple of 4, so that each warpgroup owns 64 rows: the
// other side's blocks are staged in the layout the tensor cores read in place, so a
// warpgroup's four warps share one read of them where each warp's ldmatrix read all of
// them; the own rows' fragments and the weights stay registers (wgmma's A from
// registers, the warp form's fragments tile for tile).
// OVERLAP (the warpgroup form's forward): each key block's scores issued beside the
// previous block's P V, the softmax running while the tensor cores multiply.
<%include file="attention.h"/>
<%
EMULATE = context.get("MMA_EMULATE", False)
WGMMA = context.get("WGMMA", 0)
OVERLAP = context.get("OVERLAP", 0)  # (forward, WGMMA)
UNROLL = "#pragma unroll 1" if EMULATE else "#pragma unroll"
NT = 32 * WARPS
LDD, LDV = D + 8, DV + 8
PRODUCT = "MMA_BF16" if ACT_T == "bfloat16" else "MMA_F16"
PACK = "PACK_BF16" if ACT_T == "bfloat16" else "PACK_F16"
assert D % 16 == 0 and DV % 16 == 0 and BQ % 16 == 0 and BK % 16 == 0
R = 2 * MW  # the rows a lane holds: g and g + 8 of each tile, row r in tile r / 2
# the other side's staged blocks: rows of the width + 8 (ldmatrix's eight rows in distinct
# banks) in the warp form; in the warpgroup form rows of the width in panels of 64 values,
# each row of a panel 128 bytes swizzled 128 bytes wide (wgmma.h), which the tensor cores
# read in place both ways: K-major (the block as the B of rows by rows, as K in Q K^T)
# and MN-major (as the B of weights by block, as V in P V), 8 rows an atom
SLD, SLV = (D, DV) if WGMMA else (LDD, LDV)
PUBLISHED = "WG_FENCE_PROXY();" if WGMMA else ""  # cp.async's stores, for the tensor cores
if WGMMA:
    assert D % 64 == 0 and DV % 64 == 0 and MW == 1 and WARPS % 4 == 0
    assert BQ % 16 == 0 and BK % 16 == 0 and max(BQ, BK) <= 256
    WG_TYPE = "bf16" if ACT_T == "bfloat16" else "f16"
    KIND = 2 if ACT_T == "bfloat16" else 1
def k_major(b, c, rows):
    """the descriptor of the c-th 16 values of K of the block staged at b (rows of it),
    read K-major: 32 bytes on along a panel's swizzled rows"""
    at = (c // 4) * 128 * rows + (c % 4) * 32
    return "wg_descriptor(WG_ADDRESS(%s) + %d, 16, 1024, 1)" % (b, at)
def mn_major(b, c, rows):
    """the same read MN-major, the c-th 16 rows of the block as K: two atoms of 8 on; 64
    values of N are 128 rows' bytes apart"""
    return "wg_descriptor(WG_ADDRESS(%s) + %d, %d, 1024, 1)" % (b, 2048 * c, rows // 8 * 1024)
def stage_at(rows):
    """the offset of a staged block's row r, column c (a multiple of 8) in the warpgroup
    form's layout (None: rows of ld)"""
    return "(c >> 6) * %d + wg_k_major_at(r, c & 63, 8, 128)" % (64 * rows) if WGMMA else None
%>
// Weights without a branch per score (a branch each split the softmax's work into 64
// blocks per key block): a masked score is -inf and 2^-inf is 0, so only the row's own
// maximum needs a stand-in where it is -inf (no key seen yet, or a row masked whole):
// 0 in the forward, and in the backward m = 0, nl2 = -inf with it, which gives 0 for
// every score of such a row. exp(s - m - log l) = 2^((s - m) log2(e) + nl2), nl2 = -log2 l.
#define FINITE_MAX(m) ((m) == NEG_INF ? 0.0f : (m))
// the score of query i and key j from their product x: fl(fl(scale x) + mask), -inf for
// rows and keys past the ends
#define SCORE(x, i, j) (((i) < lq && (j) < lk) ? (x) * scale + MASK_AT(i, j) : NEG_INF)
#define PROB2(s, m, nl2) EXP2(fma((s) - (m), LOG2E, (nl2)))
// the A fragment a[0..3] of columns 16 c .. 16 c + 15 of tile w of accumulator-shaped
// floats x (16 rows by blocks of 8): two blocks side by side, rounded to the 16-bit type
#define PACK_A(a, x, w, c) { \
    (a)[0] = ${PACK}((x)[w][2 * (c)][0], (x)[w][2 * (c)][1]); \
    (a)[1] = ${PACK}((x)[w][2 * (c)][2], (x)[w][2 * (c)][3]); \
    (a)[2] = ${PACK}((x)[w][2 * (c) + 1][0], (x)[w][2 * (c) + 1][1]); \
    (a)[3] = ${PACK}((x)[w][2 * (c) + 1][2], (x)[w][2 * (c) + 1][3]); }

## rows [first, first + rows) of a global matrix of 16-bit values (rows ``row`` values
## apart) into local rows of ``ld`` (or, given ``at``, to the local offset it writes of
## row r and column c); zeros past ``limit``. Eight values a copy: ALIGNED, through
## cp.async (mma.h), in flight until the work-item's COPY_ASYNC_WAIT; else loaded and
## stored at once.
<%def name="fetch(dst, ld, src, first, limit, rows, width, row, at=None)">
    for (uint e = t; e < ${rows * (width // 8)}; e += ${NT}) {
        const uint r = e / ${width // 8}, c = (e % ${width // 8}) * 8;
        const bool live = ${first} + r < ${limit};
        // row 0 stands in for a row past the limit: an address that stays valid
        __global const ushort *p = (__global const ushort *)${src}
                                   + (live ? (ulong)(${first} + r) * ${row} + c : 0);
<% where = at or "r * %s + c" % ld %>
% if ALIGNED:
        COPY_ASYNC(${dst} + ${where}, p, live ? 16 : 0);
% else:
        *(__local uint4 *)(${dst} + ${where}) = live ? as_uint4(vload8(0, p)) : (uint4)(0);
% endif
    }
</%def>

## acc[w][n] += a(w) times columns n0 .. n0 + 15 of a staged block, for every n0 < N:
## one ldmatrix of the block's 16 x 16 at (n0, k16) (k_major: staged as rows [k][n], else
## [n][k]) feeds the products of all MW tiles; a(w) names tile w's four A registers
<%def name="block_products(acc, a, b, ld, N, k16, k_major)">
        ${UNROLL}
        for (int n = 0; n < ${N // 8}; n += 2) {
            uint bf[4];
            B_FRAGMENTS(bf, ${b}, 8 * n, ${k16}, ${ld}, ${k_major});
            ${UNROLL}
            for (int w = 0; w < ${MW}; w++) {
                ${PRODUCT}(${acc}[w][n], ${a}[0], ${a}[1], ${a}[2], ${a}[3], bf[0], bf[1]);
                ${PRODUCT}(${acc}[w][n + 1], ${a}[0], ${a}[1], ${a}[2], ${a}[3], bf[2], bf[3]);
            }
        }
</%def>

% if WGMMA:
## acc (float[1][N / 8][4], wgmma's accumulators of the warp's 16 rows, laid out as the
## warp form's tile) += A (registers a[0..3]: the warp's 16 rows by 16 of K, mma.sync's A
## fragment) times the 16 x N block of B at descriptor desc (tnsp: MN-major)
<%def name="wg_products(acc, N, a, desc, tnsp)">
% if EMULATE:
        wgmma_emulated_a(&${acc}[0][0][0], ${N}, ${a}[0], ${a}[1], ${a}[2], ${a}[3], smem,
                         ${desc}, ${1 - tnsp}, ${KIND}, mma_scratch + 192 * warp, lane);
% else:
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %${N // 2 + 5}, 0;\n"
            "//SM90A wgmma.mma_async.sync.aligned.m64n${N}k16.f32.${WG_TYPE}.${WG_TYPE} {"
            % for i in range(N // 2):
            "%${i}${"," if i < N // 2 - 1 else "},"}"
            % endfor
            " {%${N // 2}, %${N // 2 + 1}, %${N // 2 + 2}, %${N // 2 + 3}}, %${N // 2 + 4}, p, 1, 1, ${tnsp};\n}"
            : ${", ".join('"+f"(%s[0][%d][%d])' % (acc, i // 4, i % 4) for i in range(N // 2))}
            : "r"(${a}[0]), "r"(${a}[1]), "r"(${a}[2]), "r"(${a}[3]), "l"(${desc}), "r"(1)
            : "memory");
% endif
</%def>
% endif

## acc[w][n] (tile w < MW; n < N / 8, 16 rows by 8 columns each) = the warp's rows of
## fragments a[MW][W / 16][4] times the columns of a block staged as rows [n][w] (B = its
## transpose). The warpgroup form only issues the products: see products_done.
<%def name="rows_by_rows(acc, a, b, ld, N, W)">
    ${zeros(acc, N)}
% if WGMMA:
    WG_FENCE();
    % for c in range(W // 16):
    {
${wg_products(acc, N, "%s[0][%d]" % (a, c), k_major(b, c, N), 0)}
    }
    % endfor
% else:
    ${UNROLL}
    for (int c = 0; c < ${W // 16}; c++) {
        ${block_products(acc, a + "[w][c]", b, ld, N, "16 * c", 0)}
    }
% endif
</%def>

## acc[w][n] (n < N / 8) += x[w] (block staged as rows [k][n]): x[MW][K / 8][4]
## accumulator-shaped floats (16 rows by K per tile), packed two blocks of 8 at a time
## into A fragments. The warpgroup form only issues the products: see products_done.
<%def name="weights_by_block(acc, x, b, ld, N, K)">
% if WGMMA:
    % for c in range(K // 16):
    {
        uint a[4];
        PACK_A(a, ${x}, 0, ${c});
        WG_FENCE();  // orders this fragment's registers, just written, before its product
${wg_products(acc, N, "a", mn_major(b, c, K), 1)}
    }
    % endfor
% else:
    ${UNROLL}
    for (int c = 0; c < ${K // 16}; c++) {
        uint a[${MW}][4];
        ${UNROLL}
        for (int w = 0; w < ${MW}; w++) {
            PACK_A(a[w], ${x}, w, c);
        }
        ${block_products(acc, "a[w]", b, ld, N, "16 * c", 1)}
    }
% endif
</%def>

## the products issued since the last products_done finished (the warpgroup form's are
## asynchronous; the warp form's are done as issued); accs: (name, N) of their
## accumulators. The wait names no register, so the compiler could move reads of the
## accumulators above it (wrong sums, seen on the H200): an empty asm after it takes each
## as an operand it may change, so that every later read follows it.
<%def name="products_done(accs)">
% if WGMMA:
    WG_COMMIT();
    WG_WAIT(0);
    ${touched(accs)}
% endif
</%def>

## after a wait for products: every later read of their accumulators (accs: (name, N))
## follows it (see products_done)
<%def name="touched(accs)">
% for name, n in (accs if not EMULATE else ()):
<% operands = ", ".join('"+f"(%s[0][%d][%d])' % (name, i // 4, i % 4) for i in range(n // 2)) %>
    asm volatile("" : ${operands} :: "memory");
% endfor
</%def>

## the warp's fragments of its MW tiles of rows from a staged block, W wide
<%def name="fragments(name, src, ld, W)">
    uint ${name}[${MW}][${W // 16}][4];
    ${UNROLL}
    for (int w = 0; w < ${MW}; w++) {
        ${UNROLL}
        for (int c = 0; c < ${W // 16}; c++)
            A_FRAGMENTS(${name}[w][c], ${src}, 16 * (${MW} * warp + w), 16 * c, ${ld}, 0);
    }
</%def>

## the walk over the other side's blocks of B rows, double-buffered: blocks(stage, x)
## fetches the block at row x into stage 0 or 1; while block x0 is computed on in stage
## cur (the caller's body), the next one is in flight into the other
<%def name="walk(x0, start, end, B, blocks, before_wait='', published='')">
    ${blocks("0", start)}
    COPY_ASYNC_COMMIT();
    uint cur = 0;
    for (uint ${x0} = ${start}; ${x0} < ${end}; ${x0} += ${B}, cur ^= 1) {
        if (${x0} + ${B} < ${end}) {
            ${blocks("(cur ^ 1)", "%s + %s" % (x0, B))}
        }
        COPY_ASYNC_COMMIT();
        ${before_wait}
        COPY_ASYNC_WAIT(1);  // this work-item's copies of the current block
        ${published}
        barrier(CLK_LOCAL_MEM_FENCE);  // and everyone's
        ${caller.body()}
        barrier(CLK_LOCAL_MEM_FENCE);  // its stage is free for the block after next
    }
    COPY_ASYNC_WAIT(0);  // no copy left in flight (a walk of no blocks fetched one)
</%def>

## the query block's walk over the key and value blocks (forward, dq): causal stops at
## its last query; in the caller's body kc and vc are the current stage's blocks and s
## the scores' products Q K^T (qf: the warp's query fragments); blocks as walk's
<%def name="key_walk(blocks, done=True)">
    ${key_end()}
    <%self:walk x0="j0" start="0" end="jend" B="${BK}" blocks="${blocks}" published="${PUBLISHED}">
        __local ushort *kc = ks + cur * ${BK * SLD}, *vc = vs + cur * ${BK * SLV};
        ${rows_by_rows("s", "qf", "kc", LDD, BK, D)}
        % if done:
        ${products_done([("s", BK)])}
        % endif
        ${caller.body()}
    </%self:walk>
</%def>

## jend: the end of the keys the query block from i0 sees
<%def name="key_end()">
% if CAUSAL:
    const uint jcausal = min(lk, i0 + ${BQ});  // key j > query i is out
% else:
    const uint jcausal = lk;
% endif
    const uint jend = min(jcausal, KEY_END(i0, min(i0 + ${BQ}, lq) - 1));  // (cache positions)
</%def>

## the work-group's own block (fetched by ``fetches``) waited for and published
<%def name="own_block(fetches)">
    ${fetches}
    COPY_ASYNC_COMMIT();
    COPY_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
</%def>

<%def name="zeros(name, N)">
    float ${name}[${MW}][${N // 8}][4];
    for (int w = 0; w < ${MW}; w++)
        for (int n = 0; n < ${N // 8}; n++)
            ${name}[w][n][0] = ${name}[w][n][1] = ${name}[w][n][2] = ${name}[w][n][3] = 0.0f;
</%def>

## the lane's rows of the block from x0: row r (< R) is row g (r even) or g + 8 of tile
## r / 2 of the warp's
<%def name="lane_rows(name, x0)">
    uint ${name}[${R}];
    for (int r = 0; r < ${R}; r++)
        ${name}[r] = ${x0} + 16 * (${MW} * warp + r / 2) + g + 8 * (r & 1);
</%def>

## store acc (the warp's tiles by W, accumulator-shaped) times ``factor`` (of the lane's
## row r) to the lane's rows ``rows`` of dst, below limit
<%def name="store(dst, row, acc, rows, limit, W, factor)">
    ${UNROLL}
    for (int r = 0; r < ${R}; r++) {
        const uint i = ${rows}[r];
        if (i < ${limit}) {
            ${UNROLL}
            for (int n = 0; n < ${W // 8}; n++) {
                ST_${ACT_T}(${dst}, (ulong)i * ${row} + 8 * n + 2 * tq,
                            ${acc}[r / 2][n][2 * (r & 1)] * ${factor("r")});
                ST_${ACT_T}(${dst}, (ulong)i * ${row} + 8 * n + 2 * tq + 1,
                            ${acc}[r / 2][n][2 * (r & 1) + 1] * ${factor("r")});
            }
        }
    }
</%def>

% if DROPOUT:
// the factors of weights (i, j), (i, j + 1), j even: one draw holds both
#define KEEP2(f, i, j) { \
    const uint4 r_ = KEEP_DRAW(i, (j) >> 2); \
    f[0] = keep_lane(r_, (j) & 3, drop_threshold, keep_scale); \
    f[1] = keep_lane(r_, ((j) & 3) + 1, drop_threshold, keep_scale); }
% else:
#define KEEP2(f, i, j) { f[0] = f[1] = 1.0f; }
% endif

% if EMULATE:
#define SCRATCH __local uint mma_scratch[${192 * WARPS}];
% else:
#define SCRATCH
% endif

## what every kernel starts with: the two operands' local stages (``a``, ``b``: two stages
## of ``other`` rows, the work-group's ``own`` rows staged there first; rows of D + 8 and
## DV + 8, or the warpgroup form's layout), the work-item's place in its warp, the batch
## row and the operands' rows of it (``dout``: the backward's output gradient too)
<%def name="prologue(a, b, own, other, dout=False)">
% if WGMMA:
<% a_values = -(-max(2 * other * D, own * LDD) // 512) * 512 %>
    // stages 1024-byte aligned for the swizzle (wgmma.h)
    __local uchar smem[${2 * (a_values + max(2 * other * DV, own * LDV))}] __attribute__((aligned(1024)));
    __local ushort *${a} = (__local ushort *)smem, *${b} = ${a} + ${a_values};
% else:
<% rows = max(2 * other, own) %>
    __local uint4 ${a}4[${rows * LDD // 8}], ${b}4[${rows * LDV // 8}];
    __local ushort *${a} = (__local ushort *)${a}4, *${b} = (__local ushort *)${b}4;
% endif
    SCRATCH
    const int t = get_local_id(0), lane = t % 32, warp = t / 32, g = lane >> 2, tq = lane & 3;
    const uint bh = get_group_id(1);
    q += q_offset + IN_AT(bh, lq, ${D});
    k += k_offset + IN_AT(bh, lk, ${D});
    v += v_offset + IN_AT(bh, lk, ${DV});
% if dout:
    dout += dout_offset + OUT_AT(bh, lq, ${DV});
% endif
</%def>


<%
def key_block(stage, x):  # the fetches of the key block at row x into a stage
    return capture(fetch, "ks + %s * %d" % (stage, BK * SLD), LDD, "k", x, "lk", BK, D,
                   "IN_ROW(%d)" % D, stage_at(BK))
def value_block(stage, x):
    return capture(fetch, "vs + %s * %d" % (stage, BK * SLV), LDV, "v", x, "lk", BK, DV,
                   "IN_ROW(%d)" % DV, stage_at(BK))
def kv(stage, x):  # both
    return key_block(stage, x) + value_block(stage, x)
%>

% if PASS == "forward":
## the forward's online softmax of the block of keys from j0 whose products are in s: the
## scores, the rows' new maxima m and sums l, acc rescaled, s the weights p (times the
## dropout factors). ``later``: acc's factors left in that array (float[R]) instead, for
## products into acc still in flight
<%def name="online_softmax(later=None)">
        float mx[${R}];
        ${UNROLL}
        for (int r = 0; r < ${R}; r++) {
            mx[r] = NEG_INF;
            ${UNROLL}
            for (int n = 0; n < ${BK // 8}; n++) {
                ${UNROLL}
                for (int h = 0; h < 2; h++) {
                    const uint i = rows[r], j = j0 + 8 * n + 2 * tq + h;
                    const float y = SCORE(s[r / 2][n][2 * (r & 1) + h], i, j);
                    s[r / 2][n][2 * (r & 1) + h] = y;
                    mx[r] = fmax(mx[r], y);
                }
            }
        }
        float mf[${R}];
        ${UNROLL}
        for (int r = 0; r < ${R}; r++) {
            mx[r] = fmax(mx[r], LANES_XOR(mx[r], 1));
            mx[r] = fmax(mx[r], LANES_XOR(mx[r], 2));
            const float mn = fmax(m[r], mx[r]);
            // rescale the old sums
            const float f = mn == NEG_INF ? 1.0f : EXP2((m[r] - mn) * LOG2E);
            m[r] = mn;
            mf[r] = FINITE_MAX(mn);
            l[r] *= f;
% if later:
            ${later}[r] = f;
% else:
            ${rescaled("acc", "r", "f")}
% endif
        }
        ${UNROLL}
        for (int r = 0; r < ${R}; r++) {
            ${UNROLL}
            for (int n = 0; n < ${BK // 8}; n++) {
                float keep[2];
                KEEP2(keep, rows[r], j0 + 8 * n + 2 * tq);
                ${UNROLL}
                for (int h = 0; h < 2; h++) {
                    const float p = EXP2((s[r / 2][n][2 * (r & 1) + h] - mf[r]) * LOG2E);
                    l[r] += p;
                    s[r / 2][n][2 * (r & 1) + h] = p * keep[h];
                }
            }
        }
</%def>

## the output sums of the lane's row r times f
<%def name="rescaled(acc, r, f)">
            ${UNROLL}
            for (int n = 0; n < ${DV // 8}; n++) {
                ${acc}[${r} / 2][n][2 * (${r} & 1)] *= ${f};
                ${acc}[${r} / 2][n][2 * (${r} & 1) + 1] *= ${f};
            }
</%def>

% if WGMMA:
## the weights in s (the warpgroup's 64 rows by BK keys, accumulator-shaped) packed into
## A fragments pf[BK / 16][4], one per 16 keys
<%def name="packed_weights()">
    ${UNROLL}
    for (int c = 0; c < ${BK // 16}; c++) {
        PACK_A(pf[c], s, 0, c);
    }
</%def>

## acc += the packed weights pf times the value block staged at vp, issued (after a fence)
<%def name="weights_products()">
    % for c in range(BK // 16):
    {
${wg_products("acc", DV, "pf[%d]" % c, mn_major("vp", c, BK), 1)}
    }
    % endfor
</%def>

## The forward's walk with each key block's scores issued beside the previous block's
## P V, so that the softmax of one block runs while the tensor cores multiply the other
## (a warpgroup waited for its scores, ran the softmax, then waited for P V; only other
## work-groups filled the gaps). The value blocks come one block behind the key blocks,
## in stages of their own: the copies of K_b+1 and V_b are in flight during block b, as
## the walk's copies of block b+1.
<%def name="overlapped_key_walk()">
    ${key_end()}
    const uint blocks = (jend + ${BK - 1}) / ${BK};
    uint pf[${BK // 16}][4];
    if (blocks > 0) {
        ${key_block("0", "0")}
        COPY_ASYNC_COMMIT();
        if (blocks > 1) {
            ${key_block("1", BK)}
        }
        ${value_block("0", "0")}
        COPY_ASYNC_COMMIT();
        COPY_ASYNC_WAIT(1);  // K_0
        ${PUBLISHED}
        barrier(CLK_LOCAL_MEM_FENCE);
        {
            const uint j0 = 0;
            ${rows_by_rows("s", "qf", "ks", LDD, BK, D)}
            ${products_done([("s", BK)])}
            ${online_softmax()}
            ${packed_weights()}
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint b = 1; b < blocks; b++) {
        const uint j0 = b * ${BK};
        if (b + 1 < blocks) {
            ${key_block("((b + 1) & 1)", "j0 + %d" % BK)}
        }
        ${value_block("(b & 1)", "j0")}
        COPY_ASYNC_COMMIT();
        COPY_ASYNC_WAIT(1);  // K_b and V_b-1
        ${PUBLISHED}
        barrier(CLK_LOCAL_MEM_FENCE);
        __local ushort *kc = ks + (b & 1) * ${BK * SLD}, *vp = vs + ((b - 1) & 1) * ${BK * SLV};
        ${rows_by_rows("s", "qf", "kc", LDD, BK, D)}
        WG_COMMIT();
        ${weights_products()}
        WG_COMMIT();
        WG_WAIT(1);  // the scores (P V may still run)
        ${touched([("s", BK)])}
        float later[${R}];
        ${online_softmax("later")}
        WG_WAIT(0);
        ${touched([("acc", DV)])}
        ${UNROLL}
        for (int r = 0; r < ${R}; r++) {
            ${rescaled("acc", "r", "later[r]")}
        }
        ${packed_weights()}
        barrier(CLK_LOCAL_MEM_FENCE);  // K_b-1's and V_b-1's stages free
    }
    if (blocks > 0) {  // the last block's P V
        COPY_ASYNC_WAIT(0);
        ${PUBLISHED}
        barrier(CLK_LOCAL_MEM_FENCE);
        __local ushort *vp = vs + ((blocks - 1) & 1) * ${BK * SLV};
        WG_FENCE();
        ${weights_products()}
        ${products_done([("acc", DV)])}
    }
</%def>
% endif

## the forward's start after the query block is in qf: the output sums acc, the rows'
## maxima m and sums l, the lane's rows
<%def name="forward_state()">
    ${zeros("acc", DV)}
    float m[${R}], l[${R}];
    for (int r = 0; r < ${R}; r++) {
        m[r] = NEG_INF;
        l[r] = 0.0f;
    }
    ${lane_rows("rows", "i0")}
</%def>

## the forward's end: the statistics and o = acc / l
<%def name="forward_end()">
    float inv[${R}];
    o += o_offset + OUT_AT(bh, lq, ${DV});
    ${UNROLL}
    for (int r = 0; r < ${R}; r++) {
        float total = l[r] + LANES_XOR(l[r], 1);
        total += LANES_XOR(total, 2);
        inv[r] = total > 0.0f ? 1.0f / total : 0.0f;
        if (tq == 0 && rows[r] < lq) {  // -inf and log 0 = -inf for a row masked whole
            const ulong at = stats_offset + STATS_AT(bh, lq, rows[r]);
            stats[at] = m[r];
            stats[at + 1] = log(total);
        }
    }
    ${store("o", "OUT_ROW(%d)" % DV, "acc", "rows", "lq", DV, lambda r: "inv[%s]" % r)}
</%def>

// o = softmax(s) v and the statistics per query row, for the block of BQ query rows of
// group 0
__kernel __attribute__((reqd_work_group_size(${NT}, 1, 1)))
void attention_mma_forward(FORWARD_ARGS, __global ${ACT_T} *o, ulong o_offset,
                           __global float *stats, ulong stats_offset MASK_ARGS DROP_ARGS)
{
    // two stages of the key and value blocks
    ${prologue("ks", "vs", BQ, BK)}
    const uint i0 = get_group_id(0) * ${BQ};
    // the query block through the key blocks' place, into registers
    ${own_block(capture(fetch, "ks", LDD, "q", "i0", "lq", BQ, D, "IN_ROW(%d)" % D))}
    ${fragments("qf", "ks", LDD, D)}
    barrier(CLK_LOCAL_MEM_FENCE);
    ${forward_state()}
% if WGMMA and OVERLAP:
    ${overlapped_key_walk()}
% else:
    <%call expr="key_walk(kv)">
        ${online_softmax()}
        ${weights_by_block("acc", "s", "vc", LDV, DV, BK)}
        ${products_done([("acc", DV)])}  // before the walk's closing barrier frees the stage
    </%call>
% endif
    ${forward_end()}
}
% endif

// backward: ds_ij = p_ij (k_ij dO_i . v_j - delta_i), delta_i = dO_i . O_i, k_ij the
// dropout factor
% if PASS == "dq":
## s = dS of the block of keys from j0, from its scores s and dP = dO V^T in dp
<%def name="dq_weights()">
        ${UNROLL}
        for (int r = 0; r < ${R}; r++) {
            ${UNROLL}
            for (int n = 0; n < ${BK // 8}; n++) {
                float keep[2];
                const uint i = rows[r], j = j0 + 8 * n + 2 * tq;
                KEEP2(keep, i, j);
                ${UNROLL}
                for (int h = 0; h < 2; h++) {
                    const int w = r / 2, e = 2 * (r & 1) + h;
                    const float p = PROB2(SCORE(s[w][n][e], i, j + h), m_r[r], nl2_r[r]);
                    s[w][n][e] = p * (dp[w][n][e] * keep[h] - delta_r[r]);
                }
            }
        }
</%def>

// dq_i = scale sum_j ds_ij k_j for the block of BQ query rows of group 0
__kernel __attribute__((reqd_work_group_size(${NT}, 1, 1)))
void attention_mma_dq(BACKWARD_ARGS, __global ${ACT_T} *dq, ulong dq_offset MASK_ARGS DROP_ARGS)
{
    ${prologue("ks", "vs", BQ, BK, dout=True)}
    const uint i0 = get_group_id(0) * ${BQ};
    ${own_block(capture(fetch, "ks", LDD, "q", "i0", "lq", BQ, D, "IN_ROW(%d)" % D)
                + capture(fetch, "vs", LDV, "dout", "i0", "lq", BQ, DV, "OUT_ROW(%d)" % DV))}
    ${fragments("qf", "ks", LDD, D)}
    ${fragments("gf", "vs", LDV, DV)}
    barrier(CLK_LOCAL_MEM_FENCE);
    ${zeros("acc", D)}
    ${lane_rows("rows", "i0")}
    float m_r[${R}], nl2_r[${R}], delta_r[${R}];
    for (int r = 0; r < ${R}; r++) {
        const bool live = rows[r] < lq;
        const ulong at = stats_offset + STATS_AT(bh, lq, rows[r]);
        const float m = live ? stats[at] : NEG_INF;
        m_r[r] = FINITE_MAX(m);
        nl2_r[r] = m == NEG_INF ? NEG_INF : -stats[at + 1] * LOG2E;
        delta_r[r] = live ? delta[delta_offset + STAT_AT(bh, lq, rows[r])] : 0.0f;
    }
    <%call expr="key_walk(kv, False)">
        ${rows_by_rows("dp", "gf", "vc", LDV, BK, DV)}
        ${products_done([("s", BK), ("dp", BK)])}
        ${dq_weights()}
        ${weights_by_block("acc", "s", "kc", LDD, D, BK)}
        ${products_done([("acc", D)])}
    </%call>
    dq += dq_offset + IN_AT(bh, lq, ${D});
    ${store("dq", "IN_ROW(%d)" % D, "acc", "rows", "lq", D, lambda r: "scale")}
}
% endif

% if PASS == "dkdv":
<%
def qg(stage, x):
    return (capture(fetch, "qs + %s * %d" % (stage, BQ * SLD), LDD, "q", x, "lq", BQ, D,
                    "IN_ROW(%d)" % D, stage_at(BQ))
            + capture(fetch, "gs + %s * %d" % (stage, BQ * SLV), LDV, "dout", x, "lq", BQ, DV,
                      "OUT_ROW(%d)" % DV, stage_at(BQ)))
STATS = """
        for (uint e = t; e < %d; e += %d) {  // the current block's statistics
            const bool live = i0 + e < lq;
            const ulong at = stats_offset + STATS_AT(bh, lq, i0 + e);
            const float m = live ? stats[at] : NEG_INF;
            ms[e] = FINITE_MAX(m);
            nls[e] = m == NEG_INF ? NEG_INF : -stats[at + 1] * LOG2E;
            dls[e] = live ? delta[delta_offset + STAT_AT(bh, lq, i0 + e)] : 0.0f;
        }""" % (BQ, NT)
%>
## st = P^T, dpt = dS^T of the block of queries from i0, from their scores st and
## dP^T = V dO^T in dpt
<%def name="dkdv_weights()">
        ${UNROLL}
        for (int w = 0; w < ${MW}; w++)
        ${UNROLL}
        for (int n = 0; n < ${BQ // 8}; n++) {
            ${UNROLL}
            for (int e = 0; e < 4; e++) {
                const uint c = 8 * n + 2 * tq + (e & 1), i = i0 + c, j = keys[2 * w + (e >> 1)];
% if DROPOUT:
                const float keep = KEEP(i, j);
% else:
                const float keep = 1.0f;
% endif
                const float p = PROB2(SCORE(st[w][n][e], i, j), ms[c], nls[c]);
                st[w][n][e] = p * keep;
                dpt[w][n][e] = p * (dpt[w][n][e] * keep - dls[c]);
            }
        }
</%def>

// dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij k_ij dO_i for the block of BK key rows
// of group 0 (the statistics and delta of the query block staged beside it)
__kernel __attribute__((reqd_work_group_size(${NT}, 1, 1)))
void attention_mma_dkdv(BACKWARD_ARGS, __global ${ACT_T} *dk, ulong dk_offset,
                        __global ${ACT_T} *dv, ulong dv_offset MASK_ARGS DROP_ARGS)
{
    // two stages of the query and output-gradient blocks
    ${prologue("qs", "gs", BK, BQ, dout=True)}
    __local float ms[${BQ}], nls[${BQ}], dls[${BQ}];
    const uint j0 = get_group_id(0) * ${BK};
    // the key and value blocks through the query blocks' places, into registers
    ${own_block(capture(fetch, "qs", LDD, "k", "j0", "lk", BK, D, "IN_ROW(%d)" % D)
                + capture(fetch, "gs", LDV, "v", "j0", "lk", BK, DV, "IN_ROW(%d)" % DV))}
    ${fragments("kf", "qs", LDD, D)}
    ${fragments("vf", "gs", LDV, DV)}
    barrier(CLK_LOCAL_MEM_FENCE);
    ${zeros("ak", D)}
    ${zeros("av", DV)}
    ${lane_rows("keys", "j0")}
% if CAUSAL:
    const uint istart = j0 / ${BQ} * ${BQ};  // query i < key j is out
% else:
    const uint istart = 0;
% endif
    <%self:walk x0="i0" start="istart" end="lq" B="${BQ}" blocks="${qg}" before_wait="${STATS}" published="${PUBLISHED}">
        __local ushort *qc = qs + cur * ${BQ * SLD}, *gc = gs + cur * ${BQ * SLV};
        ${rows_by_rows("st", "kf", "qc", LDD, BQ, D)}
        ${rows_by_rows("dpt", "vf", "gc", LDV, BQ, DV)}
        ${products_done([("st", BQ), ("dpt", BQ)])}
        ${dkdv_weights()}
        ${weights_by_block("av", "st", "gc", LDV, DV, BQ)}
        ${weights_by_block("ak", "dpt", "qc", LDD, D, BQ)}
        ${products_done([("av", DV), ("ak", D)])}
    </%self:walk>
    dk += dk_offset + IN_AT(bh, lk, ${D});
    dv += dv_offset + IN_AT(bh, lk, ${DV});
    ${store("dk", "IN_ROW(%d)" % D, "ak", "keys", "lk", D, lambda r: "scale")}
    ${store("dv", "IN_ROW(%d)" % DV, "av", "keys", "lk", DV, lambda r: "1.0f")}
}
% endif
