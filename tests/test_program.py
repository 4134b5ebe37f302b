import numpy as np
import pytest

import dlprim as dp
from dlprim.kernels import program
from dlprim.utils import round_up


def test_memoized_build(ctx):
    p1 = program.get(ctx, "fill", dtype="float")
    builds = program.stats["builds"]
    p2 = program.get(ctx, "fill", dtype="float")
    assert p1 is p2 and program.stats["builds"] == builds
    p3 = program.get(ctx, "fill", dtype="int")
    assert p3 is not p1 and program.stats["builds"] == builds + 1


def test_launch_with_offsets(ctx):
    t = dp.Tensor.from_numpy(ctx, np.zeros(70, np.float32))
    v = t.view((65,), offset=3)
    prg = program.get(ctx, "fill", dtype="float")
    launch = program.Launch(prg, "fill", (round_up(65, 32),), (32,),
                            [np.uint64(65), v, np.float32(2.5)])
    launch(ctx.queue)
    out = t.numpy()
    assert np.all(out[3:68] == 2.5) and np.all(out[:3] == 0) and np.all(out[68:] == 0)


def test_build_error_shows_source_and_params(ctx, tmp_path, monkeypatch):
    (tmp_path / "broken.cl").write_text(
        "__kernel void broken(__global float *y)\n{\n    y[0] = undefined_name_${N};\n}\n")
    monkeypatch.setattr(program, "_lookup",
                        program.TemplateLookup(directories=[str(tmp_path), program.KERNEL_DIR]))
    with pytest.raises(dp.KernelBuildError) as err:
        program.get(ctx, "broken", N=7)
    msg = str(err.value)
    assert "broken" in msg and "N=7" in msg and ctx.facts.name in msg
    assert ">>    3|     y[0] = undefined_name_7;" in msg
