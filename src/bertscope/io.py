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


def output_format(path: str | Path, fmt: Format | str | None = None) -> Format:
    """The format to export `path` in: `fmt` when given, else the path's suffix."""
    p = Path(path)
    return export_format(str(fmt) if fmt is not None else p.suffix.lstrip("."), p)


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


def check_output(path: str | Path | None, *, folder: bool = False) -> None:
    """Refuse, in one line, an output path bertscope could not write, before any work starts:
    its folder missing, the path an existing folder (or, with `folder`, an existing file), or
    a place where no file can be created (read-only, /proc). Nothing is left behind."""
    if path is None:
        return
    p = Path(path)
    if folder:
        _parent(p)
        if p.exists() and not p.is_dir():
            raise BertscopeError(f"{p}: exists and is not a folder; give a folder path")
        return
    Path(_temp_beside(p, ".probe")).unlink(missing_ok=True)


def _parent(p: Path) -> Path:
    """The folder `p` is written into; a one-line error when it does not exist."""
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise BertscopeError(f"{p}: folder {parent} does not exist; create it first")
    return parent


def _temp_beside(p: Path, suffix: str) -> str:
    """A new empty file beside the file path `p` (same folder, hidden name); one-line errors
    when the folder is missing, `p` is a folder, or no file can be created there."""
    parent = _parent(p)
    if p.is_dir():
        raise BertscopeError(f"{p}: is a folder; give a file path")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{p.name}.", suffix=suffix)
    except OSError as e:
        raise BertscopeError(f"{p}: cannot create a file in {parent} ({e.strerror or e}); "
                             f"choose a writable folder") from None
    os.close(fd)
    return tmp


@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """A temporary path beside `path` to write into; on success it replaces `path` whole,
    on failure it is removed. Readers see the old file or the whole new one, never half.
    A failure of the file system (full disk, no permission) is a one-line `BertscopeError`."""
    path = Path(path)
    tmp = _temp_beside(path, ".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual permissions
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise BertscopeError(f"{path}: cannot write ({e.strerror or e})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write bytes to `path` atomically (see `atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_or_rescue(path: str | Path, data: bytes) -> Path:
    """Write a finished measurement to `path` atomically; if that fails, save it to a rescue
    file in the temporary folder instead and raise a one-line error that says where, so the
    measurement is never lost to a failed write."""
    try:
        atomic_write(path, data)
        return Path(path)
    except BertscopeError as e:
        p = Path(path)
        fd, rescue = tempfile.mkstemp(prefix=f"bertscope-rescued-{p.stem}-",
                                      suffix=p.suffix or ".json")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        raise BertscopeError(f"{e}; the result was saved to {rescue} instead") from None


MAX_INPUT_BYTES = 256 * 2**20
"""Largest config, device, pattern or profile file bertscope reads (256 MiB); traces are
streamed and have no such cap."""


def read_text(path: str | Path, *, limit: int = MAX_INPUT_BYTES, missing: str = "") -> str:
    """A UTF-8 input file's text, read with a size cap: a device such as /dev/zero, a folder
    or a huge file is refused in one line, not read until memory runs out. `missing`: the
    hint after "no such file; " when the file does not exist."""
    p = Path(path)
    if not p.exists():
        raise BertscopeError(f"{p}: no such file" + (f"; {missing}" if missing else ""))
    if not p.is_file():
        raise BertscopeError(f"{p}: not a regular file; give the path of a file")
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise BertscopeError(f"{p}: cannot read ({e.strerror or e})") from None
    if len(data) > limit:
        raise BertscopeError(f"{p}: larger than {limit // 2**20} MiB; not a bertscope input "
                             f"file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BertscopeError(f"{p}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None


__all__ = ["MAX_INPUT_BYTES", "Format", "atomic_path", "atomic_write", "check_output",
           "export_format", "frame_bytes", "output_format", "read_text", "write_or_rescue"]
