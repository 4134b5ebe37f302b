"""Operators over lists of ocl tensors (``_foreach_`` operators, fused optimizers) as
multi-tensor launches (``dlprim.core.multi_tensor``): a few launches per call instead of
one operator per tensor.

An optimizer calls them every step over the same tensors (parameters, gradients, its
state), so the prepared launches are kept per list of tensors (``PlanCache``) and a step
costs a check that the tensors are still those, new scalar values, and the launches.
"""
import collections
import operator
import weakref

import torch

from ..core.multi_tensor import MultiTensorPlan, MultiTensorPointwise
from ..core.pointwise import memo, param_specs
from ..kernels.program import Recording
from ..utils import BoundedCache
from .tensor import RECORDING_ALIGN, OclTensor, as_dlprim, numpy_dtype

__all__ = ["PlanCache", "run_lists", "plans", "Overlap", "list_shapes", "remember_shapes"]


_storage_of = operator.attrgetter("_ocl_storage")
_meta_of = operator.attrgetter("_ocl_meta")


class _Entry:
    __slots__ = ("plan", "refs", "storages", "metas", "__weakref__")

    def __init__(self, plan, tensors, gone):
        self.plan = plan
        self.refs = [weakref.ref(t, gone) for t in tensors]  # an entry dies with a tensor
        self.storages = list(map(_storage_of, tensors))
        self.metas = list(map(_meta_of, tensors))

    def holds(self, tensors):
        """Whether these tensors (alive: the entry is gone otherwise, so their ids are
        theirs) still have the memory, sizes and strides the plan was made for
        (``.data =``, an in-place view operator or resize_ stamps the tensor anew)."""
        return list(map(_storage_of, tensors)) == self.storages and \
            list(map(_meta_of, tensors)) == self.metas  # identity: no Storage.__eq__


class PlanCache:
    """Prepared multi-tensor plans keyed by (what they compute, the ids of their
    tensors). An entry goes when one of its tensors is collected (its memory may then
    serve another tensor) and, past ``limit`` entries, the oldest goes first."""

    def __init__(self, limit=256):
        self.limit = limit
        self._entries = collections.OrderedDict()
        self.hits = self.misses = 0

    def get(self, key, tensors):
        entry = self._entries.get(key)
        if entry is not None and entry.holds(tensors):
            self.hits += 1
            return entry.plan
        self.misses += 1
        return None

    def put(self, key, tensors, plan):
        entries = self._entries
        holder = []

        def gone(_):  # a tensor of the entry was collected: its memory may be reused
            if holder and entries.get(key) is holder[0]:
                del entries[key]
        entry = _Entry(plan, tensors, gone)
        holder.append(entry)
        entries[key] = entry
        entries.move_to_end(key)
        while len(entries) > self.limit:
            entries.popitem(last=False)

    def __len__(self):
        return len(self._entries)


plans = PlanCache()


def run_lists(name, code, x_lists, y_lists, params=(), one=None, keep=True, check=None):
    """``code`` over element i of every list, for every i: ``y_lists[k][i]`` is output yk
    of element i, ``x_lists[k][i]`` input xk (a single element where ``one[k]``).
    Every tensor is a contiguous ocl tensor, the tensors of one list share a dtype and an
    element's tensors share a size. ``keep``: keep the prepared launches for the next
    call over these very tensors (False where the lists are temporaries); ``check()``
    runs before launches are prepared (not again while they are kept). ``Overlap``
    where an element writes memory that another reads or writes, or that it reads
    itself in another layout."""
    n = len(y_lists[0])
    if n == 0:
        return
    tensors = [t for lst in list(x_lists) + list(y_lists) for t in lst]
    types, values = param_specs(params)
    key = (name, code, tuple(types), tuple(one or ()), tuple(map(id, tensors)))
    plan = plans.get(key, tensors) if keep else None
    if plan is not None:
        plan.run(values)
        return
    if check is not None:
        check()
    ctx = y_lists[0][0]._ocl_storage.ctx
    xd = tuple(numpy_dtype(lst[0].dtype) for lst in x_lists)
    yd = tuple(numpy_dtype(lst[0].dtype) for lst in y_lists)
    op = memo(ctx, ("mt", name, code, xd, yd, tuple(types), tuple(one or ())),
               lambda: MultiTensorPointwise(ctx, xd, yd, code, types, one, name=name))
    # the same computation over other tensors of the same sizes and the same pattern of
    # repeats (an optimizer's fresh gradients every step, or gradients that are views of
    # one buffer): the launches recorded by the first such call, replayed over these
    # tensors' memory (program.Recording, each tensor's arguments known by their place)
    unique, pattern, distinct = _unique(list(x_lists) + list(y_lists), tensors)
    if distinct is not None:  # whole lists: their places as worked out for each list
        lists = list(map(_list_places, distinct))
        places = [p for lp in lists for p in lp.places]
        sizes = sum((lp.sizes for lp in lists), ())
        layout = sum((lp.layout for lp in lists), ())
    else:
        places = list(map(_Place, unique))
        sizes, layout = _sizes(places), _layout(places)
    signature = ("mt_recording", name, code, tuple(types), tuple(one or ()), xd, yd, pattern,
                 sizes)
    width = len(x_lists) + len(y_lists)
    # each element's tensors in turn, by their index among the distinct ones
    at = lambda: [pattern[j * n + i] for i in range(n) for j in range(width)]  # noqa: E731
    recording = ctx.ops.get(signature)
    if recording is not None:
        replay = _replay_for(op, recording, signature, layout)
        if replay is None:  # a layout met once so far: the shared kernels, rebound
            _check_disjoint(recording, layout, places, at, len(x_lists), width, n, name)
            replay = _Replay(op, recording, layout)
        replay.run(places, values)
        if keep and _seen_before(key):  # these very tensors a third time: the replay kept
            plans.put(key, tensors, _Bound(replay, places))
        return
    at = at()
    views = [as_dlprim(t) for t in unique]
    groups = _groups(views, at, len(x_lists), width, n)
    if not _disjoint(groups):
        raise Overlap("%s: an output shares memory with another output or with an input "
                      "in another layout; the elements cannot run at once" % name)
    slots = []
    plan = MultiTensorPlan(op, groups, values, slots)
    if keep:
        plans.put(key, tensors, plan)
    # (each tensor's arguments by its index among the distinct tensors, the replay's list)
    recorded = Recording.at(plan.launches, [[(arg, at[g * width + k]) for arg, (g, k) in used]
                                            for used in slots])
    recorded.checked = _layout(places)
    ctx.ops[signature] = recorded
    _met_before(_layouts_met, (op, signature, recorded.checked))  # next time: own kernels
    plan.run(values)


def _met_before(seen, key):
    """Whether ``key`` is in ``seen`` (a BoundedCache of keys met once); put it there if
    not."""
    if seen.get(key) is not None:
        return True
    seen[key] = True
    return False


# keys of lists replayed once (ids: a guess, checked later): only a list that comes back is
# kept (keeping one costs a weak reference per tensor, wasted on an optimizer's
# temporaries, which are new every step)
_seen = BoundedCache(256)


def _seen_before(key):
    return _met_before(_seen, key)


# (op, signature, layout) -> the _Replay with kernels of its own bound at that layout. An
# optimizer's temporaries (AdamW's sqrt of its second moments, then divided, shifted and
# used) are new tensors every step, but the pool hands their memory back in a pattern of
# one or two places: replayed there on kernels that keep their arguments, a step sets
# none of them again (setting every argument of a list of hundreds cost milliseconds).
REPLAYS_KEPT = 64
_replays = BoundedCache(REPLAYS_KEPT)
_layouts_met = BoundedCache(4 * REPLAYS_KEPT)  # keys of _replays met once: kernels on the second


def _replay_for(op, recording, signature, layout):
    """The replay kept for ``layout``, made on the second call there (an eager loop whose
    temporaries land somewhere new each time would otherwise make kernels per call);
    None on the first (the caller replays on the recording's shared kernels)."""
    key = (op, signature, layout)  # (the op: one per context)
    replay = _replays.get(key)
    if replay is None and _met_before(_layouts_met, key):
        # met before, so checked for overlaps then (_check_disjoint) with this very layout
        replay = _replays[key] = _Replay(op, recording.fork(), layout)
    return replay


class _Replay:
    """A recording replayed over tensors' places (``_Place``) whose layout it is given."""
    __slots__ = ("op", "recording", "layout")

    def __init__(self, op, recording, layout):
        self.op, self.recording, self.layout = op, recording, layout

    def run(self, places, values=()):
        op = self.op
        self.recording.replay(op.ctx.queue, places, tuple(op.typed_params(values)), self.layout)
        op.ctx.enqueued(len(self.recording.steps))


class _Bound:
    """What ``PlanCache`` keeps for a list replayed a third time: its replay with the
    list's places (``run`` as a plan's)."""
    __slots__ = ("replay", "places")

    def __init__(self, replay, places):
        self.replay, self.places = replay, places

    def run(self, values=()):
        self.replay.run(self.places, values)


class _Place:
    """Where a contiguous ocl tensor's elements lie (what a replay rebinds, and what
    ``_disjoint`` compares): made without a dlprim view."""
    __slots__ = ("buffer", "offset", "size")

    def __init__(self, t):
        flat = t._ocl_storage.flat
        self.buffer, self.offset, self.size = flat.buffer, flat.offset + t.storage_offset(), \
            t.numel()


class _ListPlaces:
    """A list's places (``_Place``), their layout and (size, alignment) pairs, and the
    storage offsets they were worked out at."""
    __slots__ = ("offsets", "places", "layout", "sizes")

    def __init__(self, lst, offsets):
        self.offsets = offsets
        self.places = list(map(_Place, lst))
        self.layout, self.sizes = _layout(self.places), _sizes(self.places)


# the places of lists met before, by their tensors' ids (gone with a tensor, as plans): an
# optimizer's parameters and state come back every step, and a step's temporaries are
# one list through the few operators that use them
_lists = PlanCache(limit=64)
_offset_of = torch.Tensor.storage_offset


def _list_places(lst):
    """``_ListPlaces`` of a list of contiguous ocl tensors, kept while its tensors keep
    their storages and offsets."""
    key = tuple(map(id, lst))
    offsets = list(map(_offset_of, lst))
    known = _lists.get(key, lst)
    if known is not None and known.offsets == offsets:
        return known
    known = _ListPlaces(lst, offsets)
    _lists.put(key, lst, known)
    return known


# (dtype, shapes) of lists checked before, by their tensors' ids (gone with a tensor, as
# plans): an optimizer's lists come back every step, and its temporaries (AdamW's square
# roots) go through several operators, checked once where they are made
_shapes = PlanCache(limit=64)
_shape_of, _dtype_of = operator.attrgetter("shape"), operator.attrgetter("dtype")
_contiguous = torch.Tensor.is_contiguous


def list_shapes(lst):
    """(dtype, shapes) of a list of contiguous ocl tensors of one dtype, None where it is
    not one. Kept as plans are: while its tensors keep their storages and stamps."""
    key = tuple(map(id, lst))
    known = _shapes.get(key, lst)
    if known is not None:
        return known
    if set(map(type, lst)) != {OclTensor} or len(set(map(_dtype_of, lst))) != 1 \
            or not all(map(_contiguous, lst)):
        return None
    return remember_shapes(lst, key)


def remember_shapes(lst, key=None):
    """Note (and return) the facts of a list of contiguous ocl tensors of one dtype (new
    ones: ``tensor.empty_list``'s) as ``list_shapes`` finds them."""
    known = (lst[0].dtype, tuple(map(_shape_of, lst)))
    _shapes.put(tuple(map(id, lst)) if key is None else key, lst, known)
    return known


def _sizes(places):
    """(size, offset modulo RECORDING_ALIGN) per place: what a recording may serve."""
    return tuple((t.size, t.offset % RECORDING_ALIGN) for t in places)


def _layout(views):
    return tuple((v.buffer.int_ptr, v.offset) for v in views)


def _groups(views, at, nx, width, n):
    """Element i's (inputs, outputs) from the flat places ``at`` into ``views``."""
    return [([views[k] for k in at[i * width:i * width + nx]],
             [views[k] for k in at[i * width + nx:(i + 1) * width]]) for i in range(n)]


def _check_disjoint(recording, layout, places, at, nx, width, n, name):
    """(``at()``: the element-major places, made only where needed) Overlap unless the outputs of a replay over ``places`` are apart (see _disjoint):
    checked where the memory differs from what the recording last ran over and some
    tensors share a buffer (apart from that, only the repeats of one tensor could
    overlap, and those are the recording's own pattern)."""
    if layout == recording.checked:
        return
    if len({b for b, _ in layout}) < len(layout) and \
            not _disjoint(_groups(places, at(), nx, width, n)):
        raise Overlap("%s: an output shares memory with another output or with an input "
                      "in another layout; the elements cannot run at once" % name)
    recording.checked = layout


def _unique(lists, tensors):
    """(the distinct tensors in order of first appearance, each position's index among
    them, the distinct lists where the tensors are theirs, else None) of ``tensors``, the
    lists' elements in turn: the pattern of repeats (an in-place
    output that is its own input) is part of what a recording may be replayed over. Lists
    are mostly either the same tensors as an earlier list or none of its tensors: that is
    told list by list, the rest tensor by tensor."""
    unique, pattern, starts = [], [], []
    for lst in lists:
        start = next((at for at, other in starts if len(other) == len(lst) and
                      all(map(operator.is_, lst, other))), None)
        if start is None:
            start = len(unique)
            starts.append((start, lst))
            unique.extend(lst)
        pattern.extend(range(start, start + len(lst)))
    if len(set(map(id, unique))) == len(unique):
        return unique, tuple(pattern), [lst for _, lst in starts]
    first, unique, pattern = {}, [], []
    for t in tensors:
        k = first.get(id(t))
        if k is None:
            k = first[id(t)] = len(unique)
            unique.append(t)
        pattern.append(k)
    return unique, tuple(pattern), None


class Overlap(ValueError):
    """The lists' elements write where others read: they cannot run in one launch."""


def _span(t):
    return (t.offset, t.offset + t.size)


def _disjoint(groups):
    """Whether no element writes memory that another element reads or writes: every
    output apart from every other, an input that shares an output's buffer being exactly
    an output of its own element (read before written there, element by element)."""
    spans = {}  # buffer -> [(start, end, element)] of the outputs
    for e, (xs, ys) in enumerate(groups):
        for y in ys:
            spans.setdefault(y.buffer.int_ptr, []).append(_span(y) + (e,))
    for lst in spans.values():
        lst.sort()
        for (s0, e0, g0), (s1, e1, g1) in zip(lst, lst[1:]):
            if s1 < e0 and ((s0, e0) != (s1, e1) or g0 != g1):
                return False
    for e, (xs, ys) in enumerate(groups):
        own = {(y.buffer.int_ptr,) + _span(y) for y in ys}
        for x in xs:
            lst = spans.get(x.buffer.int_ptr)
            if lst is None or (x.buffer.int_ptr,) + _span(x) in own:
                continue
            a, b = _span(x)
            if any(s < b and a < t for s, t, _ in lst):
                return False
    return True
