"""The op-table schema: `Op` (one row per operation of a training iteration) and columns.

A row is one op *site* in the iteration's graph (e.g. layer 3's FFN1 weight-gradient GEMM).
`count` says how many times it runs per iteration (micro-batches); `flops`, `bytes_read`
and `bytes_written` are totals over those runs, so sums over rows are iteration totals.
`saved_bytes` is what the op keeps for backward during one micro-batch (a memory figure,
not a volume). `time_s` is measured or predicted time where a producer knows it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from bertscope.errors import BertscopeError, expect, parse_enum
from bertscope.taxonomy import Category, Issuer, Phase, PipelineStage, Sublayer, TensorSplit


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
    tp_split: TensorSplit = TensorSplit.REPLICATED
    """Role under tensor parallelism (column, row, split, replicated)."""
    pp_stage: PipelineStage = PipelineStage.STACK
    """Role under pipeline parallelism (first stage, the layer stack, last stage)."""
    module: str = ""
    """Module path where a producer knows it ("BertModel_0/BertEncoder_0/BertLayer_3/...":
    a trace recorded with modules or record_function scopes); "" where it does not."""
    issuer: Issuer = Issuer.FRAMEWORK
    """Who issues the op: framework code, or autocast inside another op (its casts)."""


_INT_FIELDS = ("layer", "m", "n", "k", "batch", "elements", "count")
_FLOAT_FIELDS = ("flops", "bytes_read", "bytes_written", "saved_bytes")
_ENUM_FIELDS = {"sublayer": Sublayer, "category": Category, "phase": Phase,
                "tp_split": TensorSplit, "pp_stage": PipelineStage, "issuer": Issuer}


def op_from_dict(row: Any, origin: str) -> Op:
    """An `Op` from a row a file holds (an export's or a saved result's), every field checked
    ("ORIGIN: FIELD: expected X, got Y"); fields the row lacks take `Op`'s defaults (columns
    added since it was written), fields that are no `Op` field (intensity) are ignored;
    `time_s` may be null (unknown)."""
    if not isinstance(row, dict):
        raise BertscopeError(f"{origin}: expected an object, got {type(row).__name__}")
    out: dict[str, Any] = {"name": expect(row, "name", str, origin)}
    for f in _INT_FIELDS:
        if f in row:
            value = expect(row, f, float, origin, minimum=-1 if f == "layer" else 0)
            if not value.is_integer():
                raise BertscopeError(f"{origin}: {f}: expected an integer, got {value!r}")
            out[f] = int(value)
    for f in _FLOAT_FIELDS:
        if f in row:
            out[f] = expect(row, f, float, origin, minimum=0)
    time_s = expect(row, "time_s", float, origin, math.nan, nullable=True, minimum=0)
    out["time_s"] = math.nan if time_s is None else time_s
    if "module" in row:
        out["module"] = expect(row, "module", str, origin)
    for f, kind in _ENUM_FIELDS.items():
        if f in row or f in ("sublayer", "category", "phase"):
            out[f] = parse_enum(kind, expect(row, f, str, origin), f, origin)
    if "layer" not in out:
        raise BertscopeError(f"{origin}: missing layer")
    return Op(**out)


COLUMNS: tuple[str, ...] = (*Op._fields, "intensity")
"""Column order of an op table's DataFrame (`intensity` = flops / bytes moved)."""

ENUM_COLUMNS: tuple[str, ...] = ("sublayer", "category", "phase", "tp_split", "pp_stage",
                                 "issuer")
"""Columns holding taxonomy enums (written as their values)."""

SUMMED: tuple[str, ...] = ("count", "flops", "bytes_read", "bytes_written", "time_s")
"""Columns a grouping sums."""


# -- columns ---------------------------------------------------------------------------------
def is_frame(obj: object) -> bool:
    """Whether `obj` is a pandas DataFrame (without importing pandas: if pandas is not loaded,
    nothing is a DataFrame)."""
    pd_mod = sys.modules.get("pandas")
    return pd_mod is not None and isinstance(obj, pd_mod.DataFrame)


def as_column(values: Any) -> np.ndarray:
    """A 1-D column from values, typed as pandas infers a column from Python values: bool,
    int64 or float64 for numbers, else an object array holding the values as given (strings,
    enum members)."""
    if not isinstance(values, list | tuple):
        values = np.asarray(values)  # an array, a pandas Series, any array-like
        if values.dtype.kind in "biufO":
            return values
        values = values.tolist()
    if len(values) and not isinstance(values[0], str):
        arr = np.asarray(values)
        if arr.dtype.kind in "biuf":
            return arr
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def bytes_moved(cols: Mapping[str, Any]) -> np.ndarray:
    """Per row: bytes_read + bytes_written, as floats. `cols`: op-table columns (a mapping of
    name -> array, or a DataFrame)."""
    return (np.asarray(cols["bytes_read"], dtype=float)
            + np.asarray(cols["bytes_written"], dtype=float))


def intensity(cols: Mapping[str, Any]) -> np.ndarray:
    """Arithmetic intensity per row: flops / bytes moved, 0 where no bytes move (or FLOPs are
    unknown)."""
    flops = np.asarray(cols["flops"], dtype=float)
    moved = bytes_moved(cols)
    out = np.divide(flops, moved, out=np.zeros(len(flops)), where=moved > 0)
    return np.where(np.isnan(out), 0.0, out)


class Columns:
    """An op table's rows as read-only columns, read the way a DataFrame is: `rows["flops"]`
    is a 1-D numpy array, `"phase" in rows` asks for a column, `len(rows)` counts rows, and
    iterating (or `keys()`) gives the column names. So efficiency models written for a
    DataFrame run on it unchanged, and `dict(rows)` copies it."""

    __slots__ = ("_cols", "_n")

    def __init__(self, cols: Mapping[str, np.ndarray]) -> None:
        out = {}
        for name, col in cols.items():
            view = np.asarray(col).view()
            view.flags.writeable = False
            out[name] = view
        lengths = {len(v) for v in out.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns differ in length: {sorted(lengths)}")
        self._cols: Mapping[str, np.ndarray] = MappingProxyType(out)
        self._n = lengths.pop() if lengths else 0

    def __reduce__(self) -> tuple[type[Columns], tuple[dict[str, np.ndarray]]]:
        """Pickled as its columns (sent to and from worker processes: `bertscope.cluster`)."""
        return (Columns, (dict(self._cols),))

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def keys(self) -> Iterable[str]:
        """The column names."""
        return self._cols.keys()

    def items(self) -> Iterable[tuple[str, np.ndarray]]:
        """(name, column) pairs."""
        return self._cols.items()

    @property
    def columns(self) -> tuple[str, ...]:
        """The column names (as `DataFrame.columns` lists them)."""
        return tuple(self._cols)


__all__ = ["COLUMNS", "ENUM_COLUMNS", "SUMMED", "Columns", "Op", "as_column", "bytes_moved",
           "intensity", "is_frame"]
