"""Provenance once per table: long text repeated down a column is said once, as a note.

A table whose rows carry a long description (a device's GEMM model, where a number came
from) repeats it in every row: hundreds of characters times thousands of rows in a CSV. The
study writes such a column with a short reference in each row ("note 1") and the text once,
beside the table (in report.html, study.json and tables/README.md); the CSV stays a plain
table any reader loads (`pandas.read_csv` without options).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

LONG = 80
"""A text value longer than this many characters, repeated in a column, becomes a note."""


@dataclass(frozen=True)
class NotedTable:
    """A table whose repeated long text is replaced by references, and the notes."""

    table: pd.DataFrame
    notes: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per column: reference (as it appears in the rows) -> the text it stands for."""


def factor_notes(df: pd.DataFrame, long: int = LONG) -> NotedTable:
    """`df` with every text value longer than `long` characters that occurs in more than
    one row of its column replaced by "note N" (numbered per column in order of first
    appearance), and the notes; `df` itself is not changed."""
    out = df
    notes: dict[str, dict[str, str]] = {}
    for col in df.columns:
        values = df[col]
        if not (pd.api.types.is_object_dtype(values) or pd.api.types.is_string_dtype(values)):
            continue
        text = values[values.map(lambda v: isinstance(v, str) and len(v) > long)]
        repeated = list(pd.unique(text[text.duplicated(keep=False)]))
        if not repeated:
            continue
        refs = {v: f"note {i}" for i, v in enumerate(repeated, 1)}
        if out is df:
            out = df.copy()
        out[col] = values.map(lambda v, r=refs: r.get(v, v) if isinstance(v, str) else v)
        notes[str(col)] = {ref: text for text, ref in refs.items()}
    return NotedTable(out, notes)


def note_lines(notes: dict[str, dict[str, str]]) -> list[str]:
    """The notes as sentences, one per reference: 'column, note 1: text'."""
    return [f"{col}, {ref}: {text}" for col, refs in notes.items()
            for ref, text in refs.items()]


__all__ = ["LONG", "NotedTable", "factor_notes", "note_lines"]
