## Eight stored values as a float8, for the CPU kernels that read rows as vectors (the
## few-rows GEMV, the cache's attention rows): load8(T) writes the function
## float8 load8_<T>(p, i), the values at p[i] .. p[i + 7] widened from the storage T
## (float, char, half through common.h's load_half8, bfloat16 by shifting its bits;
## another storage value by value through its LD_ macro).
<%def name="load8(T)">
inline float8 load8_${T}(__global const ${T} *p, ulong i)
{
## (common.h's VLOAD_GLOBAL_OF: PoCL's vload8 may be a call out of line; read so, float32
## rows streamed 1.6-2x faster there, docs/benchmarks.md, "Language-model decoding")
% if T == "float":
    return VLOAD_GLOBAL(8, 0, p + i);
% elif T == "char":
    return convert_float8(VLOAD_GLOBAL_OF(char, 8, 0, p + i));
% elif T == "half":
    return load_half8(p + i);
% elif T == "bfloat16":
    return as_float8(convert_uint8(VLOAD_GLOBAL_OF(ushort, 8, 0, p + i)) << 16);
% else:
    return (float8)(${", ".join("LD_%s(p, i + %d)" % (T, k) for k in range(8))});
% endif
}
</%def>
