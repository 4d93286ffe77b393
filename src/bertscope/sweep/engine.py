"""The vectorized engine: one group of a grid, every device and knob set, in a few array passes.

For a `Group` the analytic producer runs once on the group's views (`model_blocks` on
`ModelView`/`RunView`): every row's FLOPs, bytes and GEMM shape come back as arrays that
broadcast over the group's numeric axes, each only as large as the axes it reads. Rows are
bucketed by that shape and stacked, and `perf.predict.row_times` (the formula `predict` uses)
times each bucket on each device: the roofline, the efficiency models and the launch and host
overheads. Each row's time is weighted by its multiplicity (1, the layer count, or the layer
count less one; `analytic.blocks.multiplicity`) and summed per category, per bound and per
phase into arrays of the group's full shape: the only full-size passes are those sums.
Rows that read batch and seq only through their product are timed on its distinct values
and their sums spread over the grid (`sweep.tokens`). A bucket stacked before in this process
(another structural variant of the same model: the optimizer, recomputation, dropout) takes
its times from the process's memo (`_Memo`) instead of timing them again.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from bertscope.analytic.blocks import Block, multiplicity
from bertscope.analytic.families import model_blocks
from bertscope.analytic.memory import memory_parts
from bertscope.analytic.params import parameter_count
from bertscope.errors import BertscopeError
from bertscope.optable import Columns, Op
from bertscope.perf.efficiency import DeviceProfile
from bertscope.perf.predict import Bound, row_times
from bertscope.perf.roofline import Knobs, Peaks, select_peaks
from bertscope.sweep.block_fusion import variants
from bertscope.sweep.grid import Group
from bertscope.sweep.tokens import TokenSpace, compact
from bertscope.taxonomy import Phase

CHUNK = 1 << 17
"""Most entries (configurations x targets timed together) a piece holds; larger groups are
cut along their longest axis, so memory stays bounded whatever the grid. Large enough that a
piece's (batch, seq) pairs share many products (`sweep.tokens`)."""
MIN_CHUNK = 1 << 15
"""Configurations a piece may hold however many targets are timed together."""


def piece_configs(targets: int) -> int:
    """Most configurations in a piece when `targets` devices and knob sets are timed
    together (`same_models`): `CHUNK` entries, at least `MIN_CHUNK` configurations."""
    return max(MIN_CHUNK, CHUNK // max(1, targets))

NUMERIC = ("flops", "bytes_read", "bytes_written", "count", "m", "n", "k", "batch")
"""Numeric op-table columns a sweep passes to the efficiency models (the contract of
`perf.device_profile.EfficiencyModel`)."""
LABELS = ("category", "phase", "issuer")
"""Label columns passed, one value per row (a (rows, 1, ..) column that broadcasts). Rows
alike in these and every numeric column are timed once, their multiplicities summed."""


def _same(a: Any, b: Any) -> bool:
    """Whether two row fields (numbers or arrays) hold the same values."""
    if a is b:
        return True
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return bool(a == b)
    if np.shape(a) != np.shape(b):
        return False
    fa, fb = np.asarray(a).flat, np.asarray(b).flat  # the last entries first: most rows
    return bool(fa[-1] == fb[-1]) and bool(np.array_equal(a, b))  # differ there already


@dataclasses.dataclass(slots=True)
class _Bucket:
    """Rows whose numeric fields share one broadcast shape, stacked."""

    shape: tuple[int, ...]
    rows: list[tuple[Op, Any]] = dataclasses.field(default_factory=list)
    seen: dict[tuple[Any, ...], list[int]] = dataclasses.field(default_factory=dict)

    def add(self, op: Op, weight: Any) -> None:
        """Add a row, or its weight to an alike row's."""
        alike = self.seen.setdefault((op.category, op.phase, op.issuer), [])
        for at in alike:
            first, w = self.rows[at]
            if all(_same(getattr(first, c), getattr(op, c)) for c in NUMERIC):
                self.rows[at] = (first, w + weight)
                return
        alike.append(len(self.rows))
        self.rows.append((op, weight))

    def columns(self) -> tuple[Columns, np.ndarray, list[tuple[str, bool, int, int]]]:
        """The rows stacked: op-table columns (each numeric column only as large as its
        rows need: a `count` of 1 everywhere stays (rows, 1, ..)), the weights likewise, and
        the spans of rows sharing (category, optimizer phase), rows sorted so that each span
        is contiguous (GEMM rows first, so the GEMM model reads a view)."""
        rows = sorted(self.rows, key=lambda r: (r[0].phase is Phase.OPTIMIZER,
                                                not r[0].category.is_gemm,
                                                str(r[0].category)))
        nd = len(self.shape)

        def stack(values: list[Any]) -> np.ndarray:
            shape = np.broadcast_shapes(*(np.shape(v) for v in values))
            out = np.empty((len(values), *((1,) * (nd - len(shape))), *shape))
            for i, v in enumerate(values):
                out[i] = v  # broadcasts as np.broadcast_to would, without its Python cost
            return out

        cols: dict[str, np.ndarray] = {c: stack([getattr(op, c) for op, _ in rows])
                                       for c in NUMERIC}
        label_shape = (len(rows), *([1] * nd))
        for c in LABELS:
            arr = np.empty(len(rows), dtype=object)
            arr[:] = [getattr(op, c) for op, _ in rows]
            cols[c] = arr.reshape(label_shape)
        spans: list[tuple[str, bool, int, int]] = []
        for i, (op, _) in enumerate(rows):
            key = (str(op.category), op.phase is Phase.OPTIMIZER)
            if spans and spans[-1][:2] == key:
                spans[-1] = (*key, spans[-1][2], i + 1)
            else:
                spans.append((*key, i, i + 1))
        return Columns(cols), stack([w for _, w in rows]), spans


MEMO_BYTES = 64 << 20
"""Most bytes of stacked rows and their times `_Memo` keeps (least recently used go): on
bench_sweep.py's 1M grid 16 MiB reused half the buckets, 32 MiB 74%, 64 MiB 82%."""
KEPT = ("time_s", "bound_code")
"""The `row_times` results the engine reads (and the memo keeps)."""


class _Memo:
    """Times of stacked rows already timed in this process, on the same targets: pieces of
    one grid that differ only in structural settings (the optimizer, micro-batches 1 or
    more, recomputation, dropout) stack many identical buckets (the same rows with the same
    numbers), and `perf.predict.row_times` is the engine's largest cost. A bucket is looked
    up by its targets, labels and column shapes, and reused only where every numeric column
    holds the same values (compared, not hashed: no collision can return another bucket's
    times). Bounded by `MEMO_BYTES`; the results are read-only arrays shared by the hits."""

    def __init__(self, budget: int = MEMO_BYTES) -> None:
        self.budget = budget
        self.used = 0
        self.entries: collections.OrderedDict[tuple[Any, ...], list[
            tuple[Columns, dict[str, np.ndarray], int]]] = collections.OrderedDict()
        self.hits = self.misses = 0
        self.lock = threading.Lock()

    @staticmethod
    def _key(target: bytes, cols: Columns) -> tuple[Any, ...]:
        labels = tuple(tuple(np.asarray(cols[c]).ravel().tolist()) for c in LABELS)
        return (target, labels, tuple(np.shape(cols[c]) for c in NUMERIC))

    def times(self, target: bytes, cols: Columns, profile: DeviceProfile, peaks: Peaks,
              overhead_scale: np.ndarray) -> dict[str, np.ndarray]:
        """`row_times` of `cols` (already (rows, ..., 1) for the targets' axis), from the
        memo where the same rows were timed on the same targets (`target`: their key)."""
        key = self._key(target, cols)
        with self.lock:
            found = list(self.entries.get(key, ()))
        for seen, got, _ in found:
            if all(_same(seen[c], cols[c]) for c in NUMERIC):
                with self.lock:
                    if key in self.entries:
                        self.entries.move_to_end(key)
                self.hits += 1
                return got
        self.misses += 1
        times = row_times(cols, profile, peaks, overhead_scale=overhead_scale)
        got = {k: times[k] for k in KEPT}
        for v in got.values():
            v.flags.writeable = False  # shared by every hit
        size = sum(np.asarray(v).nbytes for v in (*(cols[c] for c in NUMERIC), *got.values()))
        with self.lock:  # pieces may run on threads
            if size <= self.budget:
                self.entries.setdefault(key, []).append((cols, got, size))
                self.used += size
            while self.used > self.budget and self.entries:
                _, old = self.entries.popitem(last=False)
                self.used -= sum(n for _, _, n in old)
        return got

    def clear(self) -> None:
        """Forget every entry (a sweep ends: its buckets are not needed by the next)."""
        with self.lock:
            self.entries.clear()
            self.used = 0


_MEMO = _Memo()
"""The process's memo (`_Memo`): pieces evaluated in this process share it."""


def clear_memo() -> None:
    """Forget the rows this process timed (a sweep ends; forked workers end with theirs)."""
    _MEMO.clear()


def target_key(targets: list[tuple[DeviceProfile, Knobs]], precision: Any) -> bytes:
    """What identifies a set of targets (profiles with their knobs) and a precision across
    processes: a digest of their pickled form (each piece's task carries its own copies)."""
    return hashlib.blake2b(pickle.dumps((targets, precision)), digest_size=16).digest()


def chunks(group: Group, limit: int | None = None) -> Iterator[Group]:
    """The group cut along its longest axis until each piece has at most `limit` configs
    (default `CHUNK`)."""
    limit = min(CHUNK, limit) if limit is not None else CHUNK
    if group.size <= limit:
        yield group
        return
    shape = group.shape
    axis = group.axes[int(np.argmax(shape))]
    n = shape[group.axes.index(axis)]
    rest = group.size // n
    step = max(1, limit // rest)
    for lo in range(0, n, step):
        part = {**group.values, axis: group.values[axis][lo:lo + step]}
        yield from chunks(dataclasses.replace(group, values=part), limit)


def _row_shape(op: Op) -> tuple[int, ...]:
    """The broadcast shape of a row's numeric fields (most are plain numbers or share one
    array shape: no `np.broadcast_shapes` call then)."""
    shapes = {v.shape for v in (getattr(op, c) for c in NUMERIC)
              if isinstance(v, np.ndarray) and v.ndim}
    if len(shapes) <= 1:
        return shapes.pop() if shapes else ()
    return np.broadcast_shapes(*shapes)


def _split_space(op: Op, space: TokenSpace | None) -> tuple[Op, bool]:
    """A row with plain numeric fields, and whether they are token-space values (`tokens`):
    a row is timed on the distinct tokens where some field is a token array and none varies
    along batch or seq otherwise; elsewhere its token arrays are expanded."""
    got = {c: compact(getattr(op, c)) for c in NUMERIC}
    tok = any(t for _, t in got.values())
    if tok and space is not None and any(not t and space.varies(v) for v, t in got.values()):
        return op._replace(**{c: np.asarray(getattr(op, c)) for c in NUMERIC}), False
    changed = {c: v for c, (v, _) in got.items() if v is not getattr(op, c)}
    return (op._replace(**changed) if changed else op), tok


def _buckets(blocks: list[Block], m: Any, run: Any, full: tuple[int, ...]
             ) -> tuple[list[_Bucket], list[_Bucket]]:
    """The blocks' rows bucketed by the shape of their numeric fields, with their weights:
    the rows over the piece's grid, and those over its distinct tokens (`sweep.tokens`)."""
    buckets: list[dict[tuple[int, ...], _Bucket]] = [{}, {}]
    for blk in blocks:
        copies, later = multiplicity(blk, m.num_layers, run.micro_batches)
        for ops, w in ((blk.rows, copies), (blk.later, later)):
            for op in ops:
                op, tok = _split_space(op, run.space)
                shape = _row_shape(op)
                shape = (1,) * (len(full) - len(shape)) + shape
                buckets[tok].setdefault(shape, _Bucket(shape)).add(op, w)
    return list(buckets[0].values()), list(buckets[1].values())


def _fixed(blocks: list[Block], m: Any, run: Any, full: tuple[int, ...]
           ) -> dict[str, np.ndarray]:
    """The device-independent figures of the unfused blocks (parameters, memory, tokens;
    fusion keeps memory, so they hold fused too), over `full`. FLOPs are summed with the
    times (`_time_sums`), slice by slice."""
    mem = memory_parts(m, run, blocks)
    static = mem["weights"] + mem["master_weights"] + mem["gradients"] + mem["optimizer_states"]
    peak = (static + mem["activations"] + mem["segment_memory"]
            + np.floor(mem["transient"]))
    fixed = {"params": parameter_count(m), "memory_bytes": peak,
             "tokens": run.tokens}
    return {k: np.broadcast_to(np.asarray(v, dtype=float), full) for k, v in fixed.items()}


def same_models(devices: list[tuple[DeviceProfile, Knobs]]) -> list[list[int]]:
    """Indices of the targets grouped by their efficiency models: targets in one group
    differ only in peaks and knobs, so they are timed together along one more array axis
    (the fractions, which read the rows alone, computed once)."""
    by: dict[tuple[Any, ...], list[int]] = {}
    for i, (p, _) in enumerate(devices):
        by.setdefault((p.gemm, p.bandwidth, p.overhead), []).append(i)
    return list(by.values())


def runs_on(profile: DeviceProfile, precision: Any) -> bool:
    """Whether the device has the GEMM format the precision needs."""
    try:
        select_peaks(profile.device, precision)
    except BertscopeError:
        return False
    return True


def _stacked_peaks(targets: list[tuple[DeviceProfile, Knobs]], precision: Any) -> Peaks:
    """The targets' peaks (knobs applied) as arrays along the device axis."""
    each = [k.apply(select_peaks(p.device, precision)) for p, k in targets]
    link = [x.interconnect if x.interconnect is not None else np.nan for x in each]
    return Peaks(gemm_format=each[0].gemm_format, vector_format=each[0].vector_format,
                 gemm_flops=np.array([x.gemm_flops for x in each]),  # type: ignore[arg-type]
                 vector_flops=np.array([x.vector_flops for x in each]),  # type: ignore[arg-type]
                 bandwidth=np.array([x.bandwidth for x in each]),  # type: ignore[arg-type]
                 interconnect=np.array(link),  # type: ignore[arg-type]
                 batched_gemm_flops=(None if each[0].batched_gemm_flops is None else np.array(
                     [x.batched_gemm_flops for x in each])),  # type: ignore[arg-type]
                 activation_format=each[0].activation_format)


def evaluate_piece(piece: Group, devices: list[tuple[DeviceProfile, Knobs]],
                   sets: list[list[int]] | None = None
                   ) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """One piece of a group (`chunks`) on every target: pairs of (target index per entry,
    columns), entries in the piece's C order with the target fastest. Columns: iteration
    time, FLOPs, tokens, memory, capacity, the GEMM peak, the numeric axes, and time per
    category, per bound and in the optimizer. Pure: pieces may run in parallel threads
    (numpy releases the GIL in its loops)."""
    sets = sets if sets is not None else same_models(devices)
    valid = piece.valid()
    if not valid.any():
        return []
    m, run = piece.views(tokens=True)
    blocks = model_blocks(m, run)  # type: ignore[arg-type]  # the producer, once a piece
    fixed = _fixed(blocks, m, run, piece.shape)
    precision = piece.run.precision
    fusions = (variants(blocks, piece.shape, precision.act_bytes, m.num_layers,
                        chains_too=piece.run.chain_fusion)
               if piece.run.fusion else [(None, blocks)])
    parts = [(mask, *([b.columns() for b in bk] for bk in _buckets(bl, m, run, piece.shape)))
             for mask, bl in fusions]
    whole = bool(valid.all())  # no config to skip: views instead of masked copies
    axes = {a: piece.column(a).reshape(-1) if whole else piece.column(a)[valid]
            for a in piece.axes}
    fixed_v = {k: v.reshape(-1) if whole else v[valid] for k, v in fixed.items()}
    n = int(valid.sum())
    results = []
    for group_idx in sets:
        idx = [i for i in group_idx if runs_on(devices[i][0], precision)]
        if not idx:  # a precision these devices lack (tf32 on a TPU): skipped, counted
            continue
        targets = [devices[i] for i in idx]
        peaks = _stacked_peaks(targets, precision)
        scale = np.array([k.overhead for _, k in targets])
        key = target_key(targets, precision)
        shape = (*piece.shape, len(idx))
        sums: dict[str, np.ndarray] = {}
        for mask, stacked, on_tokens in parts:  # one part unless fusion decides per config
            got = _time_sums(shape, stacked, targets[0][0], peaks, scale, key)
            if on_tokens:  # rows timed on the distinct tokens, spread over the grid
                space: TokenSpace = run.space
                tok = _time_sums(space.shape(shape), on_tokens, targets[0][0], peaks, scale,
                                 key)
                for k, v in tok.items():
                    got[k] = got[k] + space.expand(v) if k in got else space.expand(v)
            _finish(got)
            if mask is None:
                sums = got
                continue
            keep = np.broadcast_to(mask[..., None], shape)
            for k, v in got.items():
                sums[k] = np.where(keep if k != "flops" else mask[..., None], v,
                                   sums.get(k, 0.0))
        flops = sums.pop("flops")[..., 0]  # (fusion sums FLOPs: equal in every variant)
        if "flops" not in fixed_v:
            fixed_v["flops"] = flops.reshape(-1) if whole else flops[valid]
        out = {k: (v.reshape(-1) if whole else v[valid].ravel()) for k, v in sums.items()}
        out.update({k: np.repeat(v, len(idx)) for k, v in {**fixed_v, **axes}.items()})
        out["gemm_peak_flops"] = np.tile(peaks.gemm_flops, n)
        out["capacity_bytes"] = np.tile([p.device.memory_bytes * k.memory
                                         for p, k in targets], n)
        results.append((np.tile(np.array(idx), n), out))
    return results


SUB = 1 << 18
"""Entries (rows x configurations x targets) timed at once: the row formulas run on whole
pieces (few calls), the timing on slices of them small enough that numpy's temporaries stay
in cache instead of being mapped and faulted in on every operation."""


def _time_sums(shape: tuple[int, ...],
               stacked: list[tuple[Columns, np.ndarray, list[tuple[str, bool, int, int]]]],
               profile: DeviceProfile, peaks: Peaks,
               overhead_scale: np.ndarray, key: bytes) -> dict[str, np.ndarray]:
    """Time summed over the rows per category ("cat:<c>"), per bound ("bound:<b>", compute
    and memory; `_finish` adds the total and the overhead) and in the optimizer phase
    ("optimizer_s"), as arrays of `shape`
    (the group's axes, then the targets), and the FLOPs x weights ("flops", the group's
    axes and one target); timed slice by slice along the outermost axis that varies."""
    keys = {f"cat:{cat}" for _, _, spans in stacked for cat, _, _, _ in spans}
    keys |= {"optimizer_s", f"bound:{Bound.COMPUTE.value}", f"bound:{Bound.MEMORY.value}"}
    acc = {k: np.zeros(shape) for k in sorted(keys)}
    grid = shape[:-1]
    flops = np.zeros((*grid, 1))  # FLOPs x weights, device-independent
    # the outermost axis that varies: its slices are contiguous blocks (slicing an inner
    # axis made every slice strided, several times slower)
    ax = next((i for i, s in enumerate(grid) if s > 1), 0)
    n = grid[ax]
    for cols, weights, spans in stacked:
        own = np.broadcast_shapes(weights.shape, *(v.shape for _, v in cols.items()))
        entries = math.prod(own) * shape[-1]
        if own[1 + ax] == 1 or entries <= SUB:  # timed once, added where it broadcasts
            _add(acc, flops, (...,), cols, weights, spans, profile, peaks, overhead_scale,
                 key)
            continue
        step = max(1, SUB // max(1, entries // n))
        for lo in range(0, n, step):
            cut = (slice(None),) * (1 + ax) + (slice(lo, min(n, lo + step)),)

            def part(v: np.ndarray, cut: tuple[slice, ...] = cut) -> np.ndarray:
                """A stacked (rows, *axes) array's slice (whole where it does not vary)."""
                return v[cut] if v.shape[1 + ax] > 1 else v

            _add(acc, flops, cut[1:], Columns({c: part(v) for c, v in cols.items()}),
                 part(weights), spans, profile, peaks, overhead_scale, key)
    acc["flops"] = flops
    return acc


def _finish(acc: dict[str, np.ndarray]) -> None:
    """The total time ("time_s") and the overhead-bound time of `_time_sums`' sums."""
    acc["time_s"] = sum(v for k, v in acc.items() if k.startswith("cat:"))
    rest = acc["time_s"] - acc["bound:compute"] - acc["bound:memory"]
    acc["bound:overhead"] = np.maximum(rest, 0.0)  # rounding never makes it negative


def _add(acc: dict[str, np.ndarray], flops: np.ndarray, at: tuple[Any, ...], cols: Columns,
         weights: np.ndarray, spans: list[tuple[str, bool, int, int]], profile: DeviceProfile,
         peaks: Peaks, overhead_scale: np.ndarray, key: bytes) -> None:
    """Time stacked rows (a bucket, or a slice of one) on the targets and add their sums per
    category, per bound and in the optimizer, and their FLOPs, to `acc` and `flops` at `at`
    (the sums broadcast there: a bucket varying along fewer axes is timed on its own size)."""
    t = _MEMO.times(key, Columns({c: v[..., None] for c, v in cols.items()}), profile, peaks,
                    overhead_scale)
    flops[at] += (cols["flops"] * weights).sum(axis=0)[..., None]
    timed = t["time_s"] * weights[..., None]
    for cat, is_opt, a, b in spans:
        sums = timed[a:b].sum(axis=0)
        acc[f"cat:{cat}"][at] += sums
        if is_opt:
            acc["optimizer_s"][at] += sums
    code = t["bound_code"]
    for i, bound in enumerate((Bound.COMPUTE, Bound.MEMORY)):  # overhead: the rest
        sel = np.broadcast_to(code == i, timed.shape)
        acc[f"bound:{bound.value}"][at] += timed.sum(axis=0, where=sel)


__all__ = ["CHUNK", "MEMO_BYTES", "MIN_CHUNK", "SUB", "chunks", "clear_memo", "evaluate_piece",
           "piece_configs", "runs_on", "same_models", "target_key"]
