"""The job: one training job declared once — the model, the run (one iteration's settings) and
the parallel layout — checked once on construction and passed whole to every producer and
consumer (the analytic model, the profiler, the performance and distributed models, sweeps).

    >>> from bertscope.config import RunConfig
    >>> from bertscope.presets import get_model
    >>> job = Job(model=get_model("bert-large"), run=RunConfig(batch=8, seq=512,
    ...           precision="bf16", checkpoint="selective", micro_batches=4),
    ...           layout=Layout(dp=64, tp=4))
    >>> job.global_batch                       # 8 sequences x 4 micro-batches x 64 replicas
    2048

Sections as torchtitan's JobConfig has them: `ModelConfig` (sizes and family), `RunConfig`
(batch, sequence, precision, optimizer, attention, dropout, recomputation, micro-batches,
fusion: what one device runs per step) and `Layout` (how the job is spread: data, tensor and
pipeline parallelism, ZeRO, sequence parallelism, pipeline schedule). Micro-batches and
activation recomputation live in the run only (one place each); a layout says nothing about
them. Every field carries its help text (`config.setting`), from which the command line and
the sweep axes are generated.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import IntEnum, StrEnum
from numbers import Integral
from typing import Any

from bertscope.config import ModelConfig, RunConfig, as_run, config_dict, from_dict, setting
from bertscope.errors import (
    BertscopeError,
    check_positive_ints,
    is_positive_int,
    parse_enum,
    shown,
)
from bertscope.recipes import Recipe, load, origin


class ZeroStage(IntEnum):
    """ZeRO partitioning across data-parallel devices (Rajbhandari et al. 2020)."""

    NONE = 0
    """Plain data parallelism (PyTorch DDP): everything replicated."""
    OPTIMIZER = 1
    """P_os: optimizer states partitioned."""
    GRADIENTS = 2
    """P_os+g: optimizer states and gradients partitioned."""
    PARAMETERS = 3
    """P_os+g+p: parameters too (gathered layer by layer when used)."""


def zero_stage(stage: ZeroStage | int) -> ZeroStage:
    """The ZeRO stage `stage` names (0-3), or a one-line error."""
    try:
        return ZeroStage(int(stage))
    except (ValueError, TypeError):
        raise BertscopeError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}") from None


class Schedule(StrEnum):
    """Pipeline schedule."""

    GPIPE = "gpipe"
    """All forwards, then all backwards (Huang et al. 2019): keeps m micro-batches' activations."""
    ONE_F_ONE_B = "1f1b"
    """One forward, one backward (PipeDream-Flush): the same bubble, at most p in flight."""
    INTERLEAVED = "interleaved"
    """1F1B over v model chunks per device (Narayanan et al. 2021): bubble divided by v."""

    @property
    def code(self) -> int:
        """The schedule's integer code in arrays of layouts (its declaration order: 0 gpipe,
        1 1f1b, 2 interleaved)."""
        return list(Schedule).index(self)


_SIZES = ("dp", "tp", "pp", "virtual_stages")
_FLAGS = ("sequence_parallel", "overlap_tp_comm", "overlap_grad_reduce", "overlap_param_gather")


@dataclass(kw_only=True, frozen=True, slots=True)
class Layout:
    """How a training job is spread over devices. Raises `BertscopeError` when inconsistent."""

    dp: int = setting(1, "Data-parallel replicas.")
    """Data-parallel replicas."""
    tp: int = setting(1, "Tensor-parallel ranks (Megatron-style split of every layer).")
    """Tensor-parallel ranks (Megatron-style split of every layer)."""
    pp: int = setting(1, "Pipeline stages.")
    """Pipeline stages."""
    zero: ZeroStage = setting(ZeroStage.NONE, "ZeRO stage 0-3 across the data-parallel "
                                              "replicas.")
    """ZeRO stage 0-3 across the data-parallel replicas."""
    sequence_parallel: bool = setting(False, "Sequence parallelism: split layernorm, dropout "
                                             "and residual work along the sequence (needs "
                                             "tp > 1).", flag="sp")
    """Split layernorm/dropout/residual work and activations along the sequence (needs tp > 1)."""
    schedule: Schedule = setting(Schedule.ONE_F_ONE_B, "Pipeline schedule (no effect with "
                                                       "pp = 1).")
    """Pipeline schedule (no effect with pp = 1)."""
    virtual_stages: int = setting(1, "Model chunks per device for the interleaved schedule "
                                     "(>= 2 there, 1 otherwise).")
    """Model chunks per device for the interleaved schedule (>= 2 there, 1 otherwise)."""
    overlap_tp_comm: bool = setting(False, "Overlap tensor-parallel communication with the "
                                           "adjacent GEMMs (Transformer Engine userbuffers: "
                                           "all-gather / reduce-scatter pipelined with the "
                                           "GEMM they feed or drain, which needs --sp; the "
                                           "backward data-gradient collective behind the "
                                           "weight-gradient GEMM). No effect with tp = 1.")
    """Overlap TP collectives with the adjacent GEMMs (`parallel.overlap`); no effect at tp 1."""
    overlap_grad_reduce: bool = setting(False, "Megatron's --overlap-grad-reduce: gradient "
                                               "buckets of max(40M, 1M x dp) parameters "
                                               "reduced behind the last micro-batch's "
                                               "backward and each pipeline stage's cool-down "
                                               "(off: PyTorch DDP's 25 MiB buckets behind the "
                                               "last backward). No effect with dp = 1.")
    """Megatron's overlapped gradient reduce (`parallel.overlap`); no effect at dp 1."""
    overlap_param_gather: bool = setting(False, "Megatron's --overlap-param-gather with the "
                                                "distributed optimizer (ZeRO 1): the updated "
                                                "parameters' all-gather bucket by bucket "
                                                "behind the next forward (the first bucket "
                                                "exposed). No effect without ZeRO 1.")
    """All-gather of the updated parameters behind the next forward (ZeRO 1 only)."""

    def __post_init__(self) -> None:
        for f in _SIZES:  # numpy integers (a search frame's rows) become ints
            value = getattr(self, f)
            if isinstance(value, Integral) and not isinstance(value, bool):
                object.__setattr__(self, f, int(value))
        check_positive_ints(self, _SIZES, "layout: ")
        object.__setattr__(self, "zero", zero_stage(self.zero))
        object.__setattr__(self, "schedule", parse_enum(Schedule, self.schedule, "schedule"))
        for f in _FLAGS:
            flag = getattr(self, f)
            if not isinstance(flag, bool):  # a numpy bool (a search frame's row) as bool;
                if (getattr(flag, "dtype", None) is None or flag.dtype.kind != "b"
                        or flag.shape != ()):  # never a truthy string taken as on
                    raise BertscopeError(f"{f} must be true or false (a bool), got "
                                         f"{shown(flag)}")
                object.__setattr__(self, f, bool(flag))
        if self.sequence_parallel and self.tp == 1:
            raise BertscopeError("sequence parallelism splits tensor-parallel regions: it needs "
                                 "tp > 1")
        if self.schedule is Schedule.INTERLEAVED:
            if self.pp == 1:
                raise BertscopeError("the interleaved schedule needs pp > 1")
            if self.virtual_stages < 2:
                raise BertscopeError("the interleaved schedule needs virtual_stages >= 2")
        elif self.virtual_stages != 1:
            raise BertscopeError(f"virtual_stages {self.virtual_stages} needs the interleaved "
                                 f"schedule")
        if self.zero >= ZeroStage.GRADIENTS and self.pp > 1:
            raise BertscopeError("ZeRO-2/3 partition gradients every micro-batch, which "
                                 "pipeline parallelism does not support (DeepSpeed); use "
                                 "ZeRO 0 or 1 with pp > 1")

    @classmethod
    def fill(cls, devices: int, *, dp: int | None = None, tp: int | None = None,
             pp: int | None = None, zero: ZeroStage | int | None = None,
             sequence_parallel: bool | None = None, schedule: Schedule | str | None = None,
             virtual_stages: int | None = None, overlap_tp_comm: bool | None = None,
             overlap_grad_reduce: bool | None = None,
             overlap_param_gather: bool | None = None) -> Layout:
        """The layout on `devices` devices with the unpinned dimensions (None) filled in:
        tp = pp = 1, dp = devices / (tp x pp), ZeRO 0, no sequence parallelism, 1F1B, 2
        virtual stages for the interleaved schedule, no communication overlap."""
        t = 1 if tp is None else tp
        p = 1 if pp is None else pp
        if dp is None:
            if not (is_positive_int(t) and is_positive_int(p)):
                dp = 1  # the layout's own checks below refuse the bad tp or pp
            elif devices % (t * p):
                raise BertscopeError(f"tp x pp = {t * p} does not divide {devices} devices; "
                                     f"give --tp/--pp that do, or --dp")
            else:
                dp = devices // (t * p)
        sched = parse_enum(Schedule, schedule or Schedule.ONE_F_ONE_B, "schedule")
        v = virtual_stages if virtual_stages is not None else (
            2 if sched is Schedule.INTERLEAVED else 1)
        return cls(dp=dp, tp=t, pp=p, zero=zero_stage(0 if zero is None else zero),
                   sequence_parallel=False if sequence_parallel is None else sequence_parallel,
                   schedule=sched,
                   virtual_stages=v,
                   overlap_tp_comm=False if overlap_tp_comm is None else overlap_tp_comm,
                   overlap_grad_reduce=False if overlap_grad_reduce is None
                   else overlap_grad_reduce,
                   overlap_param_gather=False if overlap_param_gather is None
                   else overlap_param_gather)

    @property
    def devices(self) -> int:
        """dp x tp x pp."""
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        """A short description, e.g. "dp8 tp4 sp pp2 1f1b zero1" ("dp8 tp4 sp pp2 1f1b
        overlap-tp+grad zero1" with communication overlap)."""
        parts = [f"dp{self.dp}", f"tp{self.tp}" + (" sp" if self.sequence_parallel else ""),
                 f"pp{self.pp}"]
        if self.pp > 1:
            parts.append(self.schedule.value + (f" v{self.virtual_stages}"
                                                if self.virtual_stages > 1 else ""))
        marks = [m for m, on in (("tp", self.overlap_tp_comm), ("grad", self.overlap_grad_reduce),
                                 ("param", self.overlap_param_gather)) if on]
        if marks:  # only when asked for: labels of layouts without overlap read as before
            parts.append("overlap-" + "+".join(marks))
        parts.append(f"zero{int(self.zero)}")  # last: `Job.label` puts its parts before it
        return " ".join(parts)


SINGLE_DEVICE = Layout()
"""One device: no data, tensor or pipeline parallelism."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Job:
    """A model, the run that trains it and how it is spread over devices: the triple every op
    table and prediction describes, checked once here (the sequence fits the model's
    positions; tensor parallelism divides heads and feed-forward; pipeline stages divide the
    layers; the interleaved schedule's micro-batches are a multiple of pp), then carried typed
    (`OpTable.job`)."""

    model: ModelConfig
    """The model's sizes and family."""
    run: RunConfig
    """One device's iteration settings: micro-batch size, micro-batches per step,
    recomputation, precision, attention, fusion."""
    layout: Layout = SINGLE_DEVICE
    """How the job is spread over devices (one device by default)."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig) or not isinstance(self.run, RunConfig):
            raise BertscopeError(f"Job needs a ModelConfig and a RunConfig, got "
                                 f"{type(self.model).__name__} and {type(self.run).__name__}")
        if not isinstance(self.layout, Layout):
            raise BertscopeError(f"Job's layout must be a Layout, got "
                                 f"{type(self.layout).__name__}")
        self.run.check(self.model)
        m, lay = self.model, self.layout
        for what, size in (("heads", m.heads), ("intermediate size", m.intermediate)):
            if size % lay.tp:
                raise BertscopeError(f"tp {lay.tp} does not divide {m.name}'s {size} {what}")
        chunks = lay.pp * lay.virtual_stages
        if m.stack_layers % chunks:
            raise BertscopeError(f"{m.stack_layers} layers do not split into pp x virtual "
                                 f"stages = {chunks} equal stages")
        if lay.schedule is Schedule.INTERLEAVED and self.run.micro_batches % lay.pp:
            raise BertscopeError(f"the interleaved schedule needs micro-batches "
                                 f"({self.run.micro_batches}) to be a multiple of pp "
                                 f"({lay.pp})")

    @classmethod
    def build(cls, model: ModelConfig, run: RunConfig | Mapping[str, Any] | None = None,
              layout: Mapping[str, Any] | None = None, devices: int | None = None) -> Job:
        """The job of `model` with `run` (a `RunConfig`, or a dict of its fields: those left
        out, or None, take the run's recipe's defaults) spread as `layout` says (a dict of
        `Layout` fields; None or left out: unpinned) over `devices` devices (default: the
        pinned dp x tp x pp). Unpinned layout fields take the recipe's defaults where they
        apply (`with_recipe_layout`), the rest `Layout.fill`'s.

            >>> from bertscope.presets import get_model
            >>> job = Job.build(get_model("gpt2-medium"), {"recipe": "megatron", "batch": 4,
            ...                 "micro_batches": 8}, {"tp": 4, "pp": 2}, devices=64)
            >>> job.layout.label(), job.run.attention.value
            ('dp8 tp4 sp pp2 interleaved v2 zero1', 'sdpa')
        """
        r = as_run(run)
        pinned = _pinned(layout)
        if devices is None:
            devices = 1
            for key in ("dp", "tp", "pp"):
                devices *= pinned.get(key, 1)
        job = cls(model=model, run=r, layout=_filled(devices, pinned))
        return with_recipe_layout(job, pinned)

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over every replica: batch x micro-batches x dp."""
        return self.run.batch * self.run.micro_batches * self.layout.dp

    @property
    def devices(self) -> int:
        """Devices the job runs on (dp x tp x pp)."""
        return self.layout.devices

    def label(self) -> str:
        """The layout with the run's micro-batches and recomputation, e.g.
        "dp8 tp4 sp pp2 1f1b m16 zero1 selective"."""
        *spread, zero = self.layout.label().split(" ")
        return " ".join([*spread, f"m{self.run.micro_batches}", zero,
                         self.run.checkpoint.value])

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """{"model": ..., "run": ..., "layout": ...} with enums as their values (JSON-ready);
        the layout is left out on one device, so single-device records read as before."""
        out = {"model": config_dict(self.model), "run": config_dict(self.run)}
        if self.layout != SINGLE_DEVICE:
            out["layout"] = config_dict(self.layout)
        return out

    @classmethod
    def from_dict(cls, doc: Any, origin: str = "job") -> Job:
        """The job `as_dict` wrote (e.g. a saved result's meta), validated again."""
        if not isinstance(doc, dict):
            raise BertscopeError(f"{origin}: expected an object with model and run, got "
                                 f"{type(doc).__name__}")
        layout, run = doc.get("layout"), doc.get("run")
        if isinstance(run, dict) and "checkpointing" in run:  # written before `checkpoint`
            run = {k: v for k, v in run.items() if k != "checkpointing"}
            run.setdefault("checkpoint", "full" if doc["run"]["checkpointing"] else "none")
        return cls(model=from_dict(ModelConfig, doc.get("model"), f"{origin}: model"),
                   run=from_dict(RunConfig, run, f"{origin}: run"),
                   layout=SINGLE_DEVICE if layout is None
                   else from_dict(Layout, layout, f"{origin}: layout"))


def layout_fields() -> tuple[str, ...]:
    """The layout's field names, in declaration order."""
    return tuple(f.name for f in fields(Layout))


# -- recipes: layout defaults --------------------------------------------------------------
@functools.cache
def recipe_layout(recipe: Recipe) -> dict[str, Any]:
    """The [layout] defaults of `recipe`'s file (`recipes`), in the file's order, each key a
    `Layout` field and each value of its type (one-line errors naming the file and key)."""
    table = load(recipe)["layout"]
    names = layout_fields()
    hints = typing.get_type_hints(Layout)
    out: dict[str, Any] = {}
    for key, value in table.items():
        where = origin(recipe, "layout", key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise BertscopeError(f"{where}: not a layout field{hint}; fields: "
                                 f"{', '.join(names)}")
        kind = hints[key]
        try:
            if kind is bool and not isinstance(value, bool):
                raise BertscopeError(f"must be true or false, got {shown(value)}")
            if kind is int and not is_positive_int(value):
                raise BertscopeError(f"must be a positive integer, got {shown(value)}")
            if kind in (bool, int):
                out[key] = value
            elif kind is ZeroStage:
                if isinstance(value, bool):
                    raise BertscopeError(f"must be 0, 1, 2 or 3, got {shown(value)}")
                out[key] = zero_stage(value)
            else:
                out[key] = parse_enum(kind, value, key)
        except BertscopeError as e:
            raise BertscopeError(f"{where}: {e}") from None
    return out


def with_recipe_layout(job: Job, pinned: Mapping[str, Any] | None = None) -> Job:
    """`job` with its run's recipe's layout defaults on the layout fields not in `pinned`
    (the fields the user gave; None values count as not given), each one kept only where it
    applies: the job with it still checks (sequence parallelism needs tp > 1; the interleaved
    schedule pp > 1, layers that split into pp x 2 chunks and micro-batches a multiple of pp)
    and it has an effect there (`_EFFECT`: ZeRO and the data-parallel overlaps need dp > 1,
    the tensor-parallel overlap tp > 1). A pinned field that does not apply is the job's own
    error, raised where it was made."""
    given = _pinned(pinned)
    # the given fields and the sizes as the job has them (fill's choice of dp)
    chosen = {k: getattr(job.layout, k) for k in {*given, "dp", "tp", "pp"}}
    out = job
    for key, value in recipe_layout(job.run.recipe).items():
        if key in given:
            continue
        try:
            candidate = Job(model=job.model, run=job.run,
                            layout=_filled(job.devices, {**chosen, key: value}))
        except BertscopeError:
            continue  # does not apply to this job: skipped
        if key in _EFFECT and not _EFFECT[key](candidate.layout):
            continue  # no effect on this layout: left at its default
        chosen[key] = value
        out = candidate
    return out


_EFFECT: dict[str, Any] = {
    "zero": lambda lay: lay.dp > 1,  # one replica: nothing to partition
    "overlap_tp_comm": lambda lay: lay.tp > 1,
    "overlap_grad_reduce": lambda lay: lay.dp > 1,
    "overlap_param_gather": lambda lay: lay.dp > 1 and lay.zero is ZeroStage.OPTIMIZER,
}
"""Where a layout field set to a recipe's value changes anything (its help says "no effect"
elsewhere): a recipe default is applied only there, so a layout it does not concern reads as
before (`with_recipe_layout`)."""


def _pinned(layout: Mapping[str, Any] | None) -> dict[str, Any]:
    """The layout fields given (not None), each checked to be a `Layout` field."""
    if layout is None:
        return {}
    if not isinstance(layout, Mapping):
        raise BertscopeError(f"layout: expected a dict of Layout fields, got "
                             f"{type(layout).__name__}")
    names = layout_fields()
    unknown = [k for k in layout if k not in names]
    if unknown:
        raise BertscopeError(f"layout: no field {shown(unknown[0])}; fields: "
                             f"{', '.join(names)}")
    return {k: v for k, v in layout.items() if v is not None}


_FILL = tuple(p for p in inspect.signature(Layout.fill).parameters if p not in ("cls",
                                                                             "devices"))
"""The layout fields `Layout.fill` completes (the others are set after it)."""


def _filled(devices: int, values: Mapping[str, Any]) -> Layout:
    """`Layout.fill(devices, ...)` of the fields it takes, the other given fields set on it."""
    lay = Layout.fill(devices, **{k: v for k, v in values.items() if k in _FILL})
    rest = {k: v for k, v in values.items() if k not in _FILL}
    return replace(lay, **rest) if rest else lay


__all__ = ["SINGLE_DEVICE", "Job", "Layout", "Schedule", "ZeroStage", "layout_fields",
           "recipe_layout", "with_recipe_layout", "zero_stage"]
