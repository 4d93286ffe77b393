"""The study's folder: report.html (self-contained: figures inline as SVG, no scripts, no
network), every figure as PNG and SVG, every table as CSV and Parquet. Every string that
comes from an input (model, device and file names, findings) is HTML-escaped."""

from __future__ import annotations

import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from bertscope.report.study_figures import RENDERERS

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


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})  # same input, same bytes
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: inline SVG


def _table_html(df: pd.DataFrame, rows: int = 12) -> str:
    shown = df.head(rows)
    return shown.to_html(index=False, escape=True, float_format=lambda x: f"{x:.4g}",
                         border=0)


def write_report(folder: Path, sections: list[Any], settings: dict[str, Any],
                 tell: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Write figures, tables and report.html into `folder`; the files written (relative)."""
    import matplotlib.pyplot as plt

    tell = tell or (lambda *_: None)
    (folder / "figures").mkdir()
    (folder / "tables").mkdir()
    files: list[str] = []
    parts = []
    for i, sec in enumerate(sections, 1):
        body = [f'<section id="{html.escape(sec.key)}"><h2>{i}. {html.escape(sec.title)}</h2>',
                '<ul class="findings">', *(f"<li>{html.escape(f)}</li>" for f in sec.findings),
                "</ul>"]
        render = RENDERERS.get(sec.figure)
        if render is not None:
            fig = render(sec)
            for ext in ("png", "svg"):
                fig.savefig(folder / "figures" / f"{sec.key}.{ext}", dpi=110,
                            metadata={"Date": None} if ext == "svg" else None)
                files.append(f"figures/{sec.key}.{ext}")
            body.append(f'<figure class="figure" id="fig-{html.escape(sec.key)}">{_svg(fig)}'
                        f"</figure>")
            plt.close(fig)
        for name, df in sec.tables.items():
            if df is None or df.empty:
                continue
            stem = f"{sec.key}_{name}"
            df.to_csv(folder / "tables" / f"{stem}.csv", index=False)
            df.to_parquet(folder / "tables" / f"{stem}.parquet", index=False)
            files += [f"tables/{stem}.csv", f"tables/{stem}.parquet"]
            body.append(f'<details><summary>table {html.escape(name)} ({len(df):,} rows: '
                        f'<a href="tables/{html.escape(stem)}.csv">csv</a>)</summary>'
                        f"{_table_html(df)}</details>")
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
    files.append("report.html")
    return files


__all__ = ["write_report"]
