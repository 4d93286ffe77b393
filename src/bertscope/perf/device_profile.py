"""The frame every efficiency model fits into, and the device profile that carries them.

- the protocols a model implements (`EfficiencyModel`, `OverheadModel`; their contract is in
  `bertscope.perf.efficiency`),
- the registry that lets a profile JSON file name any model by class name
  (`register_model`, `model_from_dict`) and `ModelBase`, the serialization and bound checks
  the built-in dataclass models share,
- the two small pieces of arithmetic those models share (`saturating`, `per_launch`),
- `DeviceProfile` (a device plus its three models) and its JSON round trip.

The models themselves live in `gemm_models.py` and `bandwidth.py`, the per-kind assumed
defaults and `load_profile` in `efficiency.py`. No pandas here: `predict` passes columns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from bertscope.bounded import loads_json, read_json
from bertscope.config import from_dict
from bertscope.errors import BertscopeError, expect
from bertscope.hardware import Device, device_from_dict
from bertscope.io import read_text, write_or_rescue

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


# -- registry ---------------------------------------------------------------------------------
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
    name = expect(raw, "model", str, where)
    cls = _REGISTRY.get(name)
    if cls is None:
        known = ", ".join(sorted(_REGISTRY))
        raise BertscopeError(f"{where}: unknown model {name!r}; known: {known}")
    return from_dict(cls, {k: v for k, v in raw.items() if k != "model"}, f"{where}: {name}")


class ModelBase:
    """Shared serialization and bound checks for the built-in dataclass models: a subclass
    declares `_bounds` (field -> [lo, hi]) and a `source` field, and calls `_check()` in
    `__post_init__`."""

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


# -- shared arithmetic ------------------------------------------------------------------------
def saturating(work: np.ndarray, half: float) -> np.ndarray:
    """w / (w + half): 0 at no work, 1/2 at `half`, towards 1 for large work (all ones when
    `half` <= 0: no size penalty)."""
    w = np.asarray(work, dtype=float)
    if half <= 0:
        return np.ones_like(w)
    return w / (w + half)


def per_launch(rows: Mapping[str, Any] | pd.DataFrame, column: str | Any) -> np.ndarray:
    """A per-row total (a column name, or the values themselves) divided by the row's
    launches (`count`, at least 1): the work one launch does."""
    total = np.asarray(rows[column] if isinstance(column, str) else column, dtype=float)
    count = np.asarray(rows["count"], dtype=float)
    if (count.size < total.size and np.broadcast_shapes(count.shape, total.shape) == total.shape
            and bool(np.all(count <= 1.0))):  # one launch a row (a sweep's broadcast count
        return total  # column): x / 1, without a pass over x
    return total / np.maximum(count, 1.0)


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
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)
    """Where the fits came from, as data (`calibrate --from-trace`: each trace's file name
    and sha256, the device, kernels used per fit, the date); written only when non-empty."""

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
            **({"provenance": self.provenance} if self.provenance else {}),
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
        provenance = raw.get("provenance", {})
        if not isinstance(provenance, dict):
            raise BertscopeError(f"{origin}: provenance must be an object, got "
                                 f"{type(provenance).__name__}")
        for key in ("device", "gemm", "bandwidth", "overhead"):
            expect(raw, key, dict, origin)
        return cls(device=device_from_dict(raw["device"], origin=f"{origin}: device"),
                   gemm=model_from_dict(raw["gemm"], where=f"{origin}: gemm"),
                   bandwidth=model_from_dict(raw["bandwidth"], where=f"{origin}: bandwidth"),
                   overhead=model_from_dict(raw["overhead"], where=f"{origin}: overhead"),
                   notes=str(raw.get("notes", "")), provenance=provenance)

    @classmethod
    def from_json(cls, text: str, *, origin: str = "<profile>") -> DeviceProfile:
        """Parse a profile from JSON text."""
        return cls.from_dict(loads_json(text, origin), origin=origin)

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON, atomically; on a failed write the profile goes to a
        rescue file and the one-line error says where (calibration is not lost)."""
        return write_or_rescue(path, (self.to_json() + "\n").encode())

    @classmethod
    def load(cls, path: str | Path) -> DeviceProfile:
        """Read a profile JSON file written by `save`."""
        p = Path(path)
        return cls.from_json(read_text(p), origin=str(p))

def read_profile_file(path: Path) -> DeviceProfile | None:
    """The profile in a JSON file written by `DeviceProfile.save`; None when the file is not
    one (not JSON, or no "bertscope_profile" key: a device file, say)."""
    try:
        raw = read_json(path)
    except BertscopeError:
        return None  # let the device loader give its own message (or the same one)
    if isinstance(raw, dict) and "bertscope_profile" in raw:
        return DeviceProfile.from_dict(raw, origin=str(path))
    return None


# -- device <-> data-file dict (the inverse of hardware.device_from_dict) ----------------------
_FILE_KEYS = {
    "memory_bytes": ("memory_GB", 1e9),
    "memory_bandwidth": ("memory_bandwidth_GBps", 1e9),
    "on_chip_bytes": ("on_chip_MB", 1e6),
    "interconnect_bandwidth": ("interconnect_GBps", 1e9),
    "sm_count": ("sm_count", 1),
    "boost_clock": ("boost_clock_MHz", 1e6),
    "l2_bytes_per_clock": ("l2_bytes_per_clock", 1),
    "stream_bandwidth_fraction": ("stream_bandwidth_fraction", 1),
    "dram_latency": ("dram_latency_ns", 1e-9),
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
            # through Decimal so 3.16e-07 s is written 316 ns, not 315.99999999999994
            out[key] = (value if attr == "sm_count"
                        else float(Decimal(repr(value)) / Decimal(repr(scale))))
            sources[key] = d.sources[attr]
    if d.mma_tile is not None:
        out["mma_tile"] = list(d.mma_tile)
        sources["mma_tile"] = d.sources["mma_tile"]
    if d.gemm_fractions:
        out["gemm_attainable_fraction"] = {f.value: v for f, v in d.gemm_fractions.items()}
        for f in d.gemm_fractions:
            sources[f"gemm_attainable_fraction.{f.value}"] = d.sources[f"gemm_fractions.{f.value}"]
    if d.gemm_shapes:
        out["gemm_attainable_shape"] = {f.value: list(v) for f, v in d.gemm_shapes.items()}
    out["sources"] = sources
    return out


__all__ = [
    "ASSUMED",
    "PROFILE_VERSION",
    "DeviceProfile",
    "EfficiencyModel",
    "ModelBase",
    "OverheadModel",
    "device_to_dict",
    "model_from_dict",
    "per_launch",
    "read_profile_file",
    "register_model",
    "saturating",
]
