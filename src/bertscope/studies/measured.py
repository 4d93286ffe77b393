"""The runs a study measures: what to measure (`RunSpec`, read from "model:batch:seq[:field...]"
by `parse_specs`) and what came back (`Measurement`: a `ProfileResult` just profiled, or a
`MeasuredRun` read back from a saved result by `load_result`, combined over rounds by
`combine_rounds`, or taken again by another statistic by `retake`). Shared by validation
(`studies.validate`), the fresh-process re-measurement (`studies.fresh`), the local
calibration (`studies.local_calibration`) and the DDP study; reading needs no torch.

    specs = parse_specs("bert-mini:8:128,bert-small:4:128:bf16")
    run = combine_rounds([load_result(p) for p in paths])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bertscope.analytic import build
from bertscope.bounded import read_json
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError, expect
from bertscope.optable import Combine, OpTable, ProfileFacts, combine, table_from_doc
from bertscope.presets import get_model
from bertscope.trace.attribute import Statistic, between_ops, iteration_time


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One config to profile: model preset (or config.json path), batch, seq, and the run
    settings it varies (`settings`: RunConfig fields by name, from the spec's extra fields)."""

    model: str
    batch: int
    seq: int
    settings: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        extra = "".join(f":{_token(k, v)}" for k, v in self.settings)
        return f"{self.model}:{self.batch}:{self.seq}{extra}"

    def configs(self, **run: Any) -> tuple[ModelConfig, RunConfig]:
        """The model and run configs of this spec."""
        return get_model(self.model), RunConfig(batch=self.batch, seq=self.seq,
                                                **{**dict(self.settings), **run})


def _token(key: str, value: Any) -> str:
    if key == "micro_batches":
        return f"mb{value}"
    if key == "checkpoint":
        return "ckpt" if value == "full" else f"ckpt-{value}"
    if key == "dropout":
        return "nodropout"
    if key == "masked_lm_only":
        return "masked"
    return str(value)


def _setting(token: str, part: str) -> tuple[str, Any]:
    """One extra field of a spec: a precision (fp32, tf32, fp16, bf16), an optimizer (sgd,
    adam, adamw, lamb), `ckpt` (full checkpointing), `mbN` (N micro-batches), `nodropout`,
    `masked` (MLM head on the masked positions only)."""
    t = token.strip().lower()
    if t in {p.value for p in Precision}:
        return "precision", t
    if t in {o.value for o in Optimizer}:
        return "optimizer", t
    if t == "ckpt":
        return "checkpoint", "full"
    if t == "nodropout":
        return "dropout", False
    if t == "masked":
        return "masked_lm_only", True
    if t.startswith("mb") and t[2:].isdigit():
        return "micro_batches", int(t[2:])
    raise BertscopeError(f"bad config {part!r}: unknown field {token!r}; extra fields are a "
                         f"precision (fp32, tf32, fp16, bf16), an optimizer (sgd, adam, adamw, "
                         f"lamb), ckpt, mbN, nodropout or masked")


def parse_specs(text: str) -> list[RunSpec]:
    """Parse "model:batch:seq[:field...],...", e.g. "bert-base:2:128:bf16:lamb:mb4"."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        if len(bits) < 3:
            raise BertscopeError(f"bad config {part!r}: write MODEL:BATCH:SEQ[:FIELD...], "
                                 f"e.g. bert-mini:8:128 or bert-base:2:128:bf16:lamb")
        try:
            batch, seq = int(bits[1]), int(bits[2])
        except ValueError:
            raise BertscopeError(f"bad config {part!r}: BATCH and SEQ must be integers") \
                from None
        settings = dict(_setting(t, part) for t in bits[3:])
        out.append(RunSpec(bits[0], batch, seq, tuple(settings.items())))
    if not out:
        raise BertscopeError("no configs given; write MODEL:BATCH:SEQ[:FIELD...][,...]")
    return out


class Measurement(Protocol):
    """What validation reads of a measured run (`ProfileResult` and `MeasuredRun` have it)."""

    @property
    def table(self) -> OpTable:
        """The measured op table."""
        ...

    @property
    def analytic(self) -> OpTable:
        """The analytic op table of the same model and run."""
        ...

    @property
    def facts(self) -> ProfileFacts:
        """Run facts: iteration_s, iteration_times_s, statistic, ..."""
        ...


@dataclass
class MeasuredRun:
    """A measured run read back from a saved result or combined over rounds: the fields of
    `bertscope.measure.profile.ProfileResult` (measured table with its `ProfileFacts`,
    analytic table), without torch."""

    table: OpTable
    """The measured op table."""
    analytic: OpTable
    """The analytic op table of the same model and run."""

    @property
    def facts(self) -> ProfileFacts:
        """What the run measured beside its rows (as `ProfileResult.facts`)."""
        return ProfileFacts.of(self.table)


def config_name(result: Measurement) -> str:
    """"model:batch:seq[:field...]" of a measured run (its settings that differ from
    `RunConfig`'s defaults, spelled as `parse_specs` reads them)."""
    run = result.table.run
    base = RunConfig(batch=run.batch, seq=run.seq)
    settings = tuple((k, getattr(run, k)) for k in ("precision", "optimizer", "checkpoint",
                                                     "micro_batches", "dropout",
                                                     "masked_lm_only")
                     if getattr(run, k) != getattr(base, k))
    return str(RunSpec(result.table.model.name, run.batch, run.seq, settings))


def load_result(path: str | Path) -> MeasuredRun:
    """A saved `bertscope profile` JSON result, with its analytic table rebuilt."""
    p = Path(path)
    doc = read_json(p, missing="give a JSON result written by `bertscope profile --output`",
                    fix="give a result written by `bertscope profile --output`")
    try:
        saved = expect(dict(doc), "meta", dict, "result", {}) if isinstance(doc, dict) else {}
        expect(saved, "iteration_s", float, "meta", minimum=0)
        for i, t in enumerate(expect(saved, "iteration_times_s", list, "meta")):
            expect({"t": t}, "t", float, f"meta: iteration_times_s[{i}]", minimum=0)
        table = table_from_doc(doc)
        m, run = table.model, table.run
    except BertscopeError as e:
        raise BertscopeError(f"{p}: not a bertscope profile result ({e})") from None
    return MeasuredRun(table=table, analytic=build(m, run))


def combine_rounds(results: Sequence[Measurement]) -> Measurement:
    """One result from several measurements of the same config: each row's time is the
    median over them (a row missing from one took 0 there; `Combine.MEDIAN`), the iteration
    time the median of all measured iterations; for measurements taken with the minimum
    statistic (meta "statistic"), each row's least (`Combine.MIN`) and the iteration's as
    `iteration_time` makes it (the rows' least plus the least time between ops of any
    iteration). One result is returned as it is."""
    if len(results) == 1:
        return results[0]
    facts = [r.facts for r in results]
    least = facts[0].statistic == Statistic.MIN
    table = combine([r.table for r in results], Combine.MIN if least else Combine.MEDIAN)
    every = [t for f in facts for t in f.iteration_times_s or ()]
    per_round = [_gaps(f) for f in facts]
    gaps = [g for round_gaps in per_round for g in round_gaps]
    op_time = float(table.df["time_s"].sum())
    iteration = (iteration_time(Statistic.MIN, every, op_time,
                                gaps if all(per_round) else None)
                 if least else float(np.median(every)))
    merged = replace(facts[0], iteration_s=iteration, gap_times_s=tuple(gaps),
                     iteration_times_s=tuple(every), rounds=len(results), op_time_s=op_time)
    return MeasuredRun(table=table.with_records(merged), analytic=results[0].analytic)


def _gaps(facts: ProfileFacts) -> list[float]:
    """A measurement's time between ops per iteration: its gap_times_s, or made from its
    per-iteration row times; [] where it kept neither (older results)."""
    if facts.gap_times_s is not None:
        return [float(g) for g in facts.gap_times_s]
    if facts.row_times_s is not None and facts.iteration_times_s is not None:
        return between_ops(list(facts.iteration_times_s), [list(r) for r in facts.row_times_s])
    return []


def retake(result: Measurement, statistic: Statistic | str) -> Measurement:
    """`result` with its rows' and iteration's times taken again by `statistic` from the
    per-iteration times it saved (meta "row_times_s", "iteration_times_s"), so one saved
    measurement answers for any statistic (and for the iteration time as `iteration_time`
    makes it now); returned as it is where it saved no per-iteration row times (older
    results)."""
    statistic = Statistic(statistic)
    facts = result.facts
    per_row = facts.row_times_s
    if per_row is None:
        return result
    if len(per_row) != len(result.table):
        raise BertscopeError(f"meta: row_times_s: expected a list of one entry per row "
                             f"({len(result.table)}), got {len(per_row)}")
    rows = [list(ts) for ts in per_row]
    times = [statistic.of_row(ts) for ts in rows]
    every = list(facts.iteration_times_s or ())
    gaps = between_ops(every, rows)
    op_time = float(np.nansum(times))
    retaken = replace(facts, statistic=statistic.value, gap_times_s=tuple(gaps),
                      iteration_s=iteration_time(statistic, every, op_time, gaps),
                      op_time_s=op_time)
    table = OpTable(result.table.df.assign(time_s=times), result.table.records,
                    job=result.table.job).with_records(retaken)
    return MeasuredRun(table=table, analytic=result.analytic)


def unsettled_faults(facts: ProfileFacts) -> int | None:
    """The fewest pages a measured run faulted in per iteration (`page_faults`) when
    even that is more than `allocator.SETTLED_SHARE` of this process's resident memory
    (every measured iteration faulted: the heap, not growth); None when the run settled or
    faults were not counted."""
    from bertscope.measure.allocator import settling  # measure/__init__ imports torch

    faults = [int(f) for f in facts.page_faults or () if f is not None]
    return min(faults) if faults and settling(min(faults)) else None


__all__ = ["MeasuredRun", "Measurement", "RunSpec", "combine_rounds", "config_name",
           "load_result", "parse_specs", "retake", "table_from_doc", "unsettled_faults"]
