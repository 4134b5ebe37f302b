"""Memory planner and schedule: pure Python, no OpenCL (except the last test, which checks
the plan of a real training net)."""
import numpy as np
import pytest

from dlprim.net.graph import GraphError, load_graph
from dlprim.net.memory_plan import Block, check, overlaps, place
from dlprim.net.autograd import OpFacts, Autograd


def test_overlapping_blocks_never_share_memory_random():
    rng = np.random.default_rng(0)
    for trial in range(30):
        blocks = []
        for i in range(int(rng.integers(1, 60))):
            spans = []
            for _ in range(int(rng.integers(1, 3))):
                a = int(rng.integers(0, 50))
                spans.append((a, a + int(rng.integers(0, 10))))
            blocks.append(Block("b%d" % i, int(rng.integers(0, 5000)), spans))
        plan = place(blocks, alignment=256)
        check(blocks, plan)
        for b in blocks:
            assert plan.offsets[b.name] % 256 == 0
        assert plan.arena_bytes <= plan.unplanned_bytes


def test_reuse_happens_for_a_chain():
    # a chain: each tensor alive from its producer to its consumer
    blocks = [Block("t%d" % i, 1000, (i, i + 1)) for i in range(20)]
    plan = place(blocks, alignment=256)
    check(blocks, plan)
    assert plan.arena_bytes == 2 * 1024       # two buffers ping-pong
    assert plan.unplanned_bytes == 20 * 1024


def test_freed_memory_is_reused_below_the_top():
    # two long-lived blocks with a short one between them; a later block reuses the hole
    blocks = [Block("long1", 4096, (0, 9)), Block("short", 2048, (0, 1)),
              Block("long2", 1024, (0, 9)), Block("late", 2048, (3, 4))]
    plan = place(blocks, alignment=256)
    check(blocks, plan)
    assert plan.offsets["late"] == plan.offsets["short"]
    assert plan.arena_bytes == 4096 + 2048 + 1024


def test_check_catches_a_collision():
    blocks = [Block("a", 100, (0, 3)), Block("b", 100, (2, 5))]
    from dlprim.net.memory_plan import Plan
    with pytest.raises(AssertionError, match="share memory"):
        check(blocks, Plan({"a": 0, "b": 0}, 256, 512))


def test_multi_interval_blocks():
    a = Block("ws", 100, [(1, 1), (9, 9)])
    b = Block("x", 100, (2, 8))
    assert not overlaps(a, b)
    plan = place([a, b], 256)
    assert plan.arena_bytes == 256
    with pytest.raises(ValueError, match="ends before"):
        Block("bad", 1, (3, 2))


def _graph(ops, outputs=("loss",), inputs=(("x", [4]), ("t", [4]))):
    return load_graph({"inputs": [{"name": n, "shape": s} for n, s in inputs],
                       "outputs": list(outputs),
                       "operators": [{"name": n, "type": t, "inputs": i, "outputs": o}
                                     for n, t, i, o in ops]})


FACTS = {"scale": OpFacts(trains=True), "relu": OpFacts(reads_inputs=False, reads_outputs=True,
                                                        inplace=True),
         "bn": OpFacts(trains=True, reads_inputs=True, reads_outputs=True),
         "loss": OpFacts(), "add": OpFacts(reads_inputs=False),
         "xent": OpFacts(no_grad_inputs=(1,))}


def _schedule(graph, types, train=True, keep=False):
    facts = [FACTS[t] for t in types]
    nbytes = [16 for _ in graph.values]
    return Autograd(graph, facts, nbytes, [True] * len(graph.values), train, keep)


def test_schedule_fanout_accumulates_and_inplace_relu_shares():
    g = _graph([("s1", "scale", ["x"], ["h"]), ("r", "relu", ["h"], ["h"]),
                ("s2", "scale", ["h"], ["a"]), ("s3", "scale", ["h"], ["b"]),
                ("add", "add", ["a", "b"], ["c"]), ("loss", "loss", ["c", "t"], ["loss"])])
    s = _schedule(g, ["scale", "relu", "scale", "scale", "add", "loss"])
    assert s.backward == [True] * 6
    # s3 writes dh first (backward order), s2 then accumulates
    assert s.accumulate[3] == [False] and s.accumulate[2] == [True]
    # x and t need no gradient
    assert s.dx_wanted[0] == [False] and s.dx_wanted[5] == [True, False]
    # relu in place: its output shares the memory of s1's output (s1 reads x, not h)
    assert s.inplace_ops == ["r"]
    h0, h1 = g.ops[1].in_values[0], g.ops[1].out_values[0]
    assert s.storage[h1] == s.storage[h0]
    assert s.grad_storage[h0] == s.grad_storage[h1]


def test_schedule_inplace_refused_when_backward_reads_the_old_value():
    # bn's backward reads its output; relu in place on it would destroy it in training
    g = _graph([("bn", "bn", ["x"], ["y"]), ("r", "relu", ["y"], ["y"]),
                ("loss", "loss", ["y", "t"], ["loss"])])
    train = _schedule(g, ["bn", "relu", "loss"], train=True)
    assert train.inplace_ops == []
    predict = _schedule(g, ["bn", "relu", "loss"], train=False)
    assert predict.inplace_ops == ["r"]


def test_schedule_marks_only_what_reaches_a_loss_and_depends_on_training():
    g = _graph([("s1", "scale", ["x"], ["a"]), ("side", "scale", ["a"], ["unused"]),
                ("add", "add", ["x", "t"], ["c"]), ("loss", "loss", ["c", "t"], ["loss"])],
               outputs=("loss", "unused"))
    s = _schedule(g, ["scale", "scale", "add", "loss"])
    # nothing trainable feeds the loss: no backward at all
    assert s.backward == [False, False, False, False]
    assert s.fills == []



def test_schedule_never_asks_for_a_label_gradient():
    # t feeds the loss's label slot and also "add": only add writes t's gradient (assigning),
    # and a label reached by nothing else reads as the fill of 0
    g = _graph([("st", "scale", ["t"], ["u"]), ("add", "add", ["x", "u"], ["c"]),
                ("loss", "xent", ["c", "u"], ["loss"])])
    s = _schedule(g, ["scale", "add", "xent"])
    u = g.ops[0].out_values[0]
    assert s.dx_wanted[2] == [True, False] and s.dx_wanted[1] == [False, True]
    assert s.accumulate[1] == [False, False]
    assert (u, 0.0) not in s.fills
    g = _graph([("st", "scale", ["t"], ["u"]), ("loss", "xent", ["x", "u"], ["loss"])])
    s = _schedule(g, ["scale", "xent"])
    u = g.ops[0].out_values[0]
    assert s.dx_wanted[1] == [False, False] and s.grad_needed[u] and (u, 0.0) in s.fills
    assert s.backward == [True, True]  # st still runs, on the zero gradient

def test_schedule_predict_reuses_more_than_train():
    ops = [("s%d" % i, "scale", ["x" if i == 0 else "h%d" % (i - 1)], ["h%d" % i])
           for i in range(10)]
    ops.append(("loss", "loss", ["h9", "t"], ["loss"]))
    g = _graph(ops)
    types = ["scale"] * 10 + ["loss"]
    train = place(_schedule(g, types, True).blocks)
    predict = place(_schedule(g, types, False).blocks)
    assert predict.arena_bytes < train.arena_bytes
    keep = place(_schedule(g, types, False, keep=True).blocks)
    assert keep.arena_bytes == keep.unplanned_bytes


def test_graph_errors():
    with pytest.raises(GraphError, match="duplicate operator name 'a'"):
        _graph([("a", "scale", ["x"], ["y"]), ("a", "scale", ["y"], ["z"])], outputs=())
    with pytest.raises(GraphError, match="operator 'a': input 'q' is produced by no earlier"):
        _graph([("a", "scale", ["q"], ["y"])], outputs=())
    with pytest.raises(GraphError, match="operator 'a': input 'z' is produced only later.*'b'"):
        _graph([("a", "scale", ["z"], ["y"]), ("b", "scale", ["y"], ["z"])], outputs=())
    with pytest.raises(GraphError, match="net output 'nope'"):
        _graph([("a", "scale", ["x"], ["y"])], outputs=("nope",))
    with pytest.raises(GraphError, match="operator 'b': output 'y' is already produced"):
        _graph([("a", "scale", ["x"], ["y"]), ("b", "scale", ["x"], ["y"])], outputs=())


def test_saved_blocks_live_from_forward_to_backward():
    g = _graph([("s1", "scale", ["x"], ["h"]), ("bn", "bn", ["h"], ["y"]),
                ("loss", "loss", ["y", "t"], ["loss"])])
    facts = [FACTS["scale"], OpFacts(trains=True, reads_outputs=True, saved_bytes=[40, 8]),
             FACTS["loss"]]
    nbytes = [16 for _ in g.values]
    train = Autograd(g, facts, nbytes, [True] * len(g.values), True)
    blocks = {b.name: b for b in train.blocks}
    for j, size in enumerate((40, 8)):
        assert blocks["s:1:%d" % j].size == size
        assert blocks["s:1:%d" % j].intervals == [(train.t_fwd(1), train.t_bwd(1))]
    # blocks come and go while they are alive, and check() proves none shares their bytes
    assert [b for b in train.blocks if not b.name.startswith("s:") and overlaps(b, blocks["s:1:0"])]
    check(train.blocks, place(train.blocks))
    # no backward (predicting, or nothing to train): only the forward writes and reads them
    predict = Autograd(g, facts, nbytes, [True] * len(g.values), False)
    assert {b.name: b.intervals for b in predict.blocks}["s:1:1"] == [(2, 2)]
    untrained = [OpFacts(), OpFacts(reads_outputs=True, saved_bytes=[40]), FACTS["loss"]]
    idle = Autograd(g, untrained, nbytes, [True] * len(g.values), True)
    assert idle.backward == [False] * 3
    assert {b.name: b.intervals for b in idle.blocks}["s:1:0"] == [(2, 2)]


def test_training_net_plans_what_layers_keep_for_backward(ctx):
    import dlprim as dp
    from dlprim.tensor import Tensor

    def op(name, type_name, inputs, options=None):
        return {"name": name, "type": type_name, "inputs": inputs, "outputs": [name],
                "options": options or {}}

    ops = [op("conv", "Convolution2D", ["data"], {"channels_out": 4, "kernel": 3, "pad": 1}),
           op("bn", "BatchNorm", ["conv"]),
           op("pool", "Pooling2D", ["bn"], {"mode": "max", "kernel": 2, "stride": 2}),
           op("drop", "Dropout", ["pool"], {"ratio": 0.25}),
           op("fc", "InnerProduct", ["drop"], {"outputs": 5}),
           op("loss", "SoftmaxWithLoss", ["fc", "label"])]
    graph = {"inputs": [{"name": "data", "shape": [3, 2, 6, 6]},
                        {"name": "label", "shape": [3], "dtype": "int"}],
             "outputs": ["loss"], "operators": ops}
    net = dp.Net(ctx, graph, mode="train")
    s, memory = net.plan.autograd, net.plan.memory
    blocks = {b.name: b for b in s.blocks}
    # BN's batch statistics, the pooling argmax, the dropout mask, the loss's mean factor
    # and its rows' log sum exp
    want = {"s:1:0": 16, "s:1:1": 16, "s:2:0": 3 * 4 * 3 * 3 * 4, "s:3:0": 3 * 4 * 3 * 3 * 4,
            "s:5:0": 4, "s:5:1": 3 * 4}
    assert {n: b.size for n, b in blocks.items() if n.startswith("s:")} == want
    for name in want:
        i = int(name.split(":")[1])
        assert blocks[name].intervals == [(s.t_fwd(i), s.t_bwd(i))]
        assert s.t_bwd(i) > s.t_fwd(i) + 1   # other tensors come and go in between
    check(s.blocks, memory)
    assert net.memory_stats()["saved_bytes"] == sum(want.values())
    # the layers keep no memory of their own
    for layer in net.layers:
        assert not [k for k, v in vars(layer).items() if isinstance(v, Tensor)], layer.name
    out = net(data=np.ones((3, 2, 6, 6), np.float32), label=np.zeros(3, np.int32))
    net.backward()
    assert np.isfinite(out["loss"]).all()
    assert np.isfinite(net.param_diff("conv.0").numpy()).all()
    net.mode = "predict"
    assert not [b for b in net.plan.autograd.blocks if b.name.startswith("s:")]
    assert net.memory_stats()["saved_bytes"] == 0
