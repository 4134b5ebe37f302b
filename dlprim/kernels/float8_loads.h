## Eight stored values as a float8, for the CPU kernels that read rows as vectors (the
## few-rows GEMV, the cache's attention rows): load8(T) writes the function
## float8 load8_<T>(p, i), the values at p[i] .. p[i + 7] widened from the storage T
## (float, char, half through common.h's load_half8, bfloat16 by shifting its bits;
## another storage value by value through its LD_ macro).
<%def name="load8(T)">
<% pocl = getattr(context.get("facts"), "vendor_id", "") == "pocl" %>\
inline float8 load8_${T}(__global const ${T} *p, ulong i)
{
% if pocl and T in ("float", "char"):
    // PoCL's vload8 reads element by element: a vector read through a pointer to the
    // vector type aligned as its elements are (any address, one unaligned load) streamed
    // float32 rows 1.6-2x faster (docs/benchmarks.md, "Language-model decoding")
    typedef ${T}8 __attribute__((aligned(sizeof(${T})))) ${T}8_any;
    return ${"" if T == "float" else "convert_float8"}(*(__global const ${T}8_any *)(p + i));
% elif T == "float":
    return vload8(0, p + i);
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
