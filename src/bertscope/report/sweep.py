"""Render a sweep: what was evaluated, and the best configurations by a column."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.report.tables import binary, si

_VARIED = ("precision", "optimizer", "layers", "hidden", "heads", "ffn", "vocab", "batch", "seq",
           "micro_batches", "checkpoint", "dropout", "masked_lm_only", "attention", "fused",
           "gemm_peak", "bandwidth", "overhead", "memory")
"""Configuration columns shown when they vary in the grid (model and device always)."""


def print_sweep(result: Any, ranked: pd.DataFrame, console: Console, *, sort: str) -> None:
    """The count line and a table of the ranked rows: the configuration columns that vary,
    time, tokens/s, % of the GEMM peak, the GEMM / memory-bound / optimizer shares, memory
    and whether it fits."""
    console.print(f"evaluated {result.evaluated:,} configurations in {result.seconds:.2f} s "
                  f"({result.grid_size:,} in the grid, {result.skipped:,} skipped: heads "
                  f"not dividing hidden, seq beyond the positions, or a precision the device "
                  f"lacks)")
    if ranked.empty:
        return
    frame = result.frame
    dims = ("layers", "hidden", "heads", "ffn", "vocab")  # shown when swept, not per model
    shown = ["model", "device", *(
        c for c in _VARIED
        if (frame.groupby("model", observed=True)[c].nunique().max() if c in dims
            else frame[c].nunique()) > 1)]
    t = Table(title=f"Top {len(ranked)} by {escape(sort)}")
    names = {"micro_batches": "micro", "masked_lm_only": "masked", "precision": "prec",
             "attention": "attn",
             "optimizer": "opt", "checkpoint": "ckpt", "gemm_peak": "xgemm",
             "bandwidth": "xbw", "overhead": "xlaunch", "memory": "xmem"}
    for col in shown:
        t.add_column(names.get(col, col), justify="left" if col in ("model", "device") else
                     "right")
    for col in ("time", "tok/s", "%peak", "GEMM%", "mem-bound%", "opt%", "memory", "fits"):
        t.add_column(col, justify="right")
    for r in ranked.to_dict(orient="records"):
        gemm = r.get("share_gemm", 0.0) + r.get("share_batched_gemm", 0.0)
        t.add_row(*(escape(f"{r[c]:g}" if isinstance(r[c], float) else str(r[c]))
                    for c in shown),
                  si(r["iteration_s"], "s"), si(r["tokens_per_s"]),
                  f"{100 * r['peak_fraction']:.1f}", f"{100 * gemm:.1f}",
                  f"{100 * r['memory_bound_share']:.1f}", f"{100 * r['optimizer_share']:.1f}",
                  binary(r["memory_bytes"]), "yes" if r["fits"] else "no")
    console.print(t)


__all__ = ["print_sweep"]
