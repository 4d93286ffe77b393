"""Calibration: fit the efficiency models to measurements, recording where each figure came from.

Two sources of measurements, either or both:

- **Microbenchmarks** of the local device (`perf/microbench.py`): GEMM throughput over
  shapes (including those of the op tables), streaming bandwidth, per-op overhead.
- **Measured op tables** (`bertscope profile` results): measured rows joined to the
  analytic rows of the same run by the join keys below.

Join keys. Measured rows carry ATen names and analytic rows the model's names, so they are
joined on (layer, sublayer, phase, kind, category), where kind is `gemm` (GEMM and batched
GEMM) or `memory` (everything else); for memory rows the backward phases are merged (a
measured layernorm backward computes data and weight gradients in one op), and optimizer rows
are joined over all layers. Measured time with no analytic counterpart (views, copies) is
spread over its key's other categories.

Fits (closed form):

- GEMM, per number format the measured runs' GEMMs ran in (fp32, bf16, fp16: each relative
  to its own peak; a `FormatGemmEfficiency`, which predictions read for their run's format,
  and which refuses a format no measured run had, or gives it the catalog's figures, rather
  than another format's fit at its peak): per launch
  t = (W + W0) / (P x max) x (D + D0) / D, which is `GemmEfficiency`; for each D0 on a
  grid, t D / (D + D0) = a W + c is linear, so max = 1 / (P a), W0 = c / a.
  From measured op tables, then one factor per phase (`gemm_phase`: forward, which covers
  recompute by `Phase.family`; data and weight gradient): the phase's predicted over
  measured total time, so the fitted profile reproduces the calibration runs' GEMM time per
  phase (the median of per-key ratios, used before, left every calibration run 2-11%
  over-predicted and the held-out ones 3-6%: bench/results/validate_cpu_r3_arena.txt at
  d715217).
  The phase factors are fitted on plain GEMMs, and batched GEMMs (attention's products)
  get one factor of their own after them (`GemmEfficiency.batched`): pooled, the CPU's bf16
  batched products were predicted 70% fast in sample (bench/results/validate_cpu_r9 at d715217). A
  join key's shape is its narrowest GEMM's (a batched product's two gradients are each
  head-size narrow; their largest m, n and k apart are not).
- Memory, per category c: per launch t = a_c B + c_c, which is `CategoryBandwidthEfficiency`
  with max_c = 1 / (bandwidth a_c) and B0_c = c_c / a_c (a fixed cost per launch, Little's law).
  From measured runs of several activation formats (fp32 and bf16 runs), per format as well
  (keys "c#bf16"; predictions of a bf16 run read them first): a CPU's bf16 kernels of some
  categories upcast to fp32 (the loss's log-softmax), so their time per byte is not the fp32
  kernels'; pooling the formats left bf16 loss rows ~2x slower than predicted.
- From measured op tables the fits are robust (`robust=True`), because run-to-run noise
  there is heavy-tailed: the line t = a w + c by Theil-Sen (`_robust_line`: the median of
  pairwise slopes, then the median intercept), which keeps the fixed cost per launch that a
  median rate (c = 0, used before) dropped. Leave-one-out over the 11 configs of three
  saved validations (bench/validate_loo.py): with the batched-GEMM factor and narrowest
  key shapes (`fit_gemm`, `joined`) MAPE 5.1/7.4/7.2% -> 4.9/6.1/5.9%, and with Theil-Sen
  as well -> 3.9/5.9/5.8%, the largest share error 5.8/4.8/4.7 -> 1.9/1.9/2.5 pp
  (bench/results/validate_loo.txt at d715217).
  Microbenchmarks (clean, repeated medians) use least squares with the fixed-cost term.
  Keys of one size fall back to the median rate, which one key defines, so a category seen
  once in a phase family gets its own
  entry (LAMB's norms, "reduction@optimizer", are not priced at the backward bias-gradient
  sums' rate: with one LAMB calibration run the pooled rate over-predicted a held-out bf16
  LAMB run's reductions by 73%, bench/results/validate_cpu_r4.txt at d715217; its error
  12.5% -> 9.8%).
- Host time per launch (`Overhead.host_seconds_per_launch`, added to every op the framework
  issues): the median over runs of (measured iteration - sum of measured ops) / analytic
  launches, autocast's casts not counted (issued inside the op that needs them, no framework
  code around them); on a CPU the eager framework's work between ops (Python, hooks,
  autograd, the profiler) is 5-12% of an iteration and scales with launches, not with FLOPs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from bertscope.errors import BertscopeError
from bertscope.hardware import NumberFormat
from bertscope.optable import OpTable, ProfileFacts, bytes_moved
from bertscope.perf.bandwidth import framework_launches, tensor_formats
from bertscope.perf.device_profile import per_launch
from bertscope.perf.efficiency import (
    BandwidthEfficiency,
    CategoryBandwidthEfficiency,
    DeviceProfile,
    GemmEfficiency,
    Overhead,
    gemm_phase,
)
from bertscope.perf.gemm_models import FormatGemmEfficiency
from bertscope.perf.roofline import activation_format, select_peaks
from bertscope.taxonomy import Phase, PhaseFamily, gemm_mask, phase_families

KEYS = ["layer", "sublayer", "phase", "kind", "category"]
"""Columns that join measured and analytic (or predicted) rows."""


def join_keys(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the join-key columns: `kind` (gemm or memory); for memory rows the backward
    phases merged; for GEMM rows the category `gemm` (a 2-D matmul may be either); optimizer
    rows at layer -1 (measured foreach/per-tensor ops do not tell parameter groups apart)."""
    gemm = gemm_mask(df["category"])
    phase = df["phase"].astype(str)
    backward = phase_families(phase) == PhaseFamily.BACKWARD.value
    phase = phase.where(gemm | ~backward, Phase.BACKWARD.value)
    layer = df["layer"].where(phase != Phase.OPTIMIZER.value, -1)
    return df.assign(kind=np.where(gemm, "gemm", "memory"), phase=phase, layer=layer,
                     category=df["category"].astype(str).where(~gemm, "gemm"))


def joined(measured: OpTable, analytic: OpTable) -> pd.DataFrame:
    """Per join key: measured time, and the analytic FLOPs, bytes, launches, GEMM batch,
    narrowest GEMM shape and the most bytes one of its rows moves per launch (launch_bytes)
    of the same run. Measured memory-bound time of a category the
    analytic key lacks (views, copies) is spread over the key's other categories in
    proportion to their time."""
    mk = join_keys(measured.df)
    m = mk.groupby(KEYS)["time_s"].sum().rename("measured_s")
    a = join_keys(analytic.df)
    a = a.assign(bytes=bytes_moved(a))
    a = a.assign(launch_bytes=per_launch(a, "bytes"))  # as `GemmEfficiency.fraction` splits
    agg = a.groupby(KEYS).agg(flops=("flops", "sum"), bytes=("bytes", "sum"),
                              count=("count", "sum"), batch=("batch", "max"),
                              launch_bytes=("launch_bytes", "max"))
    # the shape of each key's narrowest GEMM (smallest of m, n, k), not the largest m, n and
    # k apart: a batched product's two gradients, (s, d_h) x (d_h, s) and (d_h, s) x (s, s)
    # in one key, are each 64 narrow, and their maxima (s, s, s) are not
    narrow = a.assign(_d=a[["m", "n", "k"]].min(axis=1)).sort_values("_d", kind="stable")
    agg = agg.join(narrow.groupby(KEYS)[["m", "n", "k"]].first())
    out = agg.join(m, how="left").fillna({"measured_s": 0.0}).reset_index()
    orphan = m[~m.index.isin(agg.index)].groupby(KEYS[:4]).sum()
    if len(orphan):
        grp = out.groupby(KEYS[:4])["measured_s"]
        total = grp.transform("sum")
        extra = out.set_index(KEYS[:4]).index.map(orphan.to_dict()).to_numpy(dtype=float)
        extra = np.nan_to_num(extra)
        share = np.where(total > 0, out["measured_s"] / total.where(total > 0, 1.0), 0.0)
        out["measured_s"] = out["measured_s"] + extra * share
    return out


def _linear_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """y = a x + c by least squares, a > 0, c >= 0 (clean microbenchmark points)."""
    a_mat = np.stack([x, np.ones_like(x)], axis=1)
    (a, c), *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    if c < 0 or a <= 0:  # refit through the origin: a pure rate
        a, c = float(np.sum(x * y) / np.sum(x * x)), 0.0
    return float(a), float(c)


def _rate_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """y = a x with a the median of y / x over the points: robust to the heavy-tailed
    run-to-run noise of measured op tables (on a shared 2-core VM the same op's time varies
    several-fold between runs, see bench/results/validate_cpu.txt at d715217), where least squares
    follows the outliers. (A median of per-run aggregate rates did worse on held-out configs:
    13.9% vs 11.8% MAPE on the same saved measurements.)"""
    return float(np.median(y / x)), 0.0


_PAIRS = 1_000_000
"""Pairwise slopes a Theil-Sen fit takes at most (1,415 points give a million pairs)."""


def _robust_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """y = a x + c by Theil-Sen (Sen 1968, "Estimates of the regression coefficient based on
    Kendall's tau", JASA 63): a the median of the slopes between every pair of points of
    different x, c the median of y - a x. As robust to heavy-tailed noise as a median rate
    (a 29% breakdown point), but it keeps a fixed cost per launch. Points of one x, a slope
    of a <= 0 or an intercept c < 0 fall back to the median rate (c = 0). Beyond `_PAIRS`
    pairs, that many pairs drawn with a fixed seed (the randomized Theil-Sen of Dillencourt,
    Mount & Netanyahu 1992), so memory stays bounded for many points."""
    n = len(x)
    if n * (n - 1) // 2 > _PAIRS:  # pairs drawn with replacement, never all n^2 of them
        i, j = np.random.default_rng(0).integers(0, n, size=(2, _PAIRS))
    else:
        i, j = np.triu_indices(n, k=1)
    dx = x[j] - x[i]
    apart = dx != 0
    if not apart.any():
        return _rate_fit(x, y)
    a = float(np.median((y[j] - y[i])[apart] / dx[apart]))
    if a <= 0:
        return _rate_fit(x, y)
    c = float(np.median(y - a * x))
    return (a, c) if c >= 0 else _rate_fit(x, y)


@dataclass(frozen=True, slots=True)
class GemmFit:
    """A fitted GEMM model, the peak its fractions are relative to, and its time-weighted
    relative error on its points."""

    model: GemmEfficiency
    mape: float
    points: int
    peak_flops: float
    """The peak given, or, where measured GEMMs ran faster than it (a microbenchmark taken
    in a slow spell), the fastest fitted rate, so that no fraction exceeds 1."""


def fit_gemm(points: pd.DataFrame, peak_flops: float, source: str, *,
             robust: bool = True, preserve_total: bool = False,
             cache_bytes: float = 0.0) -> GemmFit:
    """Fit `GemmEfficiency` to points with columns flops, count (launches), m, n, k, time_s
    (and phase: one factor per phase; batch: one factor for batched GEMMs; launch_bytes,
    the most bytes one of the point's GEMMs moves per launch: with `cache_bytes` > 0, one
    factor per phase for the GEMMs beyond that cache); `robust` fits the size term by
    Theil-Sen (`_robust_line`), else by least squares. The fit is made in
    rates (FLOP/s), then expressed as fractions of `peak_flops`, or of the fastest fitted
    rate where that is higher (see `GemmFit`). The phase factors come from the plain GEMMs
    within the cache, the beyond-cache factors from the plain GEMMs past it after them (a
    phase with too few of either kind: one factor for all its GEMMs), the batched factor from
    the batched ones last (where each kind has enough points).
    `preserve_total` makes each factor the ratio of predicted to measured total time
    instead of the median ratio, so the fit reproduces the points' GEMM time per phase and
    of the batched GEMMs (a trace's many launches of one run, rather than noisy separate
    runs)."""
    p = points[(points["flops"] > 0) & (points["time_s"] > 0)]
    if len(p) < 3:
        raise BertscopeError(f"GEMM fit needs at least 3 measured GEMMs, got {len(p)}")
    cnt = np.maximum(p["count"].to_numpy(float), 1.0)
    w = p["flops"].to_numpy(float) / cnt
    t = p["time_s"].to_numpy(float) / cnt

    def error(pred: np.ndarray) -> float:
        return float(np.sum(np.abs(pred - t) * cnt) / np.sum(t * cnt))  # time-weighted

    dims = p[["m", "n", "k"]].to_numpy(float)
    d = np.where(dims.min(axis=1) > 0, dims.min(axis=1), 1.0)
    best: tuple[float, float, float, float] | None = None  # error, rate, W0, D0
    for d0 in (0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0):
        shape = d / (d + d0) if d0 else np.ones_like(d)
        # the model's time, W / (rate S) + W0 / rate, is linear in W / S: t = a W / S + c
        a, c = (_robust_line if robust else _linear_fit)(w / shape, t)
        pred = a * w / shape + c  # rate 1 / a for large square GEMMs, W0 = c / a
        # a shape term must earn its place: lower the error by a point (0.01) or 2% of it,
        # not by rounding (equal dims make every D0 fit alike)
        if best is None or error(pred) < best[0] - max(0.01, 0.02 * best[0]):
            best = (error(pred), 1.0 / a, c / a, d0)
    assert best is not None
    err, rate, w0, d0 = best
    per_phase: dict[str, float] = {}
    beyond: dict[str, float] = {}
    batched = 1.0
    if (robust or preserve_total) and "phase" in p.columns:  # a factor per phase
        phases = gemm_phase(p["phase"])
        shape = d / (d + d0) if d0 else np.ones_like(d)
        base = (w / shape + w0) / rate  # per-launch time at the base rate
        least = 1 if preserve_total else 3

        def factor(sel: np.ndarray) -> float:  # > 1: faster than the base
            return float(np.sum((base * cnt)[sel]) / np.sum((t * cnt)[sel]) if preserve_total
                         else np.median((base / t)[sel]))

        many = (p["batch"].to_numpy(float) > 1 if "batch" in p.columns
                else np.zeros(len(p), dtype=bool))
        if many.sum() < least or (~many).sum() < least:
            many = np.zeros(len(p), dtype=bool)  # too few of either kind: one rate for all
        big = (p["launch_bytes"].to_numpy(float) > cache_bytes
               if cache_bytes > 0 and "launch_bytes" in p.columns
               else np.zeros(len(p), dtype=bool)) & ~many
        # the phases' factors from the plain GEMMs within the cache, then one per phase for
        # those beyond it, then one for the batched ones after them
        for ph in sorted(set(phases)):
            sel = (phases == ph) & ~many
            split = np.sum(sel & big) >= least and np.sum(sel & ~big) >= least
            if np.sum(sel) >= least:
                per_phase[str(ph)] = factor(sel & ~big if split else sel)
            if split:
                beyond[str(ph)] = factor(sel & big) / per_phase[str(ph)]
        if many.any():
            base = base / np.array([per_phase.get(str(ph), 1.0) for ph in phases])
            batched = factor(many)
    fastest = max([1.0, *per_phase.values(),
                   *(per_phase[ph] * f for ph, f in beyond.items())])
    peak = max(peak_flops, rate * max(fastest, batched * max(per_phase.values(), default=1.0)))
    model = GemmEfficiency(max_fraction=rate / peak, half_saturation_flops=w0,
                           half_saturation_dim=d0, per_phase=per_phase, batched=batched,
                           cache_bytes=cache_bytes if beyond else 0.0, beyond_cache=beyond,
                           source=source)
    if per_phase:
        # with a split, the points as rows: each launch moves its key's most bytes (what
        # `big` split on)
        rows = (p.assign(bytes_read=p["launch_bytes"].to_numpy(float) * cnt, bytes_written=0.0)
                if beyond else p)
        err = error(w / (peak * model.fraction(rows)))
    return GemmFit(model=model, mape=err, points=len(p), peak_flops=peak)


def with_gemm_peak(profile: DeviceProfile, fit: GemmFit,
                   fmt: NumberFormat = NumberFormat.FP32) -> DeviceProfile:
    """`profile` with its `fmt` peak raised to `fit.peak_flops` where the fit needed a higher
    one (measured GEMMs beat the microbenchmark); the source says why."""
    dev = profile.device
    old = dev.peak_flops(fmt)
    if fit.peak_flops <= old:
        return profile
    key = f"peaks.{fmt.value}"
    note = (f"fastest fitted GEMM rate ({fit.model.source}); the microbenchmark measured "
            f"{old:.4g} FLOP/s: {dev.sources[key]}")
    device = replace(dev, peaks={**dev.peaks, fmt: fit.peak_flops},
                     sources={**dev.sources, key: note})
    return replace(profile, device=device)


def _gemm_format(profile: DeviceProfile, table: OpTable) -> NumberFormat:
    """The number format a measured run's GEMMs ran in on the profile's device."""
    return select_peaks(profile.device, table.run.precision).gemm_format


def fit_gemm_per_format(keys: pd.DataFrame, profile: DeviceProfile,
                        source: str, *, preserve_total: bool = False, robust: bool = True,
                        fallback: Any = None, inputs: Iterable[str] = ()
                        ) -> tuple[DeviceProfile, FormatGemmEfficiency, dict[str, Any]]:
    """GEMM fits per number format (column `format` of the joined keys), each relative to
    its format's peak (raised where measured GEMMs beat it), as a `FormatGemmEfficiency`
    whose `default` is fp32 where fitted (else the format with the most points). Formats
    with fewer than 3 GEMM points are not fitted; a prediction in a format not fitted gets
    `fallback` (a catalog device's default model) or is refused in one line
    (`FormatGemmEfficiency.for_format`): never another format's fit at this format's peak.
    `inputs` names what was measured (for that line). `preserve_total` and `robust` as for
    `fit_gemm`; the cache split is at the device's `on_chip_bytes` where it has one."""
    fits: dict[NumberFormat, GemmFit] = {}
    cache = float(profile.device.on_chip_bytes or 0.0)
    for fmt in sorted({NumberFormat(f) for f in keys["format"]}, key=list(NumberFormat).index):
        points = keys[(keys["kind"] == "gemm") & (keys["format"] == fmt.value)]
        if int(((points["flops"] > 0) & (points["time_s"] > 0)).sum()) < 3 and fits:
            continue
        fit = fit_gemm(points, profile.device.peak_flops(fmt), f"{source} ({fmt.value} GEMMs)",
                       preserve_total=preserve_total, robust=robust, cache_bytes=cache)
        profile = with_gemm_peak(profile, fit, fmt)
        fits[fmt] = fit
    report: dict[str, Any] = {"gemm_points": sum(f.points for f in fits.values()),
                              "gemm_fit_mape": {f.value: fit.mape for f, fit in fits.items()},
                              "gemm_formats": [f.value for f in fits]}
    if len(fits) == 1:
        report["gemm_fit_mape"] = next(iter(fits.values())).mape
    default = (NumberFormat.FP32 if NumberFormat.FP32 in fits
               else max(fits, key=lambda f: fits[f].points))
    model = FormatGemmEfficiency(per_format={f.value: fit.model for f, fit in fits.items()},
                                 default=default.value, source=source, fallback=fallback,
                                 inputs=tuple(inputs))
    return profile, model, report


def fit_memory(points: pd.DataFrame, bandwidth: float, source: str,
               min_points: int = 2, *, robust: bool = True) -> CategoryBandwidthEfficiency:
    """Fit per-category bandwidth models to points with columns category, bytes, count,
    time_s (memory-bound time per join key); a pooled fit is the default. With points of
    several activation formats (column `activation_format`), each format's categories are
    fitted on that format's points alone too ("category[@family]#format" keys, which
    predictions of that format read first: `CategoryBandwidthEfficiency.for_format`)."""
    p = points[(points["bytes"] > 0) & (points["time_s"] > 0)]
    if len(p) < 2:
        raise BertscopeError(f"memory fit needs at least 2 measured keys, got {len(p)}")

    def fit(sel: pd.DataFrame) -> list[float]:
        cnt = np.maximum(sel["count"].to_numpy(float), 1.0)
        fit_line = _robust_line if robust else _linear_fit
        a, c = fit_line(sel["bytes"].to_numpy(float) / cnt, sel["time_s"].to_numpy(float) / cnt)
        return [min(1.0, 1.0 / (bandwidth * a)), c / a]

    pooled = fit(p)
    # a median rate is defined by one point; a line with a fixed cost needs two sizes
    least = 1 if robust else min_points
    per = _per_category(p, fit, least, sizes=not robust)
    if "activation_format" in p.columns and p["activation_format"].nunique() > 1:
        for fmt, sub in p.groupby("activation_format"):
            per |= _per_category(sub, fit, least, f"#{NumberFormat(fmt).value}",
                                 sizes=not robust)
    return CategoryBandwidthEfficiency(per_category=per, max_fraction=pooled[0],
                                       half_saturation_bytes=pooled[1], source=source)


def _per_category(p: pd.DataFrame, fit: Any, min_points: int, suffix: str = "", *,
                  sizes: bool = True) -> dict[str, list[float]]:
    """`fit` per category of the points, and per category and phase family, where they
    have `min_points` points (`sizes`: of more than one size); keys end in `suffix`."""
    per: dict[str, list[float]] = {}
    family = (pd.Series(phase_families(p["phase"]), index=p.index) if "phase" in p.columns
              else None)

    def enough(sel: pd.DataFrame) -> bool:
        return len(sel) >= min_points and (not sizes or sel["bytes"].nunique() > 1)

    for cat, sel in p.groupby("category"):
        if enough(sel):
            per[f"{cat}{suffix}"] = fit(sel)
        if family is None:
            continue
        for fam, sub in sel.groupby(family.loc[sel.index]):  # forward and backward apart
            if enough(sub):
                per[f"{cat}@{fam}{suffix}"] = fit(sub)
    return per


def fit_host_gap(pairs: Iterable[tuple[OpTable, OpTable]]) -> float | None:
    """Host seconds per analytic launch between ops: the median over runs of (measured
    iteration - sum of measured ops) / launches of the analytic table that framework code
    issues (`bandwidth.framework_launches`: not autocast's casts). Measured tables carry
    the iteration time in their `ProfileFacts`; None when none does."""
    gaps = []
    for measured, analytic in pairs:
        facts = ProfileFacts.on(measured)
        iteration = facts.iteration_s if facts is not None else None
        launches = float(np.sum(framework_launches(analytic.columns)))
        if iteration is None or launches <= 0:
            continue
        ops = float(np.nansum(np.asarray(measured.columns["time_s"], dtype=float)))
        gaps.append(max(0.0, float(iteration) - ops) / launches)
    return float(np.median(gaps)) if gaps else None


def _joined_formats(measured: OpTable, analytic: OpTable, profile: DeviceProfile
                    ) -> pd.DataFrame:
    """`joined` keys of one run with its GEMM format (`format`) and, per key, the format
    its memory-bound tensors are in (`activation_format`: `bandwidth.tensor_formats`)."""
    keys = joined(measured, analytic)
    act = activation_format(analytic.run.precision)
    return keys.assign(format=_gemm_format(profile, analytic).value,
                       activation_format=tensor_formats(phase_families(keys["phase"]), act))


def fit_from_tables(pairs: Iterable[tuple[OpTable, OpTable]], profile: DeviceProfile,
                    source: str, *, inputs: Iterable[str] = ()) -> tuple[DeviceProfile,
                                                                       dict[str, Any]]:
    """Fit GEMM and memory models, and the host time per launch (when the measured tables
    carry iteration times), from (measured, analytic) table pairs of the same runs; returns
    the profile with the fitted models and a report of the fits. `inputs` names the runs
    (a GEMM format none of them ran is refused by name: `fit_gemm_per_format`)."""
    pairs = list(pairs)
    keys = pd.concat([_joined_formats(m, a, profile) for m, a in pairs], ignore_index=True)
    keys = keys.rename(columns={"measured_s": "time_s"})
    profile, gemm, report = fit_gemm_per_format(keys, profile, source, preserve_total=True,
                                                inputs=inputs)
    mem = fit_memory(keys[keys["kind"] == "memory"], profile.device.memory_bandwidth, source)
    report |= {"memory_points": int((keys["kind"] == "memory").sum()),
               "memory_categories": sorted(mem.per_category)}
    models: dict[str, Any] = {"gemm": gemm, "bandwidth": mem}
    host = fit_host_gap(pairs)
    if host is not None and isinstance(profile.overhead, Overhead):
        models["overhead"] = replace(
            profile.overhead, host_seconds_per_launch=host,
            source=f"{profile.overhead.source}; host time per launch {source}")
        report["host_seconds_per_launch"] = host
    return profile.with_models(**models), report


def fit_from_microbench(gemm_points: pd.DataFrame, stream_points: pd.DataFrame,
                        profile: DeviceProfile, source: str) -> DeviceProfile:
    """Fit GEMM and (pooled) bandwidth models from microbenchmark points: GEMM rows with
    m, n, k, flops, count, time_s; streaming rows with bytes, count, time_s."""
    fit = fit_gemm(gemm_points, profile.device.peak_flops("fp32"), source, robust=False)
    profile, gemm = with_gemm_peak(profile, fit), fit.model
    b = stream_points["bytes"].to_numpy(float)
    t = stream_points["time_s"].to_numpy(float)
    a, c = _linear_fit(b, t)
    bw = BandwidthEfficiency(max_fraction=min(1.0, 1.0 / (profile.device.memory_bandwidth * a)),
                             half_saturation_bytes=c / a, source=source)
    return profile.with_models(gemm=gemm, bandwidth=bw)


__all__ = [
    "KEYS",
    "CategoryBandwidthEfficiency",
    "GemmFit",
    "fit_from_microbench",
    "fit_from_tables",
    "fit_gemm",
    "fit_gemm_per_format",
    "fit_host_gap",
    "fit_memory",
    "join_keys",
    "joined",
    "with_gemm_peak",
]
