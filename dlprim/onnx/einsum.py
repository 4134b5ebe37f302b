"""ONNX's Einsum (numpy's einsum) composed of layers that compute it exactly:

1. an index repeated within an operand takes that diagonal (``...ii->...i``): the two
   axes last and flattened, padded by n to n (n + 1) and read as (n, n + 1), whose first
   column is the diagonal;
2. an index that no other operand nor the output has is summed out (Reduction);
3. operands are joined left to right: the indices both have and a later operand or the
   output needs are batch axes, the others both have are contracted; float32 and 16-bit
   floats as one batched MatMul (batch, left, contracted) x (batch, contracted, right),
   other dtypes as a broadcast product summed over the contracted axes;
4. a Transpose to the output's order.

The output without ``->`` is numpy's: the broadcast ``...`` axes, then the indices that
appear once, in alphabetical order. Sizes of one index must agree across operands (an
ellipsis axis of size 1 against a longer one is refused).
"""
import string

import numpy as np

from .registry import Unsupported
from .steps import Steps, dtype_name

__all__ = ["einsum"]

_MATMUL = ("float32", "float16", "bfloat16")


def _parse(eq, ranks):
    """([letters of each operand], output letters) with ``...`` spelled as letters."""
    eq = eq.replace(" ", "")
    ins, arrow, out = eq.partition("->")
    terms = ins.split(",")
    if len(terms) != len(ranks):
        raise Unsupported("equation %r names %d operands, the node has %d"
                          % (eq, len(terms), len(ranks)))
    free = [c for c in string.ascii_letters if c not in eq]
    width = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            width = max(width, r - len(t.replace("...", "")))
    ell = "".join(free[:width])
    letters = []
    for t, r in zip(terms, ranks):
        named = t.replace("...", "")
        if not all(c in string.ascii_letters for c in named):
            raise Unsupported("equation %r: term %r" % (eq, t))
        k = r - len(named) if "..." in t else 0
        if k < 0 or ("..." not in t and len(t) != r):
            raise Unsupported("equation %r: term %r for an operand of rank %d" % (eq, t, r))
        letters.append(t.replace("...", ell[width - k:] if k else ""))
    if arrow:
        out = out.replace("...", ell)
    else:
        counts = "".join(letters)
        out = ell + "".join(sorted(c for c in set(counts) if c not in ell
                                   and counts.count(c) == 1))
    if len(set(out)) != len(out) or any(c not in "".join(letters) for c in out):
        raise Unsupported("equation %r: output %r" % (eq, out))
    return letters, out


class _Operand:
    """A tensor with one letter per axis."""

    def __init__(self, t, letters, shape):
        self.t, self.letters, self.shape = t, letters, tuple(int(d) for d in shape)


class _Builder:
    def __init__(self, b, node):
        self.s, self.b, self.node = Steps(b, node), b, node
        self.dtype = b.dtype(node.inputs[0])

    def add(self, type, x, shape, tag, **options):
        return self.s.add(type, [x], shape, tag, dtype=self.dtype, **options)

    def reshape(self, op, letters, shape, tag):
        if tuple(shape) == op.shape:
            return _Operand(op.t, letters, shape)
        return _Operand(self.s.reshape(op.t, shape, tag), letters, shape)

    def transpose(self, op, letters, tag):
        perm = [op.letters.index(c) for c in letters]
        if perm == list(range(len(perm))):
            return op
        shape = [op.shape[p] for p in perm]
        return _Operand(self.add("Transpose", op.t, shape, tag, dims=perm), letters, shape)

    def diagonal(self, op, c, tag):
        """op with the axes of letter c (twice) replaced by their diagonal, last."""
        i = op.letters.index(c)
        j = op.letters.index(c, i + 1)
        n = op.shape[i]
        if op.shape[j] != n:
            raise Unsupported("index %r of sizes %d and %d" % (c, n, op.shape[j]))
        rest = [x for k, x in enumerate(op.letters) if k not in (i, j)]
        # letters as positions: the two axes go last
        keys = [k for k in range(len(op.letters)) if k not in (i, j)] + [i, j]
        shape = [op.shape[k] for k in keys]
        if keys != list(range(len(keys))):
            op = _Operand(self.add("Transpose", op.t, shape, tag + "_last", dims=keys),
                          None, shape)
        lead = shape[:-2]
        flat = self.reshape(op, None, lead + [n * n], tag + "_flat")
        pads = [0] * len(lead) + [0] + [0] * len(lead) + [n]
        padded = self.add("Pad", flat.t, lead + [n * (n + 1)], tag + "_pad", pads=pads)
        rows = self.s.reshape(padded, lead + [n, n + 1], tag + "_rows")
        col = self.add("Slice", rows, lead + [n, 1], tag + "_col", dim=len(lead) + 1,
                       start=0, stop=1)
        return self.reshape(_Operand(col, None, lead + [n, 1]), "".join(rest) + c,
                            lead + [n], tag + "_diag")

    def sum(self, op, letters, tag):
        """op summed over ``letters``."""
        axes = [op.letters.index(c) for c in letters]
        kept = [k for k in range(len(op.shape)) if k not in axes]
        shape = [op.shape[k] for k in kept]
        t = self.add("Reduction", op.t, shape or [1], tag, method="sum", dims=axes,
                     keep_dim=False)
        out = _Operand(t, "".join(op.letters[k] for k in kept), shape or [1])
        return self.reshape(out, out.letters, shape, tag + "_scalar") if not shape else out

    def join(self, a, b, needed, k):
        """The product of a and b over the indices both have that ``needed`` lacks."""
        tag = "join%d" % k
        both = [c for c in a.letters if c in b.letters]
        for c in both:
            if a.shape[a.letters.index(c)] != b.shape[b.letters.index(c)]:
                raise Unsupported("index %r of sizes %d and %d (broadcast)"
                                  % (c, a.shape[a.letters.index(c)], b.shape[b.letters.index(c)]))
        batch = "".join(c for c in both if c in needed)
        con = "".join(c for c in both if c not in needed)
        left = "".join(c for c in a.letters if c not in both)
        right = "".join(c for c in b.letters if c not in both)
        size = dict(zip(a.letters, a.shape))
        size.update(zip(b.letters, b.shape))

        def prod(cs):
            return int(np.prod([size[c] for c in cs], dtype=np.int64))
        out_letters = batch + left + right
        out_shape = [size[c] for c in out_letters]
        if dtype_name(self.dtype) in _MATMUL:
            a3 = self.reshape(self.transpose(a, batch + left + con, tag + "_a"), None,
                              [prod(batch), prod(left), prod(con)], tag + "_a3")
            b3 = self.reshape(self.transpose(b, batch + con + right, tag + "_b"), None,
                              [prod(batch), prod(con), prod(right)], tag + "_b3")
            shape = [prod(batch), prod(left), prod(right)]
            t = self.s.add("MatMul", [a3.t, b3.t], shape, tag, dtype=self.dtype)
            return self.reshape(_Operand(t, None, shape), out_letters, out_shape, tag + "_out")
        # a broadcast product summed over the contracted axes
        ones = [1] * len(right)
        a4 = self.reshape(self.transpose(a, batch + left + con, tag + "_a"), None,
                          [size[c] for c in batch + left] + ones + [size[c] for c in con],
                          tag + "_a4")
        b4 = self.reshape(self.transpose(b, batch + right + con, tag + "_b"), None,
                          [size[c] for c in batch] + [1] * len(left) +
                          [size[c] for c in right + con], tag + "_b4")
        full = out_letters + con
        t = self.s.add("LibraryOp", [a4.t, b4.t], [size[c] for c in full], tag,
                       dtype=self.dtype, op="mul")
        prod_op = _Operand(t, full, [size[c] for c in full])
        return self.sum(prod_op, con, tag + "_sum") if con else prod_op


def einsum(b, node, eq):
    """Add the layers of Einsum ``node`` with equation ``eq``."""
    names = [n for n in node.inputs if n]
    dtypes = {dtype_name(b.dtype(n)) for n in names}
    if len(dtypes) != 1:
        raise Unsupported("operands of dtypes %s (one dtype)" % ", ".join(sorted(dtypes)))
    letters, out = _parse(eq, [len(b.shape(n)) for n in names])
    g = _Builder(b, node)
    ops = []
    for k, (n, ls) in enumerate(zip(names, letters)):
        op = _Operand(n, ls, b.shape(n))
        while len(set(op.letters)) != len(op.letters):
            c = next(c for c in op.letters if op.letters.count(c) > 1)
            op = g.diagonal(op, c, "in%d_diag_%s" % (k, c))
        others = "".join(letters[:k] + letters[k + 1:]) + out
        alone = "".join(c for c in op.letters if c not in others)
        if alone:
            op = g.sum(op, alone, "in%d_sum" % k)
        ops.append(op)
    acc = ops[0]
    for k, op in enumerate(ops[1:], 1):
        needed = out + "".join(o.letters for o in ops[k + 1:])
        acc = g.join(acc, op, needed, k)
    rest = "".join(c for c in acc.letters if c not in out)
    if rest:
        acc = g.sum(acc, rest, "sum")
    acc = g.transpose(acc, out, "out")
    t = acc.t
    if t in names:  # nothing to compute: a copy of the operand
        t = b.add("LibraryOp", [b.value(t)], acc.shape, name=node.name + "/copy",
                  output=b.fresh(node.outputs[0] + "/copy"), dtype=g.dtype,
                  options={"op": "copy", "dtype": dtype_name(g.dtype)})
        b.alias[t] = t
    b.out(node, b.value(t))
