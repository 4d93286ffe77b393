"""Typed facts an op table carries beside its rows: where the rows came from (`Provenance`),
and what each producer or consumer adds (a prediction's totals, a trace's summary, a
profiler run's facts, the memory estimate; their classes live with the code that makes
them). A record is a frozen dataclass; code reads its fields (`Prediction.of(table)
.time_s`), never string keys.

Dicts appear in two places only: `Record.to_dict` (export: the top-level JSON meta entries
the record owns, `KEYS`, as commands have always written them) and `records_from_dict` (load:
saved JSON meta back into records, through each class's `from_dict`). Entries no record
class claims are kept as they are in `Extra`, so a table read and written again keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

from bertscope.errors import BertscopeError

if TYPE_CHECKING:
    from bertscope.optable.table import OpTable

_REGISTRY: dict[str, type[Record]] = {}
"""Record class per top-level key it owns (filled as record classes are defined)."""


class Record:
    """Base of a table's typed facts. A subclass is a frozen dataclass that names the
    top-level JSON meta keys it owns (`KEYS`) and turns itself into those entries
    (`to_dict`) and back (`from_dict`)."""

    __slots__ = ()
    KEYS: ClassVar[tuple[str, ...]] = ()
    """The top-level keys of the exported meta this record writes (and reads back)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for key in cls.__dict__.get("KEYS", ()):
            _REGISTRY[key] = cls

    def to_dict(self) -> dict[str, Any]:
        """The record's top-level meta entries, as exports write them."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """The record from its top-level meta entries (those of `KEYS` the meta has)."""
        raise NotImplementedError

    @classmethod
    def on(cls, table: OpTable) -> Self | None:
        """This kind of record on `table`, or None."""
        for r in table.records:
            if isinstance(r, cls):
                return r
        return None

    @classmethod
    def of(cls, table: OpTable) -> Self:
        """This kind of record on `table` (a one-line error when it has none)."""
        r = cls.on(table)
        if r is None:
            raise BertscopeError(f"this op table has no {cls.__name__} ({cls.__doc__ or ''}"
                                 .split(".")[0].rstrip() + ")")
        return r


@dataclass(frozen=True, slots=True)
class Provenance(Record):
    """Which producer wrote the rows, and the model's parameter count where it knows it."""

    KEYS: ClassVar[tuple[str, ...]] = ("producer", "params")
    producer: str
    """"analytic", "profile", "trace"."""
    params: int | None = None
    """Unique trainable parameters (analytic and profiled tables)."""

    def to_dict(self) -> dict[str, Any]:
        """{"producer": ..., "params": ...} (params left out when unknown)."""
        out: dict[str, Any] = {"producer": self.producer}
        if self.params is not None:
            out["params"] = self.params
        return out

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """From "producer" and "params"."""
        params = entries.get("params")
        return cls(producer=str(entries.get("producer", "")),
                   params=int(params) if params is not None else None)


@dataclass(frozen=True, slots=True)
class Extra(Record):
    """Saved meta entries no record class claims, kept as read so they are written again."""

    entries: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The entries as read."""
        return dict(self.entries)

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """The entries as they are."""
        return cls(dict(entries))


@dataclass(frozen=True, slots=True)
class ProfileFacts(Record):
    """What a profiled run measured beside its rows (`bertscope profile`, each DDP rank, a
    saved result read back): the iteration's times, the run's setting and its health. Fields
    a result did not save (older results) are None. Exported at the top level of the meta,
    in this order."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "device", "torch", "threads", "hf", "iters", "warmup", "settling_iterations",
        "page_faults", "partial", "trace_error", "statistic", "host_allocator", "iteration_s",
        "iteration_times_s", "row_times_s", "gap_times_s", "tokens_per_s", "op_time_s",
        "unattributed_s", "unattributed_share", "framework_share", "rounds",
        "fresh_process", "unprofiled_iteration_s", "unprofiled_iteration_times_s",
        "load_average", "steal_share", "cpus")
    device: str | None = None
    """"cpu" or the GPU's name."""
    torch: str | None = None
    """torch's version."""
    threads: int | None = None
    hf: bool | None = None
    """Whether the Hugging Face model ran (else the reference model)."""
    iters: int | None = None
    """Measured iterations completed."""
    warmup: int | None = None
    settling_iterations: int | None = None
    page_faults: tuple[int | None, ...] | None = None
    """Pages faulted in per measured iteration (None entries where not counted)."""
    partial: bool | None = None
    """Interrupted: fewer iterations than asked for were measured."""
    trace_error: str | None = None
    """Why the trace file was not written (the measurement is kept)."""
    statistic: str | None = None
    """How rows and iteration were taken over the iterations (mean, median, min)."""
    host_allocator: str | None = None
    iteration_s: float | None = None
    iteration_times_s: tuple[float, ...] | None = None
    row_times_s: tuple[tuple[float, ...], ...] | None = None
    """Per row (table order), per iteration."""
    gap_times_s: tuple[float, ...] | None = None
    """Per iteration: its time minus its rows'."""
    tokens_per_s: float | None = None
    op_time_s: float | None = None
    unattributed_s: float | None = None
    unattributed_share: float | None = None
    """Share of op time no layer or sublayer claimed."""
    framework_share: float | None = None
    """Profiled iteration time not covered by any op (Python, hooks, the profiler)."""
    rounds: int | None = None
    """Measurements combined into this one (`studies.validate.combine_rounds`)."""
    fresh_process: bool | None = None
    """Measured in a fresh process (`studies.fresh`)."""
    unprofiled_iteration_s: float | None = None
    """The iteration's wall time without the profiler: the statistic over the warm-up
    iterations after the first (each timed to its end, the device synchronized). On a GPU the
    profiler's per-op host cost can dominate a profiled eager iteration; this is the time a
    prediction of the job should match. None with fewer than two warm-up iterations."""
    unprofiled_iteration_times_s: tuple[float, ...] | None = None
    """The warm-up iterations after the first, each timed (seconds)."""
    load_average: float | None = None
    """The machine's 1-minute load average as the measured iterations ended
    (`measure.host_load`; ours included)."""
    steal_share: float | None = None
    """Share of CPU time the hypervisor stole during the measured iterations."""
    cpus: int | None = None
    """CPUs the measuring process could run on (the load average's scale)."""

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (a result read back writes the keys it had), lists as
        lists."""
        out: dict[str, Any] = {}
        for key in self.KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            if key == "row_times_s" and value is not None:
                value = [list(v) for v in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[key] = value
        return out

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """From the saved top-level entries (lists become tuples)."""
        kw: dict[str, Any] = {}
        for key, value in entries.items():
            if key == "row_times_s" and value is not None:
                value = tuple(tuple(v) for v in value)
            elif isinstance(value, list):
                value = tuple(value)
            kw[key] = value
        return cls(**kw)


def records_from_dict(meta: Mapping[str, Any], *, skip: Iterable[str] = ()) -> tuple[Record, ...]:
    """Saved JSON meta as records (the one place meta dicts are read): each registered
    record class from the keys it owns, in the order the meta has them; other keys (but
    `skip`) in one `Extra` at the place of the first."""
    skipped = set(skip)
    groups: dict[type[Record], dict[str, Any]] = {}
    for key, value in meta.items():
        if key in skipped:
            continue
        groups.setdefault(_REGISTRY.get(key, Extra), {})[key] = value
    try:
        return tuple(kind.from_dict(entries) for kind, entries in groups.items())
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise BertscopeError(f"meta: not as bertscope writes it ({type(e).__name__}: {e})"
                             ) from None


def records_to_dict(records: Iterable[Record]) -> dict[str, Any]:
    """Records as JSON meta (the one place meta dicts are written): their entries in order."""
    out: dict[str, Any] = {}
    for r in records:
        out.update(r.to_dict())
    return out


def replace_records(records: Iterable[Record], *new: Record) -> tuple[Record, ...]:
    """`records` with each of `new` put in place of the record of its class (appended when
    there is none)."""
    out = list(records)
    for r in new:
        at = next((i for i, old in enumerate(out) if type(old) is type(r)), None)
        if at is None:
            out.append(r)
        else:
            out[at] = r
    return tuple(out)


__all__ = ["Extra", "ProfileFacts", "Provenance", "Record", "records_from_dict", "records_to_dict",
           "replace_records"]
