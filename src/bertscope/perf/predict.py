"""Predicted time of every op-table row on a device: the roofline refined by efficiency models.

For each row (all its `count` executions together):

    compute_s  = flops / (peak x gemm.fraction)      GEMM rows (tensor units, run precision)
               = flops / fp32 peak                   other rows (vector units)
    memory_s   = bytes moved / (bandwidth x bandwidth.fraction)
    overhead_s = overhead.seconds                     count x seconds per launch by default
    host_s     = overhead.host_seconds                host work between ops nothing overlaps
    time_s     = max(compute_s, memory_s, overhead_s) + host_s
    bound      = the largest of compute_s, memory_s and overhead_s + host_s

Because every fraction is at most 1, time_s >= roofline_s = max(flops / peak,
bytes / bandwidth); because no model reads the device's peaks, a faster chip never predicts
slower. Rows run one after another (a single stream, as eager PyTorch), so the iteration's
time is the sum of the rows' times.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from bertscope.config import Precision
from bertscope.errors import BertscopeError, shown
from bertscope.hardware import Device, NumberFormat
from bertscope.optable import (
    Columns,
    Grouped,
    OpTable,
    Record,
    group_first_max,
    group_rows,
    group_sum,
    stable_largest,
)
from bertscope.perf.efficiency import (
    ASSUMED,
    DeviceProfile,
    Provenance,
    default_profile,
    gemm_caps,
    load_profile,
)
from bertscope.perf.kernel_fusion import FusionStats
from bertscope.perf.roofline import Knobs, Peaks, roofline, select_peaks
from bertscope.taxonomy import Category, gemm_mask

if TYPE_CHECKING:
    import pandas as pd


class Bound(StrEnum):
    """What limits a row's predicted time."""

    COMPUTE = "compute"
    MEMORY = "memory"
    OVERHEAD = "overhead"


PREDICTED_COLUMNS: tuple[str, ...] = ("compute_s", "memory_s", "overhead_s", "host_s",
                                      "roofline_s", "bound")
"""Columns `predict` adds (time_s is filled in place)."""

_BOUNDS = np.array([b.value for b in Bound], dtype=object)


@dataclass(frozen=True, slots=True)
class BoundShare:
    """The rows one bound limits: how many, their launches and their predicted time."""

    rows: int
    launches: int
    time_s: float
    time_share: float
    """Of the iteration's predicted time."""


@dataclass(frozen=True, slots=True)
class Prediction(Record):
    """A predicted table's totals: the device and peaks used, the efficiency models, the
    iteration's time, throughput and roofline bound (`predict` attaches it; exported as meta
    "prediction"). `bounds()` and `top(n)` break the predicted rows down."""

    KEYS: ClassVar[tuple[str, ...]] = ("prediction",)
    device: str
    """The device's catalog name."""
    sku: str
    precision: Precision
    gemm_format: NumberFormat
    """The number format of the GEMM peak used."""
    gemm_peak_flops: float
    vector_format: NumberFormat
    vector_peak_flops: float
    bandwidth: float
    """Memory bandwidth used, bytes/s."""
    notes: tuple[str, ...]
    """What the choice of peaks assumed, in words."""
    models: Mapping[str, Mapping[str, Any]]
    """The efficiency models used ("gemm", "bandwidth", "overhead"), as each describes
    itself (`to_dict`)."""
    time_s: float
    roofline_s: float
    flops: float
    achieved_flops: float
    peak_fraction: float
    """Achieved FLOP/s over the GEMM peak."""
    tokens: int | None
    """Real tokens per iteration (`RunConfig.tokens`: padding never counted)."""
    tokens_per_s: float | None
    fused: bool
    """Whether the rows were fused (`perf.fuse`) before the prediction."""
    sequences: int | None = None
    """Sequences per iteration (`RunConfig.sequences`: packed rows count each sequence)."""
    sequences_per_s: float | None = None
    rows: Columns | None = field(default=None, compare=False, repr=False)
    """The predicted rows (for `bounds` and `top`; None when read back from a file)."""
    provenance: str = ""
    """One line: which parts of the prediction are cited, fitted (from what) or assumed
    (`provenance`)."""

    @property
    def sources(self) -> list[str]:
        """Where the efficiency models come from (each model's "source"), sorted."""
        return sorted({str(m.get("source", "?")) for m in self.models.values()})

    def _rows(self) -> Columns:
        if self.rows is None:
            raise BertscopeError("this prediction was read back without its rows; predict the "
                                 "table again")
        return self.rows

    def bounds(self) -> dict[Bound, BoundShare]:
        """Rows, launches and time per bound (compute, memory, overhead)."""
        return bound_shares(self._rows())

    def top(self, n: int) -> Grouped:
        """The n op sites with the most predicted time (`top_sites`)."""
        return top_sites(self._rows(), n)

    def to_dict(self) -> dict[str, Any]:
        """{"prediction": {...}}, enums as their values, as exports write it."""
        return {"prediction": {
            "device": self.device, "sku": self.sku, "precision": self.precision.value,
            "gemm_format": self.gemm_format.value, "gemm_peak_flops": self.gemm_peak_flops,
            "vector_format": self.vector_format.value,
            "vector_peak_flops": self.vector_peak_flops, "bandwidth": self.bandwidth,
            "notes": list(self.notes), "models": {k: dict(v) for k, v in self.models.items()},
            "time_s": self.time_s, "roofline_s": self.roofline_s, "flops": self.flops,
            "achieved_flops": self.achieved_flops, "peak_fraction": self.peak_fraction,
            "tokens": self.tokens, "tokens_per_s": self.tokens_per_s, "fused": self.fused,
            "sequences": self.sequences, "sequences_per_s": self.sequences_per_s,
            "provenance": self.provenance}}

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """From meta "prediction" (without its rows)."""
        d = dict(entries["prediction"])
        return cls(**{**d, "precision": Precision(d["precision"]),
                      "gemm_format": NumberFormat(d["gemm_format"]),
                      "vector_format": NumberFormat(d["vector_format"]),
                      "notes": tuple(d.get("notes", ()))})


def _fraction(values: np.ndarray, what: str) -> np.ndarray:
    f = np.asarray(values, dtype=float)
    if f.size and not (f.min() > 0 and f.max() <= 1):  # NaN fails both
        bad = f[~((f > 0) & (f <= 1))][0]
        raise BertscopeError(f"{what} efficiency model returned {bad!r}; fractions must lie "
                             f"in (0, 1]")
    return f


def gemm_for(profile: DeviceProfile, peaks: Peaks) -> Any:
    """The profile's GEMM model for the run's GEMM format: a model with per-format figures
    (`gpu_gemm.TileWaveGemmEfficiency`, `gemm_models.FormatGemmEfficiency`) offers
    `for_format`; any other model is used as it is."""
    pick = getattr(profile.gemm, "for_format", None)
    return profile.gemm if pick is None else pick(peaks.gemm_format)


def batched_gemm_for(profile: DeviceProfile, peaks: Peaks) -> Any:
    """The profile's GEMM model for batched-GEMM rows: `gemm_for`'s, except where they run
    in another format than the linear GEMMs (`Peaks.batched_gemm_format`: fp8 runs keep
    attention's batched GEMMs in bf16), that format's (its attainable fraction and split-K
    ridge), so no row is held to another format's cap."""
    pick = getattr(profile.gemm, "for_format", None)
    if pick is None or peaks.batched_gemm_format is None:
        return gemm_for(profile, peaks)
    return pick(peaks.batched_gemm_format)


def bandwidth_for(profile: DeviceProfile, peaks: Peaks) -> Any:
    """The profile's bandwidth model for the run's activation format
    (`Peaks.activation_format`): a model with per-format figures
    (`CategoryBandwidthEfficiency` fitted on runs of several formats) offers `for_format`;
    any other model is used as it is."""
    pick = getattr(profile.bandwidth, "for_format", None)
    return profile.bandwidth if pick is None else pick(peaks.activation_format)


def row_times(rows: Mapping[str, Any], profile: DeviceProfile, peaks: Peaks, *,
              overhead_scale: float = 1.0) -> dict[str, np.ndarray]:
    """The formulas of the module docstring for op-table columns `rows`: compute_s,
    memory_s, overhead_s, host_s, roofline_s, time_s and `bound_code` (the index of the
    largest term in `Bound`, as ints). Shape-agnostic: `predict` passes 1-D columns, the
    sweep engine (rows x configurations) numeric columns with (rows, 1) category and phase
    columns. `overhead_scale` multiplies the launch floor and host time (a what-if knob)."""
    roof = roofline(rows, peaks)
    gemm_model = gemm_for(profile, peaks)
    cats = np.asarray(rows["category"], dtype=object)
    gemm = gemm_mask(cats.reshape(len(cats), -1)[:, 0])  # one flag per row (the first axis)
    compute = np.asarray(roof["compute_s"], dtype=float)
    if not compute.flags.writeable:
        compute = compute.copy()
    if gemm.any():  # the GEMM model sees the GEMM rows (other rows run at the vector peak)
        at = np.flatnonzero(gemm)
        # contiguous GEMM rows (the sweep sorts them so) are a view, not a copy
        sel = slice(at[0], at[-1] + 1) if at[-1] - at[0] + 1 == len(at) else gemm
        subset = Columns({c: np.asarray(v)[sel] for c, v in rows.items()})
        frac = _fraction(gemm_model.fraction(subset), "GEMM")
        batched_model = batched_gemm_for(profile, peaks)
        if batched_model is not gemm_model:  # each GEMM row at its own format's fraction
            first = cats.reshape(len(cats), -1)[:, 0][sel]
            is_b = (first == Category.BATCHED_GEMM).reshape(-1, *([1] * (np.ndim(frac) - 1)))
            if is_b.any():
                frac = np.where(is_b, _fraction(batched_model.fraction(subset), "GEMM"),
                                frac)
        compute[sel] = compute[sel] / frac
    f_bw = _fraction(bandwidth_for(profile, peaks).fraction(rows), "bandwidth")
    memory = roof["memory_s"] / f_bw
    overhead = np.asarray(profile.overhead.seconds(rows), dtype=float)
    host = np.asarray(profile.overhead.host_seconds(rows), dtype=float)
    if np.any(overhead < 0) or np.any(host < 0):
        raise BertscopeError("overhead model returned a negative time")
    if np.any(np.asarray(overhead_scale) != 1):
        overhead, host = overhead * overhead_scale, host * overhead_scale
    top = np.maximum(compute, memory)
    return {
        # NaN where the row cannot be placed (no link figure)
        "time_s": np.maximum(top, overhead) + host,
        "compute_s": compute,
        "memory_s": memory,
        "overhead_s": np.broadcast_to(overhead, top.shape),
        "host_s": np.broadcast_to(host, top.shape),
        "roofline_s": roof["roofline_s"],
        "bound_code": _bound_code(compute, memory, top, overhead + host),
    }


def _bound_code(compute: np.ndarray, memory: np.ndarray, top: np.ndarray,
                fixed: np.ndarray) -> np.ndarray:
    """Index in `Bound` of the largest of compute, memory and fixed (overhead + host) time,
    the first on ties, a NaN term counting as -1: what argmax over the stacked terms gives,
    without stacking them (`top` = max(compute, memory))."""
    if np.isnan(np.max(top, initial=-np.inf)):  # max propagates NaN: one pass, no mask
        compute, memory = np.nan_to_num(compute, nan=-1.0), np.nan_to_num(memory, nan=-1.0)
        top = np.maximum(compute, memory)
    code = (compute < memory).astype(np.int8)  # 0 compute, 1 memory
    code[np.broadcast_to(fixed > top, code.shape)] = 2
    return code


def predict(table: OpTable, profile: DeviceProfile | Device | str | os.PathLike[str],
            precision: Precision | str | None = None, *,
            gemm_format: NumberFormat | str | None = None,
            knobs: Knobs | None = None) -> OpTable:
    """A copy of `table` with `time_s` predicted on `profile`'s device, and the columns
    compute_s, memory_s, overhead_s (the three candidate times), host_s (host time added),
    roofline_s and bound.

    `profile` may also be a catalog name or a device or profile file (`load_profile`).
    `precision` defaults to the table's run precision (`table.run.precision`); a bare
    `Device` gets its kind's default efficiency models. `gemm_format` forces the GEMM peak's
    format (e.g. "tf32"); `knobs` scales the device's figures (what-ifs). Totals go to the
    table's `Prediction` record (`Prediction.of(result)`). Works on the table's columns (no
    pandas); the result is column-backed unless `table` is DataFrame-backed.
    """
    if not isinstance(table, OpTable):
        raise BertscopeError(f"predict: expected an OpTable (bertscope.ops, read_trace, ...), "
                             f"got {type(table).__name__} {shown(table)}")
    if isinstance(profile, str | os.PathLike):  # a catalog name, device or profile file
        profile = load_profile(profile)
    if isinstance(profile, Device):
        profile = default_profile(profile)
    if not isinstance(profile, DeviceProfile):
        raise BertscopeError(f"predict: expected a device (a catalog name, a device or "
                             f"profile file, a Device or a DeviceProfile), got "
                             f"{type(profile).__name__} {shown(profile)}")
    if knobs is not None and not isinstance(knobs, Knobs):
        raise BertscopeError(f"predict: knobs must be a Knobs or None, got "
                             f"{type(knobs).__name__} {shown(knobs)}")
    if precision is None:
        if table.job is None:
            raise BertscopeError("the op table carries no run configuration; pass precision=")
        precision = table.run.precision
    knobs = knobs or Knobs()
    peaks = knobs.apply(select_peaks(profile.device, precision, gemm_format))
    rows = table.columns
    added: dict[str, Any] = row_times(rows, profile, peaks, overhead_scale=knobs.overhead)
    added["bound"] = _BOUNDS[added.pop("bound_code")]
    # real tokens and sequences (padding never counted: bertscope.packing)
    tokens = table.run.tokens if table.job is not None else None
    seqs = table.run.sequences if table.job is not None else None
    fused = FusionStats.on(table) is not None
    summary = _summary(Columns({**rows, **added}), fused, profile, Precision(precision), peaks,
                       tokens, seqs)
    return table.with_columns(added, summary)


def _total(values: Any) -> float:
    """Sum of a column, NaN ignored (as pandas sums)."""
    return float(np.nansum(np.asarray(values, dtype=float)))


def _summary(cols: Columns, fused: bool, profile: DeviceProfile, precision: Precision,
             peaks: Peaks, tokens: int | None,
             sequences: int | None = None) -> Prediction:
    """Iteration totals of a predicted table: time, real tokens/s and sequences/s (when the
    run is known), achieved FLOP/s."""
    time_s = _total(cols["time_s"])
    flops = _total(cols["flops"])
    dev = profile.device
    return Prediction(
        device=dev.name, sku=dev.sku, precision=precision, gemm_format=peaks.gemm_format,
        gemm_peak_flops=peaks.gemm_flops, vector_format=peaks.vector_format,
        vector_peak_flops=peaks.vector_flops, bandwidth=peaks.bandwidth,
        notes=tuple(peaks.notes),
        models={"gemm": gemm_for(profile, peaks).to_dict(),
                "bandwidth": bandwidth_for(profile, peaks).to_dict(),
                "overhead": profile.overhead.to_dict()},
        time_s=time_s, roofline_s=_total(cols["roofline_s"]), flops=flops,
        achieved_flops=flops / time_s if time_s > 0 else 0.0,
        peak_fraction=flops / time_s / peaks.gemm_flops if time_s > 0 else 0.0,
        tokens=tokens, tokens_per_s=tokens / time_s if tokens and time_s > 0 else None,
        fused=fused, sequences=sequences,
        sequences_per_s=sequences / time_s if sequences and time_s > 0 else None, rows=cols,
        provenance=provenance(profile, peaks))


def _short(citation: str, limit: int = 60) -> str:
    """A citation's author or title (before its first comma) and the start of its detail
    (after the reference's URL and "; ", up to the first colon, comma or parenthesis), e.g.
    "Bekman: BF16 row NVIDIA A100 SXM"."""
    head = citation.split(",")[0].strip()
    url = citation.rfind("http")
    cut = citation.find("; ", max(url, 0))
    detail = ""
    if cut >= 0:
        detail = citation[cut + 2:]
        for stop in (":", ",", " ("):
            detail = detail.split(stop)[0]
        detail = detail.strip()
    text = f"{head}: {detail}" if detail and detail != head else head
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def _kind(model: Any, default: Any) -> Provenance:
    """Provenance of a model the prediction used: the device's default model is cited unless
    its source says assumed; any other model was fitted by calibration."""
    if model != default:
        return Provenance.FITTED
    return Provenance.ASSUMED if str(getattr(model, "source", ASSUMED)).startswith(ASSUMED) \
        else Provenance.CITED


def _figure(what: str, model: Any) -> str:
    """The headline figure of a bandwidth or launch model, for the provenance line."""
    if what == "bandwidth" and hasattr(model, "max_fraction"):
        return f"bandwidth {model.max_fraction:g} of peak"
    if what == "launch" and hasattr(model, "seconds_per_launch"):
        return f"launch {model.seconds_per_launch * 1e6:g} us"
    return what


def provenance(profile: DeviceProfile, peaks: Peaks) -> str:
    """One line saying which parts of a prediction are cited (and from where), fitted (from
    what) or assumed: the GEMM cap of the run's GEMM format and the GEMM shape model, the
    bandwidth model and the launch overhead."""
    default = _default_profile(profile.device)
    fmt = peaks.gemm_format
    gemm, base = gemm_for(profile, peaks), gemm_for(default, peaks)
    if gemm != base:
        parts = [f"GEMM {fmt} fitted ({_short(str(getattr(gemm, 'source', '?')), 80)})"]
    else:
        cap = gemm_caps(profile.device).get(fmt)
        if cap is None:  # a format without a published peak (a stand-in's): the model's cap
            cap_text = f"GEMM {fmt} cap {getattr(gemm, 'max_fraction', 0):g} assumed"
        elif cap.provenance is Provenance.CITED:
            cap_text = f"GEMM {fmt} cap {cap.fraction:g} cited ({_short(cap.source)})"
        else:
            cap_text = f"GEMM {fmt} cap {cap.fraction:g} assumed"
        sms = getattr(gemm, "sm_count", None)
        parts = [cap_text, f"GEMM shapes from first principles (tile/wave over {sms} SMs)"
                 if sms else "GEMM size/shape saturation assumed"]
    for what, model, dflt in (("bandwidth", bandwidth_for(profile, peaks),
                               bandwidth_for(default, peaks)),
                              ("launch", profile.overhead, default.overhead)):
        kind = _kind(model, dflt)
        if kind is Provenance.FITTED:
            parts.append(f"{what} fitted ({_short(str(getattr(model, 'source', '?')), 80)})")
        else:
            parts.append(f"{_figure(what, model)} {kind.value}")
    return "; ".join(parts)


_DEFAULTS_SEEN: dict[int, tuple[Device, DeviceProfile]] = {}


def _default_profile(device: Device) -> DeviceProfile:
    """`default_profile`, remembered per device (a sweep predicts many times per device)."""
    seen = _DEFAULTS_SEEN.get(id(device))
    if seen is None or seen[0] is not device:
        seen = (device, default_profile(device))
        _DEFAULTS_SEEN[id(device)] = seen
    return seen[1]


def bound_shares(cols: Mapping[str, Any]) -> dict[Bound, BoundShare]:
    """Rows, launches and time per bound (compute, memory, overhead) of predicted rows."""
    if "bound" not in cols:
        raise BertscopeError("the table has no predictions; run predict() first")
    time_s = np.asarray(cols["time_s"], dtype=float)
    bound = np.asarray(cols["bound"], dtype=object)
    total = _total(time_s)
    out = {}
    for b in Bound:
        sel = bound == b.value
        t = _total(time_s[sel])
        out[b] = BoundShare(rows=int(sel.sum()), launches=int(np.sum(cols["count"][sel])),
                            time_s=t, time_share=t / total if total > 0 else 0.0)
    return out


def top_sites(c: Mapping[str, Any], n: int) -> Grouped:
    """The n op sites of predicted rows with the most time, each summed over the encoder
    layers (ffn1 of all 24 layers is one entry), keyed by (name, phase): time, roofline
    time, FLOPs, bytes, layers, and the bound and shape of its slowest row."""
    keys, codes = group_rows(c, ("name", "phase"))
    size = len(keys)
    summed = {"time_s": c["time_s"], "roofline_s": c["roofline_s"], "flops": c["flops"],
              "bytes": c["bytes_read"] + c["bytes_written"], "layers": c["layer"] >= 0}
    out = {col: group_sum(codes, size, values) for col, values in summed.items()}
    slowest = group_first_max(codes, size, c["time_s"])
    for col in ("bound", "m", "n", "k", "batch", "elements"):
        out[col] = c[col][slowest]
    top = Grouped(("name", "phase"), keys, out)
    return top.take(stable_largest(out["time_s"], n))


def by_bound(table: OpTable) -> dict[str, dict[str, float]]:
    """Rows, launches and time per bound of a predicted table, as plain dicts
    (`Prediction.bounds` gives them typed)."""
    return {b.value: {"rows": s.rows, "launches": s.launches, "time_s": s.time_s,
                      "time_share": s.time_share} for b, s in bound_shares(table.columns).items()}


def top_groups(table: OpTable, n: int) -> Grouped:
    """`top_sites` of a predicted table's rows (`Prediction.top`). `top_ops` without pandas."""
    return top_sites(table.columns, n)


def top_ops(table: OpTable, n: int) -> pd.DataFrame:
    """The n op sites with the most predicted time, each summed over the encoder layers
    (ffn1 of all 24 layers is one entry): time, roofline time, FLOPs, bytes, layers, and
    the bound of its slowest row."""
    return top_groups(table, n).to_frame().reset_index()


__all__ = ["PREDICTED_COLUMNS", "Bound", "BoundShare", "Prediction", "bandwidth_for",
           "batched_gemm_for", "bound_shares", "by_bound", "predict", "provenance", "row_times",
           "top_groups", "top_ops", "top_sites"]
