"""Net.summary(): one row per operator (outputs, parameters, FLOPs, planned memory)."""
import html

import numpy as np

__all__ = ["summary_rows", "summary_text", "summary_html"]

HEADER = ("operator", "type", "output shapes", "params", "MFLOPs", "output KiB")


def _flops(layer, launches):
    """The layer's own count if it has one, else what its forward launches declare."""
    f = getattr(layer, "flops", None)
    if callable(f):
        f = f()
    if f is None:
        f = sum(getattr(launch, "flops", 0) or 0 for launch in launches) or None
    return None if f is None else float(f)


def summary_rows(net):
    g, store, plan = net.graph, net.store, net.plan
    starts = np.concatenate([[0], np.cumsum(plan.op_forward)]).astype(int)
    inplace, views = set(plan.autograd.inplace_ops), set(plan.autograd.view_ops)
    rows = []
    for op, layer in zip(g.ops, net.layers):
        shapes = " ".join("x".join(map(str, g.values[v].shape)) or "()" for v in op.out_values)
        nparams = sum(int(np.prod(store.layout[n][1], dtype=np.int64))
                      for n in store.op_param_names[op.index])
        flops = _flops(layer, plan.forward[starts[op.index]:starts[op.index + 1]])
        out_bytes = sum(int(np.prod(g.values[v].shape, dtype=np.int64)) * g.values[v].dtype.itemsize
                        for v in op.out_values)
        rows.append((op.name, op.type, shapes, str(nparams),
                     "-" if flops is None else "%.1f" % (flops / 1e6),
                     "%.1f%s" % (out_bytes / 1024, " in place" if op.name in inplace
                                 else " view" if op.name in views else "")))
    return rows


def _footer(net):
    st = net.memory_stats()
    nparams = sum(int(np.prod(s, dtype=np.int64)) for _, s, _ in net.param_layout.values())
    return ("parameters: %d (%.2f MiB); mode %s; planned arena %.2f MiB for %.2f MiB of tensors "
            "(ratio %.2f); forward %d launches, backward %d"
            % (nparams, st["params_bytes"] / 2**20, st["mode"], st["arena_bytes"] / 2**20,
               st["unplanned_bytes"] / 2**20, st["ratio"], st["launches_forward"],
               st["launches_backward"]))


def summary_text(net):
    rows = [HEADER] + summary_rows(net)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append(_footer(net))
    return "\n".join(lines)


def summary_html(net):
    if not getattr(net, "_ready", False):
        return "<pre>%s</pre>" % html.escape(repr(net))
    head = "".join("<th>%s</th>" % html.escape(h) for h in HEADER)
    body = "".join("<tr>%s</tr>" % "".join("<td>%s</td>" % html.escape(c) for c in r)
                   for r in summary_rows(net))
    return "<table><thead><tr>%s</tr></thead><tbody>%s</tbody></table><p>%s</p>" % (
        head, body, html.escape(_footer(net)))
