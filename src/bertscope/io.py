"""File output in one place: folder checks before work starts, atomic writes (a reader sees
the old file or the whole new one), and the export formats of every table bertscope writes.

Every file bertscope writes goes through `atomic_path` (or `atomic_write`, which writes
bytes through it): the data is written into a private temporary folder beside the target
(so a foreign writer's own temporary files, such as Kineto's `<name>.tmp`, land there too),
checked (its size equal to the bytes given, or a caller's completeness check: an exported
trace must be whole JSON), synced and renamed over the target; on any failure the folder
and everything in it are removed and the target is left as it was. A full disk is a
one-line `BertscopeError`, never a 0-byte or truncated file."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertscope.errors import BertscopeError, parse_enum
from bertscope.requirements import require_format

if TYPE_CHECKING:
    import pandas as pd


class Format(StrEnum):
    """Export formats of a table."""

    CSV = "csv"
    JSON = "json"
    JSONL = "jsonl"
    """JSON Lines: one object per row, nothing else (no meta), so it can be streamed."""
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
    JSON is {"meta": meta, "rows": [...]} (indent 1; `json_default` for values JSON lacks);
    JSON Lines the rows alone (`json_lines`)."""
    if fmt is Format.CSV:
        return d.to_csv(index=False).encode()
    if fmt is Format.JSONL:
        return json_lines({str(c): json_texts(d[c].to_numpy()) for c in d.columns})
    if fmt is Format.JSON:
        rows = json.loads(d.to_json(orient="records"))
        return (json.dumps({"meta": meta or {}, "rows": rows}, indent=1,
                           default=json_default) + "\n").encode()
    require_format(fmt)
    buf = io.BytesIO()
    d = d.copy()
    d.attrs = {}
    d.to_parquet(buf, index=False)
    return buf.getvalue()


def json_value(value: Any) -> Any:
    """`value` as JSON can hold it: numpy scalars as Python's, a non-finite float (NaN, inf)
    as None (null, as pandas writes it: JSON has no NaN), an enum as its value."""
    import math
    from enum import Enum

    if hasattr(value, "item") and not isinstance(value, list | tuple | dict):
        value = value.item()  # a numpy scalar
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Enum):
        return value.value
    return value


def json_column(values: Any) -> list[Any]:
    """A column (a numpy array or a sequence) as a list of `json_value`s; a float array's
    non-finite values as None without a loop over its finite ones."""
    import numpy as np

    a = np.asarray(values)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if not bad.any():
            return a.tolist()
        out = a.astype(object)
        out[bad] = None
        return out.tolist()
    if a.dtype.kind in "biu":
        return a.tolist()
    return [json_value(v) for v in a.tolist()]


def json_texts(values: Any) -> list[str]:
    """A column's values each written as JSON text (`json_column`'s values: NaN as null);
    numbers and booleans a whole column at a time (a float's text is Python's shortest repr,
    read back equal), other values one by one."""
    import numpy as np

    a = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if not len(a):
        return []
    if a.dtype == bool:
        return np.where(a, "true", "false").tolist()
    if a.dtype.kind in "fiu":  # numbers never hold ", ": one dumps, split
        return json.dumps(json_column(a))[1:-1].split(", ")
    encode = json.JSONEncoder(allow_nan=False).encode
    return [encode(v) for v in json_column(a)]


def json_lines(texts: dict[str, list[str]]) -> bytes:
    """Rows as JSON Lines: one object per row ({column: value}, keys in column order), each on
    its own line; `texts` holds each column's values as JSON text (`json_texts`)."""
    keys = ",".join(json.dumps(str(k)).replace("%", "%%") + ":%s" for k in texts)
    line = "{" + keys + "}\n"
    return "".join([line % row for row in zip(*texts.values(), strict=True)]).encode()


def check_output(path: str | Path | None, *, folder: bool = False) -> None:
    """Refuse, in one line, an output path bertscope could not write, before any work starts:
    its folder missing, the path an existing folder (or, with `folder`, an existing file), a
    device, pipe or socket (/dev/stdout: replacing it is no way to write to it), or a place
    where no file can be created (read-only, /proc). Nothing is left behind."""
    if path is None:
        return
    p = Path(path)
    if folder:
        _parent(p)
        if p.exists() and not p.is_dir():
            raise BertscopeError(f"{p}: exists and is not a folder; give a folder path")
        return
    _regular(p)
    Path(_temp_beside(p, ".probe")).unlink(missing_ok=True)


def usual_mode(folder: str | Path) -> None:
    """Give a folder made by `tempfile.mkdtemp` (private, 0700) the mode an ordinary
    `mkdir` would have given it under the current umask (0755 under umask 022), so a
    folder built aside and renamed into place is like any other."""
    mask = os.umask(0o077)  # read the umask (no call reads it without setting it) ...
    os.umask(mask)  # ... and put it back at once
    os.chmod(folder, 0o777 & ~mask)


def _regular(p: Path) -> None:
    """Refuse an output path that exists and is neither a regular file nor a folder (those
    have their own messages): a device, a pipe, a socket."""
    try:
        special = p.exists() and not p.is_file() and not p.is_dir()
    except OSError:
        special = False
    if special:
        raise BertscopeError(f"{p}: not a regular file (a device, pipe or socket); give the "
                             f"path of a file to write")


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


Check = Callable[[Path], str | None]
"""A check of a written file: None when it is whole, else what is wrong (`atomic_path`)."""


@contextmanager
def atomic_path(path: str | Path, *, size: int | None = None,
                check: Check | None = None) -> Iterator[str]:
    """A path to write `path`'s new content into (in a private temporary folder beside it);
    when the block ends it must be a file, of `size` bytes when given, that passes `check`
    when given; it is then synced and replaces `path` whole. On any failure the temporary
    folder and all in it are removed and `path` is untouched: readers see the old file or
    the whole new one, never half. A failure of the file system (full disk, no permission)
    or a file that is not whole is a one-line `BertscopeError`."""
    path = Path(path)
    parent = _parent(path)
    if path.is_dir():
        raise BertscopeError(f"{path}: is a folder; give a file path")
    _regular(path)
    try:
        folder = tempfile.mkdtemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise BertscopeError(f"{path}: cannot create a file in {parent} ({e.strerror or e}); "
                             f"choose a writable folder") from None
    tmp = os.path.join(folder, path.name)
    try:
        yield tmp
        _settle(tmp, size, check)
        os.replace(tmp, path)
    except OSError as e:
        raise BertscopeError(f"{path}: cannot write ({e.strerror or e}); nothing was "
                             f"written") from None
    except _Incomplete as e:
        raise BertscopeError(f"{path}: {e}; nothing was written") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Incomplete(Exception):
    """A written file that is not whole (`atomic_path`)."""


def _settle(tmp: str, size: int | None, check: Check | None) -> None:
    """Check and sync a file written into `atomic_path`'s folder."""
    if not os.path.isfile(tmp):
        raise _Incomplete("the writer wrote no file (a full disk?)")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
        got = os.fstat(f.fileno()).st_size
    if size is not None and got != size:
        raise _Incomplete(f"{got:,} of {size:,} bytes written (a full disk?)")
    problem = check(Path(tmp)) if check is not None else None
    if problem:
        raise _Incomplete(problem)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to the file descriptor `fd`, however many calls it takes; a write
    that takes nothing is a full disk (ENOSPC)."""
    view, done = memoryview(data), 0
    while done < len(view):
        n = os.write(fd, view[done:])
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        done += n


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write bytes to `path` atomically, the file's size checked against them (see
    `atomic_path`)."""
    with atomic_path(path, size=len(data)) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)


def whole_json(p: Path) -> str | None:
    """`atomic_path`'s check of an exported JSON document (a trace): not empty, and ending
    where a JSON object or array ends (a writer stopped by a full disk leaves it open).
    Gzipped files (.gz) are checked for being non-empty only."""
    try:
        size = p.stat().st_size
        if not size:
            return "the writer wrote an empty file (a full disk?)"
        if p.suffix == ".gz":
            return None
        with open(p, "rb") as f:
            f.seek(max(0, size - 64))
            tail = f.read().rstrip()
    except OSError as e:
        return f"cannot read back what was written ({e.strerror or e})"
    if not tail.endswith((b"}", b"]")):
        return "the writer stopped before the end of the JSON (a full disk?)"
    return None


def write_or_rescue(path: str | Path, data: bytes) -> Path:
    """Write a finished measurement to `path` atomically; if that fails, save it to a rescue
    file in the temporary folder instead and raise a one-line error that says where, so the
    measurement is never lost to a failed write."""
    try:
        atomic_write(path, data)
        return Path(path)
    except BertscopeError as e:
        p = Path(path)
        try:
            fd, rescue = tempfile.mkstemp(prefix=f"bertscope-rescued-{p.stem}-",
                                          suffix=p.suffix or ".json")
        except OSError as r:
            raise BertscopeError(f"{e}; no rescue file either ({r.strerror or r})") from None
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError as r:
            Path(rescue).unlink(missing_ok=True)
            raise BertscopeError(f"{e}; no rescue file either ({r.strerror or r})") from None
        finally:
            os.close(fd)
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


__all__ = ["MAX_INPUT_BYTES", "Check", "Format", "atomic_path", "atomic_write", "check_output",
           "export_format", "frame_bytes", "json_column", "json_lines", "json_texts",
           "json_value", "output_format", "read_text", "usual_mode", "whole_json", "write_all",
           "write_or_rescue"]
