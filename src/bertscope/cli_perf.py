"""The `predict` and `devices` commands; `register(app)` adds them to the `bertscope` app.

Thin like the rest of the CLI: parse, call `bertscope.perf`, render. Errors are
`BertscopeError`s, which `bertscope.cli.main` prints as one line with exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from bertscope.cli_options import (
    BatchOpt,
    CheckpointingOpt,
    DropoutOpt,
    MaskedLmOnlyOpt,
    MicroBatchesOpt,
    ModelArg,
    OptimizerOpt,
    PrecisionOpt,
    SeqOpt,
)
from bertscope.config import Optimizer, Precision
from bertscope.errors import BertscopeError
from bertscope.optable import (
    Grouped,
    OpTable,
    group_first_max,
    group_rows,
    group_sum,
    stable_largest,
)
from bertscope.report.tables import binary, make_console, print_breakdowns, shape, si

if TYPE_CHECKING:
    import pandas as pd


def predict_cmd(
    model: ModelArg,
    device: Annotated[str, typer.Option(
        help="Catalog device (see `bertscope devices`), or a .toml/.json device file, or a "
             "profile JSON with calibrated efficiency models.")],
    batch: BatchOpt = 8,
    seq: SeqOpt = 128,
    precision: PrecisionOpt = Precision.FP32,
    optimizer: OptimizerOpt = Optimizer.ADAM,
    dropout: DropoutOpt = True,
    checkpointing: CheckpointingOpt = False,
    micro_batches: MicroBatchesOpt = 1,
    masked_lm_only: MaskedLmOnlyOpt = False,
    fusion: Annotated[bool, typer.Option(
        help="Fuse chains of memory-bound ops and the optimizer step; show what it buys.")] = (
        False),
    top: Annotated[int, typer.Option(help="Show the N slowest ops.")] = 10,
    plot: Annotated[Path | None, typer.Option(
        help="Write a roofline plot of every op (.png or .svg).")] = None,
    output: Annotated[Path | None, typer.Option(
        help="Write the op table with predicted times (.csv, .json or .parquet).")] = None,
) -> None:
    """Predicted iteration time on a device: tokens/s, breakdowns, each op's bound."""
    from bertscope.analytic import ops as build_ops
    from bertscope.perf import fuse, load_profile, predict

    if top < 0:
        raise BertscopeError(f"--top must be >= 0, got {top}")
    if plot is not None and plot.suffix.lower() not in (".png", ".svg"):
        raise BertscopeError(f"{plot}: the plot must be a .png or .svg file")
    profile = load_profile(device)
    table = build_ops(model, batch=batch, seq=seq, precision=precision, optimizer=optimizer,
                      dropout=dropout, checkpointing=checkpointing,
                      micro_batches=micro_batches, masked_lm_only=masked_lm_only)
    unfused = predict(table, profile)
    result = predict(fuse(table), profile) if fusion else unfused
    out = make_console()
    print_prediction(result, out, top=top, unfused=unfused if fusion else None)
    if plot is not None:
        from bertscope.report.roofline import plot_roofline

        out.print(f"wrote roofline plot to {plot_roofline(result, plot)}")
    if output is not None:
        path = result.export(output)
        out.print(f"wrote {len(result)} rows with predictions to {path}")


def devices_cmd() -> None:
    """List the hardware catalog: peaks, memory bandwidth, ridge points."""
    from bertscope.hardware import list_devices

    t = Table(title="Device catalog (dense peaks)", title_justify="left", header_style="bold")
    cols = ("name", "SKU", "kind", "bf16 TFLOP/s", "fp16 TFLOP/s", "fp32 TFLOP/s", "HBM GB/s",
            "memory GB", "ridge FLOP/B")
    for col in cols:
        t.add_column(col, justify="left" if col in ("name", "SKU", "kind") else "right",
                     no_wrap=col == "name")

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4g}"

    for r in list_devices():
        ridge = (f"{r['ridge_FLOP_per_byte']:.0f} ({r['ridge_format']})"
                 if r["ridge_FLOP_per_byte"] is not None else "-")
        t.add_row(r["name"], r["sku"], r["kind"], num(r["bf16_TFLOPS"]), num(r["fp16_TFLOPS"]),
                  num(r["fp32_TFLOPS"]), num(r["bandwidth_GBps"]), num(r["memory_GB"]), ridge)
    out = make_console()
    out.print(t)
    out.print("--device also takes a .toml/.json device file (same fields as the catalog) "
                  "or a profile JSON with calibrated efficiency models.")


# -- rendering ---------------------------------------------------------------------------------
def _time(seconds: float) -> str:
    return si(seconds, "s")


def print_prediction(table: OpTable, console: Console, *, top: int = 10,
                     unfused: OpTable | None = None) -> None:
    """Print a predicted table: headline, peaks used, breakdowns by category, sublayer group,
    phase and bound, and the slowest ops with their bounds. With `unfused`, also what fusion
    bought against it."""
    from bertscope.perf import by_bound
    meta = table.meta
    pred = meta["prediction"]
    run = meta.get("run", {})
    model = meta.get("model", {})
    console.print(
        f"[bold]{model.get('name', '?')}[/] batch {run.get('batch')} x seq {run.get('seq')} x "
        f"{run.get('micro_batches', 1)} micro-batch(es), {run.get('precision')}, "
        f"{run.get('optimizer')} on [bold]{pred['sku']}[/] ({pred['device']})")
    sources = sorted({m.get("source", "?") for m in pred["models"].values()})
    console.print(
        f"peaks: GEMMs {pred['gemm_format']} {si(pred['gemm_peak_flops'], 'FLOP/s')}, other "
        f"ops {pred['vector_format']} {si(pred['vector_peak_flops'], 'FLOP/s')}, memory "
        f"{si(pred['bandwidth'], 'B/s')}; efficiency models: {', '.join(sources)}")
    for note in pred["notes"]:
        console.print(f"note: {note}")
    tps = pred["tokens_per_s"]
    console.print(
        f"[bold]predicted iteration {_time(pred['time_s'])}[/]   tokens/s "
        f"{si(tps) if tps else '-'}   achieved {si(pred['achieved_flops'], 'FLOP/s')} "
        f"({100 * pred['peak_fraction']:.1f}% of {pred['gemm_format']} peak)   roofline bound "
        f"{_time(pred['roofline_s'])}")
    if unfused is not None and "fusion" in meta:
        fu = meta["fusion"]
        before = unfused.meta["prediction"]["time_s"]
        gain = 100 * (before - pred["time_s"]) / before if before > 0 else 0.0
        console.print(
            f"fusion: {fu['chains']} chains of {fu['ops_merged']} ops merged, "
            f"{fu['launches_saved']:,} launches and {binary(fu['bytes_elided'])} of traffic "
            f"saved: {_time(before)} -> {_time(pred['time_s'])} ({gain:.1f}% faster)")
    print_breakdowns(table, console)
    console.print(_bound_table(by_bound(table)))
    if top > 0:
        console.print(_top_table(table, top))


def _bound_table(rows: dict[str, dict[str, Any]]) -> Table:
    t = Table(title="By bound (what limits each op)", title_justify="left",
              header_style="bold")
    for col in ("bound", "ops", "launches", "time", "time %"):
        t.add_column(col, justify="left" if col == "bound" else "right")
    for bound, r in rows.items():
        t.add_row(bound, str(r["rows"]), f"{r['launches']:,}", _time(r["time_s"]),
                  f"{100 * r['time_share']:.1f}")
    return t


def top_groups(table: OpTable, n: int) -> Grouped:
    """The n op sites with the most predicted time, each summed over the encoder layers
    (ffn1 of all 24 layers is one entry), keyed by (name, phase): time, roofline time, FLOPs,
    bytes, layers, and the bound and shape of its slowest row. `top_ops` without pandas."""
    c = table.columns
    keys, codes = group_rows(c, ("name", "phase"))
    size = len(keys)
    summed = {"time_s": c["time_s"], "roofline_s": c["roofline_s"], "flops": c["flops"],
              "bytes": c["bytes_read"] + c["bytes_written"], "layers": c["layer"] >= 0}
    out = {col: group_sum(codes, size, values) for col, values in summed.items()}
    slowest = group_first_max(codes, size, c["time_s"])
    for col in ("bound", "m", "n", "k", "batch", "elements"):
        out[col] = c[col][slowest]
    top = Grouped(("name", "phase"), keys, out)
    return top.take(stable_largest(out["time_s"], n))


def top_ops(table: OpTable, n: int) -> pd.DataFrame:
    """The n op sites with the most predicted time, each summed over the encoder layers
    (ffn1 of all 24 layers is one entry): time, roofline time, FLOPs, bytes, layers, and
    the bound of its slowest row."""
    return top_groups(table, n).to_frame().reset_index()


def _top_table(table: OpTable, n: int) -> Table:
    total = float(np.nansum(table.columns["time_s"]))
    t = Table(title=f"Top {n} ops by predicted time, summed over layers (shape: MxNxK\\[xbatch] "
                    f"for GEMMs, else elements; eff = roofline time / predicted time)",
              title_justify="left", header_style="bold")
    for col in ("op", "layers", "phase", "shape", "FLOPs", "bytes", "FLOP/B", "time", "time %",
                "bound", "eff"):
        t.add_column(col, justify="left" if col in ("op", "phase", "bound") else "right",
                     overflow="fold", no_wrap=col != "op")
    for (name, phase), r in top_groups(table, n).rows():
        eff = r["roofline_s"] / r["time_s"] if r["time_s"] > 0 else 1.0
        intensity = r["flops"] / r["bytes"] if r["bytes"] > 0 else 0.0
        t.add_row(name, str(r["layers"]) if r["layers"] else "-", str(phase), shape(r),
                  si(r["flops"]), binary(r["bytes"]), f"{intensity:.1f}", _time(r["time_s"]),
                  f"{100 * r['time_s'] / total:.2f}" if total > 0 else "-", str(r["bound"]),
                  f"{100 * eff:.0f}%")
    return t


def register(app: typer.Typer) -> None:
    """Add `predict` and `devices` to a typer app."""
    app.command("predict")(predict_cmd)
    app.command("devices")(devices_cmd)


__all__ = ["devices_cmd", "predict_cmd", "print_prediction", "register", "top_groups",
           "top_ops"]
