"""Hardware catalog: accelerators as data files with a cited source for every figure.

    >>> from bertscope.hardware import load_device
    >>> a100 = load_device("a100")                 # catalog name or alias, any case
    >>> round(a100.ridge_point("bf16"))            # 312e12 FLOP/s / 2039e9 B/s
    153

`load_device("path/to/my_chip.toml")` loads a user device (TOML or JSON, same schema as the
catalog files in `bertscope/data/devices/*.toml`, one file per SKU; see `device.py`).
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from bertscope.errors import BertscopeError
from bertscope.hardware.device import (
    Device,
    DeviceKind,
    NumberFormat,
    device_from_dict,
    parse_device_text,
    read_device_file,
)

__all__ = [
    "Device",
    "DeviceKind",
    "NumberFormat",
    "catalog",
    "device_from_dict",
    "list_devices",
    "load_device",
    "parse_device_text",
    "read_device_file",
]

_FILE_SUFFIXES = (".toml", ".json")


@cache
def catalog() -> tuple[Device, ...]:
    """Every catalog device, ordered by vendor then name (digit runs by value)."""
    folder = files("bertscope") / "data" / "devices"
    devices = [parse_device_text(entry.read_text(encoding="utf-8"), origin=f"devices/{entry.name}")
               for entry in folder.iterdir() if entry.name.endswith(".toml")]
    seen: dict[str, str] = {}
    for d in devices:
        for key in (d.name, *d.aliases):
            if key in seen:
                raise BertscopeError(f"{d.origin}: name {key!r} is already used by "
                                     f"{seen[key]}; rename or drop the alias")
            seen[key] = d.origin
    return tuple(sorted(devices, key=lambda d: (d.vendor.lower(), _natural(d.name))))


def _natural(name: str) -> tuple[Any, ...]:
    """Sort key that orders digit runs by value, so "mi50" comes before "mi100"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _by_name() -> dict[str, Device]:
    """Catalog devices keyed by name and by every alias (all lowercase)."""
    out: dict[str, Device] = {}
    for d in catalog():
        out[d.name] = d
        for alias in d.aliases:
            out[alias] = d
    return out


def load_device(name_or_path: str | Path) -> Device:
    """A catalog device by name or alias (case-insensitive), or a user TOML/JSON device file.

    Raises `BertscopeError` for an unknown name (suggesting close ones) or a bad file.
    """
    if isinstance(name_or_path, Path) or str(name_or_path).lower().endswith(_FILE_SUFFIXES):
        return read_device_file(name_or_path)
    text = str(name_or_path).strip()
    if Path(text).is_file() or "/" in text or "\\" in text:
        return read_device_file(text)
    key = "-".join(text.lower().replace("_", " ").split())  # "TPU v4" -> "tpu-v4"
    known = _by_name()
    if key in known:
        return known[key]
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    names = ", ".join(d.name for d in catalog())
    raise BertscopeError(f"unknown device {name_or_path!r}; {hint}catalog: {names}; "
                         f"or give a path to a .toml/.json device file")


def list_devices(fmt: NumberFormat | str | None = None) -> list[dict[str, Any]]:
    """One row per catalog device for a table: name, SKU, vendor, peaks, memory, ridge point.

    Peaks are dense TFLOPS (None where the chip lacks the format). The ridge point (FLOP/byte)
    is for `fmt` (None where the chip lacks it); by default bf16, else fp16, else the chip's
    first format (int8 on TPU v1), named in `ridge_format`.
    """
    rows = []
    for d in catalog():
        if fmt is not None:
            ridge_fmt: NumberFormat | None = NumberFormat(str(fmt).lower()) if d.has(fmt) else None
        else:
            preferred = (NumberFormat.BF16, NumberFormat.FP16, *d.formats)
            ridge_fmt = next(f for f in preferred if d.has(f))

        def tflops(f: NumberFormat, d: Device = d) -> float | None:
            return d.peaks[f] / 1e12 if f in d.peaks else None

        rows.append({
            "name": d.name,
            "sku": d.sku,
            "vendor": d.vendor,
            "kind": d.kind.value,
            "bf16_TFLOPS": tflops(NumberFormat.BF16),
            "fp16_TFLOPS": tflops(NumberFormat.FP16),
            "fp32_TFLOPS": tflops(NumberFormat.FP32),
            "bandwidth_GBps": d.memory_bandwidth / 1e9,
            "memory_GB": d.memory_bytes / 1e9,
            "ridge_format": ridge_fmt.value if ridge_fmt else None,
            "ridge_FLOP_per_byte": d.ridge_point(ridge_fmt) if ridge_fmt else None,
        })
    return rows
