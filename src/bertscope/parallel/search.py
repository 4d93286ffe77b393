"""Layout search: every valid DP x TP x PP x micro-batches x ZeRO x recomputation layout of a
job, costed at once and ranked by throughput among those that fit device memory.

Valid means: dp x tp x pp = devices; tp divides the heads and the FFN size and (by default)
stays inside a node; pp divides the layers; dp x micro-batches divides the global batch;
ZeRO 1-3 only with dp > 1, and 2-3 only without pipeline stages; sequence parallelism only
with tp > 1; pipeline schedules GPipe, 1F1B and interleaved with v virtual stages (v >= 2
dividing L/pp, micro-batches a multiple of pp) when pp > 1.

Costs come from `evaluate_arrays`, one numpy pass over all layouts, and one `predict` call
for every (micro-batch size, tp, sequence parallel) the layouts need (`compute_table`), so
ten thousand layouts cost about as much as a handful of op-table builds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.config import Checkpoint
from bertscope.errors import BertscopeError, is_positive_int, parse_enum
from bertscope.io import Format, atomic_write, frame_bytes, output_format
from bertscope.job import Job, Layout, Schedule, ZeroStage, recipe_layout
from bertscope.parallel.compute import compute_table
from bertscope.parallel.evaluation import MEMORY_KEYS, OVERLAP_KEYS, TIME_KEYS, evaluate_arrays
from bertscope.parallel.job import Cluster, Workload
from bertscope.parallel.memory import CHECKPOINTS
from bertscope.parallel.pipeline import INTERLEAVED_CODE, SCHEDULES

if TYPE_CHECKING:
    import pandas as pd


@dataclass(kw_only=True, frozen=True, slots=True)
class SearchSpace:
    """Which layouts a search tries. A field left None takes every valid value; a value pins
    that dimension."""

    dp: int | None = None
    """Data-parallel replicas."""
    tp: int | None = None
    """Tensor-parallel size."""
    pp: int | None = None
    """Pipeline stages."""
    micro_batches: int | None = None
    """Micro-batches per step per replica."""
    zero: ZeroStage | None = None
    """ZeRO stage."""
    checkpoint: Checkpoint | None = None
    """Recomputation mode."""
    sequence_parallel: bool | None = None
    """Sequence parallelism on or off (only applies where tp > 1)."""
    schedule: Schedule | None = None
    """Pipeline schedule (only applies where pp > 1)."""
    virtual_stages: int | None = None
    """Virtual stages of the interleaved schedule."""
    tp_within_node: bool = True
    """Keep tensor-parallel groups inside one node (tp <= devices per node)."""
    overlap_tp_comm: bool | None = None
    """Tensor-parallel communication overlap, carried into every layout (not searched; None:
    off). See `job.Layout`."""
    overlap_grad_reduce: bool | None = None
    """Megatron's overlapped gradient reduce, carried into every layout (None: off)."""
    overlap_param_gather: bool | None = None
    """Megatron's overlapped parameter gather, carried into every layout (None: off)."""

    def __post_init__(self) -> None:
        for f in ("dp", "tp", "pp", "micro_batches", "virtual_stages"):
            value = getattr(self, f)
            if value is not None and not is_positive_int(value):
                raise BertscopeError(f"{f} must be a positive integer, got {value!r}")
        if self.zero is not None:
            try:
                object.__setattr__(self, "zero", ZeroStage(int(self.zero)))
            except (ValueError, TypeError):
                raise BertscopeError(f"ZeRO stage must be 0, 1, 2 or 3, got "
                                     f"{self.zero!r}") from None
        if self.checkpoint is not None:
            object.__setattr__(self, "checkpoint",
                               parse_enum(Checkpoint, self.checkpoint, "checkpoint"))
        if self.schedule is not None:
            object.__setattr__(self, "schedule", parse_enum(Schedule, self.schedule, "schedule"))
        for f in OVERLAP_KEYS:
            value = getattr(self, f)
            if value is not None and not isinstance(value, bool | np.bool_):
                raise BertscopeError(f"{f} must be true or false, got {value!r}")

    def overlap(self) -> dict[str, bool]:
        """The overlap flags every layout of the search carries (None read as off)."""
        return {f: bool(getattr(self, f)) for f in OVERLAP_KEYS}


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Every layout a search costed, best first: those that fit memory, by tokens/s."""

    workload: Workload
    """What was spread: the model, the run per sequence, the global batch."""
    frame: pd.DataFrame
    """One row per layout: its fields, time parts, tokens/s, memory parts, fits."""
    seconds: float
    """Wall time of the search (enumeration, compute table, costing, ranking)."""

    @property
    def evaluated(self) -> int:
        """Layouts costed."""
        return len(self.frame)

    @property
    def fitting(self) -> int:
        """Layouts whose peak memory fits a device."""
        return int(self.frame["fits"].sum())

    def jobs(self, k: int | None = None) -> list[Job]:
        """The jobs of the first k layouts (all with None), best first."""
        rows = self.frame if k is None else self.frame.head(k)
        return [row_job(self.workload, r) for r in rows.to_dict("records")]

    def best(self) -> Job | None:
        """The job of the fastest layout that fits, or None when none fits."""
        fit = self.frame[self.frame["fits"]]
        return row_job(self.workload, fit.iloc[0].to_dict()) if len(fit) else None

    def export(self, path: str | Path, fmt: Format | str | None = None) -> Path:
        """Write every costed layout to `path` atomically (csv, json or parquet; from the
        suffix when `fmt` is None)."""
        p = Path(path)
        atomic_write(p, self.to_bytes(output_format(p, fmt)))
        return p

    def to_bytes(self, fmt: Format) -> bytes:
        """Every costed layout as `export` writes it in `fmt`."""
        return frame_bytes(self.frame, fmt)


def row_job(workload: Workload, row: dict[str, Any]) -> Job:
    """The `Job` of one row of a search frame: `workload` spread as the row says."""
    layout = Layout(dp=int(row["dp"]), tp=int(row["tp"]), pp=int(row["pp"]),
                    zero=ZeroStage(int(row["zero"])), sequence_parallel=bool(row["sp"]),
                    schedule=Schedule(row["schedule"]),
                    virtual_stages=int(row["virtual_stages"]),
                    **{k: bool(row.get(k, False)) for k in OVERLAP_KEYS})
    return workload.job(layout, int(row["micro_batches"]), Checkpoint(row["checkpoint"]))


def divisors(n: int) -> list[int]:
    """The positive divisors of n, ascending."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _pick(values: list[Any], pinned: Any) -> list[Any]:
    return values if pinned is None else [v for v in values if v == pinned]


def recipe_pins(workload: Workload, space: SearchSpace) -> dict[str, Any]:
    """The layout defaults of the workload's recipe (`job.recipe_layout`: the megatron
    recipe's sequence parallelism, distributed optimizer (ZeRO 1), interleaved schedule and
    communication overlap) that the search pins instead of searching over, each where it
    applies to a layout (`enumerate_layouts`): those `space` leaves unset (None); a value
    `space` gives wins."""
    return {k: v for k, v in recipe_layout(workload.run.recipe).items()
            if k in _RECIPE_PINNED and getattr(space, k) is None}


_RECIPE_PINNED = ("zero", "sequence_parallel", "schedule", *OVERLAP_KEYS)
"""The `SearchSpace` fields a recipe's layout defaults may pin."""


def enumerate_layouts(workload: Workload, cluster: Cluster,
                      space: SearchSpace | None = None) -> dict[str, np.ndarray]:
    """Every valid layout in `space` as equal-length arrays (the form `evaluate_arrays`
    takes). See the module docstring for what counts as valid. The fields `space` leaves
    unset that the run's recipe gives a layout default for (`recipe_pins`) are pinned to it
    where it applies, as `job.with_recipe_layout` applies them to one job: sequence
    parallelism where tp > 1, the ZeRO stage where dp > 1 (and the pipeline allows it), the
    interleaved schedule where pp > 1 and the micro-batches are a multiple of pp (1F1B
    elsewhere), each overlap flag where it has an effect (tensor-parallel overlap with
    tp > 1, the data-parallel ones with dp > 1, the parameter gather with ZeRO 1); the rest
    at `Layout.fill`'s defaults."""
    space = space or SearchSpace()
    pins = recipe_pins(workload, space)
    m, n, gb = workload.model, cluster.devices, workload.global_batch
    per_node = cluster.topology.devices_per_node
    blocks: list[dict[str, np.ndarray]] = []
    tps = [t for t in divisors(n) if m.heads % t == 0 and m.intermediate % t == 0
           and (not space.tp_within_node or t <= per_node)]
    for t in _pick(tps, space.tp):
        for p in _pick([p for p in divisors(n // t) if m.stack_layers % p == 0], space.pp):
            d = n // (t * p)
            if (space.dp is not None and d != space.dp) or gb % d:
                continue
            ms = _pick(divisors(gb // d), space.micro_batches)
            # ZeRO 1-3 need replicas to shard over; 2-3 no pipeline stages (see `Layout`)
            top = ZeroStage.NONE if d == 1 else ZeroStage.OPTIMIZER if p > 1 else \
                ZeroStage.PARAMETERS
            zeros = [int(z) for z in ZeroStage if z <= top]
            if space.zero is not None:  # a pinned stage with dp = 1 is a harmless no-op
                limit = ZeroStage.OPTIMIZER if p > 1 else ZeroStage.PARAMETERS
                zeros = [int(space.zero)] if space.zero <= limit else []
            elif "zero" in pins:  # the recipe's stage where it applies, else none
                zeros = [int(pins["zero"])] if d > 1 and pins["zero"] <= top else [0]
            cks = _pick([c.code for c in CHECKPOINTS], None if space.checkpoint is None
                        else space.checkpoint.code)
            sp_pin = space.sequence_parallel
            if sp_pin is None and t > 1:  # the recipe's where tensor parallelism is
                sp_pin = pins.get("sequence_parallel")
            sps = _pick([False] if t == 1 else [False, True], sp_pin)
            scheds = _schedules(m.stack_layers, p, space, pins.get("schedule"))
            if not (ms and zeros and cks and sps and scheds):
                continue
            grid = np.meshgrid(np.asarray(ms), np.asarray(zeros), np.asarray(cks),
                               np.asarray(sps), np.arange(len(scheds)), indexing="ij")
            mb, z, ck, sp, k = (g.ravel() for g in grid)
            sc = np.asarray([s for s, _ in scheds])[k]
            vs = np.asarray([v for _, v in scheds])[k]
            keep = ~((sc == INTERLEAVED_CODE) & (mb % p != 0))
            if pins.get("schedule") is Schedule.INTERLEAVED and INTERLEAVED_CODE in sc:
                # the recipe's interleaving where it applies; 1F1B only where it does not
                keep &= (sc == INTERLEAVED_CODE) | (mb % p != 0)
            size = int(keep.sum())
            flags = {k: np.full(size, on) for k, on in space.overlap().items()}
            effect = {"overlap_tp_comm": np.full(size, t > 1),
                      "overlap_grad_reduce": np.full(size, d > 1),
                      "overlap_param_gather": (d > 1) & (z[keep] == ZeroStage.OPTIMIZER)}
            for k in OVERLAP_KEYS:
                if k in pins:  # the recipe's flag where it has an effect (`job._EFFECT`)
                    flags[k] = np.asarray(pins[k], dtype=bool) & effect[k]
            blocks.append({
                "dp": np.full(size, d), "tp": np.full(size, t), "pp": np.full(size, p),
                "micro_batches": mb[keep], "zero": z[keep], "checkpoint": ck[keep],
                "sp": sp[keep], "schedule": sc[keep], "virtual_stages": vs[keep], **flags})
    if not blocks:
        return {k: np.zeros(0, dtype=bool if k in OVERLAP_KEYS else np.int64) for k in
                ("dp", "tp", "pp", "micro_batches", "zero", "checkpoint", "sp", "schedule",
                 "virtual_stages", *OVERLAP_KEYS)}
    return {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}


def _schedules(layers: int, p: int, space: SearchSpace,
               recipe: Schedule | None = None) -> list[tuple[int, int]]:
    """(schedule code, virtual stages) pairs to try with p stages; `recipe`: the recipe's
    schedule, pinned where `space` gives none (interleaved keeps 1F1B beside it, for the
    micro-batch counts interleaving does not apply to and layers that do not split)."""
    if p == 1:  # no pipeline: the schedule does not apply
        ok = space.schedule is not Schedule.INTERLEAVED and space.virtual_stages in (None, 1)
        return [(Schedule.ONE_F_ONE_B.code, 1)] if ok else []
    pairs = [(Schedule.GPIPE.code, 1), (Schedule.ONE_F_ONE_B.code, 1)]
    pairs += [(Schedule.INTERLEAVED.code, v) for v in divisors(layers // p) if v > 1]
    if space.schedule is not None:
        pairs = [(s, v) for s, v in pairs if s == space.schedule.code]
    elif recipe is not None:
        fallback = Schedule.ONE_F_ONE_B.code if recipe is Schedule.INTERLEAVED else recipe.code
        pairs = [(s, v) for s, v in pairs if s in (recipe.code, fallback)]
    if space.virtual_stages is not None:
        pairs = [(s, v) for s, v in pairs if v == space.virtual_stages]
    return pairs


def search(workload: Workload, cluster: Cluster, space: SearchSpace | None = None) -> SearchResult:
    """Cost every valid layout in `space` and rank them: layouts that fit device memory
    first, each group by tokens/s. Raises `BertscopeError` when no layout is valid."""
    import pandas as pd  # the result is a frame; imported here to keep the CLI's start fast

    t0 = time.perf_counter()
    arrays = enumerate_layouts(workload, cluster, space)
    if len(arrays["dp"]) == 0:
        raise BertscopeError(
            f"no valid layout of {cluster.devices} devices for {workload.model.name} with "
            f"global batch {workload.global_batch} and the pinned choices; relax --tp/--pp/"
            f"--dp/--micro-batches, or pick a device count and batch with common divisors")
    b = workload.global_batch // (arrays["dp"] * arrays["micro_batches"])
    table = compute_table(workload, cluster.profile, np.unique(b), np.unique(arrays["tp"]))
    r = evaluate_arrays(workload, cluster, arrays, table)
    frame = pd.DataFrame({
        "dp": arrays["dp"], "tp": arrays["tp"], "pp": arrays["pp"], "sp": arrays["sp"],
        "schedule": np.asarray([s.value for s in SCHEDULES], dtype=object)[arrays["schedule"]],
        "virtual_stages": arrays["virtual_stages"], "micro_batches": arrays["micro_batches"],
        **{k: arrays[k] for k in OVERLAP_KEYS},
        "micro_batch": r["micro_batch"], "zero": arrays["zero"],
        "checkpoint": np.asarray([c.value for c in CHECKPOINTS],
                                 dtype=object)[arrays["checkpoint"]],
        "tokens_per_s": r["tokens_per_s"], "iteration_s": r["iteration_s"],
        **{k: r[k] for k in (*TIME_KEYS, "recompute_s")},
        "bubble_fraction": r["bubble_fraction"],
        **{k: r[k] for k in MEMORY_KEYS},
        "memory_bytes": r["memory_bytes"], "fits": r["fits"],
    })
    order = np.lexsort((-frame["tokens_per_s"].to_numpy(), ~frame["fits"].to_numpy()))
    frame = frame.iloc[order].reset_index(drop=True)
    return SearchResult(workload=workload, frame=frame, seconds=time.perf_counter() - t0)


__all__ = ["SearchResult", "SearchSpace", "divisors", "enumerate_layouts", "recipe_pins",
           "row_job", "search"]
