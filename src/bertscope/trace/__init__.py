"""Read any PyTorch profiler (Kineto / Chrome) trace into the op-table taxonomy.

    table = read_trace("trace.json.gz")          # OpTable: per-iteration rows, meta["trace"]
    table.by_category()                           # busy time and share per category
    result = analyze_trace("traces/", rank=0)     # per-rank tables, streams, overlap, unknowns

A trace is one file (.json or .json.gz) or a folder of per-rank files. Files are streamed
(`reader.py`) and handled one at a time, so memory is bounded by one file's columns. Rows
are kernels (with layer, sublayer and phase from the CPU op that launched them) when the
trace has device activity, else CPU ops (attributed exactly as `bertscope profile` does).
Names map to categories by the one pattern table (`bertscope/data/patterns.toml`), with a
user's pattern file tried first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertscope.errors import BertscopeError
from bertscope.optable import OpTable
from bertscope.taxonomy import Classifier, Pattern, load_patterns

if TYPE_CHECKING:
    import pandas as pd

    from bertscope.trace.breakdown import RankBreakdown

# The reader and the breakdown (and pandas) are imported when a trace is read, not with the
# package: the CLI imports `trace.attribute` at start-up, and every command would pay for them.


@dataclass
class TraceResult:
    """A read trace: the op table (mean over ranks) and each rank's breakdown."""

    table: OpTable
    ranks: dict[int, RankBreakdown] = field(default_factory=dict)

    def _frames(self, attr: str) -> pd.DataFrame:
        import pandas as pd

        parts = [getattr(r, attr).assign(rank=k) for k, r in self.ranks.items()
                 if not getattr(r, attr).empty]
        if not parts:
            return pd.DataFrame()
        d = pd.concat(parts, ignore_index=True)
        return d[["rank", *[c for c in d.columns if c != "rank"]]]

    def devices(self) -> pd.DataFrame:
        """Per rank and device: active window, busy, idle, compute, communication, overlap
        and exposed communication (seconds over the whole capture)."""
        return self._frames("devices")

    def streams(self) -> pd.DataFrame:
        """Per rank, device and stream: busy and idle seconds, busy share, events."""
        return self._frames("streams")

    def unknown(self) -> pd.DataFrame:
        """Names no pattern matched, with their time per iteration (mean over ranks), count
        and the category they got from the launching op: what to add to a pattern file."""
        names = set().union(*(r.unknown for r in self.ranks.values())) if self.ranks else set()
        d = self.table.df
        d = d[d["name"].isin(names)]
        g = d.groupby("name", sort=False).agg(
            time_s=("time_s", "sum"), count=("count", "sum"),
            category=("category", lambda c: ",".join(sorted({str(x) for x in c}))))
        return g.sort_values("time_s", ascending=False).reset_index()

    def by(self, column: str, rank: int | None = None) -> pd.DataFrame:
        """Time, share and count per `column` (category, sublayer, phase, group), for one
        rank or the mean over ranks."""
        t = self.table if rank is None else self._rank(rank).table
        return t.summary(column)[["time_s", "time_share", "count"]]

    def top(self, n: int = 10, rank: int | None = None) -> pd.DataFrame:
        """The n names with the most time (summed over places), with category and count."""
        t = self.table if rank is None else self._rank(rank).table
        d = t.df.groupby(["name", "category"], sort=False, observed=True)[
            ["time_s", "count"]].sum().reset_index()
        total = d["time_s"].sum()
        d["time_share"] = d["time_s"] / total if total > 0 else 0.0
        return d.nlargest(n, "time_s").reset_index(drop=True)

    def modules(self, rank: int | None = None) -> pd.DataFrame:
        """The module tree: per module path (every prefix of a row's `module`, parents before
        children in the order they ran), its depth, the last element's name, time per
        iteration (its own rows and all below), share of all time and launches. Rows without
        a module path are not in it; the shares are of all time, so they say how much of
        the run the tree covers."""
        import pandas as pd

        d = (self.table if rank is None else self._rank(rank).table).df
        total = float(d["time_s"].sum())
        time: dict[str, float] = {}
        count: dict[str, int] = {}
        for module, t, c in zip(d["module"].tolist(), d["time_s"].tolist(),
                                d["count"].tolist(), strict=True):
            if not module:
                continue
            parts = module.split("/")
            for i in range(1, len(parts) + 1):
                key = "/".join(parts[:i])
                time[key] = time.get(key, 0.0) + t
                count[key] = count.get(key, 0) + c
        paths = _tree_order(time)
        return pd.DataFrame({
            "module": paths, "depth": [p.count("/") for p in paths],
            "name": [p.rpartition("/")[2] for p in paths],
            "time_s": [time[p] for p in paths],
            "time_share": [time[p] / total if total > 0 else 0.0 for p in paths],
            "count": [count[p] for p in paths]})

    def fused(self) -> pd.DataFrame:
        """torch.compile (Inductor) kernels: name, category, the ATen ops the name says it
        fuses, time per iteration (mean over ranks) and count."""
        import pandas as pd

        from bertscope.taxonomy import fused_ops

        d = self.table.df
        g = d.groupby(["name", "category"], sort=False, observed=True)[
            ["time_s", "count"]].sum().reset_index()
        g["fuses"] = [", ".join(fused_ops(n)) for n in g["name"]]
        g = g[[bool(_INDUCTOR_KERNEL.match(n)) for n in g["name"]]]
        if g.empty:
            return pd.DataFrame(columns=["name", "category", "fuses", "time_s", "count"])
        return g[["name", "category", "fuses", "time_s", "count"]].sort_values(
            "time_s", ascending=False).reset_index(drop=True)

    def _rank(self, rank: int) -> RankBreakdown:
        if rank not in self.ranks:
            raise BertscopeError(f"no rank {rank} in this trace; ranks: "
                                 f"{', '.join(map(str, sorted(self.ranks)))}")
        return self.ranks[rank]


_INDUCTOR_KERNEL = re.compile(r"^triton_(poi|red|per|for|tem)_")


def _tree_order(paths: dict[str, float]) -> list[str]:
    """Module paths with each parent before its children, siblings in first-seen order."""
    children: dict[str, list[str]] = {}
    for p in paths:
        children.setdefault(p.rpartition("/")[0] if "/" in p else "", []).append(p)
    out: list[str] = []
    stack = list(reversed(children.get("", [])))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(reversed(children.get(p, [])))
    return out


def analyze_trace(path: str | Path, *, rank: int | None = None,
                  patterns: str | Path | Sequence[Pattern] | None = None) -> TraceResult:
    """Read a trace file or a folder of per-rank trace files (one rank, or all).

    `patterns` is a pattern file (or patterns) tried before the built-in table."""
    from bertscope.trace.breakdown import break_down, mean_table
    from bertscope.trace.gemm_ops import has_gemm_shape
    from bertscope.trace.reader import rank_from_name, read_events, trace_files

    extra = load_patterns(patterns) if isinstance(patterns, str | Path) else (patterns or ())
    classify = Classifier(extra)
    files = trace_files(path)
    if rank is not None and len(files) > 1:  # read only that rank's file(s)
        files = [f for f in files if _peek_rank(f) == rank]
        if not files:
            raise BertscopeError(f"{path}: no trace file for rank {rank} (ranks come from "
                                 f"distributedInfo or a rankN/workerN file name)")
    ranks: dict[int, RankBreakdown] = {}
    for i, f in enumerate(files):
        ev = read_events(f, keep_dims=lambda n: has_gemm_shape(n) or classify(n).is_gemm)
        r = ev.rank
        if r is None:
            r = rank_from_name(f)
        if r is None:
            r = i if rank is None else rank
        if rank is not None and r != rank:
            raise BertscopeError(f"{f}: this trace is rank {r}, not rank {rank}")
        if r in ranks:
            raise BertscopeError(f"{f}: a second trace for rank {r} (first: {ranks[r].path});"
                                 f" read one file at a time")
        ranks[r] = break_down(ev, r, classify)
        del ev
    ranks = dict(sorted(ranks.items()))
    result = TraceResult(table=mean_table((b.table for b in ranks.values()), {}), ranks=ranks)
    result.table.meta = _meta(result, path)
    unknown = result.unknown()
    total = float(result.table.df["time_s"].sum())
    result.table.meta["trace"].update(
        fused=_records(result.fused()),
        unknown=_records(unknown), unknown_s=float(unknown["time_s"].sum()),
        unknown_share=float(unknown["time_s"].sum()) / total if total > 0 else 0.0)
    return result


def _peek_rank(f: Path) -> int | None:
    from bertscope.trace.reader import rank_from_name, read_rank

    r = read_rank(f)
    return r if r is not None else rank_from_name(f)


def read_trace(path: str | Path, *, rank: int | None = None,
               patterns: str | Path | Sequence[Pattern] | None = None) -> OpTable:
    """A trace (file or folder of per-rank files) as an op table: one row per distinct
    (name, layer, sublayer, category, phase), time and count per iteration (mean over
    ranks); `meta["trace"]` holds the per-rank breakdowns, streams, overlap and unknowns."""
    return analyze_trace(path, rank=rank, patterns=patterns).table


def _records(d: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in d.to_dict(orient="records")]


def _shares(t: OpTable, by: str) -> dict[str, dict[str, float]]:
    if t.df.empty:
        return {}
    s = t.summary(by)
    return {str(k): {"time_s": float(r["time_s"]), "share": float(r["time_share"]),
                     "count": int(r["count"])} for k, r in s.iterrows()}


def _meta(result: TraceResult, path: str | Path) -> dict[str, Any]:
    per_rank = {}
    for r, b in result.ranks.items():
        per_rank[str(r)] = {
            "path": str(b.path), "iterations": b.iterations, "time_source": b.time_source,
            "busy_s": float(b.table.df["time_s"].sum()),
            "by_category": _shares(b.table, "category"),
            "by_sublayer": _shares(b.table, "sublayer"),
            "by_phase": _shares(b.table, "phase"),
            "top": _records(result.top(10, rank=r)),
            "devices": _records(b.devices), "streams": _records(b.streams),
            **b.header,
        }
    sources = sorted({b.time_source for b in result.ranks.values()})
    return {"producer": "trace", "path": str(path), "ranks": sorted(result.ranks),
            "time_source": ",".join(sources),
            "trace": {"per_rank": per_rank}}


def __getattr__(name: str) -> Any:
    if name == "RankBreakdown":
        from bertscope.trace.breakdown import RankBreakdown

        return RankBreakdown
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RankBreakdown", "TraceResult", "analyze_trace", "read_trace"]
