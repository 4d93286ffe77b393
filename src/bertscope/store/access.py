"""The one way into the runs store's file: where it is, connecting to it (read-write, or
read-only without writing anything), how long to wait for another writer, and every SQLite or
OS error turned into one line that names the file and the fix.

    path = store_path(None)                       # $BERTSCOPE_STORE, else the data folder
    conn = connect(path, write=False)             # read-only: mode=ro (immutable when the
    with guarded(path):                           #   folder cannot hold its -shm file)
        conn.execute(...)                         # sqlite3.Error / OSError -> StoreError

Nothing here knows the schema (`bertscope.store` does).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bertscope.errors import BertscopeError, printable

ENV = "BERTSCOPE_STORE"
"""Environment variable naming the store file."""
OFF = "off"
"""`BERTSCOPE_STORE=off`: record nothing (as `--no-store` on every command)."""
ENV_TIMEOUT = "BERTSCOPE_STORE_TIMEOUT"
"""Environment variable: seconds to wait for another process's write (default
`DEFAULT_TIMEOUT`)."""
DEFAULT_TIMEOUT = 30.0
"""Seconds a write waits for another writer before giving up."""
MAX_ID = 64
"""Longest run id accepted (ids bertscope makes are 8 hex digits)."""
_ID = re.compile(r"[A-Za-z0-9_-]+")


class StoreError(BertscopeError):
    """The runs store could not be opened, read or written (one line: the file and the fix).
    `reason`: the line without the file's name (what a warning after a result says)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


def quoted(value: object, limit: int = 60) -> str:
    """`value` quoted for an error line: control characters and undecodable bytes escaped
    (repr), cut to about `limit` characters with the full length said (a 100,000-character
    path is not echoed whole)."""
    text = repr(str(value))
    if len(text) <= limit:
        return text
    return f"{text[:limit - 3]}... ({len(str(value)):,} characters)"


def storable(text: str) -> str:
    """`text` as SQLite can keep it (UTF-8): lone surrogates, from undecodable bytes in a file
    name or argument, become backslash escapes instead of failing the insert."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_run_id(rid: object) -> str:
    """`rid` if it can be a run id (1 to `MAX_ID` letters, digits, '-' or '_'); otherwise a
    `BertscopeError` that quotes it cut short."""
    if not isinstance(rid, str) or len(rid) > MAX_ID or not _ID.fullmatch(rid):
        raise BertscopeError(f"{quoted(rid)} is not a run id (ids are 1 to {MAX_ID} letters, "
                             f"digits, '-' or '_'); see `bertscope runs list`")
    return rid


def recording() -> bool:
    """Whether commands record their runs (not when $BERTSCOPE_STORE is "off")."""
    return os.environ.get(ENV, "").strip().lower() != OFF


def store_path(path: str | Path | None = None) -> Path:
    """The store file: `path`, else $BERTSCOPE_STORE, else runs.sqlite in the user's data
    folder (platformdirs). A blank name is refused rather than made into a file."""
    if path is None:
        env = os.environ.get(ENV)
        if env is None:
            import platformdirs  # only here: a store named by --store or the variable

            return Path(platformdirs.user_data_dir("bertscope")) / "runs.sqlite"
        if not env.strip():
            raise BertscopeError(f"{ENV} is blank ({env!r}); set it to the store file, to "
                                 f"'{OFF}' to record nothing, or unset it for the default")
        return Path(env)
    if not str(path).strip():
        raise BertscopeError(f"--store {path!r} is blank; give the store file's name")
    return Path(path)


def busy_timeout(value: float | None = None) -> float:
    """Seconds to wait for another writer: `value`, else $BERTSCOPE_STORE_TIMEOUT, else
    `DEFAULT_TIMEOUT`; a value that is not a number >= 0 is refused."""
    if value is None:
        raw = os.environ.get(ENV_TIMEOUT)
        if raw is None or not raw.strip():
            return DEFAULT_TIMEOUT
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        what = f"{ENV_TIMEOUT}={quoted(raw)}"
    else:
        what = f"store timeout {value!r}"
    if not (isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 86400):
        raise BertscopeError(f"{what}: expected seconds from 0 to 86400")
    return float(value)


def _disk_full(path: Path) -> bool:
    """Whether the file system holding `path` has no space left (an I/O error on a full disk:
    SQLite cannot size its shared-memory file)."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def reason(exc: BaseException, timeout: float | None = None, path: Path | None = None) -> str:
    """What an SQLite or OS error on the store at `path` means, and the fix (without the
    file's name)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    msg = str(exc).lower()
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in msg:
        waited = f" (waited {timeout:g} s)" if timeout is not None else ""
        return f"locked by another process{waited}; retry, or pass --no-store"
    if name == "SQLITE_FULL" or "disk is full" in msg or getattr(exc, "errno", None) == 28:
        return "the disk is full; free some space, give another --store FILE, or pass --no-store"
    if name.startswith("SQLITE_READONLY") or "readonly" in msg or "read-only" in msg \
            or isinstance(exc, PermissionError):
        return "read-only (the file or its folder); fix the permissions, give another " \
               "--store FILE, or pass --no-store"
    if name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB" or "malformed" in msg \
            or "not a database" in msg:
        return f"damaged ({printable(exc)}); move it aside (a new one is started there), or " \
               f"give another --store FILE"
    if name.startswith("SQLITE_CANTOPEN") or isinstance(exc, OSError):
        why = getattr(exc, "strerror", None) or str(exc)
        return f"cannot be opened ({printable(why)}); check the path and its folder's " \
               f"permissions, or give another --store FILE"
    if name.startswith("SQLITE_IOERR") and path is not None and _disk_full(path):
        return "the disk is full; free some space, give another --store FILE, or pass --no-store"
    if name.startswith("SQLITE_IOERR"):
        return f"disk I/O error ({printable(exc)}); check the disk, or give another --store FILE"
    if isinstance(exc, UnicodeError):
        return f"text it cannot keep ({printable(exc)})"
    return f"{printable(exc)}; give another --store FILE, or pass --no-store"


def explain(path: Path, exc: BaseException, timeout: float | None = None) -> str:
    """One line for an SQLite or OS error on the store at `path`: the file, what happened and
    the fix (`reason`)."""
    why = reason(exc, timeout, path)
    f = quoted(path, 120)
    if why.startswith(("locked", "damaged", "read-only")):
        return f"the runs store {f} is {why}"
    if why.startswith("cannot"):
        return f"the runs store {f} {why}"
    return f"the runs store {f}: {why}"


@contextmanager
def guarded(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Within: an SQLite error, an OS error or text SQLite cannot decode becomes a
    `StoreError` with `explain`'s line."""
    try:
        yield
    except StoreError:
        raise
    except (sqlite3.Error, OSError, UnicodeError) as e:
        raise StoreError(explain(path, e, timeout), reason(e, timeout, path)) from None


def _decode(data: bytes) -> str:
    """Text read from the store: invalid UTF-8 (a file edited by hand) escaped, not raised."""
    return data.decode("utf-8", "backslashreplace")


def writable(path: Path) -> bool:
    """Whether the file `path` and its folder (where SQLite keeps its journal files) can be
    written by this process."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def connect(path: Path, *, write: bool, timeout: float) -> sqlite3.Connection:
    """A connection to the existing file `path`: read-write (SQLite waits up to `timeout`
    seconds for another writer), or for reading only: where the file could be written, a
    `query_only` connection (its journal files removed on close, as a writer's are);
    otherwise `mode=ro`, which writes nothing and, where the folder cannot hold the
    write-ahead log's index (a read-only folder), opens the file as immutable. Errors become
    a `StoreError`."""
    with guarded(path, timeout):
        if write or writable(path):
            conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
            if not write:
                conn.execute("PRAGMA query_only = ON")
        else:
            uri = f"{path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError as e:
                conn.close()
                # no write-ahead index possible here: SQLITE_CANTOPEN (a read-only mount),
                # SQLITE_READONLY_DIRECTORY (a folder without write permission)
                name = getattr(e, "sqlite_errorname", "") or ""
                if not name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY")):
                    raise
                conn = sqlite3.connect(f"{uri}&immutable=1", uri=True, timeout=timeout,
                                       isolation_level=None)
        conn.text_factory = _decode
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        return conn


def pragmas(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """(application_id, user_version, number of schema objects) of a connection's file, read
    in one statement: one snapshot, never half of another process's schema set-up."""
    row = conn.execute("SELECT (SELECT application_id FROM pragma_application_id()), "
                       "(SELECT user_version FROM pragma_user_version()), "
                       "(SELECT count(*) FROM sqlite_master)").fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def remove_quietly(*paths: Any) -> None:
    """Delete files that may not exist (a failed new store and its journal files)."""
    for p in paths:
        with suppress(OSError):
            os.unlink(p)


__all__ = [
    "DEFAULT_TIMEOUT",
    "ENV",
    "ENV_TIMEOUT",
    "MAX_ID",
    "OFF",
    "StoreError",
    "busy_timeout",
    "check_run_id",
    "connect",
    "explain",
    "guarded",
    "pragmas",
    "printable",
    "quoted",
    "reason",
    "recording",
    "remove_quietly",
    "storable",
    "store_path",
    "writable",
]
