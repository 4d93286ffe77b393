"""Accelerator descriptions: peak throughput per number format, memory, on-chip memory, links.

A `Device` holds SI units inside: FLOP/s, bytes/s, bytes. Data files (TOML or JSON, one
device per file) carry the unit in each field name at the edge, as published:

    memory_GB = 80                     # or memory_GiB: capacities in the vendor's own unit
    memory_bandwidth_GBps = 2039       # or _TBps
    on_chip_MiB = 40                   # optional; or _MB, _KiB, _GB, _GiB
    interconnect_GBps = 600            # optional; or _TBps, _Gbitps
    sm_count = 108                     # optional (GPUs): SMs (NVIDIA) / compute units (AMD)
    boost_clock_MHz = 1410             # optional: the clock the published peaks assume
    mma_tile = [16, 8, 16]             # optional: M, N, K of one tensor-core instruction
    l2_bytes_per_clock = 5120          # optional: L2 read bandwidth per clock, whole chip
    stream_bandwidth_fraction = 0.877  # optional: measured streaming-kernel bandwidth / the peak
    dram_latency_ns = 316              # optional: measured DRAM load latency (pointer chase)
    [gemm_attainable_fraction]         # optional: measured large-GEMM rate / peak, per format
    fp16 = 0.664
    [gemm_attainable_shape]            # optional: the [M, N, K] each fraction was measured at
    fp16 = [8192, 8192, 8192]          # (cited by the fraction's own source)
    [peak_TFLOPS]                      # DENSE peaks (no 2:4 structured sparsity); int8 in TOPS
    bf16 = 312
    [sources]                          # one citation per figure, keyed by the field name
    "peak_TFLOPS.bf16" = "NVIDIA A100 datasheet (2021), https://..."
    memory_GB = "@datasheet"           # "@id" or "@id, detail" expands from [references]

Every numeric figure must have a source; the loader rejects a file where one is missing.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any

from bertscope.bounded import loads_json, loads_toml
from bertscope.errors import BertscopeError, is_positive_number, parse_enum
from bertscope.io import read_text


class NumberFormat(StrEnum):
    """Number format of the math a peak applies to. `int8` peaks count integer ops (TOPS)."""

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"


class DeviceKind(StrEnum):
    """Broad class of processor."""

    GPU = "gpu"
    TPU = "tpu"
    CPU = "cpu"


@dataclass(kw_only=True, slots=True, frozen=True)
class Device:
    """One accelerator SKU, its published peaks in SI units, and a citation per figure.

    Raises `BertscopeError` on construction when a figure is not a positive number, a peak's
    format is unknown, or a figure has no source.
    """

    name: str
    """Catalog key, lowercase, e.g. "a100-sxm4-80gb"."""
    sku: str
    """The exact product the figures describe, e.g. "NVIDIA A100 SXM4 80GB"."""
    vendor: str
    """Maker, e.g. "NVIDIA", "AMD", "Google"."""
    kind: DeviceKind
    """gpu, tpu or cpu."""
    peaks: dict[NumberFormat, float]
    """Dense (no structured sparsity) peak throughput per format, FLOP/s (int8: op/s).
    A format the chip has no published peak for is absent."""
    memory_bytes: float
    """Device memory capacity (HBM, or DDR for TPU v1), bytes."""
    memory_bandwidth: float
    """Peak device-memory bandwidth, bytes/s."""
    memory_kind: str = ""
    """Memory technology, e.g. "HBM2e"."""
    on_chip_bytes: float | None = None
    """Largest on-chip memory level as documented (L2, Infinity Cache, CMEM, unified
    buffer...), bytes; None where the vendor does not publish it."""
    on_chip_note: str = ""
    """What `on_chip_bytes` is, e.g. "L2 cache"."""
    interconnect_bandwidth: float | None = None
    """Device-to-device link bandwidth per device (NVLink, Infinity Fabric, ICI), bytes/s,
    as the vendor quotes it (usually both directions summed, see `interconnect_note`);
    None where the device has no such link or the figure is not published."""
    interconnect_note: str = ""
    """What `interconnect_bandwidth` counts: links, generation, direction convention."""
    sources: dict[str, str] = field(repr=False)
    """Citation per figure, keyed by `figures()` keys ("peaks.bf16", "memory_bytes", ...)."""
    aliases: tuple[str, ...] = ()
    """Other lowercase names `load_device` accepts, e.g. ("a100",)."""
    sm_count: int | None = None
    """Streaming multiprocessors (NVIDIA) or compute units (AMD): the processors a GEMM's
    thread-block tiles are spread over (wave quantization); None where it does not apply
    (TPUs: a few large systolic arrays) or is not published."""
    boost_clock: float | None = None
    """Clock the published peaks are computed at, Hz (peak = units x ops/clock x clock)."""
    mma_tile: tuple[int, int, int] | None = None
    """(M, N, K) of one tensor/matrix-core instruction (e.g. A100 mma.sync m16n8k16): GEMM
    dimensions are padded to multiples of it."""
    l2_bytes_per_clock: float | None = None
    """Whole-chip L2 read bandwidth per clock, bytes (what feeds the SMs' operand tiles)."""
    stream_bandwidth_fraction: float | None = None
    """Fraction of `memory_bandwidth` a large streaming kernel (STREAM-style: one load and
    one store stream) was measured to reach, cited; None where no measurement is cited."""
    dram_latency: float | None = None
    """Measured device-memory load latency (pointer chase past the last cache), seconds,
    cited; with the bandwidth it gives the bytes in flight a launch needs (Little's law)."""
    gemm_fractions: dict[NumberFormat, float] = field(default_factory=dict)
    """Per format: the fraction of that format's dense peak large library GEMMs were
    measured to reach (a microbenchmark figure, cited; file table
    `[gemm_attainable_fraction]`); formats without a cited figure are absent."""
    gemm_shapes: dict[NumberFormat, tuple[int, int, int]] = field(default_factory=dict)
    """Per format with a `gemm_fractions` figure: the (M, N, K) GEMM it was measured on,
    where its citation gives one (file table `[gemm_attainable_shape]`; the fraction's source
    cites it): the GEMM model reproduces the figure at that shape
    (`perf.gpu_gemm.for_device`)."""
    notes: str = field(default="", repr=False)
    """Caveats: which figures were omitted and why, how dense figures were derived."""
    origin: str = field(default="", compare=False, repr=False)
    """File the device was loaded from ("" when built in code)."""

    def __post_init__(self) -> None:
        peaks: dict[NumberFormat, float] = {}
        for fmt, value in dict(self.peaks).items():
            peaks[_number_format(fmt, self.name)] = value
        object.__setattr__(self, "peaks", peaks)
        object.__setattr__(self, "sources", dict(self.sources))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if self.mma_tile is not None:
            tile = tuple(self.mma_tile)
            if len(tile) != 3 or not all(isinstance(v, int) and not isinstance(v, bool)
                                         and 0 < v <= 4096 for v in tile):
                raise BertscopeError(f"device {self.name!r}: mma_tile must be three positive "
                                     f"integers [M, N, K], got {self.mma_tile!r}")
            object.__setattr__(self, "mma_tile", tile)
            if not str(self.sources.get("mma_tile", "")).strip():
                raise BertscopeError(f"device {self.name!r}: mma_tile has no source; cite "
                                     f"where the figure comes from")
        if self.sm_count is not None and (isinstance(self.sm_count, bool)
                                          or not isinstance(self.sm_count, int)):
            raise BertscopeError(f"device {self.name!r}: sm_count must be a whole number, "
                                 f"got {self.sm_count!r}")
        frac = self.stream_bandwidth_fraction
        if frac is not None and not (is_positive_number(frac) and frac <= 1):
            raise BertscopeError(f"device {self.name!r}: stream_bandwidth_fraction must lie in "
                                 f"(0, 1], got {frac!r}")
        fractions = {_number_format(f, self.name): v for f, v in dict(self.gemm_fractions).items()}
        object.__setattr__(self, "gemm_fractions", fractions)
        for fmt, value in fractions.items():
            if not (is_positive_number(value) and value <= 1):
                raise BertscopeError(f"device {self.name!r}: gemm_attainable_fraction.{fmt.value} "
                                     f"must lie in (0, 1], got {value!r}")
        shapes = {_number_format(f, self.name): v for f, v in dict(self.gemm_shapes).items()}
        for fmt, shape in shapes.items():
            shape = tuple(shape) if isinstance(shape, list | tuple) else ()
            if len(shape) != 3 or not all(isinstance(v, int) and not isinstance(v, bool)
                                          and 0 < v <= 10**7 for v in shape):
                raise BertscopeError(f"device {self.name!r}: gemm_attainable_shape.{fmt.value} "
                                     f"must be three positive integers [M, N, K], got "
                                     f"{self.gemm_shapes[fmt]!r}")
            if fmt not in fractions:
                raise BertscopeError(f"device {self.name!r}: gemm_attainable_shape.{fmt.value} "
                                     f"has no gemm_attainable_fraction.{fmt.value} to go with "
                                     f"it; give the fraction measured at that shape")
            shapes[fmt] = shape
        object.__setattr__(self, "gemm_shapes", shapes)
        if not isinstance(self.kind, DeviceKind):
            if self.kind not in set(DeviceKind):
                kinds = ", ".join(k.value for k in DeviceKind)
                raise BertscopeError(f"device {self.name!r}: unknown kind {self.kind!r}; "
                                     f"choose one of: {kinds}")
            object.__setattr__(self, "kind", DeviceKind(self.kind))
        for text in ("name", "sku", "vendor"):
            if not isinstance(getattr(self, text), str) or not getattr(self, text).strip():
                raise BertscopeError(f"device {self.name!r}: {text} must be a non-empty string")
        if not peaks:
            raise BertscopeError(f"device {self.name!r}: give at least one peak throughput")
        for key, value in self.figures().items():
            if not is_positive_number(value):
                raise BertscopeError(f"device {self.name!r}: {key} must be a positive number, "
                                     f"got {value!r}")
            source = self.sources.get(key)
            if not isinstance(source, str) or not source.strip():
                raise BertscopeError(f"device {self.name!r}: {key} has no source; cite where "
                                     f"the figure comes from")

    def __hash__(self) -> int:
        """Hash of the identifying figures (the dict fields are not hashable themselves)."""
        return hash((self.name, self.sku, self.memory_bytes, self.memory_bandwidth))

    def figures(self) -> dict[str, float]:
        """Every numeric figure in SI units, keyed as in `sources` ("peaks.bf16", ...)."""
        out = {f"peaks.{fmt.value}": value for fmt, value in self.peaks.items()}
        out["memory_bytes"] = self.memory_bytes
        out["memory_bandwidth"] = self.memory_bandwidth
        if self.on_chip_bytes is not None:
            out["on_chip_bytes"] = self.on_chip_bytes
        if self.interconnect_bandwidth is not None:
            out["interconnect_bandwidth"] = self.interconnect_bandwidth
        for key in _COMPUTE_FIELDS:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for fmt, value in self.gemm_fractions.items():
            out[f"gemm_fractions.{fmt.value}"] = value
        return out

    @property
    def formats(self) -> tuple[NumberFormat, ...]:
        """Formats with a published peak, in `NumberFormat` order."""
        return tuple(f for f in NumberFormat if f in self.peaks)

    def has(self, fmt: NumberFormat | str) -> bool:
        """True when the device has a published peak for `fmt`."""
        return _number_format(fmt, self.name) in self.peaks

    def peak_flops(self, fmt: NumberFormat | str) -> float:
        """Dense peak throughput for `fmt`, FLOP/s (int8: op/s).

        Raises `BertscopeError` naming the formats the device has when it lacks `fmt`.
        """
        key = _number_format(fmt, self.name)
        if key not in self.peaks:
            have = ", ".join(f.value for f in self.formats)
            raise BertscopeError(f"{self.sku} ({self.name}) has no published dense {key.value} "
                                 f"peak; it has: {have}")
        return self.peaks[key]

    def ridge_point(self, fmt: NumberFormat | str) -> float:
        """Roofline ridge point for `fmt`: peak FLOP/s / memory bytes/s, in FLOP/byte."""
        return self.peak_flops(fmt) / self.memory_bandwidth


# ---------------------------------------------------------------------------------------------
# Loading from TOML / JSON

# Unit -> SI scale, as exact integers (scaled in Decimal so 66.9 TFLOPS is 66.9e12 exactly).
_CAPACITY_UNITS = {"GB": 10**9, "GiB": 2**30, "MB": 10**6, "MiB": 2**20, "KiB": 2**10}
_BANDWIDTH_UNITS = {"TBps": 10**12, "GBps": 10**9, "Gbitps": 10**9 // 8}
_TERA = 10**12
# Device field -> (data-file stem, units, required). The file key is f"{stem}_{unit}".
_QUANTITIES: dict[str, tuple[str, dict[str, int], bool]] = {
    "memory_bytes": ("memory", _CAPACITY_UNITS, True),
    "memory_bandwidth": ("memory_bandwidth", _BANDWIDTH_UNITS, True),
    "on_chip_bytes": ("on_chip", _CAPACITY_UNITS, False),
    "interconnect_bandwidth": ("interconnect", _BANDWIDTH_UNITS, False),
}
# Optional compute-structure figures (used by the GPU GEMM model, `perf/gpu_gemm.py`):
# Device field -> (data-file key, scale to SI). mma_tile (a list) is handled apart.
_COMPUTE_FILE: dict[str, tuple[str, int | Decimal]] = {
    "sm_count": ("sm_count", 1), "boost_clock": ("boost_clock_MHz", 10**6),
    "l2_bytes_per_clock": ("l2_bytes_per_clock", 1),
    "stream_bandwidth_fraction": ("stream_bandwidth_fraction", 1),
    "dram_latency": ("dram_latency_ns", Decimal("1e-9"))}
_FRACTIONS_TABLE = "gemm_attainable_fraction"
_SHAPES_TABLE = "gemm_attainable_shape"
_COMPUTE_FIELDS = tuple(_COMPUTE_FILE)
_PEAKS_TABLE = "peak_TFLOPS"
_TEXT_FIELDS = ("name", "sku", "vendor", "kind", "memory_kind", "on_chip_note",
                "interconnect_note", "notes")
_REQUIRED_TEXT = ("name", "vendor", "kind")
_KNOWN_KEYS = frozenset(
    [*_TEXT_FIELDS, "aliases", _PEAKS_TABLE, "sources", "references", "mma_tile",
     _FRACTIONS_TABLE, _SHAPES_TABLE,
     *(key for key, _ in _COMPUTE_FILE.values())]
    + [f"{stem}_{unit}" for stem, units, _ in _QUANTITIES.values() for unit in units]
)
_SUFFIXES = (".toml", ".json")


def read_device_file(path: str | Path) -> Device:
    """Load one device from a TOML or JSON file in the data-file schema (see module docs).

    Raises `BertscopeError` with a one-line message naming the file, the problem and the fix.
    """
    p = Path(path)
    if p.suffix.lower() not in _SUFFIXES:
        raise BertscopeError(f"{p}: device files must end in .toml or .json")
    text = read_text(p, missing="give a catalog device name or a path to a .toml/.json "
                                "device file")
    return parse_device_text(text, json_format=p.suffix.lower() == ".json", origin=str(p))


def parse_device_text(text: str, *, json_format: bool = False, origin: str = "<text>") -> Device:
    """Parse one device from TOML (or JSON when `json_format`) text in the data-file schema."""
    raw: Any = (loads_json(text, origin, "use the fields of bertscope/data/devices/*.toml")
                if json_format else
                loads_toml(text, origin, "see the catalog files in bertscope/data/devices/ for "
                                         "the format"))
    if not isinstance(raw, dict):
        raise BertscopeError(f"{origin}: expected a table/object of device fields, "
                             f"got {type(raw).__name__}")
    return device_from_dict(raw, origin=origin)


def device_from_dict(raw: Mapping[str, Any], *, origin: str = "<dict>") -> Device:
    """Build a `Device` from a parsed data file (units in field names, sources per figure)."""
    where = origin

    def fail(problem: str) -> BertscopeError:
        return BertscopeError(f"{where}: {problem}")

    unknown = sorted(set(raw) - _KNOWN_KEYS)
    if unknown:
        key = unknown[0]
        by_case = {k.lower(): k for k in _KNOWN_KEYS}
        close = ([by_case[key.lower()]] if key.lower() in by_case
                 else difflib.get_close_matches(key, sorted(_KNOWN_KEYS), n=1, cutoff=0.6))
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise fail(f"unknown field {key!r}{hint} (units go in field names, e.g. memory_GB)")
    missing = [k for k in _REQUIRED_TEXT if k not in raw]
    if missing:
        raise fail(f"missing field {', '.join(missing)}")
    text: dict[str, str] = {}
    for key in _TEXT_FIELDS:
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key].strip():
                raise fail(f"{key} must be a non-empty string, got {raw[key]!r}")
            text[key] = raw[key].strip()
    name = text["name"].lower()
    kinds = ", ".join(k.value for k in DeviceKind)
    if text["kind"].lower() not in set(DeviceKind):
        raise fail(f"unknown kind {text['kind']!r}; choose one of: {kinds}")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise fail("aliases must be a list of names, e.g. aliases = [\"a100\"]")

    references = raw.get("references", {})
    if not isinstance(references, dict) or not all(
        isinstance(v, str) and v.strip() for v in references.values()
    ):
        raise fail("[references] must map short ids to citation strings")
    sources_raw = raw.get("sources")
    if sources_raw is None:
        raise fail("missing [sources]; cite a datasheet, whitepaper or paper for every figure")
    if not isinstance(sources_raw, dict):
        raise fail("[sources] must map figure names (e.g. \"peak_TFLOPS.bf16\") to citations")

    def cite(file_key: str) -> str:
        value = sources_raw.get(file_key)
        if not isinstance(value, str) or not value.strip():
            raise fail(f"{file_key} has no source; add {file_key!r} = \"<datasheet title, URL>\" "
                       f"under [sources]")
        value = value.strip()
        if not value.startswith("@"):
            return value
        ref, _, detail = value[1:].partition(",")
        ref = ref.strip()
        if ref not in references:
            known = ", ".join(sorted(references)) or "none defined"
            raise fail(f"source of {file_key} refers to unknown reference @{ref} "
                       f"(known: {known}); define it under [references]")
        return f"{references[ref]}; {detail.strip()}" if detail.strip() else references[ref]

    def number(file_key: str, value: Any, scale: int | Decimal) -> float:
        if not is_positive_number(value):
            raise fail(f"{file_key} must be a positive number, got {value!r}")
        scaled = float(Decimal(str(value)) * scale)
        if not math.isfinite(scaled):
            raise fail(f"{file_key} {value!r} is beyond float range once in base units; "
                       f"give the figure from the datasheet")
        return scaled

    used: set[str] = set()
    peaks_raw = raw.get(_PEAKS_TABLE)
    if not isinstance(peaks_raw, dict) or not peaks_raw:
        raise fail(f"missing [{_PEAKS_TABLE}]; give at least one dense peak, e.g. bf16 = 312")
    peaks: dict[NumberFormat, float] = {}
    sources: dict[str, str] = {}
    formats = ", ".join(f.value for f in NumberFormat)
    for fmt_name, value in peaks_raw.items():
        if fmt_name not in set(NumberFormat):
            raise fail(f"unknown number format {fmt_name!r} in [{_PEAKS_TABLE}]; "
                       f"use one of: {formats}")
        file_key = f"{_PEAKS_TABLE}.{fmt_name}"
        fmt = NumberFormat(fmt_name)
        peaks[fmt] = number(file_key, value, _TERA)
        sources[f"peaks.{fmt.value}"] = cite(file_key)
        used.add(file_key)

    quantities: dict[str, float | None] = {}
    for attr, (stem, units, required) in _QUANTITIES.items():
        given = [u for u in units if f"{stem}_{u}" in raw]
        if len(given) > 1:
            both = " and ".join(f"{stem}_{u}" for u in given)
            raise fail(f"{both} both given; keep one")
        if not given:
            if required:
                choices = " or ".join(f"{stem}_{u}" for u in units)
                raise fail(f"missing field {stem} (give {choices})")
            quantities[attr] = None
            continue
        file_key = f"{stem}_{given[0]}"
        quantities[attr] = number(file_key, raw[file_key], units[given[0]])
        sources[attr] = cite(file_key)
        used.add(file_key)
    compute: dict[str, Any] = {}
    for attr, (file_key, scale) in _COMPUTE_FILE.items():
        if file_key in raw:
            value = raw[file_key]
            if attr == "sm_count" and (isinstance(value, bool) or not isinstance(value, int)
                                       or not 0 < value <= 100_000):
                raise fail(f"sm_count must be a whole number of SMs/CUs, got {value!r}")
            if attr == "stream_bandwidth_fraction" and not (is_positive_number(value)
                                                            and value <= 1):
                raise fail(f"stream_bandwidth_fraction must be a fraction in (0, 1], "
                           f"got {value!r}")
            compute[attr] = value if attr == "sm_count" else number(file_key, value, scale)
            sources[attr] = cite(file_key)
            used.add(file_key)
    if "mma_tile" in raw:
        tile = raw["mma_tile"]
        if not (isinstance(tile, list) and len(tile) == 3 and all(
                isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 4096 for v in tile)):
            raise fail(f"mma_tile must be three positive integers [M, N, K], got {tile!r}")
        compute["mma_tile"] = tuple(tile)
        sources["mma_tile"] = cite("mma_tile")
        used.add("mma_tile")
    fractions_raw = raw.get(_FRACTIONS_TABLE, {})
    if not isinstance(fractions_raw, dict):
        raise fail(f"[{_FRACTIONS_TABLE}] must map number formats to fractions, e.g. fp16 = 0.66")
    fractions: dict[NumberFormat, float] = {}
    for fmt_name, value in fractions_raw.items():
        if fmt_name not in set(NumberFormat):
            raise fail(f"unknown number format {fmt_name!r} in [{_FRACTIONS_TABLE}]; "
                       f"use one of: {formats}")
        file_key = f"{_FRACTIONS_TABLE}.{fmt_name}"
        if not (is_positive_number(value) and value <= 1):
            raise fail(f"{file_key} must be a fraction in (0, 1], got {value!r}")
        fractions[NumberFormat(fmt_name)] = float(value)
        sources[f"gemm_fractions.{fmt_name}"] = cite(file_key)
        used.add(file_key)
    if fractions:
        compute["gemm_fractions"] = fractions
    shapes_raw = raw.get(_SHAPES_TABLE, {})
    if not isinstance(shapes_raw, dict):
        raise fail(f"[{_SHAPES_TABLE}] must map number formats to [M, N, K], e.g. "
                   f"fp16 = [8192, 8192, 8192]")
    for fmt_name in shapes_raw:
        if fmt_name not in set(NumberFormat):
            raise fail(f"unknown number format {fmt_name!r} in [{_SHAPES_TABLE}]; "
                       f"use one of: {formats}")
    if shapes_raw:
        compute["gemm_shapes"] = {NumberFormat(f): v for f, v in shapes_raw.items()}
    stray = sorted(set(sources_raw) - used)
    if stray:
        raise fail(f"[sources] has {stray[0]!r}, which is not a figure in this file; "
                   f"remove it or fix its name")

    memory_bytes = quantities["memory_bytes"]
    memory_bandwidth = quantities["memory_bandwidth"]
    assert memory_bytes is not None and memory_bandwidth is not None  # required above
    try:
        return Device(
            name=name,
            sku=text.get("sku", text["name"]),
            vendor=text["vendor"],
            kind=DeviceKind(text["kind"].lower()),
            peaks=peaks,
            memory_bytes=memory_bytes,
            memory_bandwidth=memory_bandwidth,
            memory_kind=text.get("memory_kind", ""),
            on_chip_bytes=quantities["on_chip_bytes"],
            on_chip_note=text.get("on_chip_note", ""),
            interconnect_bandwidth=quantities["interconnect_bandwidth"],
            interconnect_note=text.get("interconnect_note", ""),
            sources=sources,
            aliases=tuple(a.lower() for a in aliases),
            notes=text.get("notes", ""),
            origin=origin,
            **compute,
        )
    except BertscopeError as e:
        raise fail(str(e)) from None


def _number_format(fmt: NumberFormat | str, device: str) -> NumberFormat:
    """Coerce a format name to `NumberFormat`, with a clear error listing the choices."""
    if isinstance(fmt, NumberFormat):
        return fmt
    return parse_enum(NumberFormat, str(fmt).lower(), "number format", f"device {device!r}")
