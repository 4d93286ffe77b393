"""The runs store: every recorded result kept in one SQLite file, comparable later.

    store = Store.open()                      # $BERTSCOPE_STORE, else the user's data folder
    rid = store.record("predict", table, inputs={"device": "a100"})
    store.list(kind="predict"); store.table(rid); store.remove(rid)
    Store.open(write=False)                   # read-only: writes nothing, a read-only file too

SQLite through the standard library: the runs are small (an op table is a few thousand rows)
and the queries are lookups and joins by run id, which SQLite does well; DuckDB would add a
dependency for analytics the store does not need. Every access goes through
`bertscope.store.access` (connections, the busy timeout, errors as one line naming the file).
The file is in WAL mode (readers never block the one writer; a second writer waits,
`busy_timeout`), every record is one transaction (a killed writer leaves no partial run), and
the schema is versioned (`PRAGMA user_version`, `MIGRATIONS` bring an older store up to date,
read and migrated inside one `BEGIN IMMEDIATE` transaction, so processes opening a store at the
same moment neither migrate twice nor lose a run). A new store is built beside its final name
and linked into place whole: a failed creation leaves no file. A file that is not a bertscope
store is refused, never overwritten.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bertscope import __version__
from bertscope.errors import BertscopeError
from bertscope.store.access import (
    ENV,
    OFF,
    StoreError,
    busy_timeout,
    check_run_id,
    connect,
    explain,
    guarded,
    pragmas,
    quoted,
    reason,
    recording,
    remove_quietly,
    storable,
    store_path,
    writable,
)

SCHEMA_VERSION = 2
"""The schema this code writes (`PRAGMA user_version`)."""
APPLICATION_ID = 0x62727363  # "brsc": marks the file as a bertscope store
KINDS = ("predict", "profile", "trace", "sweep", "study", "validate")
"""The kinds of run the commands record."""

_SCHEMA_V1 = """
CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, created REAL NOT NULL,
                   model TEXT, device TEXT, inputs TEXT NOT NULL, summary TEXT NOT NULL,
                   versions TEXT NOT NULL);
CREATE TABLE ops (run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
                  idx INTEGER NOT NULL, name TEXT, layer INTEGER, sublayer TEXT,
                  category TEXT, phase TEXT, flops REAL, bytes REAL, time_s REAL,
                  PRIMARY KEY (run_id, idx));
"""
MIGRATIONS: dict[int, str] = {
    2: "ALTER TABLE runs ADD COLUMN machine TEXT NOT NULL DEFAULT '';"
       "CREATE INDEX runs_kind ON runs(kind, created);",
}
"""version -> the SQL that brings a store of version - 1 to it."""
_OPS = ("name", "layer", "sublayer", "category", "phase", "flops", "bytes", "time_s")



def _token() -> str:
    """8 random hex digits (`secrets.token_hex(4)`'s bytes: os.urandom; `secrets` itself
    loads OpenSSL, ~3.5 MiB resident, into every command that records a run)."""
    return os.urandom(4).hex()

def default_path() -> Path:
    """$BERTSCOPE_STORE, else runs.sqlite in the user's data folder (platformdirs); a blank
    $BERTSCOPE_STORE is refused."""
    return store_path(None)


def _statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Bring the schema from `version` (0: nothing yet) to `SCHEMA_VERSION` (inside the
    caller's transaction)."""
    if version == 0:
        for stmt in _statements(_SCHEMA_V1):
            conn.execute(stmt)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        version = 1
    for v in range(version + 1, SCHEMA_VERSION + 1):
        for stmt in _statements(MIGRATIONS[v]):
            conn.execute(stmt)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One `BEGIN IMMEDIATE` transaction (the write lock taken first, waiting up to the busy
    timeout): all of it lands or none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _new_dirs(folder: Path) -> list[Path]:
    """The folders `mkdir(parents=True)` of `folder` would create, outermost first."""
    out = []
    while not folder.exists() and folder.parent != folder:
        out.append(folder)
        folder = folder.parent
    return out[::-1]


def _create(p: Path, timeout: float) -> None:
    """Make a new, empty store at `p`: built whole under a temporary name beside it and linked
    into place, so a failure (full disk, read-only folder) leaves no file; when another
    process made `p` meanwhile, theirs is kept."""
    with guarded(p, timeout):
        made = _new_dirs(p.parent)
        p.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(p.parent, os.W_OK):
            raise PermissionError(errno.EACCES, "read-only folder")
    tmp = p.with_name(f".{p.name}.{_token()}.new")
    try:
        with guarded(p, timeout):
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                with _transaction(conn):
                    _upgrade(conn, 0)
                conn.execute("PRAGMA journal_mode = WAL")
            finally:
                conn.close()
            try:
                os.link(tmp, p)
            except FileExistsError:
                pass  # another process created it first: use theirs
            except OSError as e:  # no hard links on this file system
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                                   errno.EMLINK, errno.ENOSYS):
                    raise
                if not p.exists():
                    os.replace(tmp, p)
    except BaseException:
        remove_quietly(tmp, f"{tmp}-journal", f"{tmp}-wal", f"{tmp}-shm")
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                break
        raise
    remove_quietly(tmp)


def _json(text: Any) -> Any:
    """A stored JSON field; text that does not parse (a store edited by hand) kept as text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return {"unreadable": str(text)}


class Store:
    """An open runs store (see the module docstring). Every method turns SQLite and OS errors
    into a `StoreError` (one line naming the file and the fix)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, *, timeout: float = 30.0,
                 version: int = SCHEMA_VERSION, writable: bool = True) -> None:
        self.conn = conn
        self.path = path
        self.timeout = timeout
        self.version = version
        """The schema version of the file (0: an empty file, read-only)."""
        self.writable = writable

    @classmethod
    def open(cls, path: str | Path | None = None, *, write: bool = True, create: bool = True,
             timeout: float | None = None) -> Store:
        """Open the store at `path` (default: `default_path()`). `write`: for recording or
        removing (a missing store is created when `create`, an older one migrated); without
        it the file is opened read-only and nothing is written, so a read-only store can be
        read. `timeout`: seconds to wait for another writer (default
        $BERTSCOPE_STORE_TIMEOUT, else 30)."""
        p = store_path(path)
        t = busy_timeout(timeout)
        with guarded(p, t):
            exists = p.exists()
            if exists and not p.is_file():
                what = "a folder" if p.is_dir() else "not a regular file"
                raise StoreError(f"the runs store {quoted(p, 120)} is {what}; give --store "
                                 f"FILE, a file's name")
        if not exists:
            if not (write and create):
                raise StoreError(f"no runs store at {quoted(p, 120)} (nothing recorded there "
                                 f"yet); record a run first, or give --store FILE")
            _create(p, t)
        elif write and not writable(p):
            ro = PermissionError(errno.EACCES, "read-only")
            raise StoreError(explain(p, ro, t), reason(ro, t))
        conn = connect(p, write=write, timeout=t)
        try:
            version = cls._check(conn, p, t)
            store = cls(conn, p, timeout=t, version=version, writable=write)
            if write and version < SCHEMA_VERSION:
                store._migrate()
            with store._guard():
                conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return store

    @staticmethod
    def _check(conn: sqlite3.Connection, p: Path, timeout: float) -> int:
        """The file's schema version (0: empty), after refusing a foreign or newer file."""
        try:
            app, version, tables = pragmas(conn)
        except sqlite3.DatabaseError as e:
            name = getattr(e, "sqlite_errorname", "") or ""
            if name == "SQLITE_NOTADB":
                raise StoreError(f"{quoted(p, 120)}: not a bertscope runs store ({e}); move "
                                 f"it aside or give another --store file") from None
            raise StoreError(explain(p, e, timeout), reason(e, timeout, p)) from None
        if tables and app != APPLICATION_ID:
            raise StoreError(f"{quoted(p, 120)}: an SQLite file of something else, not a "
                             f"bertscope runs store; give another --store file")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{quoted(p, 120)}: written by a newer bertscope (schema "
                             f"{version}, this one knows {SCHEMA_VERSION}); upgrade bertscope")
        return version if tables else 0

    def _migrate(self) -> None:
        """Create or upgrade the schema: the version read again and the upgrade made inside
        one `BEGIN IMMEDIATE` transaction (another process may have done it meanwhile); then
        WAL mode, where the file is not in it yet."""
        conn = self.conn
        with self._guard():
            with _transaction(conn):
                _, version, tables = pragmas(conn)
                if version < SCHEMA_VERSION or not tables:
                    _upgrade(conn, version if tables else 0)
            self.version = SCHEMA_VERSION
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error:
            pass  # another connection holds it: WAL is an optimization, not needed

    def _guard(self) -> Any:
        return guarded(self.path, self.timeout)

    def _tx(self) -> Any:
        """One write transaction (`BEGIN IMMEDIATE`): all of it lands or none of it."""
        return _transaction(self.conn)

    def close(self) -> None:
        """Close the connection (its write-ahead log files go with the last one)."""
        with self._guard():
            self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        """Closed on leaving the block, an error included: a connection left to the garbage
        collector keeps the store's -wal and -shm files beside it until it is collected."""
        self.close()

    def record(self, kind: str, table: Any = None, *, model: str | None = None,
               device: str | None = None, inputs: dict[str, Any] | None = None,
               summary: dict[str, Any] | None = None) -> str:
        """Keep one run (its op table's rows, when given) in one transaction; its id."""
        torch = sys.modules.get("torch")  # the torch that took part in the run, if any
        torch_version: str | None = getattr(torch, "__version__", None) if torch else None
        rows = []
        if table is not None:  # read through columns: no pandas for a prediction
            c = table.columns
            moved = (c["bytes_read"].astype(float) + c["bytes_written"].astype(float)).tolist()
            text = lambda col: [storable(str(v)) for v in c[col]]  # noqa: E731
            rows = list(zip(text("name"), map(int, c["layer"]), text("sublayer"),
                            text("category"), text("phase"),
                            c["flops"].astype(float).tolist(), moved,
                            c["time_s"].astype(float).tolist(), strict=True))
            if model is None and table.job is not None:
                model = table.model.name
        versions = {"bertscope": __version__, "torch": torch_version,
                    "python": platform.python_version()}
        opt = lambda s: None if s is None else storable(str(s))  # noqa: E731
        with self._guard(), self._tx():
            rid = self._new_id()
            self.conn.execute(
                "INSERT INTO runs (id, kind, created, model, device, inputs, summary, "
                "versions, machine) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, storable(kind), time.time(), opt(model), opt(device),
                 json.dumps(inputs or {}, default=str), json.dumps(summary or {}, default=str),
                 json.dumps(versions),
                 storable(f"{platform.machine()} {platform.processor()} {os.cpu_count()} cpus")))
            self.conn.executemany(
                "INSERT INTO ops (run_id, idx, name, layer, sublayer, category, phase, flops, "
                "bytes, time_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(rid, i, *r) for i, r in enumerate(rows)])
        return rid

    def _new_id(self) -> str:
        while True:
            rid = _token()
            if not self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone():
                return rid

    def kinds(self) -> list[str]:
        """The kinds of run in the store."""
        if not self.version:
            return []
        with self._guard():
            return [r[0] for r in self.conn.execute("SELECT DISTINCT kind FROM runs")]

    def list(self, kind: str | None = None, model: str | None = None,
             device: str | None = None) -> list[dict[str, Any]]:
        """Runs, newest first, filtered by kind, model and device."""
        if not self.version:
            return []
        q = "SELECT id, kind, created, model, device FROM runs WHERE 1 = 1"
        args: list[Any] = []
        for col, v in (("kind", kind), ("model", model), ("device", device)):
            if v is not None:
                q += f" AND {col} = ?"
                args.append(storable(str(v)))
        with self._guard():
            rows = self.conn.execute(q + " ORDER BY created DESC", args).fetchall()
        return [dict(zip(("id", "kind", "created", "model", "device"), r, strict=True))
                for r in rows]

    def get(self, rid: str) -> dict[str, Any]:
        """One run's record (inputs, summary, versions decoded)."""
        check_run_id(rid)
        row = None
        if self.version:
            machine = "machine" if self.version >= 2 else "'' AS machine"
            with self._guard():
                row = self.conn.execute(
                    "SELECT id, kind, created, model, device, inputs, summary, versions, "
                    f"{machine} FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise BertscopeError(f"no run {rid!r} in {quoted(self.path, 120)}; see "
                                 f"`bertscope runs list`")
        keys = ("id", "kind", "created", "model", "device", "inputs", "summary", "versions",
                "machine")
        out = dict(zip(keys, row, strict=True))
        for k in ("inputs", "summary", "versions"):
            out[k] = _json(out[k])
            if not isinstance(out[k], dict):
                out[k] = {"value": out[k]}
        return out

    def ops(self, rid: str) -> Any:
        """A run's op rows as a DataFrame (name, layer, sublayer, category, phase, flops,
        bytes, time_s)."""
        import pandas as pd

        self.get(rid)
        with self._guard():
            rows = self.conn.execute(f"SELECT {', '.join(_OPS)} FROM ops WHERE run_id = ? "
                                     f"ORDER BY idx", (rid,)).fetchall()
        df = pd.DataFrame(rows, columns=list(_OPS))
        for col in ("flops", "bytes", "time_s"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
        return df

    def remove(self, rid: str) -> None:
        """Delete a run and its rows (one transaction)."""
        self.get(rid)
        with self._guard(), self._tx():
            self.conn.execute("DELETE FROM ops WHERE run_id = ?", (rid,))
            self.conn.execute("DELETE FROM runs WHERE id = ?", (rid,))


__all__ = ["APPLICATION_ID", "ENV", "KINDS", "MIGRATIONS", "OFF", "SCHEMA_VERSION", "Store",
           "StoreError", "default_path", "recording"]
