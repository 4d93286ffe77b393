"""The study's folder: report.html (self-contained: figures inline as SVG, no scripts, no
network), every figure as PNG and SVG, every table as CSV and Parquet. Every string that
comes from an input (model, device and file names, findings) is HTML-escaped.

Each table in the page shows its first rows and says how many of how many ("12 of 13,212
rows"); the whole table is one click away in the page itself (the CSV embedded as a data:
link, so a moved folder or a report.html mailed alone keeps it) up to `EMBED_LIMIT` bytes per
table, beyond which the page says so and links the CSV by its path in the folder. Long text
repeated down a column is written once per table as a note (`report.table_notes`). Inline
SVGs get figure-scoped element ids (`report.svg_ids`), so every id in the page is unique."""

from __future__ import annotations

import html
import io
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from bertscope.report.study_figures import RENDERERS
from bertscope.report.svg_ids import scope_ids
from bertscope.report.table_notes import NotedTable, factor_notes, note_lines

ROWS_SHOWN = 12
"""Rows of each table shown in the page (the whole table is one click away)."""
EMBED_LIMIT = 4 * 2**20
"""Largest embedded table (bytes of its data: link) in report.html; a larger one is linked
by its path in the folder."""
PAGE_EMBED_LIMIT = 24 * 2**20
"""Most bytes of embedded tables in one report.html; the tables after are linked by path."""

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9em}.findings li{margin:.3em 0}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}
table{border-collapse:collapse;font-size:.8em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}th{background:#f4f4f4}
.tag{display:inline-block;font-size:.75em;padding:1px 6px;border-radius:8px;background:#eef}
nav a{margin-right:.8em}
"""


def _save(fig: Any, stem: Path) -> str:
    """Write `fig` as `stem`.png and `stem`.svg, laid out once (the first save runs the
    layout; later ones reuse it); the SVG's text."""
    fig.savefig(stem.with_suffix(".png"), dpi=110)
    fig.set_layout_engine("none")
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # same input, same bytes
    text = buf.getvalue()
    stem.with_suffix(".svg").write_text(text, encoding="utf-8")
    return text


def _inline_svg(text: str, prefix: str) -> str:
    """An SVG file's text for inlining: no XML prolog or DOCTYPE, ids scoped to `prefix`."""
    return scope_ids(text[text.index("<svg"):], prefix)


def _table_html(df: pd.DataFrame, rows: int = ROWS_SHOWN) -> str:
    shown = df.head(rows)
    return shown.to_html(index=False, escape=True, float_format=lambda x: f"{x:.4g}",
                         border=0)


def _table_block(name: str, stem: str, noted: NotedTable, csv: str, room: int
                 ) -> tuple[str, int]:
    """One table's `<details>`: what it shows of how many rows, the whole table (embedded
    when its link is at most `EMBED_LIMIT` and `room` bytes, else linked by path), its first
    rows and its notes; and the bytes embedded."""
    df = noted.table
    total = len(df)
    shown = min(total, ROWS_SHOWN)
    count = (f"all {total:,} rows" if shown == total else
             f"first {shown:,} of {total:,} rows")
    path = f"tables/{stem}.csv"
    uri = "data:text/csv;charset=utf-8," + urllib.parse.quote(csv, safe=",;:()")
    size = len(uri) if len(uri) <= min(EMBED_LIMIT, room) else 0
    if size:
        whole = (f'<a download="{html.escape(stem)}.csv" href="{html.escape(uri)}">'
                 f"full table (csv, in this page)</a>; also {html.escape(path)} beside it")
    else:
        whole = (f"full table too big to embed in this page ({len(uri) / 2**20:.1f} MiB): "
                 f'<a href="{html.escape(path)}">{html.escape(path)}</a> in the report '
                 f"folder")
    notes = "".join(f'<p class="meta">{html.escape(n)}</p>' for n in note_lines(noted.notes))
    return (f"<details><summary>table {html.escape(name)}: {count} shown; {whole}"
            f"</summary>{_table_html(df)}{notes}</details>", size)


def write_report(folder: Path, sections: list[Any], settings: dict[str, Any],
                 tell: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Write figures, tables and report.html into `folder`; the files written (relative)."""
    import matplotlib.pyplot as plt

    tell = tell or (lambda *_: None)
    (folder / "figures").mkdir()
    (folder / "tables").mkdir()
    files: list[str] = []
    parts = []
    room = PAGE_EMBED_LIMIT
    readme = ["# Tables of this study", "",
              "One CSV (and Parquet) per table of report.html; a column's long text that "
              "repeats is written once, below, and its rows say which note (\"note 1\").", ""]
    for i, sec in enumerate(sections, 1):
        body = [f'<section id="{html.escape(sec.key)}"><h2>{i}. {html.escape(sec.title)}</h2>',
                '<ul class="findings">', *(f"<li>{html.escape(f)}</li>" for f in sec.findings),
                "</ul>"]
        render = RENDERERS.get(sec.figure)
        if render is not None:
            fig = render(sec)
            svg = _save(fig, folder / "figures" / sec.key)
            files += [f"figures/{sec.key}.png", f"figures/{sec.key}.svg"]
            body.append(f'<figure class="figure" id="fig-{html.escape(sec.key)}">'
                        f'{_inline_svg(svg, f"fig{i}")}</figure>')
            plt.close(fig)
        for name, df in sec.tables.items():
            if df is None or df.empty:
                continue
            stem = f"{sec.key}_{name}"
            noted = factor_notes(df)
            csv = noted.table.to_csv(index=False)
            (folder / "tables" / f"{stem}.csv").write_text(csv, encoding="utf-8")
            noted.table.to_parquet(folder / "tables" / f"{stem}.parquet", index=False)
            files += [f"tables/{stem}.csv", f"tables/{stem}.parquet"]
            block, used = _table_block(name, stem, noted, csv, room)
            room -= used
            body.append(block)
            readme += [f"- {stem}.csv: {len(df):,} rows", *(f"  - {n}" for n in
                                                           note_lines(noted.notes))]
        body += [f'<p class="meta">{html.escape(n)}</p>' for n in sec.notes]
        parts.append("\n".join(body) + "</section>")
        tell("report", i, len(sections))
    cfg = settings["config"]
    nav = " ".join(f'<a href="#{html.escape(s.key)}">{i}. {html.escape(s.title)}</a>'
                   for i, s in enumerate(sections, 1))
    head = (f"<h1>bertscope study: where the time of Transformer training goes</h1>"
            f'<p class="meta">Models {html.escape(", ".join(cfg["models"]))}; devices '
            f'{html.escape(", ".join(d["name"] for d in settings["devices"]))}; precisions '
            f'{html.escape(", ".join(cfg["precisions"]))}; optimizer '
            f'{html.escape(settings["optimizer"])}. <span class="tag">predicted</span> '
            f"unless marked measured. After Pati et al., Demystifying BERT: Implications for "
            f"Accelerator Design (IISWC 2022).</p><nav>{nav}</nav>")
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>bertscope study</title><style>{_CSS}</style></head><body>{head}"
            + "\n".join(parts) + "</body></html>")
    (folder / "report.html").write_text(page, encoding="utf-8")
    (folder / "tables" / "README.md").write_text("\n".join(readme) + "\n", encoding="utf-8")
    files += ["report.html", "tables/README.md"]
    return files


__all__ = ["EMBED_LIMIT", "PAGE_EMBED_LIMIT", "ROWS_SHOWN", "write_report"]
