"""Saved measurements the tests read (tests/data/measured, gzip-compressed JSON; where each
came from: tests/data/measured/README.md), unpacked once per test process into a temporary
folder so they load as the plain files `bertscope` writes."""

from __future__ import annotations

import atexit
import gzip
import shutil
import tempfile
from functools import cache
from pathlib import Path

PACKED = Path(__file__).resolve().parent / "data" / "measured"


@cache
def _unpacked_root() -> Path:
    """A temporary copy of tests/data/measured with every `.json.gz` unpacked to `.json`."""
    root = Path(tempfile.mkdtemp(prefix="bertscope-measured-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    for packed in PACKED.rglob("*.json.gz"):
        plain = root / packed.relative_to(PACKED).with_suffix("")
        plain.parent.mkdir(parents=True, exist_ok=True)
        plain.write_bytes(gzip.decompress(packed.read_bytes()))
    return root


def saved_measurement(relative: str) -> Path:
    """The unpacked path of a saved measurement, e.g. `saved_measurement("validate_cpu")` (a
    folder of rounds) or `saved_measurement("validate_cpu.json")` (a validation report)."""
    path = _unpacked_root() / relative
    if not path.exists():
        raise FileNotFoundError(f"{PACKED / relative}(.gz): no such saved measurement")
    return path
