"""The op table: one row per operation of a training iteration, the schema every producer emits.

A row is one op *site* in the iteration's graph (e.g. layer 3's FFN1 weight-gradient GEMM).
`count` says how many times it runs per iteration (micro-batches); `flops`, `bytes_read`
and `bytes_written` are totals over those runs, so sums over rows are iteration totals.
`saved_bytes` is what the op keeps for backward during one micro-batch (a memory figure,
not a volume). `time_s` is measured or predicted time where a producer knows it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Phase, Sublayer


class Op(NamedTuple):
    """One op-table row (see the module docstring for the meaning of each column)."""

    name: str
    layer: int
    """Encoder layer index; -1 for rows outside the encoder stack (embeddings, heads, loss)."""
    sublayer: Sublayer
    category: Category
    phase: Phase
    m: int = 0
    """GEMM rows: output rows M (0 for non-GEMM)."""
    n: int = 0
    """GEMM rows: output columns N."""
    k: int = 0
    """GEMM rows: reduction size K."""
    batch: int = 0
    """GEMM rows: independent GEMMs in a batched GEMM (1 for a plain GEMM, 0 for non-GEMM)."""
    elements: int = 0
    """Non-GEMM rows: elements of the main tensor the op streams over."""
    count: int = 1
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    saved_bytes: float = 0.0
    time_s: float = math.nan


COLUMNS: tuple[str, ...] = (*Op._fields, "intensity")
"""Column order of an op table's DataFrame (`intensity` = flops / bytes moved)."""

_SUMMED = ["count", "flops", "bytes_read", "bytes_written", "time_s"]


class Format(StrEnum):
    """Export formats for an op table."""

    CSV = "csv"
    JSON = "json"
    PARQUET = "parquet"


@dataclass(slots=True)
class OpTable:
    """An op table: a DataFrame of `Op` rows plus metadata (model, run settings, producer)."""

    df: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_ops(cls, ops: Iterable[Op], meta: dict[str, Any] | None = None) -> OpTable:
        """Build a table from rows; computes arithmetic intensity."""
        df = pd.DataFrame.from_records(list(ops), columns=list(Op._fields))
        moved = df["bytes_read"] + df["bytes_written"]
        df["intensity"] = (df["flops"] / moved.where(moved > 0)).fillna(0.0)
        return cls(df=df, meta=dict(meta or {}))

    def __len__(self) -> int:
        return len(self.df)

    def to_frame(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame (a copy)."""
        return self.df.copy()

    # -- summaries -------------------------------------------------------------------------
    def totals(self) -> dict[str, float]:
        """Iteration totals: flops, bytes read/written, ops launched, time where known."""
        d = self.df
        out = {
            "flops": float(d["flops"].sum()),
            "bytes_read": float(d["bytes_read"].sum()),
            "bytes_written": float(d["bytes_written"].sum()),
            "ops": int(d["count"].sum()),
        }
        if d["time_s"].notna().any():
            out["time_s"] = float(d["time_s"].sum())
        return out

    def summary(self, by: str | list[str]) -> pd.DataFrame:
        """Totals grouped by one or more columns, with each group's share of FLOPs, bytes
        and (where known) time. `by` may also be "group" for the coarse sublayer groups."""
        d = self.df
        if by == "group" or (isinstance(by, list) and "group" in by):
            d = d.assign(group=[Sublayer(s).group.value for s in d["sublayer"]])
        keys = [by] if isinstance(by, str) else list(by)
        g = d.groupby(keys, sort=False, observed=True)[_SUMMED].sum(min_count=1)
        g["bytes"] = g["bytes_read"] + g["bytes_written"]
        timed = bool(g["time_s"].notna().any())
        if not timed:
            g = g.drop(columns="time_s")
        for col in ("flops", "bytes", "time_s") if timed else ("flops", "bytes"):
            total = g[col].sum()
            g[f"{col.removesuffix('_s')}_share"] = g[col] / total if total > 0 else 0.0
        return g.sort_values(["time_s" if timed else "flops", "bytes"], ascending=False)

    def by_category(self) -> pd.DataFrame:
        """Totals and shares per category."""
        return self.summary("category")

    def by_sublayer(self) -> pd.DataFrame:
        """Totals and shares per sublayer."""
        return self.summary("sublayer")

    def by_phase(self) -> pd.DataFrame:
        """Totals and shares per phase."""
        return self.summary("phase")

    def top(self, n: int = 10, by: str = "flops") -> pd.DataFrame:
        """The n rows largest in `by` (flops, bytes, time_s, ...)."""
        d = self.df
        if by == "bytes":
            d = d.assign(bytes=d["bytes_read"] + d["bytes_written"])
        if by not in d.columns:
            raise BertscopeError(f"cannot rank by {by!r}; use one of flops, bytes, time_s")
        return d.nlargest(n, by)

    # -- export ----------------------------------------------------------------------------
    def export(self, path: str | Path, fmt: Format | str | None = None) -> Path:
        """Write the table to `path` atomically (csv, json or parquet; from the suffix when
        `fmt` is None). JSON holds {"meta": ..., "rows": [...]}."""
        p = Path(path)
        fmt = _format(fmt if fmt is not None else p.suffix.lstrip("."), p)
        d = self.df.copy()
        for col in ("sublayer", "category", "phase"):
            d[col] = d[col].map(str)
        if fmt is Format.CSV:
            data: bytes = d.to_csv(index=False).encode()
        elif fmt is Format.JSON:
            rows = json.loads(d.to_json(orient="records"))
            data = json.dumps({"meta": self.meta, "rows": rows}, indent=1).encode()
        else:
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise BertscopeError("parquet export needs pyarrow: pip install "
                                     "'bertscope[parquet]'; or use --format csv") from None
            import io

            buf = io.BytesIO()
            d.attrs = {}
            d.to_parquet(buf, index=False)
            data = buf.getvalue()
        atomic_write(p, data)
        return p


def _format(value: str, p: Path) -> Format:
    try:
        return Format(value.lower())
    except ValueError:
        raise BertscopeError(f"{p}: unknown format {value!r}; use csv, json or parquet") from None


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


__all__ = ["COLUMNS", "Format", "Op", "OpTable", "atomic_path", "atomic_write", "check_folder"]
