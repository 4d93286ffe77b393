"""File output in one place: folder checks before work starts, atomic writes (a reader sees
the old file or the whole new one), and the export formats of every table bertscope writes."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertscope.errors import BertscopeError, parse_enum

if TYPE_CHECKING:
    import pandas as pd


class Format(StrEnum):
    """Export formats of a table."""

    CSV = "csv"
    JSON = "json"
    PARQUET = "parquet"


def export_format(value: str, p: Path) -> Format:
    """The export format named by `value` (a format or a file suffix), or a one-line error."""
    return parse_enum(Format, value.lower(), "format", str(p))


def frame_bytes(d: pd.DataFrame, fmt: Format, *, meta: dict[str, Any] | None = None,
                json_default: Any = None) -> bytes:
    """A DataFrame's rows in `fmt` (enum columns already written as text by the caller).
    JSON is {"meta": meta, "rows": [...]} (indent 1; `json_default` for values JSON lacks)."""
    if fmt is Format.CSV:
        return d.to_csv(index=False).encode()
    if fmt is Format.JSON:
        rows = json.loads(d.to_json(orient="records"))
        return (json.dumps({"meta": meta or {}, "rows": rows}, indent=1,
                           default=json_default) + "\n").encode()
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise BertscopeError("parquet export needs pyarrow: pip install "
                             "'bertscope[parquet]'; or use --format csv") from None
    buf = io.BytesIO()
    d = d.copy()
    d.attrs = {}
    d.to_parquet(buf, index=False)
    return buf.getvalue()


def check_folder(path: str | Path | None) -> None:
    """Raise the usual one-line error when the folder `path` would be written into is missing
    (call it before long work, so bad output paths fail first)."""
    if path is None:
        return
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise BertscopeError(f"{p}: folder {parent} does not exist; create it first")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """A temporary path beside `path` to write into; on success it replaces `path` whole,
    on failure it is removed. Readers see the old file or the whole new one, never half."""
    path = Path(path)
    check_folder(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else Path("."),
                               prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual permissions
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write bytes to `path` atomically (see `atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


__all__ = ["Format", "atomic_path", "atomic_write", "check_folder", "export_format",
           "frame_bytes"]
