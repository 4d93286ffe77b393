"""What differs between the ranks of a multi-rank trace (the analyses of Holistic Trace Analysis):
per rank, where the GPU's time goes (compute, communication, memory copies, idle), how much
communication hides behind compute, why the GPU sits idle, how long launches take to reach it
and how its memory grows; per collective, who arrived last and how long the others waited.

Two steps, so a folder of rank files can be read anywhere (one process, a pool, a cluster):

1. `rank_timeline(ev, comm)`: everything one rank's file says, from that file's events alone,
   as a small picklable `RankTimeline` (sums, a few percentiles, the collectives' start and end
   times, a downsampled memory series). `break_down` computes it; `RankBreakdown.timeline`
   holds it.
2. `cross_rank(result)`: a pure function over the gathered per-rank timelines: collectives
   matched across ranks, the straggler of each and the waits it caused.

Definitions, as HTA 0.5.0 has them where it has them:

- **Compute / communication / copies / idle** (device time, over the rank's window: first
  device event's start to last one's end): communication = collective kernels (the pattern
  table's communication category); copies = memcpy and memset; compute = every other kernel.
  The shares are exclusive, so they sum to 1: compute, then communication not under compute,
  then copies under neither, then idle (no device event on any stream).
- **Overlap** = communication time during which a compute kernel runs on any stream /
  communication time (HTA `get_comm_comp_overlap`).
- **Idle by cause**, per stream (HTA `get_idle_time_breakdown`): the gap before each device
  event on its stream is *host wait* when the runtime call that launched it started after the
  previous event on the stream ended (the CPU was late), else *kernel wait* when shorter than
  `KERNEL_WAIT_US` (HTA's `consecutive_kernel_delay` default, 30, compared with its
  microsecond timestamps), else *other*. Summed over the rank's streams.
- **Waiting on a collective**: time inside a collective kernel before the last rank arrived
  (last arrival - own start, at most the kernel's duration). **Pipeline bubble**: device idle
  gaps that end with a point-to-point kernel (SendRecv, Send, Recv) starting: the GPU had
  nothing to do until a pipeline neighbour's activations or gradients came.
- **Launch delay** (HTA `get_cuda_kernel_launch_stats`): device event start - end of the runtime
  call that launched it (correlation id or `ac2g` flow), clipped at 0.
- **Collectives** are matched across ranks by kind (AllReduce, ReduceScatter, ... from the NCCL
  kernel name) and order of occurrence: the k-th AllReduce of every rank is one collective.
  Arrival = the kernel's start; the straggler is the last to arrive; each rank waited for it
  (last arrival - own arrival). Timestamps are compared as written (as HTA does: its alignment
  shifts every rank by the same amount), so ranks' clocks are taken to agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.trace.events import DEVICE_KINDS, Events, Kind, message_bytes
from bertscope.trace.timeline import launched_by, length, overlap, union

if TYPE_CHECKING:
    import pandas as pd

KERNEL_WAIT_US = 30.0
"""A gap shorter than this between two device events on a stream (and not a host wait) is
kernel wait: HTA's `consecutive_kernel_delay` default, applied to its microsecond times."""
IDLE_CAUSES = ("host_wait", "kernel_wait", "other")
"""Idle causes per stream, as HTA names them."""
MEMORY_POINTS = 256
"""Most points kept of a device's memory series (the largest value of each equal run of
samples, so the peak is always kept)."""
_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_P2P = frozenset({"SendRecv", "Send", "Recv"})


def collective_kind(name: str) -> str:
    """The collective a communication kernel runs, from its name: `AllReduce` for
    `ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)` and `ncclKernel_AllReduce_RING_LL_Sum_float`;
    another name up to its argument list."""
    m = _COLLECTIVE.search(name)
    return m.group(1) if m else name.split("(", 1)[0].strip()


@dataclass(frozen=True, slots=True)
class LaunchStats:
    """Launch delays of one rank's device events (runtime call end -> device start), us."""

    count: int
    mean_us: float
    p50_us: float
    p95_us: float
    max_us: float

    @classmethod
    def of(cls, delays_us: np.ndarray) -> LaunchStats:
        """The statistics of some delays (NaN when there are none)."""
        if not len(delays_us):
            return cls(0, *(4 * [float("nan")]))
        p50, p95 = np.percentile(delays_us, [50, 95]).tolist()
        return cls(len(delays_us), float(delays_us.mean()), p50, p95, float(delays_us.max()))


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """Bytes allocated on one device over the capture (`[memory]` instants), downsampled to at
    most `MEMORY_POINTS` points (the largest value of each run of samples)."""

    device: int
    """Device id (-1: the CPU)."""
    peak_bytes: int
    ts_us: tuple[float, ...]
    bytes: tuple[int, ...]


@dataclass(frozen=True)
class RankTimeline:
    """One rank's device timeline, summed: small and picklable (what a worker sends back).
    Times in seconds except the collectives' absolute start and end (us, as in the trace)."""

    start_us: float
    """The first device event's start."""
    window_s: float
    compute_s: float
    """Time any compute kernel runs (union over streams)."""
    comm_s: float
    """Time any collective kernel runs."""
    copy_s: float
    """Time any memcpy or memset runs."""
    overlap_s: float
    """Communication time with a compute kernel running too."""
    busy_s: float
    """Time any device event runs; window - busy is idle."""
    idle_by_cause: dict[str, float]
    """Per-stream idle gaps summed by cause (`IDLE_CAUSES`), seconds."""
    idle_streams: tuple[tuple[str, str, float, float, float], ...]
    """Per (device, stream): host wait, kernel wait and other idle, seconds."""
    bubble_s: float
    """Device idle gaps that end with a point-to-point kernel starting."""
    collective_kinds: tuple[str, ...]
    """Kind of each collective kernel, in start order."""
    collective_start_us: np.ndarray
    collective_end_us: np.ndarray
    launch: LaunchStats
    memory: tuple[MemorySeries, ...] = ()
    collective_bytes: tuple[float, ...] = ()
    """Input message bytes of each collective kernel (same order as `collective_kinds`), from
    its `In msg nelems` and `dtype` args; NaN where the trace does not say (empty: none do)."""

    @property
    def idle_s(self) -> float:
        """Time no device event runs, within the window."""
        return self.window_s - self.busy_s

    def shares(self) -> dict[str, float]:
        """Exclusive shares of the window: compute, communication not under compute, copies
        under neither, idle (sum 1; zeros for an empty window)."""
        w = self.window_s
        comm_only = self.comm_s - self.overlap_s
        copy_only = self.busy_s - self.compute_s - comm_only
        parts = {"compute": self.compute_s, "comm": comm_only, "copy": copy_only,
                 "idle": self.idle_s}
        return {k: (max(v, 0.0) / w if w > 0 else 0.0) for k, v in parts.items()}


def rank_timeline(ev: Events, comm: set[int]) -> RankTimeline | None:
    """One rank's `RankTimeline` from its events (None: no device events). `comm` are the
    name indices of communication kernels."""
    dev = np.flatnonzero(np.isin(ev.kind, np.array(DEVICE_KINDS, dtype=np.uint8)))
    if not len(dev):
        return None
    ts, end = ev.ts[dev], ev.end[dev]
    kernel = ev.kind[dev] == Kind.KERNEL
    is_comm = kernel & np.isin(ev.name[dev], np.fromiter(comm, dtype=np.int64, count=len(comm)))
    comp = union(ts[kernel & ~is_comm], end[kernel & ~is_comm])
    com = union(ts[is_comm], end[is_comm])
    cpy = union(ts[~kernel], end[~kernel])
    busy = union(ts, end)
    lo = float(ts.min())
    rt = launched_by(ev, dev)
    linked = rt >= 0
    delays = np.maximum(ts[linked] - (ev.ts[rt[linked]] + ev.dur[rt[linked]]), 0.0)
    rt_ts = np.where(linked, ev.ts[np.maximum(rt, 0)], np.nan)
    causes, streams = _idle_by_stream(ev, dev, rt_ts)
    order = np.flatnonzero(is_comm)
    order = order[np.argsort(ts[order], kind="stable")]
    kinds = tuple(collective_kind(ev.names[n]) for n in ev.name[dev[order]].tolist())
    nan = float("nan")
    sizes = tuple(message_bytes(m[0], m[2]) if (m := ev.messages.get(i)) else nan
                  for i in dev[order].tolist()) if ev.messages else ()
    p2p = np.array([k in _P2P for k in kinds], dtype=bool)
    gaps = busy[0][1:] - busy[1][:-1]
    bubble = float(gaps[np.isin(busy[0][1:], ts[order][p2p])].sum()) if len(gaps) else 0.0
    return RankTimeline(
        start_us=lo, window_s=(float(end.max()) - lo) * 1e-6, compute_s=length(comp) * 1e-6,
        comm_s=length(com) * 1e-6, copy_s=length(cpy) * 1e-6,
        overlap_s=overlap(comp, com) * 1e-6, busy_s=length(busy) * 1e-6,
        idle_by_cause=causes, idle_streams=streams, bubble_s=bubble * 1e-6,
        collective_kinds=kinds, collective_start_us=ts[order].copy(),
        collective_end_us=end[order].copy(), launch=LaunchStats.of(delays),
        memory=_memory(ev), collective_bytes=sizes)


def _idle_by_stream(ev: Events, dev: np.ndarray, rt_ts: np.ndarray
                    ) -> tuple[dict[str, float], tuple[tuple[str, str, float, float, float], ...]]:
    """HTA's idle breakdown per (device, stream), and its sum over streams (seconds)."""
    total = dict.fromkeys(IDLE_CAUSES, 0.0)
    rows = []
    lane = ev.pid[dev].astype(np.int64) * (len(ev.ids) + 1) + ev.tid[dev]
    for key in np.unique(lane).tolist():
        sel = np.flatnonzero(lane == key)
        sel = sel[np.argsort(ev.ts[dev[sel]], kind="stable")]
        ts = ev.ts[dev[sel]]
        prev_end = ev.end[dev[sel]][:-1]
        gap, launch = ts[1:] - prev_end, rt_ts[sel][1:]
        host = launch > prev_end  # NaN (no launch found): False, as in HTA's join
        kern = ~host & (gap < KERNEL_WAIT_US)
        by = {"host_wait": float(gap[host].sum()) * 1e-6,
              "kernel_wait": float(gap[kern].sum()) * 1e-6,
              "other": float(gap[~host & ~kern].sum()) * 1e-6}
        for k, v in by.items():
            total[k] += v
        d, s = divmod(key, len(ev.ids) + 1)
        rows.append((str(ev.ids[d]), str(ev.ids[s]), *by.values()))
    return total, tuple(rows)  # type: ignore[return-value]


def _memory(ev: Events) -> tuple[MemorySeries, ...]:
    ts, device, total = ev.memory
    out = []
    for d in np.unique(device).tolist():
        sel = np.flatnonzero(device == d)
        sel = sel[np.argsort(ts[sel], kind="stable")]
        t, b = ts[sel], total[sel]
        if len(sel) > MEMORY_POINTS:
            pick = [int(c[np.argmax(b[c])]) for c in np.array_split(np.arange(len(sel)),
                                                                   MEMORY_POINTS)]
            t, b = t[pick], b[pick]
        out.append(MemorySeries(int(d), int(total[sel].max()), tuple(t.tolist()),
                                tuple(int(x) for x in b.tolist())))
    return tuple(out)


# --- across ranks ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CollectiveWait:
    """One collective matched across ranks: each rank's arrival, the straggler, the waits."""

    kind: str
    index: int
    """Its order among the collectives of its kind (0: the first)."""
    arrival_us: dict[int, float]
    """Per rank, the kernel's start (us, as in the trace)."""
    straggler: int
    """The last rank to arrive (the lowest such rank on a tie)."""
    max_wait_s: float
    """The longest wait it caused (last arrival - first arrival)."""
    sum_wait_s: float
    """The waits it caused, summed over ranks (last arrival - each arrival)."""
    message_bytes: float = float("nan")
    """Its input message, bytes (the largest any rank's kernel says; NaN: none says)."""


@dataclass(frozen=True)
class CrossRankReport:
    """The ranks of a trace side by side (`cross_rank`): per-rank timelines, collectives
    matched across ranks, and notes on what could not be compared (one line each)."""

    ranks: Mapping[int, RankTimeline]
    collectives: tuple[CollectiveWait, ...] = ()
    notes: tuple[str, ...] = ()
    _waited: dict[int, float] = field(default_factory=dict, repr=False)

    def rank_records(self) -> list[dict[str, Any]]:
        """Per rank: window, exclusive shares (compute, comm, copy, idle), overlap share,
        idle by cause, bubble, time waiting inside collectives, straggler count and the
        wait it caused, launch delay statistics and peak memory."""
        caused: dict[int, float] = {}
        last: dict[int, int] = {}
        for c in self.collectives:
            if c.max_wait_s <= 0:
                continue  # everyone arrived at once: nobody waited
            caused[c.straggler] = caused.get(c.straggler, 0.0) + c.sum_wait_s
            last[c.straggler] = last.get(c.straggler, 0) + 1
        rows = []
        for r, t in self.ranks.items():
            sh = t.shares()
            rows.append({
                "rank": r, "window_s": t.window_s, "compute_share": sh["compute"],
                "comm_share": sh["comm"], "copy_share": sh["copy"], "idle_share": sh["idle"],
                "overlap_share": t.overlap_s / t.comm_s if t.comm_s > 0 else float("nan"),
                "compute_s": t.compute_s, "comm_s": t.comm_s, "copy_s": t.copy_s,
                "idle_s": t.idle_s,
                **{f"{k}_s": v for k, v in t.idle_by_cause.items()},
                "bubble_s": t.bubble_s, "collective_wait_s": self._waited.get(r, 0.0),
                "straggler_count": last.get(r, 0), "caused_wait_s": caused.get(r, 0.0),
                "launches": t.launch.count, "launch_mean_us": t.launch.mean_us,
                "launch_p50_us": t.launch.p50_us, "launch_p95_us": t.launch.p95_us,
                "launch_max_us": t.launch.max_us,
                "peak_bytes": max((m.peak_bytes for m in t.memory if m.device >= 0),
                                  default=None)})
        return rows

    def message_records(self) -> list[dict[str, Any]]:
        """Per collective kind whose kernels say their message size (HTA's `nccl::` args):
        collectives matched, how many say their size, the smallest, median and largest
        input message and the bytes per rank they add up to (empty: the trace has none)."""
        by: dict[str, list[float]] = {}
        count: dict[str, int] = {}
        for c in self.collectives:
            count[c.kind] = count.get(c.kind, 0) + 1
            if c.message_bytes == c.message_bytes:  # not NaN
                by.setdefault(c.kind, []).append(c.message_bytes)
        return [{"kind": k, "count": count[k], "sized": len(v), "min_bytes": min(v),
                 "median_bytes": float(np.median(v)), "max_bytes": max(v),
                 "bytes_per_rank": sum(v)} for k, v in sorted(by.items())]

    def stragglers(self, n: int = 10) -> list[CollectiveWait]:
        """The n collectives with the longest wait (ties: in order of occurrence)."""
        return sorted(self.collectives, key=lambda c: -c.max_wait_s)[:n]

    def to_frame(self) -> pd.DataFrame:
        """`rank_records` as a DataFrame, one row per rank."""
        import pandas as pd

        return pd.DataFrame(self.rank_records()).set_index("rank")

    def collectives_frame(self) -> pd.DataFrame:
        """One row per collective: kind, index, straggler, max and summed wait, input message
        bytes (NaN where the trace does not say), and each rank's arrival (us after the
        earliest arrival of that collective)."""
        import pandas as pd

        rows = []
        for c in self.collectives:
            first = min(c.arrival_us.values())
            rows.append({"kind": c.kind, "index": c.index, "straggler": c.straggler,
                         "max_wait_s": c.max_wait_s, "sum_wait_s": c.sum_wait_s,
                         "message_bytes": c.message_bytes,
                         **{f"rank {r} arrival_us": a - first for r, a in c.arrival_us.items()}})
        return pd.DataFrame(rows, columns=None if rows else
                            ["kind", "index", "straggler", "max_wait_s", "sum_wait_s",
                             "message_bytes"])

    def idle_frame(self) -> pd.DataFrame:
        """Idle time by cause per rank, device and stream (seconds), as HTA's breakdown."""
        import pandas as pd

        return pd.DataFrame([(r, *row) for r, t in self.ranks.items() for row in t.idle_streams],
                            columns=["rank", "device", "stream", *IDLE_CAUSES])

    def memory_frame(self) -> pd.DataFrame:
        """The memory series: rank, device, time (s after the earliest device event of any
        rank) and bytes allocated."""
        import pandas as pd

        t0 = min((t.start_us for t in self.ranks.values()), default=0.0)
        return pd.DataFrame([(r, m.device, (ts - t0) * 1e-6, b) for r, t in self.ranks.items()
                             for m in t.memory for ts, b in zip(m.ts_us, m.bytes, strict=True)],
                            columns=["rank", "device", "time_s", "bytes"])


def cross_rank(timelines: Mapping[int, RankTimeline | None] | Any) -> CrossRankReport:
    """Compare ranks: the per-rank timelines (a mapping rank -> `RankTimeline`, or a
    `TraceResult`, whose ranks' breakdowns hold them) and every collective matched across
    them (kind and order of occurrence) with its straggler and waits. What cannot be compared
    (one rank, a rank without device events, ranks with different numbers of a collective:
    compared over the common first ones) is said in `notes`, one line each."""
    if not isinstance(timelines, Mapping):  # a TraceResult
        timelines = {r: b.timeline for r, b in timelines.ranks.items()}
    notes = [f"rank {r}: no device events (a CPU-only trace); left out"
             for r, t in timelines.items() if t is None]
    ranks = {r: t for r, t in sorted(timelines.items()) if t is not None}
    if len(ranks) < 2:
        notes.append(f"{len(ranks)} rank(s) with device events: no collectives to compare "
                     f"across ranks")
        return CrossRankReport(ranks, (), tuple(notes))
    collectives, waited = _match(ranks, notes)
    return CrossRankReport(ranks, tuple(collectives), tuple(notes), waited)


def _match(ranks: Mapping[int, RankTimeline], notes: list[str]
           ) -> tuple[list[CollectiveWait], dict[int, float]]:
    per: dict[int, dict[str, list[int]]] = {}
    for r, t in ranks.items():
        by = per[r] = {}
        for i, k in enumerate(t.collective_kinds):
            by.setdefault(k, []).append(i)
    kinds = sorted(set().union(*(p.keys() for p in per.values())))
    out: list[CollectiveWait] = []
    waited = dict.fromkeys(ranks, 0.0)
    for kind in kinds:
        counts = {r: len(per[r].get(kind, [])) for r in ranks}
        n = min(counts.values())
        if len(set(counts.values())) > 1:
            notes.append(f"{kind}: ranks ran different numbers of it ("
                         + ", ".join(f"rank {r}: {c}" for r, c in counts.items())
                         + f"); matched over the first {n}")
        for k in range(n):
            at = {r: (float(ranks[r].collective_start_us[per[r][kind][k]]),
                      float(ranks[r].collective_end_us[per[r][kind][k]])) for r in ranks}
            sizes = [b for r in ranks if ranks[r].collective_bytes
                     and (b := ranks[r].collective_bytes[per[r][kind][k]]) == b]
            arrival = {r: a for r, (a, _) in at.items()}
            last = max(arrival.values())
            straggler = min(r for r, a in arrival.items() if a == last)
            wait = {r: last - a for r, a in arrival.items()}
            for r, (a, e) in at.items():
                waited[r] += min(wait[r], e - a) * 1e-6
            out.append(CollectiveWait(kind, k, arrival, straggler,
                                      max(wait.values()) * 1e-6, sum(wait.values()) * 1e-6,
                                      max(sizes, default=float("nan"))))
    out.sort(key=lambda c: min(c.arrival_us.values()))
    return out, waited


__all__ = ["IDLE_CAUSES", "KERNEL_WAIT_US", "MEMORY_POINTS", "CollectiveWait", "CrossRankReport",
           "LaunchStats", "MemorySeries", "RankTimeline", "collective_kind", "cross_rank",
           "rank_timeline"]
