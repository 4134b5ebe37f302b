import sys, torch, torch.nn.functional as F
sys.path.insert(0, "benchmarks")
import torch_ocl_models as t
import dlprim.torch, os
if os.environ.get('NOWINO'):
    from dlprim.core import tuning
    tuning.prefer_winograd = lambda *a, **k: False
for name in sys.argv[1:]:
    size = 224
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1)); y = torch.arange(2)
    cpu = t.build(name).eval(); ocl = t.build(name).eval(); ocl.load_state_dict(cpu.state_dict()); ocl.to("ocl")
    ex = t.build(name).eval(); ex.load_state_dict(cpu.state_dict()); ex.double()
    t._run(ocl, x.to("ocl"), y.to("ocl")); t._run(ex, x.double(), y); t._run(cpu, x, y)
    rows = []
    for (n, po), pe, pc in zip(ocl.named_parameters(), ex.parameters(), cpu.parameters()):
        if pe.grad is None: continue
        rows.append((t.rel(po.grad, pe.grad), t.rel(pc.grad, pe.grad), n, tuple(po.shape)))
    rows.sort(reverse=True)
    print(name)
    for r in rows[:6]: print("  ocl %.1e cpu32 %.1e %s %s" % r)
    mods = dict(ocl.named_modules())
    for r in rows[:3]:
        mod = mods[r[2].rsplit(".", 1)[0]]
        print("   ", r[2], mod)
