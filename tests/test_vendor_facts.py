"""The emulated vendor facts of --device-facts (tests/vendor_facts.py)."""
import pytest

from dlprim.context import DeviceFacts
from dlprim.core import tuning
from dlprim.core.gemm import Gemm
import vendor_facts


@pytest.mark.parametrize("mode", sorted(vendor_facts.VENDORS))
def test_vendor_facts_keep_what_kernels_need_real(ctx, mode):
    real = DeviceFacts(ctx.device)  # read afresh: ctx.facts may be emulated already
    facts = vendor_facts.emulated(real, mode)
    want = vendor_facts.VENDORS[mode]
    assert (facts.is_gpu, facts.is_cpu, facts.type) == (True, False, "GPU")
    assert facts.vendor_id == mode and tuning.family(facts) == \
        {"amd": "gpu", "nvidia": "gpu", "intel": "intel"}[mode]
    assert (facts.compute_units, facts.subgroup_sizes) == \
        (want["compute_units"], want["subgroup_sizes"])
    for key in ("local_mem", "max_work_group", "max_parameter_size", "max_float_vector"):
        assert getattr(facts, key) == min(want[key], getattr(real, key)), key
    for key in ("extensions", "fp16", "fp64", "float_atomics", "int64_atomics", "global_mem",
                "max_alloc", "driver_version", "platform", "opencl_c_version"):
        assert getattr(facts, key) == getattr(real, key), key
    assert facts.extensions is not real.extensions and facts.emulates == mode
    assert not hasattr(real, "emulates")
    with pytest.raises(ValueError, match="unknown vendor 'arm'; known: amd, intel, nvidia"):
        vendor_facts.emulated(real, "arm")


def test_session_context_takes_the_mode(ctx, request):
    mode = vendor_facts.mode(request.config)
    if mode is None:
        assert not hasattr(ctx.facts, "emulates")
        pytest.skip("no --device-facts given")
    assert ctx.facts.emulates == mode and ctx.facts.is_gpu
    # the vendor's GEMM table, on the tiled template, not the CPU's wide tiles
    op = Gemm(ctx, 256, 256, 64)
    assert tuning.gemm_kernel(op.tile) == "gemm"
    assert op.tile == tuning.default_tile(ctx.facts, tuning.gemm_class(ctx.facts, 256, 256))
