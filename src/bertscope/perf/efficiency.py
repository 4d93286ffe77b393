"""Efficiency models: how far below the roofline an op runs, as small swappable pieces.

A prediction divides each row's ideal time by an achieved fraction of the device's peak:

    compute_s  = flops / (peak x gemm.fraction(rows))          GEMM rows
               = flops / peak                                    other rows (vector units)
    memory_s   = bytes / (bandwidth x bandwidth.fraction(rows))
    overhead_s = overhead.seconds(rows)                          launch cost per execution
    host_s     = overhead.host_seconds(rows)                     host work nothing overlaps
    time_s     = max(compute_s, memory_s, overhead_s) + host_s

Contracts every model keeps (the property tests in tests/unit/test_perf.py rely on them):

- an `EfficiencyModel.fraction` f lies in (0, 1] (so no op beats the roofline), does not
  fall when a launch does more work w, and the time it implies, w / f(w), does not fall
  either (so merging ops, as fusion does, never costs time: with f non-decreasing, w / f(w)
  is subadditive; with w / f(w) non-decreasing, eliding bytes never adds time). The
  saturating defaults below give w / f(w) = (w + w0) / max, which is both;
- an `OverheadModel` charges a row (floor and host time alike) no more than the sum of what
  its members' rows would be charged separately;
- models depend on the rows only, never on the device's peaks (a faster chip is never slower).

The default figures are *assumed defaults* per device kind (`source` says so); calibration
replaces them with fitted figures and records where they came from in `source`. Models are
registered by class name so a `DeviceProfile` JSON file can name any of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.hardware import Device, DeviceKind, device_from_dict
from bertscope.io import atomic_write
from bertscope.optable import bytes_moved

if TYPE_CHECKING:
    import pandas as pd
ASSUMED = "assumed default"
"""`source` of a figure nobody has fitted or measured yet."""

PROFILE_VERSION = 1
"""Schema version written into profile files."""


# -- protocols --------------------------------------------------------------------------------
@runtime_checkable
class EfficiencyModel(Protocol):
    """Achieved fraction of a peak (FLOP/s or bytes/s) for each row of an op table."""

    source: str

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction in (0, 1] per row; it and work / fraction are non-decreasing in the work
        one launch does. `rows` maps op-table column names to 1-D arrays (`OpTable.columns`,
        which `predict` passes) or is a DataFrame; read columns with `np.asarray`."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Fields plus `"model"`: the class name, for `model_from_dict`."""
        ...


@runtime_checkable
class OverheadModel(Protocol):
    """Fixed time per row that no amount of bandwidth or FLOP/s removes (launch, dispatch)."""

    source: str

    def seconds(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Seconds per row (all executions of the row together), a floor under the row's
        time. `rows` as for `EfficiencyModel.fraction`."""
        ...

    def host_seconds(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Host seconds per row that add to its time (work between ops the device does not
        overlap: on a CPU the host is the device)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Fields plus `"model"`: the class name, for `model_from_dict`."""
        ...


_REGISTRY: dict[str, type] = {}
M = TypeVar("M", bound=type)


def register_model(cls: M) -> M:
    """Class decorator: make a model loadable by name from profile files."""
    _REGISTRY[cls.__name__] = cls
    return cls


def model_from_dict(raw: dict[str, Any], *, where: str = "profile") -> Any:
    """Rebuild a registered model from its `to_dict()` form."""
    if not isinstance(raw, dict) or "model" not in raw:
        raise BertscopeError(f"{where}: expected an object with a \"model\" name")
    name = raw["model"]
    cls = _REGISTRY.get(name)
    if cls is None:
        known = ", ".join(sorted(_REGISTRY))
        raise BertscopeError(f"{where}: unknown model {name!r}; known: {known}")
    allowed = {f.name for f in fields(cls)}
    args = {k: v for k, v in raw.items() if k != "model"}
    bad = sorted(set(args) - allowed)
    if bad:
        raise BertscopeError(f"{where}: {name} has no field {bad[0]!r}; fields: "
                             f"{', '.join(sorted(allowed))}")
    try:
        return cls(**args)
    except TypeError as e:
        raise BertscopeError(f"{where}: {name}: {e}") from None


class _Model:
    """Shared serialization for the dataclass models below."""

    __slots__ = ()
    _bounds: ClassVar[dict[str, tuple[float, float]]] = {}

    def to_dict(self) -> dict[str, Any]:
        """Fields plus `"model"`: the class name, for `model_from_dict`."""
        return {"model": type(self).__name__, **asdict(self)}  # type: ignore[call-overload]

    def _hash(self) -> int:
        """A hash of the figures, for models with dict fields (which frozen dataclasses
        cannot hash field by field): profiles are cache keys in the distributed model."""
        return hash(json.dumps(self.to_dict(), sort_keys=True, default=str))

    def _check(self) -> None:
        for name, (lo, hi) in self._bounds.items():
            value = getattr(self, name)
            ok = (isinstance(value, int | float) and not isinstance(value, bool)
                  and np.isfinite(value) and lo <= value <= hi)
            if not ok:
                raise BertscopeError(f"{type(self).__name__}.{name} must be a number in "
                                     f"[{lo:g}, {hi:g}], got {value!r}")
        if not isinstance(self.source, str) or not self.source.strip():  # type: ignore[attr-defined]
            raise BertscopeError(f"{type(self).__name__}.source must say where the figures "
                                 f"come from (e.g. {ASSUMED!r})")


def _saturating(work: np.ndarray, half: float) -> np.ndarray:
    """w / (w + half): 0 at no work, 1/2 at `half`, towards 1 for large work."""
    w = np.asarray(work, dtype=float)
    if half <= 0:
        return np.ones_like(w)
    return w / (w + half)


def _per_launch(rows: Mapping[str, Any] | pd.DataFrame, column: str | Any) -> np.ndarray:
    total = rows[column] if isinstance(column, str) else column
    return (np.asarray(total, dtype=float)
            / np.maximum(np.asarray(rows["count"], dtype=float), 1.0))


def _renamed(phase: Any, names: dict[str, str]) -> np.ndarray:
    """Per row: the phase's name under `names`, or the phase itself (object array of str)."""
    return np.array([names.get(str(p), str(p)) for p in np.asarray(phase, dtype=object)],
                    dtype=object)


def gemm_phase(phase: Any) -> np.ndarray:
    """Per row: the phase a GEMM's efficiency is keyed by (recompute runs as forward)."""
    return _renamed(phase, {"recompute": "forward"})


# -- the default models -----------------------------------------------------------------------
@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class GemmEfficiency(_Model):
    """GEMM fraction of the tensor-unit peak, a saturating function of size and shape:

        fraction = max_fraction x W / (W + half_saturation_flops) x D / (D + half_saturation_dim)

    with W the FLOPs of one launch (a batched GEMM is one launch) and D = min(M, N, K). The W
    term makes small GEMMs pay a fixed fill/drain cost (time = (W + W0) / (peak x max)); the D
    term makes thin GEMMs (head size 64, a 2-class classifier) slower than square ones of the
    same work. No tile or wave quantization: a smooth default that calibration can replace.
    `per_phase` scales the fraction of one phase's GEMMs (capped at 1): the same shape runs
    at different rates as a forward addmm (bias folded in), a data gradient or a weight
    gradient (a transposed operand).
    """

    max_fraction: float
    """Fraction of peak that large, square GEMMs reach."""
    half_saturation_flops: float
    """FLOPs per launch at which the size term is 1/2 (0: no size penalty)."""
    half_saturation_dim: float = 0.0
    """Smallest GEMM dimension at which the shape term is 1/2 (0: no shape penalty)."""
    per_phase: dict[str, float] = field(default_factory=dict)
    """GEMM phase (forward, which covers recompute; backward_data; backward_weight;
    backward) -> factor on the fraction; phases not listed get 1."""
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-6, 1.0), "half_saturation_flops": (0.0, 1e18),
        "half_saturation_dim": (0.0, 1e9)}

    def __post_init__(self) -> None:
        self._check()
        for phase, factor in self.per_phase.items():
            ok = (isinstance(factor, int | float) and not isinstance(factor, bool)
                  and 0 < float(factor) <= 1e3)
            if not ok:
                raise BertscopeError(f"GemmEfficiency.per_phase[{phase!r}] must be a number "
                                     f"in (0, 1000], got {factor!r}")

    def __hash__(self) -> int:
        return self._hash()

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak per row (rows without FLOPs get 1; they take no compute time)."""
        w = _per_launch(rows, "flops")
        smallest = np.minimum.reduce([np.asarray(rows[c], dtype=float) for c in "mnk"])
        d = np.where(smallest > 0, smallest, 1.0)
        f = (self.max_fraction * _saturating(w, self.half_saturation_flops)
             * _saturating(d, self.half_saturation_dim))
        if self.per_phase and "phase" in rows:
            phases = gemm_phase(rows["phase"])
            scale = np.array([float(self.per_phase.get(p, 1.0)) for p in phases], dtype=float)
            f = np.minimum(1.0, f * scale)
        return np.where(w > 0, f, 1.0)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class BandwidthEfficiency(_Model):
    """Achieved fraction of peak memory bandwidth, saturating in the bytes one launch moves:

        fraction = max_fraction x B / (B + half_saturation_bytes)

    so time = (B + B0) / (bandwidth x max): a launch pays the time to fill the memory pipeline
    (Little's law: bytes in flight = bandwidth x latency) before it streams at full rate.
    """

    max_fraction: float
    """Fraction of the datasheet bandwidth that large streaming kernels reach."""
    half_saturation_bytes: float
    """Bytes per launch at which half of `max_fraction` is reached (0: no size penalty)."""
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-6, 1.0), "half_saturation_bytes": (0.0, 1e15)}

    def __post_init__(self) -> None:
        self._check()

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak bandwidth per row (rows moving no bytes get 1)."""
        b = _per_launch(rows, bytes_moved(rows))
        return np.where(b > 0, self.max_fraction * _saturating(b, self.half_saturation_bytes),
                        1.0)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class Overhead(_Model):
    """A fixed cost per launch: `count` executions of a row cost count x seconds_per_launch.

    It is a floor, not an addition (time = max(compute, memory, overhead)): the host
    dispatches the next kernel while the device runs the current one, so an op costs its
    launch time only when that exceeds its device time (eager PyTorch on small ops). Host
    work that nothing overlaps (a CPU runs the framework and the ops one after the other) is
    the separate, additive `host_seconds_per_launch`; calibration fits it from the gap
    between measured iterations and the sum of their ops."""

    seconds_per_launch: float
    """Seconds per kernel launch (host dispatch plus launch latency)."""
    host_seconds_per_launch: float = 0.0
    """Host time per launch that *adds* to the op's time: the eager framework's work between
    ops (Python, module hooks, the autograd engine, a profiler's bookkeeping) where nothing
    overlaps it, as on a CPU, which runs both. 0 where the host runs ahead of the device."""
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "seconds_per_launch": (0.0, 1.0), "host_seconds_per_launch": (0.0, 1.0)}

    def __post_init__(self) -> None:
        self._check()

    def seconds(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """count x seconds_per_launch per row."""
        return np.asarray(rows["count"], dtype=float) * self.seconds_per_launch

    def host_seconds(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """count x host_seconds_per_launch per row."""
        return np.asarray(rows["count"], dtype=float) * self.host_seconds_per_launch


_FAMILY = {"backward": "backward", "backward_data": "backward", "backward_weight": "backward",
           "recompute": "forward"}


def phase_family(phase: Any) -> np.ndarray:
    """Per row: forward (recompute included), backward (data, weight, unsplit) or the phase
    itself (optimizer, communication)."""
    return _renamed(phase, _FAMILY)


_GEMM_NAMES = ("gemm", "batched_gemm")


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class CategoryBandwidthEfficiency(_Model):
    """`BandwidthEfficiency` with its own (max_fraction, half_saturation_bytes) per category
    of memory-bound op, as fitted from measured op tables; categories not listed use the
    defaults. GEMM rows get `gemm_fraction` (their time is the GEMM model's business)."""

    per_category: dict[str, list[float]] = field(default_factory=dict)
    """category (or "category@phase family": forward, backward, optimizer) ->
    [max_fraction, half_saturation_bytes]; the phase-specific entry wins."""
    max_fraction: float = 1.0
    """Default for categories not listed."""
    half_saturation_bytes: float = 0.0
    """Default for categories not listed."""
    gemm_fraction: float = 1.0
    """Bandwidth fraction of GEMM rows."""
    source: str = "fitted"
    """Where the figures come from."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-9, 1.0), "half_saturation_bytes": (0.0, 1e15),
        "gemm_fraction": (1e-9, 1.0)}

    def __post_init__(self) -> None:
        self._check()
        for cat, pair in self.per_category.items():
            ok = (isinstance(pair, list | tuple) and len(pair) == 2
                  and 0 < float(pair[0]) <= 1 and float(pair[1]) >= 0)
            if not ok:
                raise BertscopeError(f"CategoryBandwidthEfficiency: {cat}: expected "
                                     f"[max_fraction in (0, 1], half_saturation_bytes >= 0], "
                                     f"got {pair!r}")

    def __hash__(self) -> int:
        return self._hash()

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak bandwidth per row (rows moving no bytes get 1)."""
        b = _per_launch(rows, bytes_moved(rows))
        cats = np.array([str(c) for c in np.asarray(rows["category"], dtype=object)],
                        dtype=object)
        keyed = cats + "@" + (phase_family(rows["phase"]) if "phase" in rows else "")
        top = np.full(len(b), self.max_fraction, dtype=float)
        half = np.full(len(b), self.half_saturation_bytes, dtype=float)
        for key, (mx, h) in sorted(self.per_category.items(), key=lambda kv: "@" in kv[0]):
            sel = (keyed == key) if "@" in key else (cats == key)  # category@phase wins
            top[sel], half[sel] = float(mx), float(h)
        f = top * np.where(half > 0, b / np.maximum(b + half, 1e-300), 1.0)
        f = np.where(np.isin(cats, _GEMM_NAMES), self.gemm_fraction, f)
        return np.where(b > 0, f, 1.0)


# Assumed defaults per device kind, to be replaced by calibration. Rationale, not measurement:
# - GPU: large cuBLAS / rocBLAS GEMMs commonly run at 70-90% of the dense tensor peak; a
#   GEMM of ~0.25 GFLOP needs about 1 us at A100 bf16 peak to fill 100+ SMs; head-size-64
#   batched GEMMs reach well under half of peak. Streaming kernels reach ~85% of the HBM
#   datasheet figure; ~1 MiB in flight hides HBM latency. Eager PyTorch dispatches an op in
#   a few microseconds.
# - TPU: XLA compiles the step and fuses elementwise ops, so per-op overhead is small; the
#   128x128 MXUs favour dimensions of 128 and more.
# - CPU: BLAS reaches a lower share of peak; launches are plain calls.
_DEFAULTS: dict[DeviceKind, tuple[GemmEfficiency, BandwidthEfficiency, Overhead]] = {
    DeviceKind.GPU: (
        GemmEfficiency(max_fraction=0.85, half_saturation_flops=2.5e8, half_saturation_dim=32),
        BandwidthEfficiency(max_fraction=0.85, half_saturation_bytes=2**20),
        Overhead(seconds_per_launch=5e-6),
    ),
    DeviceKind.TPU: (
        GemmEfficiency(max_fraction=0.85, half_saturation_flops=2.5e8, half_saturation_dim=64),
        BandwidthEfficiency(max_fraction=0.85, half_saturation_bytes=2**20),
        Overhead(seconds_per_launch=1e-6),
    ),
    DeviceKind.CPU: (
        GemmEfficiency(max_fraction=0.7, half_saturation_flops=1e7, half_saturation_dim=16),
        BandwidthEfficiency(max_fraction=0.7, half_saturation_bytes=2**16),
        Overhead(seconds_per_launch=2e-6),
    ),
}


# -- device profile ---------------------------------------------------------------------------
@dataclass(kw_only=True, frozen=True, slots=True)
class DeviceProfile:
    """A device plus the efficiency models a prediction on it uses."""

    device: Device
    """Published peaks and bandwidth (the roofline)."""
    gemm: EfficiencyModel
    """Fraction of the tensor-unit peak that GEMM rows reach."""
    bandwidth: EfficiencyModel
    """Fraction of peak memory bandwidth that rows reach."""
    overhead: OverheadModel
    """Fixed time per launch."""
    notes: str = field(default="", compare=False)
    """Free text: how the profile was made (calibration run, date, software versions)."""

    def __post_init__(self) -> None:
        for name, proto in (("gemm", EfficiencyModel), ("bandwidth", EfficiencyModel),
                            ("overhead", OverheadModel)):
            if not isinstance(getattr(self, name), proto):
                raise BertscopeError(f"DeviceProfile.{name} must implement {proto.__name__}")

    @property
    def sources(self) -> dict[str, str]:
        """Where each model's figures come from."""
        return {"gemm": self.gemm.source, "bandwidth": self.bandwidth.source,
                "overhead": self.overhead.source}

    def with_models(self, **models: Any) -> DeviceProfile:
        """A copy with some models swapped (gemm=..., bandwidth=..., overhead=...)."""
        return replace(self, **models)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the device in the data-file schema and each model by name."""
        return {
            "bertscope_profile": PROFILE_VERSION,
            "device": device_to_dict(self.device),
            "gemm": self.gemm.to_dict(),
            "bandwidth": self.bandwidth.to_dict(),
            "overhead": self.overhead.to_dict(),
            "notes": self.notes,
        }

    def to_json(self) -> str:
        """The profile as JSON text (see `to_dict`)."""
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, origin: str = "<profile>") -> DeviceProfile:
        """Rebuild a profile from `to_dict()` output."""
        if not isinstance(raw, dict) or "bertscope_profile" not in raw:
            raise BertscopeError(f"{origin}: not a bertscope device profile (no "
                                 f"\"bertscope_profile\" key)")
        if raw["bertscope_profile"] != PROFILE_VERSION:
            raise BertscopeError(f"{origin}: profile version {raw['bertscope_profile']!r} "
                                 f"is not supported (this bertscope reads {PROFILE_VERSION})")
        missing = [k for k in ("device", "gemm", "bandwidth", "overhead") if k not in raw]
        if missing:
            raise BertscopeError(f"{origin}: missing {', '.join(missing)}")
        return cls(device=device_from_dict(raw["device"], origin=f"{origin}: device"),
                   gemm=model_from_dict(raw["gemm"], where=f"{origin}: gemm"),
                   bandwidth=model_from_dict(raw["bandwidth"], where=f"{origin}: bandwidth"),
                   overhead=model_from_dict(raw["overhead"], where=f"{origin}: overhead"),
                   notes=str(raw.get("notes", "")))

    @classmethod
    def from_json(cls, text: str, *, origin: str = "<profile>") -> DeviceProfile:
        """Parse a profile from JSON text."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise BertscopeError(f"{origin}: not valid JSON ({e.msg} at line {e.lineno})") \
                from None
        return cls.from_dict(raw, origin=origin)

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON, atomically."""
        p = Path(path)
        atomic_write(p, (self.to_json() + "\n").encode())
        return p

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        """Read a profile JSON file written by `save`."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BertscopeError(f"{p}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise BertscopeError(f"{p}: cannot read: {e}") from None
        return cls.from_json(text, origin=str(p))


def default_profile(device: Device) -> DeviceProfile:
    """The device with the assumed default efficiency models of its kind."""
    gemm, bandwidth, overhead = _DEFAULTS[device.kind]
    return DeviceProfile(device=device, gemm=gemm, bandwidth=bandwidth, overhead=overhead,
                         notes=f"assumed defaults for a {device.kind.value}")


def load_profile(name_or_path: str | Path) -> DeviceProfile:
    """A profile from a catalog name (default models), a device file (.toml/.json, default
    models), or a profile JSON file written by `DeviceProfile.save`."""
    from bertscope.hardware import load_device

    p = Path(str(name_or_path))
    if p.suffix.lower() == ".json" and p.is_file():
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raw = None  # let the device loader give its own message
        if isinstance(raw, dict) and "bertscope_profile" in raw:
            return DeviceProfile.from_dict(raw, origin=str(p))
    return default_profile(load_device(name_or_path))


# -- device <-> data-file dict (the inverse of hardware.device_from_dict) ----------------------
_FILE_KEYS = {
    "memory_bytes": ("memory_GB", 1e9),
    "memory_bandwidth": ("memory_bandwidth_GBps", 1e9),
    "on_chip_bytes": ("on_chip_MB", 1e6),
    "interconnect_bandwidth": ("interconnect_GBps", 1e9),
}


def device_to_dict(d: Device) -> dict[str, Any]:
    """A device in the data-file schema (units in field names), readable by
    `bertscope.hardware.device_from_dict`."""
    out: dict[str, Any] = {"name": d.name, "sku": d.sku, "vendor": d.vendor,
                           "kind": d.kind.value}
    for key in ("memory_kind", "on_chip_note", "interconnect_note", "notes"):
        if getattr(d, key).strip():
            out[key] = getattr(d, key)
    if d.aliases:
        out["aliases"] = list(d.aliases)
    out["peak_TFLOPS"] = {f.value: v / 1e12 for f, v in d.peaks.items()}
    sources = {f"peak_TFLOPS.{f.value}": d.sources[f"peaks.{f.value}"] for f in d.peaks}
    for attr, (key, scale) in _FILE_KEYS.items():
        value = getattr(d, attr)
        if value is not None:
            out[key] = value / scale
            sources[key] = d.sources[attr]
    out["sources"] = sources
    return out


__all__ = [
    "ASSUMED",
    "BandwidthEfficiency",
    "CategoryBandwidthEfficiency",
    "DeviceProfile",
    "EfficiencyModel",
    "GemmEfficiency",
    "Overhead",
    "OverheadModel",
    "default_profile",
    "device_to_dict",
    "gemm_phase",
    "load_profile",
    "model_from_dict",
    "phase_family",
    "register_model",
]
