"""The runs store: every recorded result kept in one SQLite file, comparable later.

    store = Store.open()                      # $BERTSCOPE_STORE, else the user's data folder
    rid = store.record("predict", table, inputs={"device": "a100"})
    store.list(kind="predict"); store.table(rid); store.remove(rid)

SQLite through the standard library: the runs are small (an op table is a few thousand rows)
and the queries are lookups and joins by run id, which SQLite does well; DuckDB would add a
dependency for analytics the store does not need. The file is in WAL mode (readers never
block the one writer; a second writer waits, `busy_timeout`), every record is one
transaction (a killed writer leaves no partial run), and the schema is versioned
(`PRAGMA user_version`, `MIGRATIONS` bring an older store up to date). A file that is not a
bertscope store is refused, never overwritten.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import platformdirs

from bertscope import __version__
from bertscope.errors import BertscopeError

SCHEMA_VERSION = 2
"""The schema this code writes (`PRAGMA user_version`)."""
APPLICATION_ID = 0x62727363  # "brsc": marks the file as a bertscope store
ENV = "BERTSCOPE_STORE"
"""Environment variable naming the store file."""

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


OFF = "off"
"""`BERTSCOPE_STORE=off`: record nothing (as `--no-store` on every command)."""


def recording() -> bool:
    """Whether commands record their runs (not when $BERTSCOPE_STORE is "off")."""
    return os.environ.get(ENV, "").strip().lower() != OFF


def default_path() -> Path:
    """$BERTSCOPE_STORE, else runs.sqlite in the user's data folder (platformdirs)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(platformdirs.user_data_dir("bertscope")) / "runs.sqlite"


class Store:
    """An open runs store (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: str | Path | None = None) -> Store:
        """Open (creating when absent) the store at `path` (default: `default_path()`)."""
        p = Path(path) if path is not None else default_path()
        fresh = not p.exists()
        if fresh:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise BertscopeError(f"{p}: cannot create the store's folder "
                                     f"({e.strerror or e})") from None
        elif not p.is_file():
            raise BertscopeError(f"{p}: not a file; give --store FILE")
        try:
            conn = sqlite3.connect(p, timeout=30, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 30000")
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as e:
            raise BertscopeError(f"{p}: not a bertscope runs store ({e}); give another "
                                 f"--store file") from None
        if tables and app != APPLICATION_ID:
            conn.close()
            raise BertscopeError(f"{p}: an SQLite file of something else, not a bertscope "
                                 f"runs store; give another --store file")
        if version > SCHEMA_VERSION:
            conn.close()
            raise BertscopeError(f"{p}: written by a newer bertscope (schema {version}, this "
                                 f"one knows {SCHEMA_VERSION}); upgrade bertscope")
        store = cls(conn, p)
        store._migrate(version if tables else 0)
        return store

    def _migrate(self, version: int) -> None:
        conn = self.conn
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        with self._tx():
            if version == 0:
                for stmt in filter(None, (s.strip() for s in _SCHEMA_V1.split(";"))):
                    conn.execute(stmt)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                version = 1
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for stmt in filter(None, (s.strip() for s in MIGRATIONS[v].split(";"))):
                    conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One transaction: all of it lands or none of it."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

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
            rows = list(zip(map(str, c["name"]), map(int, c["layer"]), map(str, c["sublayer"]),
                            map(str, c["category"]), map(str, c["phase"]),
                            c["flops"].astype(float).tolist(), moved,
                            c["time_s"].astype(float).tolist(), strict=True))
            if model is None and table.job is not None:
                model = table.model.name
        versions = {"bertscope": __version__, "torch": torch_version,
                    "python": platform.python_version()}
        with self._tx():
            rid = self._new_id()
            self.conn.execute(
                "INSERT INTO runs (id, kind, created, model, device, inputs, summary, "
                "versions, machine) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, kind, time.time(), model, device, json.dumps(inputs or {}, default=str),
                 json.dumps(summary or {}, default=str), json.dumps(versions),
                 f"{platform.machine()} {platform.processor()} {os.cpu_count()} cpus"))
            self.conn.executemany(
                "INSERT INTO ops (run_id, idx, name, layer, sublayer, category, phase, flops, "
                "bytes, time_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(rid, i, *r) for i, r in enumerate(rows)])
        return rid

    def _new_id(self) -> str:
        while True:
            rid = secrets.token_hex(4)
            if not self.conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone():
                return rid

    def list(self, kind: str | None = None, model: str | None = None,
             device: str | None = None) -> list[dict[str, Any]]:
        """Runs, newest first, filtered by kind, model and device."""
        q = "SELECT id, kind, created, model, device FROM runs WHERE 1 = 1"
        args: list[Any] = []
        for col, v in (("kind", kind), ("model", model), ("device", device)):
            if v is not None:
                q += f" AND {col} = ?"
                args.append(v)
        cur = self.conn.execute(q + " ORDER BY created DESC", args)
        return [dict(zip(("id", "kind", "created", "model", "device"), r, strict=True))
                for r in cur]

    def get(self, rid: str) -> dict[str, Any]:
        """One run's record (inputs, summary, versions decoded)."""
        row = self.conn.execute("SELECT id, kind, created, model, device, inputs, summary, "
                                "versions, machine FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise BertscopeError(f"no run {rid!r} in {self.path}; see `bertscope runs list`")
        keys = ("id", "kind", "created", "model", "device", "inputs", "summary", "versions",
                "machine")
        out = dict(zip(keys, row, strict=True))
        for k in ("inputs", "summary", "versions"):
            out[k] = json.loads(out[k])
        return out

    def ops(self, rid: str) -> Any:
        """A run's op rows as a DataFrame (name, layer, sublayer, category, phase, flops,
        bytes, time_s)."""
        import pandas as pd

        self.get(rid)
        return pd.read_sql_query("SELECT name, layer, sublayer, category, phase, flops, bytes, "
                                 "time_s FROM ops WHERE run_id = ? ORDER BY idx", self.conn,
                                 params=(rid,))

    def remove(self, rid: str) -> None:
        """Delete a run and its rows (one transaction)."""
        self.get(rid)
        with self._tx():
            self.conn.execute("DELETE FROM ops WHERE run_id = ?", (rid,))
            self.conn.execute("DELETE FROM runs WHERE id = ?", (rid,))


__all__ = ["APPLICATION_ID", "ENV", "MIGRATIONS", "OFF", "SCHEMA_VERSION", "Store",
           "default_path", "recording"]
