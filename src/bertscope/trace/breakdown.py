"""From a trace's event columns to op-table rows and the per-rank device timeline analysis.

1. **CPU event trees.** CPU ops, annotations and runtime calls are nested per thread by time
   (as torch builds `FunctionEvent.cpu_children`); each subtree is a contiguous range of the
   sorted order, so a placement given to an op reaches everything under it by one slice.
2. **Attribution.** The same `Attributor` as `bertscope profile` walks the trees: module
   scopes (`bertscope::<layer>::<sublayer>`), phases, backward nodes by sequence number and
   the data/weight-gradient split. Trees are built one root at a time, so memory holds one
   iteration's tree, not the trace's. Without bertscope scopes, other annotations
   (ProfilerStep#N, a user's record_function) are transparent and ops get layer -1.
3. **Rows.** A trace with device activity gives one row per kernel (memcpy, memset) name
   and place: the kernel's category comes from its own name (the pattern table); its
   layer, sublayer and phase from the CPU op that launched it (correlation id, or the
   `ac2g` flow). A CPU-only trace gives the CPU ops' rows, exactly as the profile does.
4. **Timeline.** Per device and stream: busy time (union of kernel intervals), idle time
   within the device's active window, and compute/communication overlap.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.optable import Combine, Op, OpTable, Provenance, Record, combine
from bertscope.taxonomy import Category, Classifier, Pattern, Phase, Regex, Sublayer
from bertscope.trace.attribute import ITER, PHASE, SCOPE, Attributor, Step
from bertscope.trace.ranks import RankTimeline, rank_timeline
from bertscope.trace.reader import CPU_KINDS, DEVICE_KINDS, Events, Kind
from bertscope.trace.timeline import launched_by, length, overlap, union

_STEP = "ProfilerStep#"
_OPTIMIZER = "Optimizer."
_OWN = (_STEP, _OPTIMIZER, SCOPE, PHASE, ITER)
"""Annotations the profiler and bertscope write (not scopes of a module path)."""

GENERIC = frozenset({Category.ELEMENTWISE, Category.DATA_MOVEMENT, Category.REDUCTION})
"""Launching-op categories that say little about the kernels under them (an elementwise,
copy or reduce op): their kernels keep the category of their own name, unless that is only
elementwise (the catch-all of PyTorch's native kernels: a pooling kernel under a max-pool
op is the op's reduction). Under any other launcher (a convolution, batch norm, embedding
bag, GEMM, loss, ...) a kernel takes the launcher's category: the op says what the work is,
whatever the kernel is called (cuDNN's `..._relu_...` convolution kernels, the sorts and
copies inside an embedding-bag backward). Under an op no pattern knows, the kernel's name
decides."""


class _Node:
    """A CPU event shaped like torch's FunctionEvent, for the `Attributor`."""

    __slots__ = ("cpu_children", "cpu_time_total", "device_time_total", "flops", "hi",
                 "input_shapes", "input_types", "kind", "lo", "name", "sequence_nr")

    def __init__(self, name: str, kind: int, dur: float, seq: int, shapes: list[Any],
                 lo: int, hi: int, types: list[Any] | None = None) -> None:
        self.name = name
        self.kind = kind
        self.cpu_time_total = dur
        self.device_time_total = 0.0
        self.flops = 0
        self.sequence_nr = seq
        self.input_shapes = shapes
        self.input_types = types or ()
        self.cpu_children: list[_Node] | tuple[()] = ()  # a list from the first child on
        self.lo, self.hi = lo, hi


class _Placer(Attributor):
    """The profile's `Attributor`, also recording where each op it emits sits, so the
    kernels an op launched inherit its layer, sublayer and phase."""

    def __init__(self, classify: Classifier, n: int) -> None:
        super().__init__(classify)
        self.place = np.full(n, -1, dtype=np.int32)
        """Per sorted CPU position: index into `keys` of the row that claimed it."""
        self.key_ids: dict[tuple[Any, ...], int] = {}
        self.steps = 0
        """ProfilerStep#N annotations walked."""

    def _walk(self, evt: Any, phase: Phase, where: Any) -> float | Step:
        """As the `Attributor`'s; a ProfilerStep#N annotation (wherever it sits: a user's
        annotation may wrap it) starts an iteration and is transparent."""
        if evt.kind == Kind.ANNOTATION and evt.name.startswith(_STEP):
            self.new_iteration()
            self.steps += 1
            return self._children(evt, phase, where)
        return super()._walk(evt, phase, where)

    def scope_of(self, evt: Any) -> tuple[str, str] | None:
        """Module calls, and record_function annotations other than the profiler's own
        (ProfilerStep#N, Optimizer.*, bertscope scopes), are scopes of the module path."""
        hit = super().scope_of(evt)
        if hit is None and evt.kind == Kind.ANNOTATION and not evt.name.startswith(_OWN):
            name = evt.name.replace("/", ":").replace("|", ":")
            return name, name
        return hit

    def _add(self, evt: Any, phase: Phase, where: Any) -> tuple[tuple[Any, ...], float]:
        key, t = super()._add(evt, phase, where)
        kid = self.key_ids.setdefault(key, len(self.key_ids))
        self.place[evt.lo:evt.hi] = kid
        return key, t



@dataclass
class _Trees:
    """CPU events of one trace sorted per thread and nested: position p is event order[p]."""

    order: np.ndarray
    parent: np.ndarray
    """Position of each position's parent, -1 for roots (int32)."""
    hi: np.ndarray
    """One past the last descendant of each position (int32)."""
    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray


_BLOCK = 1 << 16
"""Positions nested per Python pass (bounds the temporary lists)."""


def _trees(ev: Events) -> _Trees:
    cpu = np.flatnonzero(np.isin(ev.kind, np.array(CPU_KINDS, dtype=np.uint8)))
    thread = ev.pid[cpu].astype(np.int64) * (len(ev.ids) + 1) + ev.tid[cpu]
    # nest on the nanosecond grid the profiler's clock has: Kineto writes ts and dur in us
    # with 3 decimals, and ts + dur in float us (~5e12) rounds by up to 1 ns, so a child that
    # ends with its parent could seem to outlast it (torch nests the exact integers)
    ts = np.rint(ev.ts[cpu] * 1e3)
    end = ts + np.rint(ev.dur[cpu] * 1e3)
    o = np.lexsort((-end, ts, thread))
    order, thread, ts, end = cpu[o], thread[o], ts[o], end[o]
    n = len(order)
    parent = np.full(n, -1, dtype=np.int32)
    hi = np.full(n, n, dtype=np.int32)
    stack: list[tuple[int, int, float]] = []  # (position, thread, end) of open events
    for a in range(0, n, _BLOCK):
        b = min(a + _BLOCK, n)
        par = [-1] * (b - a)
        for p, t, s, e in zip(range(a, b), thread[a:b].tolist(), ts[a:b].tolist(),
                              end[a:b].tolist(), strict=True):
            while stack:
                q, tq, eq = stack[-1]
                # torch's rule: an event is a child of the innermost open event it fits in
                if tq != t or s >= eq or e > eq:
                    hi[q] = p
                    stack.pop()
                else:
                    par[p - a] = q
                    break
            stack.append((p, t, e))
        parent[a:b] = par
    return _Trees(order=order, parent=parent, hi=hi, start=ts * 1e-3, end=end * 1e-3,
                  thread=thread)


def _build(ev: Events, tr: _Trees, root: int) -> _Node:
    """Node objects for the subtree at position `root`, children in time order."""
    hi = int(tr.hi[root])
    idx = tr.order[root:hi]
    names = ev.names
    nodes: list[_Node] = []
    sizes: dict[int, list[list[int]]] = {}
    for off, (i, nid, kind, dur, seq, numel, h, par) in enumerate(zip(
            idx.tolist(), ev.name[idx].tolist(), ev.kind[idx].tolist(), ev.dur[idx].tolist(),
            ev.seq[idx].tolist(), ev.numel[idx].tolist(), tr.hi[root:hi].tolist(),
            tr.parent[root:hi].tolist(), strict=True)):
        dims = ev.dims.get(i)
        if dims is None:  # one shared [[numel]] per size (the walk only reads shapes)
            dims = sizes.get(numel) or sizes.setdefault(numel, [[numel]] if numel else [])
        node = _Node(names[nid], kind, dur, seq, dims, root + off, h, ev.types.get(i))
        nodes.append(node)
        if off:
            up = nodes[par - root]
            if up.cpu_children:
                up.cpu_children.append(node)  # type: ignore[union-attr]
            else:
                up.cpu_children = [node]
    return nodes[0]


@dataclass
class _Walk:
    placer: _Placer
    trees: _Trees
    iterations: int
    scoped: bool
    """True when the trace has bertscope iteration scopes (a `bertscope profile` trace)."""


LINKED = 1 << 50
"""Sequence numbers given from `fwdbwd` flows start here (above any autograd counter)."""


def _link_sequences(ev: Events) -> None:
    """Give the CPU ops at both ends of a `fwdbwd` flow (forward op, backward node) the same
    sequence number where they lack one, so the backward node finds its forward op as with
    Kineto's `Sequence number` arg."""
    s_ts, s_id, f_ts, f_id = ev.links
    cpu = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.seq < 0))
    if not len(s_ts) or not len(cpu):
        return
    at = {}
    for i, t in zip(cpu.tolist(), ev.ts[cpu].tolist(), strict=True):
        at.setdefault(t, i)  # the first op starting there: the outermost
    seq = ev.seq.copy()
    for ts, fid in zip([*s_ts.tolist(), *f_ts.tolist()], [*s_id.tolist(), *f_id.tolist()],
                       strict=True):
        i = at.get(ts)
        if i is not None:
            seq[i] = LINKED + fid
    ev.seq = seq


def _walk(ev: Events, classify: Classifier, placer_type: type[_Placer] = _Placer) -> _Walk:
    """Attribute every CPU op (`placer_type`: the `_Placer` or a subclass that records more)."""
    _link_sequences(ev)
    tr = _trees(ev)
    names = ev.names
    roots = np.flatnonzero(tr.parent == -1)
    roots = roots[np.argsort(tr.start[roots], kind="stable")]
    root_names = [names[i] for i in ev.name[tr.order[roots]].tolist()]
    placer = placer_type(classify, len(tr.order))
    iters = [(int(p), n) for p, n in zip(roots.tolist(), root_names, strict=True)
             if n.startswith(ITER)]
    if iters:  # a bertscope profile: walk its iterations, as the profile does
        iter_roots = {p for p, _ in iters}
        windows = sorted((float(tr.start[p]), float(tr.end[p])) for p in iter_roots)
        threads = {int(tr.thread[p]) for p in iter_roots}
        starts = [w[0] for w in windows]
        for p in roots.tolist():
            if p in iter_roots:
                placer.new_iteration()
            elif int(tr.thread[p]) in threads:
                continue  # outside the measured iterations (the profile skips these too)
            else:  # another thread (CUDA's autograd thread): inside an iteration's window?
                k = bisect.bisect_right(starts, float(tr.start[p])) - 1
                if k < 0 or float(tr.start[p]) >= windows[k][1]:
                    continue
            placer.walk(_build(ev, tr, p))
            placer.end_tree()
        return _Walk(placer, tr, len(iters), True)
    for p in roots.tolist():  # a trace without bertscope iterations: every root
        placer.walk(_build(ev, tr, p))
        placer.end_tree()
    return _Walk(placer, tr, max(placer.steps, 1), False)


# --- rows -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Place:
    layer: int
    sublayer: Sublayer
    category: Category
    phase: Phase
    module: str = ""


_NOWHERE = _Place(-1, Sublayer.OTHER, Category.OTHER, Phase.FORWARD)


def kernel_place(pattern: Pattern | Category | None, launcher: _Place | None, *,
                 memory_op: bool = False, user: bool = False) -> _Place:
    """Layer, sublayer, category and phase of a device event from the pattern its name
    matched (or just its category; None when no pattern matched) and the place of the CPU op
    that launched it. The launcher's category wins unless it is `GENERIC`; collectives stay
    communication and memcpy/memset (`memory_op`) data movement wherever they run, and a
    name the user's pattern file gives a category other than elementwise, data movement or
    reduction (`user`) keeps it. In a
    backward phase, a pattern's phase (a convolution's `wgrad` kernels: the weight gradient)
    says which gradient the kernel computes."""
    if isinstance(pattern, Category):
        pattern = Pattern(_ANY, pattern)
    at = launcher or _NOWHERE
    category = pattern.category if pattern is not None else None
    cat = category if category is not None else at.category
    # a user's rule for this kernel name, unless it only says "elementwise / copy / reduce"
    own = user and (category is Category.OTHER or category not in GENERIC)
    says = at.category is not Category.OTHER and (
        at.category not in GENERIC or category in (None, Category.ELEMENTWISE))
    if launcher is not None and not memory_op and not own and says \
            and category is not Category.COMMUNICATION:
        cat = at.category
        if category is Category.BATCHED_GEMM and at.category is Category.GEMM:
            cat = category  # a fused attention kernel under a plain-GEMM-shaped op
    layer, sub, phase, module = at.layer, at.sublayer, at.phase, at.module
    if pattern is not None and pattern.phase is not None and phase.is_backward:
        phase = pattern.phase
    if phase is Phase.OPTIMIZER and cat is Category.ELEMENTWISE:
        cat = Category.OPTIMIZER
    if cat is Category.COMMUNICATION:
        layer, sub, phase, module = -1, Sublayer.OTHER, Phase.COMMUNICATION, ""
    elif sub is Sublayer.OTHER and cat is Category.LOSS:
        sub = Sublayer.LOSS
    return _Place(layer, sub, cat, phase, module)


_ANY = Regex("")


def launch_keys(ev: Events, w: _Walk) -> tuple[np.ndarray, np.ndarray]:
    """The device events (indices) and, for each, the index into `w.placer.key_ids` of the
    CPU op row that launched it (-1: no launcher found)."""
    dev = np.flatnonzero(np.isin(ev.kind, np.array(DEVICE_KINDS, dtype=np.uint8)))
    launcher = _launchers(ev, w.trees, dev)
    place = w.placer.place
    kid = (np.where(launcher >= 0, place[np.maximum(launcher, 0)], -1) if len(place)
           else np.full(len(dev), -1))
    return dev, kid


def _device_rows(ev: Events, w: _Walk, classify: Classifier) -> tuple[list[Op], set[str]]:
    """One row per device-event name and place; also the names no pattern matched."""
    dev, kid = launch_keys(ev, w)
    keys = list(w.placer.key_ids)
    pair = ev.name[dev].astype(np.int64) * (len(keys) + 1) + (kid + 1)
    uniq, first, inv = np.unique(pair, return_index=True, return_inverse=True)
    time_us = np.bincount(inv, weights=ev.dur[dev], minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    memory_op = (ev.kind[dev[first]] != Kind.KERNEL).tolist()
    rows: dict[tuple[Any, ...], list[float]] = {}
    unknown: set[str] = set()
    match, user = classify.match, set(classify.extra)
    for u, t, c, mem in zip(uniq.tolist(), time_us.tolist(), count.tolist(), memory_op,
                            strict=True):
        name = ev.names[u // (len(keys) + 1)]
        k = u % (len(keys) + 1) - 1
        hit = match(name)
        if hit is None:
            unknown.add(name)
        at = None
        if k >= 0:
            _n, layer, sub, cat, phase, *_, module = keys[k]
            at = _Place(layer, sub, cat, phase, module)
        pl = kernel_place(hit, at, memory_op=mem, user=hit is not None and hit in user)
        acc = rows.setdefault((name, pl.layer, pl.sublayer, pl.category, pl.phase, pl.module),
                              [0, 0.0])
        acc[0] += c
        acc[1] += t
    its = w.iterations
    ops = [Op(name, layer, sub, cat, phase, count=max(1, round(c / its)),
              time_s=t * 1e-6 / its, module=module)
           for (name, layer, sub, cat, phase, module), (c, t) in rows.items()]
    return ops, unknown


def _launchers(ev: Events, tr: _Trees, dev: np.ndarray) -> np.ndarray:
    """Sorted CPU position of the runtime call that launched each device event (-1: none)."""
    rt = launched_by(ev, dev)
    pos_of = np.full(len(ev), -1, dtype=np.int64)
    pos_of[tr.order] = np.arange(len(tr.order))
    return np.where(rt >= 0, pos_of[np.maximum(rt, 0)], -1)


# --- timeline ---------------------------------------------------------------------------------

def timeline(ev: Events, comm_names: set[int]
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per device and per stream (records): active window, busy and idle time (seconds over
    the whole capture), and per device the compute/communication overlap. `comm_names` are
    the name indices of communication kernels."""
    dev = np.flatnonzero(np.isin(ev.kind, np.array(DEVICE_KINDS, dtype=np.uint8)))
    devices: list[dict[str, Any]] = []
    streams: list[dict[str, Any]] = []
    if not len(dev):
        return devices, streams
    ts, end = ev.ts[dev], ev.end[dev]
    is_comm = np.isin(ev.name[dev], np.fromiter(comm_names, dtype=np.int64, count=len(comm_names)))
    is_kernel = ev.kind[dev] == Kind.KERNEL
    for d in np.unique(ev.pid[dev]).tolist():
        on = ev.pid[dev] == d
        lo, hi = float(ts[on].min()), float(end[on].max())
        window = hi - lo
        busy = union(ts[on], end[on])
        comm = union(ts[on & is_comm], end[on & is_comm])
        comp = union(ts[on & ~is_comm & is_kernel], end[on & ~is_comm & is_kernel])
        both = overlap(comp, comm)
        devices.append({
            "device": str(ev.ids[d]), "window_s": window * 1e-6, "busy_s": length(busy) * 1e-6,
            "idle_s": (window - length(busy)) * 1e-6, "compute_s": length(comp) * 1e-6,
            "comm_s": length(comm) * 1e-6, "overlap_s": both * 1e-6,
            "exposed_comm_s": (length(comm) - both) * 1e-6,
            "streams": len(np.unique(ev.tid[dev][on])), "events": int(on.sum())})
        for s in np.unique(ev.tid[dev][on]).tolist():
            sel = on & (ev.tid[dev] == s)
            b = length(union(ts[sel], end[sel]))
            streams.append({"device": str(ev.ids[d]), "stream": str(ev.ids[s]),
                            "busy_s": b * 1e-6, "idle_s": (window - b) * 1e-6,
                            "busy_share": b / window if window > 0 else 0.0,
                            "events": int(sel.sum())})
    return devices, streams


# --- one rank ---------------------------------------------------------------------------------

@dataclass
class RankBreakdown:
    """What one rank's trace file says: its op table (per iteration), device timeline and
    the names the pattern table did not know."""

    rank: int
    path: Path
    table: OpTable
    iterations: int
    time_source: str
    """"device" (kernel, memcpy and memset time) or "cpu" (CPU op time: no device events)."""
    device_rows: list[dict[str, Any]] = field(default_factory=list)
    """Per device: window_s, busy_s, idle_s, compute_s, comm_s, overlap_s, exposed_comm_s."""
    stream_rows: list[dict[str, Any]] = field(default_factory=list)
    """Per device and stream: busy_s, idle_s, busy_share, events."""
    unknown: frozenset[str] = frozenset()
    """Names that no pattern matched (their rows' categories come from the launching op)."""
    header: dict[str, Any] = field(default_factory=dict)
    """The trace file's schemaVersion, distributedInfo and traceName, where it has them."""
    scoped: bool = False
    """Whether the trace holds bertscope's own scopes (record_function layer/sublayer)."""
    timeline: RankTimeline | None = None
    """The rank's device timeline, summed for the cross-rank analyses (`trace.ranks`); None
    without device events."""


def break_down(ev: Events, rank: int, classify: Classifier) -> RankBreakdown:
    """Attribute and break down one rank's events."""
    w = _walk(ev, classify)
    match = classify.match
    has_device = bool(np.isin(ev.kind, np.array(DEVICE_KINDS, dtype=np.uint8)).any())
    if has_device:
        ops, unknown = _device_rows(ev, w, classify)
        comm = {i for i, n in enumerate(ev.names)
                if (hit := match(n)) is not None and hit.category is Category.COMMUNICATION}
        devices, streams = timeline(ev, comm)
        summed = rank_timeline(ev, comm)
    else:
        ops = w.placer.ops(w.iterations)
        unknown = {o.name for o in ops if match(o.name) is None}
        devices, streams, summed = [], [], None
    table = OpTable.from_ops(ops, (Provenance("trace"),))
    return RankBreakdown(rank=rank, path=ev.path, table=table, iterations=w.iterations,
                         time_source="device" if has_device else "cpu", device_rows=devices,
                         stream_rows=streams, unknown=frozenset(unknown),
                         header={k: v for k, v in ev.header.items()
                                 if k in ("schemaVersion", "distributedInfo", "traceName")},
                         scoped=w.scoped, timeline=summed)


def mean_table(parts: Iterable[OpTable], records: Iterable[Record] = ()) -> OpTable:
    """Rows averaged over ranks: each rank's per-iteration rows summed, divided by ranks
    (`combine`'s mean: a row missing on a rank counts 0 there, count rounded, at least 1)."""
    return combine(list(parts), Combine.MEAN, records=records)


__all__ = ["GENERIC", "RankBreakdown", "break_down", "kernel_place", "launch_keys",
           "mean_table", "overlap", "timeline", "union"]
