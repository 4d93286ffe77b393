"""Terminal report of a prediction: headline, peaks, breakdowns, bounds and the slowest ops."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.analytic.memory import MemoryEstimate
from bertscope.optable import OpTable
from bertscope.packing import active
from bertscope.perf.kernel_fusion import FusionStats
from bertscope.perf.predict import Bound, BoundShare, Prediction
from bertscope.report.tables import (
    binary,
    job_line,
    name_column,
    print_breakdowns,
    segment_part,
    shape,
    si,
)


def _time(seconds: float) -> str:
    return si(seconds, "s")


def memory_verdict(table: OpTable, capacity: float) -> tuple[bool, str] | None:
    """Whether the table's job fits one device of `capacity` bytes, and the line that says
    so: needed vs available (the analytic `MemoryEstimate`'s peak: weights, gradients and
    optimizer state, saved activations, the segment memory of Transformer-XL and XLNet and
    the largest transient buffer); None when the table carries no estimate."""
    mem = MemoryEstimate.on(table)
    if mem is None:
        return None
    parts = (f"weights+grads+optimizer {binary(mem.static)}, activations "
             f"{binary(mem.activations)}{segment_part(mem)}")
    if mem.peak <= capacity:
        return True, f"memory: fits, {binary(mem.peak)} of {binary(capacity)} ({parts})"
    return False, (f"memory: does not fit one device, needs {binary(mem.peak)} of "
                   f"{binary(capacity)} ({parts}); the time assumes it did: split it with "
                   f"`bertscope distributed` (tp, pp, zero), or lower --batch/--seq or add "
                   f"--checkpoint full")


def print_prediction(table: OpTable, console: Console, *, top: int = 10,
                     unfused: OpTable | None = None, capacity: float | None = None,
                     verbose: bool = False) -> None:
    """Print a predicted table, the result first: what was predicted, the predicted
    iteration, whether it fits a device of `capacity` bytes (when given), the notes, then
    the peaks used in one line (with `verbose`, also each figure's source), what fusion
    bought against `unfused` (when given), breakdowns by category, sublayer group, phase
    and bound, and the slowest ops with their bounds."""
    pred = Prediction.of(table)
    console.print(f"{job_line(table)} on [bold]{escape(pred.sku)}[/] "
                  f"({escape(pred.device)})")
    tps = pred.tokens_per_s
    real = table.job is not None and active(table.run)  # padding not counted: say so
    tokens = (f"real tokens/s {si(tps) if tps else '-'}   sequences/s "
              f"{si(pred.sequences_per_s) if pred.sequences_per_s else '-'}" if real
              else f"tokens/s {si(tps) if tps else '-'}")
    console.print(
        f"[bold]predicted iteration {_time(pred.time_s)}[/]   {tokens}   achieved "
        f"{si(pred.achieved_flops, 'FLOP/s')} "
        f"({100 * pred.peak_fraction:.1f}% of {pred.gemm_format} peak)   roofline bound "
        f"{_time(pred.roofline_s)}")
    verdict = None if capacity is None else memory_verdict(table, capacity)
    if verdict is not None:
        fits, line = verdict
        console.print(escape(line) if fits else f"[bold red]{escape(line)}[/]")
    for note in pred.notes:
        console.print(f"note: {escape(note)}")
    console.print(
        f"peaks: GEMMs {pred.gemm_format} {si(pred.gemm_peak_flops, 'FLOP/s')}, other "
        f"ops {pred.vector_format} {si(pred.vector_peak_flops, 'FLOP/s')}, memory "
        f"{si(pred.bandwidth, 'B/s')}" + ("" if verbose else " (sources: --verbose)"))
    if verbose:
        console.print(f"sources: {escape(pred.provenance or ', '.join(pred.sources))}")
    fu = FusionStats.on(table)
    if unfused is not None and fu is not None:
        before = Prediction.of(unfused).time_s
        gain = 100 * (before - pred.time_s) / before if before > 0 else 0.0
        console.print(
            f"fusion: {fu.chains} chains of {fu.ops_merged} ops merged, "
            f"{fu.launches_saved:,} launches and {binary(fu.bytes_elided)} of traffic "
            f"saved: {_time(before)} -> {_time(pred.time_s)} ({gain:.1f}% faster)")
    print_breakdowns(table, console)
    console.print(_bound_table(pred.bounds()))
    if top > 0:
        console.print(_top_table(pred, top))


def _bound_table(rows: dict[Bound, BoundShare]) -> Table:
    t = Table(title="By bound (what limits each op)", title_justify="left",
              header_style="bold")
    for col in ("bound", "ops", "launches", "time", "time %"):
        t.add_column(col, justify="left" if col == "bound" else "right")
    for bound, r in rows.items():
        t.add_row(bound.value, str(r.rows), f"{r.launches:,}", _time(r.time_s),
                  f"{100 * r.time_share:.1f}")
    return t


def _top_table(pred: Prediction, n: int) -> Table:
    total = pred.time_s
    t = Table(title=f"Top {n} ops by predicted time, summed over layers (shape: MxNxK\\[xbatch] "
                    f"for GEMMs, else elements; eff = roofline time / predicted time)",
              title_justify="left", header_style="bold")
    name_column(t)
    for col in ("layers", "phase", "shape", "FLOPs", "bytes", "FLOP/B", "time", "time %",
                "bound", "eff"):
        t.add_column(col, justify="left" if col in ("phase", "bound") else "right",
                     no_wrap=True)
    for (name, phase), r in pred.top(n).rows():
        eff = r["roofline_s"] / r["time_s"] if r["time_s"] > 0 else 1.0
        intensity = r["flops"] / r["bytes"] if r["bytes"] > 0 else 0.0
        t.add_row(escape(str(name)), str(r["layers"]) if r["layers"] else "-", str(phase), shape(r),
                  si(r["flops"]), binary(r["bytes"]), f"{intensity:.1f}", _time(r["time_s"]),
                  f"{100 * r['time_s'] / total:.2f}" if total > 0 else "-", str(r["bound"]),
                  f"{100 * eff:.0f}%")
    return t


def print_devices(rows: list[dict[str, Any]], console: Console) -> None:
    """Print the hardware catalog (`bertscope.hardware.list_devices()` rows)."""
    t = Table(title="Device catalog (dense peaks)", title_justify="left", header_style="bold")
    cols = ("name", "SKU", "kind", "bf16 TFLOP/s", "fp16 TFLOP/s", "fp32 TFLOP/s", "HBM GB/s",
            "memory GB", "ridge FLOP/B")
    for col in cols:
        t.add_column(col, justify="left" if col in ("name", "SKU", "kind") else "right",
                     no_wrap=col == "name")

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.4g}"

    for r in rows:
        ridge = (f"{r['ridge_FLOP_per_byte']:.0f} ({r['ridge_format']})"
                 if r["ridge_FLOP_per_byte"] is not None else "-")
        t.add_row(escape(r["name"]), escape(r["sku"]), r["kind"], num(r["bf16_TFLOPS"]),
                  num(r["fp16_TFLOPS"]), num(r["fp32_TFLOPS"]), num(r["bandwidth_GBps"]),
                  num(r["memory_GB"]), ridge)
    console.print(t)
    console.print("--device also takes a .toml/.json device file (same fields as the catalog) "
                  "or a profile JSON with calibrated efficiency models.")


__all__ = ["print_devices", "print_prediction"]
