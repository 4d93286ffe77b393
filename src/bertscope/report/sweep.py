"""Render a sweep: what was evaluated, and the best configurations by a column."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.io import json_value
from bertscope.report.tables import binary, si

_DIMS = ("num_layers", "hidden", "heads", "intermediate", "vocab_size")
"""Model dimensions: shown when swept, not when they only differ between models."""
_AFTER = ("dp", "tp", "pp", "zero", "gemm_peak", "bandwidth", "overhead", "memory")
"""Layout and knob columns, shown after the run's."""
_OWN = ("model", "device", "family")
"""Columns that are not configuration axes (model and device always shown)."""


def print_sweep(result: Any, ranked: list[dict[str, Any]], console: Console, *,
                sort: str) -> None:
    """The count line and a table of the ranked rows ({column: value}; `result`: a
    `SweepSummary` or `SweepResult`): the configuration columns that vary (`result.varied`),
    time, tokens/s, % of the GEMM peak, the GEMM / memory-bound / optimizer shares, memory
    and whether it fits."""
    console.print(f"evaluated {result.evaluated:,} configurations in {result.seconds:.2f} s "
                  f"({result.grid_size:,} in the grid, {result.skipped:,} skipped: heads "
                  f"not dividing hidden, seq beyond the positions, or a precision the device "
                  f"lacks)")
    if not ranked:
        return
    columns = list(result.columns)
    # the configuration's columns, in the frame's order: the run's (every RunConfig field,
    # so a field added to it shows up here), then the layout's and the knobs'
    run = [c for c in columns[:columns.index("tokens")] if c not in (*_OWN, *_DIMS, *_AFTER)]
    varied = (c for c in (*run[:2], *_DIMS, *run[2:], *_AFTER) if c in result.varied)
    shown = ["model", "device", *varied]
    comm = "dp" in columns  # multi-device points: the communication and bubble share
    t = Table(title=f"Top {len(ranked)} by {escape(sort)}")
    names = {"micro_batches": "micro", "masked_lm_only": "masked", "precision": "prec",
             "attention": "attn", "num_layers": "layers", "intermediate": "ffn",
             "vocab_size": "vocab", "decoder_seq": "dec_seq",
             "optimizer": "opt", "checkpoint": "ckpt", "gemm_peak": "xgemm",
             "bandwidth": "xbw", "overhead": "xlaunch", "memory": "xmem"}
    for col in shown:
        t.add_column(names.get(col, col), justify="left" if col in ("model", "device") else
                     "right")
    split = any(r["memory_bound_share"] == r["memory_bound_share"]  # some row has
                for r in ranked)  # categories (not NaN)
    for col in ("time", "tok/s", "%peak", *(("GEMM%", "mem-bound%") if split else ()), "opt%",
                *(("comm%", "bubble%") if comm else ()), "memory", "fits"):
        t.add_column(col, justify="right")
    for r in ranked:
        gemm = r.get("share_gemm", 0.0) + r.get("share_batched_gemm", 0.0)
        parts = ((_pct(r["tp_comm_share"] + r["pp_comm_share"] + r["dp_comm_share"]),
                  _pct(r["bubble_share"])) if comm else ())
        t.add_row(*(escape(f"{r[c]:g}" if isinstance(r[c], float) else str(r[c]))
                    for c in shown),
                  si(r["iteration_s"], "s"), si(r["tokens_per_s"]),
                  _pct(r["peak_fraction"]),
                  *((_pct(gemm), _pct(r["memory_bound_share"])) if split else ()),
                  _pct(r["optimizer_share"]), *parts,
                  binary(r["memory_bytes"]), "yes" if r["fits"] else "no")
    console.print(t)
    if comm and any(r["memory_bound_share"] != r["memory_bound_share"] for r in ranked):
        console.print("multi-device rows (devices > 1 or ZeRO): the distributed model times "
                      "layer sections, not categories, so GEMM% and mem-bound% are not split "
                      "there (-)")


def sweep_json(result: Any, *, sort: str | None) -> bytes:
    """A sweep (a `SweepSummary`) as one JSON document, the shape of every command's
    `--format json` ({"meta": ..., "rows": [...]}): the meta holds the grid's axes, the
    counts (in the grid, evaluated, skipped), the sort column and the seconds; the rows are
    the best `--top` rows by it, best first (what the table shows, every column), NaN as
    null."""
    meta = {"command": "sweep", "axes": result.axes, "grid_size": result.grid_size,
            "evaluated": result.evaluated, "skipped": result.skipped, "sort": sort,
            "top": len(result.top), "seconds": result.seconds}
    rows = [{k: json_value(v) for k, v in r.items()} for r in result.top]
    return (json.dumps({"meta": meta, "rows": rows}, indent=1, allow_nan=False)
            + "\n").encode()


def _pct(share: float) -> str:
    """A share as a percentage, '-' where it is not known (NaN)."""
    return "-" if share != share else f"{100 * share:.1f}"


__all__ = ["print_sweep", "sweep_json"]
