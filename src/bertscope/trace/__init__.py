"""Read any PyTorch profiler (Kineto / Chrome) trace into the op-table taxonomy.

    table = read_trace("trace.json.gz")          # OpTable: per-iteration rows, TraceSummary
    table.by_category()                           # busy time and share per category
    result = analyze_trace("traces/", rank=0)     # per-rank tables, streams, overlap, unknowns
    result.cross_rank().to_frame()                # ranks side by side: stragglers, idle, launches

A trace is one file (.json or .json.gz) or a folder of per-rank files. Files are streamed
(`reader.py`) and handled one at a time, so memory is bounded by one file's columns. Rows
are kernels (with layer, sublayer and phase from the CPU op that launched them) when the
trace has device activity, else CPU ops (attributed exactly as `bertscope profile` does).
Names map to categories by the one pattern table (`bertscope/data/patterns.toml`), with a
user's pattern file tried first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bertscope import cluster
from bertscope.errors import BertscopeError, check_path, shown
from bertscope.optable import OpTable, Provenance, Record
from bertscope.taxonomy import Classifier, Pattern, load_patterns
from bertscope.trace.breakdown import RankBreakdown, break_down, mean_table
from bertscope.trace.gemm_ops import has_gemm_shape
from bertscope.trace.ranks import CrossRankReport, cross_rank
from bertscope.trace.reader import rank_from_name, read_events, read_rank, trace_files
from bertscope.trace.summaries import (
    Row,
    frame,
    fused_records,
    module_records,
    shares,
    top_records,
    unknown_records,
)

if TYPE_CHECKING:
    import pandas as pd


def rank_summary(b: RankBreakdown) -> dict[str, Any]:
    """One rank's breakdown as exports write it (meta "trace" "per_rank"): path, iterations,
    time source, busy time, shares by category, sublayer and phase, the top names, devices
    and streams, and the file's header."""
    return {
        "path": str(b.path), "iterations": b.iterations, "time_source": b.time_source,
        "busy_s": float(b.table.columns["time_s"].sum()),
        "by_category": shares(b.table, "category"),
        "by_sublayer": shares(b.table, "sublayer"),
        "by_phase": shares(b.table, "phase"),
        "top": top_records(b.table, 10),
        "devices": b.device_rows, "streams": b.stream_rows,
        **b.header,
    }


@dataclass(frozen=True, slots=True)
class TraceSummary(Record):
    """What a read trace says beside its mean rows (the mean table's record): where it was
    read from, its ranks (their breakdowns, the same objects as `TraceResult.ranks`), the
    time source, the Inductor kernels and the names no pattern matched. Exported as meta
    "path", "ranks", "time_source" and "trace" (per rank: `rank_summary`); not read
    back (a saved trace export loads with these entries kept as they are)."""

    KEYS: ClassVar[tuple[str, ...]] = ()
    path: str
    ranks: Mapping[int, RankBreakdown]
    time_source: str
    """"device" or "cpu" (several, comma-separated, when ranks differ)."""
    fused: tuple[Row, ...]
    """`fused_records` of the mean table."""
    unknown: tuple[Row, ...]
    """`unknown_records` of the mean table."""
    unknown_s: float
    """Time per iteration of the names no pattern matched."""
    unknown_share: float
    """Their share of all time."""

    def to_dict(self) -> dict[str, Any]:
        """The summary as exports write it."""
        return {"path": self.path, "ranks": sorted(self.ranks), "time_source": self.time_source,
                "trace": {"per_rank": {str(r): rank_summary(b) for r, b in self.ranks.items()},
                          "fused": list(self.fused), "unknown": list(self.unknown),
                          "unknown_s": self.unknown_s, "unknown_share": self.unknown_share}}

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> TraceSummary:
        """Not read back (see the class docstring)."""
        raise NotImplementedError("a trace summary is not read back")


@dataclass
class TraceResult:
    """A read trace: the op table (mean over ranks, carrying the `TraceSummary`) and each
    rank's breakdown. The methods give DataFrames (pandas imported then); `trace.summaries`
    has the same as records."""

    table: OpTable
    ranks: dict[int, RankBreakdown] = field(default_factory=dict)

    @property
    def summary(self) -> TraceSummary:
        """The trace's summary (the mean table's record)."""
        return TraceSummary.of(self.table)

    def device_records(self, attr: str = "device_rows") -> list[Row]:
        """`devices()` as records (`attr` "stream_rows": `streams()`)."""
        return [{"rank": k, **row} for k, r in self.ranks.items() for row in getattr(r, attr)]

    def devices(self) -> pd.DataFrame:
        """Per rank and device: active window, busy, idle, compute, communication, overlap
        and exposed communication (seconds over the whole capture)."""
        rows = self.device_records()
        return frame(rows, rows[0] if rows else ())

    def streams(self) -> pd.DataFrame:
        """Per rank, device and stream: busy and idle seconds, busy share, events."""
        rows = self.device_records("stream_rows")
        return frame(rows, rows[0] if rows else ())

    def unknown_names(self) -> set[str]:
        """Names no pattern matched, on any rank."""
        return set().union(*(r.unknown for r in self.ranks.values())) if self.ranks else set()

    def unknown(self) -> pd.DataFrame:
        """Names no pattern matched, with their time per iteration (mean over ranks), count
        and the category they got from the launching op: what to add to a pattern file."""
        return frame(unknown_records(self.table, self.unknown_names()),
                     ("name", "time_s", "count", "category"))

    def by(self, column: str, rank: int | None = None) -> pd.DataFrame:
        """Time, share and count per `column` (category, sublayer, phase, group), for one
        rank or the mean over ranks."""
        return self.rank_table(rank).summary(column)[["time_s", "time_share", "count"]]

    def top(self, n: int = 10, rank: int | None = None) -> pd.DataFrame:
        """The n names with the most time (summed over places), with category and count."""
        return frame(top_records(self.rank_table(rank), n),
                     ("name", "category", "time_s", "count", "time_share"))

    def modules(self, rank: int | None = None) -> pd.DataFrame:
        """The module tree: per module path (every prefix of a row's `module`, parents before
        children in the order they ran), its depth, the last element's name, time per
        iteration (its own rows and all below), share of all time and launches. Rows without
        a module path are not in it; the shares are of all time, so they say how much of
        the run the tree covers."""
        return frame(module_records(self.rank_table(rank)),
                     ("module", "depth", "name", "time_s", "time_share", "count"))

    def fused(self) -> pd.DataFrame:
        """torch.compile (Inductor) kernels: name, category, the ATen ops the name says it
        fuses, time per iteration (mean over ranks) and count."""
        return frame(fused_records(self.table), ("name", "category", "fuses", "time_s", "count"))

    def cross_rank(self) -> CrossRankReport:
        """The ranks side by side (`trace.ranks`): per rank compute, communication, copies,
        idle (by cause), overlap, launch delays and memory; per collective the straggler
        and the waits it caused."""
        return cross_rank(self)

    def rank_table(self, rank: int | None = None) -> OpTable:
        """One rank's op table, or (None) the mean over ranks."""
        if rank is None:
            return self.table
        if rank not in self.ranks:
            raise BertscopeError(f"no rank {rank} in this trace; ranks: "
                                 f"{', '.join(map(str, sorted(self.ranks)))}")
        return self.ranks[rank].table


def analyze_trace(path: str | Path, *, rank: int | None = None,
                  patterns: str | Path | Sequence[Pattern] | None = None,
                  scheduler: str | None = None) -> TraceResult:
    """Read a trace file or a folder of per-rank trace files (one rank, or all).

    `patterns` is a pattern file (or patterns) tried before the built-in table. The files
    of a folder are read side by side on local worker processes (`bertscope.cluster`), or
    with `scheduler` (a Dask scheduler's address, tcp://HOST:PORT) on that cluster's
    workers, each reading its file where it lies (the folder must be on a file system the
    workers share) and sending back only its rank's breakdown. The result does not depend
    on where the files were read."""
    _check_arguments(path, rank, patterns)
    scheduler = cluster.check_scheduler(scheduler)
    extra = tuple(load_patterns(patterns) if isinstance(patterns, str | Path)
                  else (patterns or ()))
    files = trace_files(path)
    if rank is not None and len(files) > 1:  # read only that rank's file(s)
        files = [f for f in files if _peek_rank(f) == rank]
        if not files:
            raise BertscopeError(f"{path}: no trace file for rank {rank} (ranks come from "
                                 f"distributedInfo or a rankN/workerN file name)")
    items = [(f, i, rank, extra) for i, f in enumerate(files)]
    if scheduler is not None:  # the workers' working folder is not ours: absolute paths
        items = [(f.absolute(), i, rank, extra) for f, i, rank, extra in items]
    ranks: dict[int, RankBreakdown] = {}
    with cluster.mapped(_breakdown_file, items, scheduler=scheduler,
                        what="trace file") as results:
        for f, b in zip(files, results, strict=True):
            b.path = f  # as the caller named it, wherever it was read
            if rank is not None and b.rank != rank:
                raise BertscopeError(f"{f}: this trace is rank {b.rank}, not rank {rank}")
            if b.rank in ranks:
                raise BertscopeError(f"{f}: a second trace for rank {b.rank} (first: "
                                     f"{ranks[b.rank].path}); read one file at a time")
            ranks[b.rank] = b
    ranks = dict(sorted(ranks.items()))
    table = mean_table(b.table for b in ranks.values())
    unknown_names = set().union(*(b.unknown for b in ranks.values())) if ranks else set()
    unknown = unknown_records(table, unknown_names)
    total = float(table.columns["time_s"].sum())
    unknown_s = sum(r["time_s"] for r in unknown)
    summary = TraceSummary(
        path=str(path), ranks=ranks,
        time_source=",".join(sorted({b.time_source for b in ranks.values()})),
        fused=tuple(fused_records(table)), unknown=tuple(unknown), unknown_s=unknown_s,
        unknown_share=unknown_s / total if total > 0 else 0.0)
    return TraceResult(table=table.with_records(Provenance("trace"), summary), ranks=ranks)


def _check_arguments(path: Any, rank: Any, patterns: Any) -> None:
    """Refuse, in one line, a path that is no text path, a rank that is no integer >= 0,
    patterns that are neither a file nor a list of `Pattern`s (public API arguments)."""
    check_path(path, "trace")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
        raise BertscopeError(f"rank must be an integer >= 0 or None, got {shown(rank)}")
    listed = isinstance(patterns, Sequence) and all(isinstance(p, Pattern) for p in patterns)
    if not (patterns is None or isinstance(patterns, str | Path) or listed):
        raise BertscopeError(f"patterns: expected a pattern file or a list of Patterns, got "
                             f"{type(patterns).__name__} {shown(patterns)}")


def _breakdown_file(item: tuple[Path, int, int | None, tuple[Pattern, ...]]) -> RankBreakdown:
    """One trace file's breakdown (the unit `analyze_trace` maps over a folder's files, in
    this process, a worker process or on a Dask worker): (path, index in the folder, the
    rank asked for, the user's patterns). The rank is the trace's distributedInfo, else a
    rankN/workerN file name, else the rank asked for, else the index."""
    f, index, wanted, extra = item
    classify = Classifier(extra)
    ev = read_events(f, keep_dims=lambda n: has_gemm_shape(n) or classify(n).is_gemm)
    r = ev.rank
    if r is None:
        r = rank_from_name(f)
    if r is None:
        r = index if wanted is None else wanted
    return break_down(ev, r, classify)


def _peek_rank(f: Path) -> int | None:
    r = read_rank(f)
    return r if r is not None else rank_from_name(f)


def read_trace(path: str | Path, *, rank: int | None = None,
               patterns: str | Path | Sequence[Pattern] | None = None) -> OpTable:
    """A trace (file or folder of per-rank files) as an op table: one row per distinct
    (name, layer, sublayer, category, phase), time and count per iteration (mean over
    ranks); its `TraceSummary` holds the per-rank breakdowns, streams, overlap and unknowns."""
    return analyze_trace(path, rank=rank, patterns=patterns).table


__all__ = ["CrossRankReport", "RankBreakdown", "TraceResult", "TraceSummary", "analyze_trace",
           "cross_rank", "rank_summary", "read_trace"]
