"""The Net: a static graph with its own autograd, planned memory and bound launch lists.

    graph.py           the DLPrimitives JSON net read into operators and values (pure)
    netconfig.py       NetConfig: build that JSON from Python (pure)
    autograd.py        backprop marks, in-place sharing, lifetimes (pure)
    memory_plan.py     lifetimes -> offsets in one arena (pure)
    parameters.py      parameter and gradient arenas
    execution_plan.py  one mode's arena, tensor views and bound launches
    inputs.py          what net(**arrays) accepts: needed inputs, kinds, host checks (pure)
    weights.py         .dlp and .h5 parameter files; exporters other packages register
    summary.py         the operator table
    net.py             Net, which drives them

Names load on first use, so the pure modules import without an OpenCL driver.
"""
__all__ = ["Net", "NetConfig", "GraphError", "load_graph", "TRAIN", "PREDICT"]

def __getattr__(name):
    if name == "Net":
        from .net import Net as value
    elif name == "NetConfig":
        from .netconfig import NetConfig as value
    elif name == "TRAIN":
        from ..layers.base import TRAIN as value
    elif name == "PREDICT":
        from ..layers.base import PREDICT as value
    elif name == "GraphError":
        from .graph import GraphError as value
    elif name == "load_graph":
        from .graph import load_graph as value
    else:
        raise AttributeError("module 'dlprim.net' has no attribute %r" % name)
    globals()[name] = value
    return value
