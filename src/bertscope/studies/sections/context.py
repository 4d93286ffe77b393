"""What every study section shares: the phases, the `Section` a section returns, the
`Ctx` (settings plus cached tables and predictions) and the helpers findings are written
with.

Every sentence of a section is built from the section's own tables: the numbers in it and
the direction it states ("rises", "falls", which device) are read from the data, and a
claim that fails for some device names that device instead of hiding it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from bertscope.analytic import build
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import OpTable
from bertscope.perf import DeviceProfile, fuse, predict, run_format, study_format
from bertscope.taxonomy import Category, Sublayer

GEMM = {c.value for c in Category if c.is_gemm}
MEMORY_BOUND_AT = 0.2
"""A device "is memory-bound" for a configuration when at least this share of the predicted
iteration is in ops bound by memory bandwidth."""


@dataclass(frozen=True)
class PhaseSpec:
    """A BERT pretraining phase: sequence length and per-device micro-batch."""

    name: str
    seq: int
    batch: int


@dataclass
class Section:
    """One section of the report."""

    key: str
    title: str
    findings: list[str]
    tables: dict[str, pd.DataFrame]
    figure: str
    """Which renderer of `report.study_figures` draws it."""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MeasuredPart:
    """A measured run the study shows beside its predictions (a profile on this machine, or
    an ingested trace)."""

    label: str
    """Where it ran, as the tables name the device ("this machine (cpu)", "trace x.json")."""
    model: str
    phase: str
    precision: str
    table: OpTable
    """The measured op table."""
    note: str
    """How it was measured, in words."""
    iteration_s: float | None = None
    """The measured iteration (None for a trace)."""


@dataclass
class Ctx:
    """The study's settings and its cached tables and predictions."""

    models: list[ModelConfig]
    devices: list[DeviceProfile]
    precisions: list[Precision]
    phases: list[PhaseSpec]
    optimizer: Optimizer = Optimizer.LAMB
    measured: list[MeasuredPart] = field(default_factory=list)
    """The measured parts."""
    _tables: dict[tuple[Any, ...], OpTable] = field(default_factory=dict)
    _preds: dict[tuple[Any, ...], OpTable] = field(default_factory=dict)

    def run(self, phase: PhaseSpec, precision: Precision, **kw: Any) -> RunConfig:
        """The run of a phase in a precision."""
        kw = {"batch": phase.batch, "seq": phase.seq, "optimizer": self.optimizer, **kw}
        return RunConfig(precision=precision, **kw)

    def on(self, dev: DeviceProfile, precision: Precision) -> Precision | None:
        """The precision column `precision` runs on `dev` (`perf.study_format`: a 16-bit
        column is fp16 where the device has no bf16, unless both are studied); None: the
        device cannot run it."""
        fmt = study_format(dev.device, precision)
        sixteen = {Precision.BF16, Precision.FP16}
        if fmt is not precision and sixteen <= set(self.precisions):
            return None  # bf16 and fp16 both studied: each column runs its own format only
        return fmt

    def label(self, precision: Precision) -> str:
        """A precision column's name in tables and findings: its own name where every
        device that runs it runs that format, else "16-bit" (a bf16 column with fp16 on a
        V100: the tables' "format" column says which ran where)."""
        ran = {self.on(d, precision) for d in self.devices} - {None}
        return precision.value if ran <= {precision} else "16-bit"

    def check(self) -> None:
        """Refuse, in one line and before any work, a device that runs none of the precision
        columns and a column that no device runs (either would leave tables empty)."""
        names = ", ".join(p.value for p in self.precisions)
        for d in self.devices:
            if all(self.on(d, p) is None for p in self.precisions):
                have = ", ".join(f.value for f in d.device.formats)
                raise BertscopeError(f"{d.device.name} runs none of the studied precisions "
                                     f"({names}; it has {have}): drop it from --device or "
                                     f"add a format it has to --precision")
        for p in self.precisions:
            if not self.running(p):
                raise BertscopeError(f"no studied device runs {p.value} (the devices: "
                                     f"{', '.join(d.device.name for d in self.devices)}): "
                                     f"drop it from --precision")

    def running(self, precision: Precision) -> list[DeviceProfile]:
        """The studied devices that can run column `precision` (the rest are skipped)."""
        return [d for d in self.devices if self.on(d, precision) is not None]

    @property
    def skipped(self) -> list[str]:
        """One note per device and precision column the study skips, and per 16-bit column
        the devices that run a different format than named."""
        return [n for prec in self.precisions for n in self.skipped_in(prec)]

    def skipped_in(self, prec: Precision) -> list[str]:
        """`skipped`'s notes for the precision column `prec` alone."""
        notes = []
        for d in self.devices:
            fmt = self.on(d, prec)
            if fmt is None:
                have = ", ".join(f.value for f in d.device.formats)
                notes.append(f"{d.device.name}: no {prec.value} (it has {have}); its "
                             f"{self.label(prec)} column is skipped")
            elif fmt is not prec:
                notes.append(f"{d.device.name}: its {self.label(prec)} column runs "
                             f"{fmt.value} (no {prec.value})")
        return notes

    def sweep(self, sweep_fn: Any, models: list[ModelConfig], devices: list[DeviceProfile],
              precisions: list[Precision], **axes: Any) -> pd.DataFrame:
        """`sweep_fn` over `devices` with each precision column run in each device's own
        format (one sweep per format); the frame's "precision" is the column's label and
        "format" the format that ran. Devices that cannot run a column are left out."""
        parts = []
        for prec in precisions:
            by: dict[Precision, list[DeviceProfile]] = {}
            for d in devices:
                fmt = self.on(d, prec)
                if fmt is not None:
                    by.setdefault(fmt, []).append(d)
            for fmt, devs in by.items():
                frame = sweep_fn(models, devs, precision=[fmt.value], **axes).frame.copy()
                frame["precision"] = self.label(prec)
                frame["format"] = fmt.value
                parts.append(frame)
        if not parts:
            return pd.DataFrame()
        names = [d.device.name for d in devices]
        df = pd.concat(parts, ignore_index=True)
        order = {n: i for i, n in enumerate(names)}
        return df.sort_values("device", key=lambda c: c.astype(str).map(order),
                              kind="stable").reset_index(drop=True)

    def table(self, m: ModelConfig, run: RunConfig) -> OpTable:
        """The analytic op table (cached); for a run that fuses (`RunConfig.fusion`, a
        recipe's default), as fused kernels run it (`perf.fuse`), as `ops` and `predict`
        show it."""
        key = (m, run)
        if key not in self._tables:
            table = build(m, run)
            self._tables[key] = fuse(table) if run.fusion else table
        return self._tables[key]

    def pred(self, m: ModelConfig, run: RunConfig, dev: DeviceProfile) -> OpTable:
        """The prediction on a device (cached), in the format the device runs for the run's
        precision column (`on`); a device that cannot run it raises (`perf.run_format`)."""
        fmt = self.on(dev, run.precision)
        if fmt is None:
            run_format(dev.device, run.precision)  # raises, naming the formats it has
        run = replace(run, precision=fmt)
        key = (m, run, dev.device.name, id(dev))
        if key not in self._preds:
            self._preds[key] = predict(self.table(m, run), dev)
        return self._preds[key]

    @property
    def big(self) -> ModelConfig:
        """The largest model studied."""
        return max(self.models, key=lambda m: m.hidden * m.num_layers)

    @property
    def low(self) -> Precision:
        """The narrowest precision studied (the one fast training uses)."""
        return self.precisions[-1]


def pct(x: float) -> str:
    """A share as a percentage for a sentence."""
    if abs(x) >= 0.1:
        return f"{100 * x:.0f}%"
    return f"{100 * x:.1f}%" if abs(x) >= 0.001 or x == 0 else f"{100 * x:.2g}%"


def shares(t: OpTable, by: str) -> pd.Series:
    """Each value of column `by` (or "group": sublayer groups) as a share of the predicted
    time."""
    df = t.df
    key = (df["sublayer"].map(lambda s: Sublayer(s).group.value) if by == "group"
           else df[by].astype(str))
    s = df.groupby(key, observed=True)["time_s"].sum()
    return s / s.sum()


__all__ = ["GEMM", "MEMORY_BOUND_AT", "Ctx", "MeasuredPart", "PhaseSpec", "Section", "pct",
           "shares"]
