## Eight stored values as a float8, for the CPU kernels that read rows as vectors (the
## few-rows GEMV, the cache's attention rows): load8(T) writes the function
## float8 load8_<T>(p, i), the values at p[i] .. p[i + 7] widened from the storage T
## (float, char, half through common.h's load_half8, bfloat16 by shifting its bits;
## another storage value by value through its LD_ macro).
<%def name="load8(T)">
<% pocl = getattr(context.get("facts"), "vendor_id", "") == "pocl" %>\
inline float8 load8_${T}(__global const ${T} *p, ulong i)
{
% if T == "float":
    return VLOAD_GLOBAL(8, 0, p + i);  // (common.h: PoCL's vload8 may be a call)
% elif pocl and T == "char":
    // as common.h's VLOAD_GLOBAL: PoCL's vload8 may be a call out of line (streamed
    // float32 rows 1.6-2x faster read this way, docs/benchmarks.md, "Language-model decoding")
    typedef char8 __attribute__((aligned(1))) char8_any;
    return convert_float8(*(__global const char8_any *)(p + i));
% elif T == "char":
    return convert_float8(vload8(0, p + i));
% elif T == "half":
    return load_half8(p + i);
% elif T == "bfloat16":
    return as_float8(convert_uint8(vload8(0, p + i)) << 16);
% else:
    return (float8)(${", ".join("LD_%s(p, i + %d)" % (T, k) for k in range(8))});
% endif
}
</%def>
