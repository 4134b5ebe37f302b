"""Net.summary(): one row per operator (outputs, parameters, FLOPs, planned memory)."""
import html

import numpy as np

__all__ = ["summary_rows", "summary_text", "summary_html"]

HEADER = ("operator", "type", "output shapes", "params", "MFLOPs", "output KiB")


def _flops(layer):
    f = getattr(layer, "flops", None)
    if callable(f):
        f = f()
    return None if f is None else float(f)


def summary_rows(net):
    g, store = net.graph, net.store
    rows = []
    for op, layer in zip(g.ops, net.layers):
        shapes = " ".join("x".join(map(str, g.values[v].shape)) or "()" for v in op.out_values)
        nparams = sum(int(np.prod(store.layout[n][1], dtype=np.int64))
                      for n in store.op_param_names[op.index])
        flops = _flops(layer)
        out_bytes = sum(int(np.prod(g.values[v].shape, dtype=np.int64)) * g.values[v].dtype.itemsize
                        for v in op.out_values)
        rows.append((op.name, op.type, shapes, str(nparams),
                     "-" if flops is None else "%.1f" % (flops / 1e6), "%.1f" % (out_bytes / 1024)))
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
