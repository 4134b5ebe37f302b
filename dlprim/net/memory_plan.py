"""Memory planning: place tensors with known lifetimes into one arena.

Pure Python, no OpenCL, so it is tested on its own. A ``Block`` is a byte size and a list
of live intervals ``[start, end]`` (inclusive step numbers over the op order; a
workspace is alive only during its op's forward and backward launches, hence a list).
``place`` assigns every block a byte offset so that two blocks whose intervals overlap
never share a byte, and returns the arena size.

Placement is greedy by size with best fit, as in Pisarchyk & Lee, "Efficient Memory
Management for Deep Neural Net Inference" (2020): the largest blocks are placed first;
each block takes the smallest gap, among the blocks already placed that are alive at the
same time, that holds it, else it goes above them all.
"""
from ..utils import round_up

__all__ = ["Block", "Plan", "place", "overlaps", "check"]


class Block:
    """A tensor to place: ``size`` bytes alive during each ``[start, end]`` interval."""
    __slots__ = ("name", "size", "intervals")

    def __init__(self, name, size, intervals):
        self.name = name
        self.size = int(size)
        if isinstance(intervals, tuple) and len(intervals) == 2 and isinstance(intervals[0], int):
            intervals = [intervals]
        self.intervals = [(int(a), int(b)) for a, b in intervals]
        if self.size < 0:
            raise ValueError("block %r: negative size %d" % (name, self.size))
        for a, b in self.intervals:
            if b < a:
                raise ValueError("block %r: interval [%d, %d] ends before it starts" % (name, a, b))

    def __repr__(self):
        return "Block(%r, %d, %s)" % (self.name, self.size, self.intervals)


class Plan:
    """Offsets (bytes) by block name, the arena size, and the unplanned sum for comparison."""

    def __init__(self, offsets, arena_bytes, unplanned_bytes):
        self.offsets = offsets
        self.arena_bytes = arena_bytes
        self.unplanned_bytes = unplanned_bytes

    def __repr__(self):
        return "Plan(%d blocks, arena %d bytes, unplanned %d bytes)" % (
            len(self.offsets), self.arena_bytes, self.unplanned_bytes)


def overlaps(a, b):
    """Whether two blocks are ever alive at the same step."""
    return any(s1 <= e2 and s2 <= e1 for s1, e1 in a.intervals for s2, e2 in b.intervals)




def place(blocks, alignment=256):
    """-> Plan. Every offset is a multiple of ``alignment``; sizes are padded to it."""
    names = set()
    for b in blocks:
        if b.name in names:
            raise ValueError("block %r given twice" % (b.name,))
        names.add(b.name)
    order = sorted(blocks, key=lambda b: (-b.size, min((a for a, _ in b.intervals), default=0)))
    placed = []  # (offset, padded_size, block)
    offsets = {}
    top = 0
    for block in order:
        size = round_up(block.size, alignment) if block.size else 0
        if size == 0 or not block.intervals:
            offsets[block.name] = 0
            continue
        busy = sorted((off, off + sz) for off, sz, other in placed if overlaps(block, other))
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        offset = best if best is not None else cursor
        offsets[block.name] = offset
        placed.append((offset, size, block))
        top = max(top, offset + size)
    unplanned = sum(round_up(b.size, alignment) for b in blocks)
    return Plan(offsets, top, unplanned)


def check(blocks, plan):
    """Raise AssertionError if two blocks alive together share bytes or leave the arena."""
    items = [(plan.offsets[b.name], b) for b in blocks if b.size and b.intervals]
    for off, b in items:
        if off + b.size > plan.arena_bytes:
            raise AssertionError("block %r ends at %d beyond the arena (%d)"
                                 % (b.name, off + b.size, plan.arena_bytes))
    for i, (o1, b1) in enumerate(items):
        for o2, b2 in items[i + 1:]:
            if o1 < o2 + b2.size and o2 < o1 + b1.size and overlaps(b1, b2):
                raise AssertionError("blocks %r and %r are alive together and share memory"
                                     % (b1.name, b2.name))
