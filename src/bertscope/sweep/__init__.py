"""Design-space sweeps: every configuration of a grid, predicted on every device, at once.

    result = sweep(["bert-base", "bert-large"], ["a100", "h100"], batch=range(1, 257),
                   seq=(128, 512), precision=("fp32", "bf16"))
    result.frame.nlargest(5, "tokens_per_s")

Every axis is named as the config field it sets (`num_layers`, `intermediate`, `vocab_size`,
`batch`, `micro_batches`, `checkpoint`, `fusion`, ... every `RunConfig` field; `dp`, `tp`,
`pp`, `zero`; the knobs) and so is its column in the result.

One row per configuration (model, dimensions, run settings, device, knobs): iteration time,
tokens/s, achieved FLOP/s and fraction of the GEMM peak, time share per category and per bound,
the memory-bound (non-GEMM) and optimizer shares, peak memory per device and whether it fits.
Every figure equals what `predict(build(model, run), device, knobs=...)` gives for that
configuration (tests check it to 1e-9): the engine (`engine.py`) runs the same analytic
producer on arrays and the same `perf.predict.row_times`. Configurations a model cannot run
(heads that do not divide hidden, a sequence beyond its positions) are skipped and counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope import cluster
from bertscope.config import ModelConfig
from bertscope.errors import BertscopeError, as_values, check_path, is_positive_int, shown
from bertscope.io import Format, atomic_path, atomic_write, frame_bytes, output_format
from bertscope.perf.efficiency import DeviceProfile, load_profile
from bertscope.perf.predict import Bound
from bertscope.perf.roofline import Knobs
from bertscope.presets import get_model
from bertscope.requirements import require_format
from bertscope.sweep import engine, multi
from bertscope.sweep.grid import KNOB_AXES, MODEL_AXES, Grid, Group, run_axes
from bertscope.sweep.stream import (
    Columns,
    JsonRows,
    Labels,
    ParquetRows,
    TopRows,
    Varied,
    columns_of,
    frame_of,
)
from bertscope.taxonomy import Category

if TYPE_CHECKING:
    import pandas as pd

MAX_CONFIGS = 2_000_000
"""Largest grid evaluated without being asked to (`sweep(..., max_configs=None)`,
`bertscope sweep --yes`)."""
BYTES_PER_CONFIG = 400
"""About what one result row holds (some 45 numeric columns): the memory a grid will need."""



def label_columns() -> tuple[str, ...]:
    """Columns naming a configuration's structure (categorical in the frame): the model,
    its family, every non-numeric `RunConfig` field (read now) and the device."""
    return ("model", "family", *(a.name for a in run_axes() if not a.numeric), "device")


def numeric_columns() -> tuple[str, ...]:
    """Columns of the numeric axes: the model dimensions and the integer `RunConfig` fields
    (an optional one, `decoder_seq`, only where some configuration sets it)."""
    return (*MODEL_AXES, *(a.name for a in run_axes() if a.numeric))

_GEMM = {c.value for c in Category if c.is_gemm}

ASCENDING = frozenset({"iteration_s", "memory_bytes", "flops", "params", "devices"})
"""Columns ranked smallest first (times and sizes); every other column largest first."""

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class SweepResult:
    """A sweep's rows and how it went."""

    frame: pd.DataFrame
    """One row per configuration evaluated."""
    grid_size: int
    """Configurations in the grid."""
    skipped: int
    """Configurations a model or device cannot run (heads not dividing hidden, seq beyond
    positions, a precision whose GEMM format the device lacks: tf32 off NVIDIA)."""
    seconds: float
    """Wall time of the evaluation."""
    empty: str = ""
    """Why nothing was evaluated, in one line (the first configuration's reason), when every
    configuration was skipped; "" otherwise. The command refuses such a sweep (exit 2)."""

    @property
    def evaluated(self) -> int:
        """Configurations evaluated (rows of `frame`)."""
        return len(self.frame)

    def ranked(self, sort: str | None = None, top: int | None = None) -> pd.DataFrame:
        """The rows sorted by `sort` (smallest first for the `ASCENDING` columns: time and
        sizes; largest first otherwise), the first `top` of them."""
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
            raise BertscopeError(f"top must be an integer >= 0 or None, got {shown(top)}")
        df = self.frame
        if sort is not None:
            check_sort(sort)
            if sort not in df.columns:  # a category no configuration has: all zero
                return df.head(top) if top is not None else df
            ascending = sort in ASCENDING
            df = df.sort_values(sort, ascending=ascending, kind="stable")
        return df.head(top) if top is not None else df

    @property
    def columns(self) -> tuple[str, ...]:
        """The frame's columns, in order."""
        return tuple(self.frame.columns)

    @property
    def varied(self) -> frozenset[str]:
        """Configuration columns holding more than one value (the model dimensions: within
        a model): what the sweep table shows."""
        v = Varied()
        if not self.frame.empty:
            v.add(columns_of(self.frame))
        return frozenset(v.columns)

    def export(self, path: str | Path, fmt: Format | str | None = None) -> Path:
        """Write the rows (csv, json, jsonl or parquet: `fmt`, else from the suffix)
        atomically."""
        p = Path(check_path(path, "export"))
        fmt = output_format(p, fmt)
        if fmt not in STREAMED:
            atomic_write(p, frame_bytes(self.frame, fmt))
            return p
        require_format(fmt)
        with atomic_path(p) as tmp:  # the writer `sweep_to` streams with: equal files
            rows = STREAMED[fmt](tmp)
            try:
                rows.write(columns_of(self.frame), 0.0)
            finally:
                rows.close()
        return p


STREAMED = {Format.PARQUET: ParquetRows, Format.JSONL: JsonRows}
"""The formats `sweep_to` writes piece by piece, and their writers (`sweep.stream`)."""


METRIC_COLUMNS = ("tokens", "params", "flops", "iteration_s", "tokens_per_s", "achieved_flops",
                  "peak_fraction", *(f"share_{c.value}" for c in Category),
                  *(f"bound_{b.value}" for b in Bound), "memory_bound_share",
                  "optimizer_share", "memory_bytes", "fits", "dp", "tp", "pp", "zero",
                  "devices", "tokens_per_s_per_device", "compute_share", "tp_comm_share",
                  "pp_comm_share",
                  "bubble_share", "dp_comm_share")
"""Every figure column a sweep can hold (a share column only where some row has the
category)."""


def check_sort(column: str) -> None:
    """Refuse, before any work, a column no sweep result has."""
    known = (*label_columns(), *numeric_columns(), *KNOB_AXES, *METRIC_COLUMNS)  # layout in
    # METRIC_COLUMNS
    if not isinstance(column, str) or column not in known:
        raise BertscopeError(f"no column {shown(column)} to sort by; columns: "
                             f"{', '.join(known)}")


def _models(models: Any) -> tuple[ModelConfig, ...]:
    return tuple(get_model(m) for m in as_values(models, "models"))


def _devices(devices: Any) -> tuple[DeviceProfile, ...]:
    out = []
    for d in as_values(devices, "devices"):
        if not isinstance(d, DeviceProfile | str | os.PathLike):
            raise BertscopeError(f"devices: expected a catalog name, a device or profile file "
                                 f"or a DeviceProfile, got {type(d).__name__} {shown(d)}")
        out.append(d if isinstance(d, DeviceProfile) else load_profile(d))
    return tuple(out)


def make_grid(models: Sequence[str | Path | ModelConfig] | str | Path | ModelConfig,
              devices: Sequence[str | Path | DeviceProfile] | str | Path | DeviceProfile,
              **axes: Any) -> Grid:
    """The grid of `sweep` (models and devices loaded, every axis checked). Every argument
    takes one value or a list of them (`errors.as_values`): `"bert-base"` is one model,
    `batch=8` the axis [8]."""
    return Grid(models=_models(models), devices=_devices(devices), **axes)


def sweep(models: Sequence[str | Path | ModelConfig] | str | Path | ModelConfig,
          devices: Sequence[str | Path | DeviceProfile] | str | Path | DeviceProfile = ("a100",),
          *,
          max_configs: int | None = MAX_CONFIGS, progress: Progress | None = None,
          workers: int | None = None, scheduler: str | None = None,
          **axes: Any) -> SweepResult:
    """Evaluate every configuration of the grid (see the module docstring). Axes: the model
    dimensions (`num_layers`, `hidden`, `heads`, `intermediate`, `vocab_size`: ModelConfig's
    fields), every `RunConfig` field by its name (`batch`, `seq`, `micro_batches`,
    `decoder_seq`, `precision`, `optimizer`, `checkpoint` none/selective/full, `dropout`,
    `masked_lm_only`, `attention`, `fusion` as `perf.kernel_fusion.fuse` runs the table,
    ...), the layout `dp`, `tp`, `pp`, `zero` (multi-device points, timed by the distributed
    model: `sweep.multi`), and the knobs `gemm_peak`, `bandwidth`, `overhead`, `memory`
    (multipliers of each device's figures); each a value or a sequence of values (a string
    is one value: `sweep("bert-base", "a100", batch=8, precision="bf16")`).
    A grid above `max_configs` is refused (None: no cap). A grid none of whose
    configurations can run gives an empty result whose `empty` says why. Pieces of
    the grid run on `workers` threads (default: one per CPU core; numpy's loops release the
    GIL), or forked processes for large grids of many pieces (`PROCESS_CONFIGS`); with
    `scheduler` (a Dask scheduler's address, tcp://HOST:PORT) on that cluster's workers
    (`bertscope.cluster`; multi-device points stay local). The result does not depend on
    where they ran."""
    return _gathered(*_prepared(models, devices, max_configs, progress, workers, scheduler,
                                axes))


def _gathered(grid: Grid, run: _Pieces) -> SweepResult:
    """Every piece of the grid evaluated and gathered into one frame (`sweep`)."""
    t0 = time.perf_counter()
    parts = [part for piece in run for part in piece.parts]
    frame = _frame(parts, run.targets, grid, layouts=run.layouts)
    empty = (f"every configuration of the grid ({grid.size:,}) was skipped "
             f"({grid.refusal()})") if frame.empty else ""
    return SweepResult(frame=frame, grid_size=grid.size, skipped=grid.size - len(frame),
                       seconds=time.perf_counter() - t0, empty=empty)


def _prepared(models: Any, devices: Any, max_configs: int | None, progress: Progress | None,
              workers: int | None, scheduler: str | None, axes: dict[str, Any]
              ) -> tuple[Grid, _Pieces]:
    """The arguments of `sweep` checked, the grid made and its pieces ready to evaluate."""
    if max_configs is not None and not is_positive_int(max_configs):
        raise BertscopeError(f"max_configs must be a positive integer or None, got "
                             f"{shown(max_configs)}")
    if workers is not None and not is_positive_int(workers):
        raise BertscopeError(f"workers must be a positive integer or None, got "
                             f"{shown(workers)}")
    if progress is not None and not callable(progress):
        raise BertscopeError(f"progress must be a callable (stage, done, total) or None, "
                             f"got {shown(progress)}")
    scheduler = cluster.check_scheduler(scheduler)
    grid = make_grid(models, devices, **axes)
    if max_configs is not None and grid.size > max_configs:
        raise BertscopeError(
            f"the grid has {grid.size:,} configurations (about "
            f"{grid.size * BYTES_PER_CONFIG / 2**30:.1f} GiB of results), above "
            f"{max_configs:,}; narrow an axis or pass --yes")
    return grid, _Pieces(grid, progress or (lambda *_: None), workers, scheduler)


Part = tuple[dict[str, Any], np.ndarray, dict[str, np.ndarray]]
"""One evaluated slice of a piece: its labels, target index per row, columns."""


@dataclass(frozen=True, slots=True)
class _Piece:
    """The parts of one evaluated piece (a group's chunk on every target, or a group's
    multi-device points), and whether they are multi-device rows."""

    parts: list[Part]
    multi: bool = False


class _Pieces:
    """A grid's pieces, evaluated in order as they are iterated: the single-device engine's
    chunks on local threads, forked processes or a Dask cluster (`cluster.mapped`), then the
    multi-device points (`multi`) in this process."""

    def __init__(self, grid: Grid, tell: Progress, workers: int | None,
                 scheduler: str | None) -> None:
        self.grid = grid
        self.tell = tell
        self.workers = workers
        self.scheduler = scheduler
        self.targets = [(p, k) for p in grid.devices for k in grid.knob_sets()]
        self.combos = multi.layouts(grid.layouts())
        self.layouts = bool(self.combos)
        """Whether the grid has multi-device points (the layout columns)."""

    def __iter__(self) -> Iterator[_Piece]:
        """The evaluated pieces with rows, in grid order (progress told after each)."""
        grid, targets, combos = self.grid, self.targets, self.combos
        sets = engine.same_models(targets)
        single = len(combos) < len(grid.layouts())
        limit = engine.piece_configs(max(len(s) for s in sets))
        tasks = ([(g, piece) for g in grid.groups() for piece in engine.chunks(g, limit)]
                 if single else [])
        done = 0
        n_workers = cluster.local_workers(max(1, len(tasks)), self.workers)
        processes = len(tasks) >= PROCESS_PIECES * n_workers and grid.size >= PROCESS_CONFIGS
        try:
            with cluster.mapped(_evaluate, [(piece, targets, sets) for _, piece in tasks],
                                scheduler=self.scheduler, workers=n_workers,
                                processes=processes, ahead=AHEAD * n_workers,
                                what="sweep piece") as results:
                for (group, piece), res in zip(tasks, results, strict=True):
                    labels = _labels(group)
                    done += piece.size * len(targets)
                    self.tell("sweep", done, grid.size)
                    if res:
                        yield _Piece([(labels, target, cols) for target, cols in res])
        finally:  # pieces evaluated in this process (threads, one worker) leave their memo
            engine.clear_memo()
        for group in grid.groups() if combos else ():  # multi-device points: `multi`
            labels = _labels(group)
            got = multi.evaluate_group(group, targets, combos, grid.pinned)
            done += group.size * len(targets) * len(combos)
            self.tell("sweep", done, grid.size)
            if got:
                yield _Piece([(labels, target, {**cols, MULTI: np.ones(0)})
                              for target, cols in got], multi=True)


@dataclass(frozen=True)
class SweepSummary:
    """What a sweep streamed to a file (`sweep_to`) leaves in memory: its counts, its best
    rows and which configuration columns vary; the rows themselves are in the file."""

    output: Path | None
    """The file written (None: the rows were ranked only)."""
    grid_size: int
    """Configurations in the grid."""
    evaluated: int
    """Configurations evaluated (rows written)."""
    skipped: int
    """Configurations a model or device cannot run."""
    seconds: float
    """Wall time of the evaluation and the writing."""
    columns: tuple[str, ...]
    """The columns of the rows, in order."""
    varied: frozenset[str]
    """Configuration columns holding more than one value (model dimensions: within a model)."""
    top: list[dict[str, Any]]
    """The best rows by the sort column, best first ({column: value})."""
    axes: dict[str, list[Any] | None] = dataclasses.field(default_factory=dict)
    """The grid's axes: models and devices by name, then every axis's values (enums by
    value; None: a model dimension each model keeps), as `Grid.axes` holds them."""


def sweep_to(output: str | Path | None,
             models: Sequence[str | Path | ModelConfig] | str | Path | ModelConfig,
             devices: Sequence[str | Path | DeviceProfile] | str | Path | DeviceProfile = (
                 "a100",), *,
             fmt: Format | str | None = None, sort: str | None = "tokens_per_s",
             top: int = 10, max_configs: int | None = MAX_CONFIGS,
             progress: Progress | None = None, workers: int | None = None,
             scheduler: str | None = None, **axes: Any) -> SweepSummary:
    """`sweep` with its rows streamed, piece by piece as they are evaluated, to the Parquet
    or JSON Lines file `output` (`fmt`, else its suffix: `.parquet`, `.jsonl`; or only
    ranked: None), so that memory
    holds one piece's rows at a time whatever the grid's size; returns the counts, the
    grid's axes and the best `top` rows by `sort` (`SweepResult.ranked`'s order). The file is
    written into a temporary file beside it and renamed into place once whole: a failure (a
    Dask worker lost past its retries, Ctrl-C, a full disk) leaves no file. The rows read
    back equal `sweep(...).frame`. A `.csv` or `.json` output is written from the gathered
    frame (CSV cannot take a column found late; a JSON document is one object). A grid
    every configuration of which is skipped is a one-line error (nothing to write)."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise BertscopeError(f"top must be an integer >= 0, got {shown(top)}")
    if sort is not None:
        check_sort(sort)
    path = None if output is None else Path(check_path(output, "output"))
    fmt = None if path is None else output_format(path, fmt)
    if fmt is not None and fmt not in STREAMED:
        grid, pieces = _prepared(models, devices, max_configs, progress, workers, scheduler,
                                 axes)
        result = _gathered(grid, pieces)
        _refuse_empty(result.empty)
        result.export(path, fmt)  # type: ignore[arg-type]
        return SweepSummary(path, result.grid_size, result.evaluated, result.skipped,
                            result.seconds, result.columns, result.varied,
                            result.ranked(sort, top).to_dict(orient="records"),
                            grid_axes(grid))
    if path is not None:
        require_format(fmt)  # type: ignore[arg-type]
    grid, pieces = _prepared(models, devices, max_configs, progress, workers, scheduler, axes)
    t0 = time.perf_counter()
    rank = TopRows(sort, top, ascending=sort in ASCENDING)
    varied = Varied()
    present: list[Category] = []
    evaluated, columns = 0, ()
    with contextlib.ExitStack() as stack:
        rows = None
        if path is not None:
            rows = STREAMED[fmt](stack.enter_context(atomic_path(path)))  # type: ignore[index]
            stack.callback(rows.abort)
        for piece in pieces:
            present = _present(piece.parts, present)
            cols = _columns(piece.parts, pieces.targets, grid, layouts=pieces.layouts,
                            present=present)
            fill = np.nan if piece.multi else 0.0
            if rows is not None:
                rows.write(cols, fill)
            rank.add(cols, fill)
            varied.add(cols)
            evaluated += len(cols["iteration_s"])
            columns = tuple(cols)
        if not evaluated:
            _refuse_empty(f"every configuration of the grid ({grid.size:,}) was skipped "
                          f"({grid.refusal()})")
        if rows is not None:
            rows.close()
    return SweepSummary(path, grid.size, evaluated, grid.size - evaluated,
                        time.perf_counter() - t0, columns, frozenset(varied.columns),
                        rank.records(columns), grid_axes(grid))


def grid_axes(grid: Grid) -> dict[str, list[Any] | None]:
    """The grid's axes as plain values: "models" and "devices" by name, then every axis in
    `Grid.axes`' order (enums by value; None: a model dimension each model keeps)."""
    out: dict[str, list[Any] | None] = {"models": [m.name for m in grid.models],
                                        "devices": [d.device.name for d in grid.devices]}
    for name, values in grid.axes.items():
        out[name] = None if values is None else [
            v.value if isinstance(v, Enum) else v.item() if isinstance(v, np.generic) else v
            for v in values]
    return out


def _refuse_empty(why: str) -> None:
    """An empty sweep is not success: nothing printed, written or recorded."""
    if why:
        raise BertscopeError(f"nothing to evaluate: {why}; change the axes")


PROCESS_CONFIGS = 100_000
"""Configurations (x devices and knob sets) from which a grid of many pieces
(`PROCESS_PIECES` per worker) runs on worker processes rather than threads: many small
pieces spend their time in Python between numpy calls, holding the GIL (a 1M-configuration
grid of 128 groups ran 1.0x faster on two threads than on one; on two processes 2.2x),
while a few large pieces run well on threads (numpy's loops release the GIL) and would pay
for shipping their results back (bench/results/bench_sweep.txt)."""
AHEAD = 4
"""Pieces per local worker submitted ahead of the one being read: what bounds the results
held (a piece is at most `engine.CHUNK` entries) when the reader, writing rows, is slower
than the workers."""
PROCESS_PIECES = 8
"""Pieces per worker from which a large grid runs on processes (see `PROCESS_CONFIGS`)."""


def _evaluate(task: tuple[Group, Any, Any]) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """`engine.evaluate_piece` on one (piece, targets, model sets) task (a pool's unit)."""
    return engine.evaluate_piece(*task)


def _labels(group: Group) -> dict[str, Any]:
    """The group's label columns: model, family and its run config's structural fields
    (enums by their values)."""
    out: dict[str, Any] = {"model": group.model.name, "family": group.model.family.value}
    for f in dataclasses.fields(group.run):
        if f.name not in group.axes:
            value = getattr(group.run, f.name)
            out[f.name] = value.value if isinstance(value, Enum) else value
    return out


MULTI = "_multi"
"""Key marking a multi-device part's columns (`multi.evaluate_group`)."""
LAYOUT_COLUMNS = ("dp", "tp", "pp", "zero", "devices")
"""Layout columns, in a sweep with multi-device points (1, 1, 1, 0, 1 on the others)."""
PART_SHARES = {part: part.removesuffix("_s") + "_share" for part in multi.PARTS}
"""Time parts of a layout and their share columns (compute the whole on one device)."""


def _present(parts: list[Part], known: list[Category] | None = None) -> list[Category]:
    """The categories some part has time in (with those `known` already), in enum order:
    the share columns."""
    have = set(known or ())
    return [c for c in Category if c in have or any(f"cat:{c.value}" in p for _, _, p in parts)]


def _frame(parts: list[Part], targets: list[tuple[DeviceProfile, Knobs]], grid: Grid, *,
           layouts: bool = False) -> pd.DataFrame:
    """One frame from the evaluated pieces (`_columns`, labels as categoricals)."""
    import pandas as pd

    if not parts:
        return pd.DataFrame(columns=["model", "family", *grid.structural, "device",
                                     *grid.num_axes, "iteration_s"])
    return frame_of(_columns(parts, targets, grid, layouts=layouts))


def _columns(parts: list[Part], targets: list[tuple[DeviceProfile, Knobs]], grid: Grid, *,
             layouts: bool = False, present: list[Category] | None = None) -> Columns:
    """The rows of evaluated pieces (at least one) as columns: labels as `Labels`, figures
    as floats; with `layouts`, the layout columns and time-part shares too (multi-device
    points have no per-category or per-bound split: NaN there). `present`: the share
    columns (default: the categories the parts have)."""
    labels = ("model", "family", *grid.structural)
    sizes = np.array([len(c["time_s"]) for _, _, c in parts])
    out: dict[str, Any] = {}
    for col in labels:
        values = [lab[col] for lab, _, _ in parts]
        cats = list(dict.fromkeys(values))
        out[col] = Labels(np.repeat(np.array([cats.index(v) for v in values]), sizes), cats)
    target = np.concatenate([t for _, t, _ in parts])
    names = [p.device.name for p, _ in targets]
    cats = list(dict.fromkeys(names))
    out["device"] = Labels(np.array([cats.index(n) for n in names])[target], cats)
    for a in grid.num_axes:
        values = np.concatenate([c.pop(a) for _, _, c in parts])
        unset = np.isnan(values)
        if not unset.any():
            out[a] = values.astype(np.int64)
        elif not unset.all():  # an optional field (decoder_seq) set for some models only
            out[a] = values
    for k in KNOB_AXES:
        out[k] = np.array([getattr(knobs, k) for _, knobs in targets])[target]

    def cat(key: str, single: float = 0.0, many: float = np.nan) -> np.ndarray:
        """A column of all pieces, each piece's copy dropped as it is taken (one copy of
        the results in memory at a time); a piece without it holds `single` (or `many` in
        a multi-device piece)."""
        return np.concatenate([c.pop(key, None) if key in c else
                               np.full(n, many if MULTI in c else single)
                               for (_, _, c), n in zip(parts, sizes, strict=True)])

    present = _present(parts) if present is None else present
    t = cat("time_s")
    flops, tokens = cat("flops"), cat("tokens")
    out["tokens"] = tokens.astype(np.int64)
    out["params"] = cat("params").astype(np.int64)
    out["flops"] = flops
    out["iteration_s"] = t
    out["tokens_per_s"] = tokens / t
    devices = cat("devices", 1.0) if layouts else 1.0
    out["achieved_flops"] = flops / t / devices  # per device
    out["peak_fraction"] = out["achieved_flops"] / cat("gemm_peak_flops")
    for c in present:
        out[f"share_{c.value}"] = cat(f"cat:{c.value}") / t
    for b in Bound:
        out[f"bound_{b.value}"] = cat(f"bound:{b.value}") / t
    out["memory_bound_share"] = 1.0 - sum((out[f"share_{c.value}"] for c in present
                                           if c.value in _GEMM), np.zeros(len(t)))
    if layouts:  # no category split on multi-device points (even with none present)
        many = np.concatenate([np.full(n, MULTI in c) for (_, _, c), n in
                               zip(parts, sizes, strict=True)])
        out["memory_bound_share"] = np.where(many, np.nan, out["memory_bound_share"])
    out["optimizer_share"] = cat("optimizer_s") / t
    if layouts:
        for key, fill in zip(LAYOUT_COLUMNS, (1, 1, 1, 0, 1), strict=True):
            out[key] = (devices if key == "devices" else cat(key, fill)).astype(np.int64)
        out["tokens_per_s_per_device"] = out["tokens_per_s"] / devices
        on_one = 1.0 - out["optimizer_share"]  # a single device's time is all compute
        for key, name in PART_SHARES.items():
            share = cat(key, np.nan, np.nan) / t
            out[name] = np.where(np.isnan(share), on_one if key == "compute_s" else 0.0,
                                 share)
    out["memory_bytes"] = cat("memory_bytes")
    out["fits"] = out["memory_bytes"] <= cat("capacity_bytes")
    return out


class _CallablePackage(types.ModuleType):
    """This package, callable as `sweep()`: `bertscope.sweep` names both the package and the
    public function, and the import system rebinds the attribute to the package once it is
    imported, so `import bertscope; bertscope.sweep(...)` works either way."""

    def __call__(self, *args: Any, **kwargs: Any) -> SweepResult:
        """`sweep(*args, **kwargs)`."""
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = ["ASCENDING", "BYTES_PER_CONFIG", "MAX_CONFIGS", "METRIC_COLUMNS", "STREAMED", "Grid",
           "SweepResult", "SweepSummary", "check_sort", "grid_axes", "label_columns",
           "make_grid", "numeric_columns", "sweep", "sweep_to"]
