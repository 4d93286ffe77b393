"""The `distributed` command; `register(app)` adds it to the `bertscope` app.

Thin like the rest of the CLI: parse, call `bertscope.parallel`, render. Errors are
`BertscopeError`s, which `bertscope.cli.main` prints as one line with exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from bertscope.cli_options import (
    ModelArg,
    OptimizerOpt,
    PrecisionOpt,
    SeqOpt,
)
from bertscope.config import Optimizer, Precision
from bertscope.errors import BertscopeError
from bertscope.parallel.layouts import (
    MEMORY_KEYS,
    Cluster,
    Layout,
    LayoutResult,
    Schedule,
    Workload,
)
from bertscope.parallel.memory import Checkpoint, ZeroStage
from bertscope.parallel.search import SearchResult, SearchSpace
from bertscope.report.tables import make_console

_TIME_LABELS = {
    "compute_s": "compute (incl. recompute, grad accumulation)",
    "tp_comm_s": "tensor-parallel communication",
    "pp_comm_s": "pipeline send/recv",
    "bubble_s": "pipeline bubble",
    "dp_comm_s": "data-parallel / ZeRO communication (exposed)",
    "optimizer_s": "optimizer step",
}
_MEMORY_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states (incl. fp32 master)",
    "activations": "activations",
    "transient": "largest transient buffer",
}


def distributed_cmd(
    model: ModelArg,
    devices: Annotated[int, typer.Option(help="Devices in all.")],
    device: Annotated[str, typer.Option(
        help="Catalog device (see `bertscope devices`), a .toml/.json device file, or a "
             "profile JSON with calibrated efficiency models.")],
    global_batch: Annotated[int, typer.Option(help="Sequences per optimizer step.")],
    seq: SeqOpt = 128,
    precision: PrecisionOpt = Precision.BF16,
    optimizer: OptimizerOpt = Optimizer.ADAM,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
    dp: Annotated[int | None, typer.Option(
        help="Data-parallel replicas (default: devices / (tp x pp)).")] = None,
    microbatches: Annotated[int | None, typer.Option(
        help="Micro-batches per step per replica (pipeline / gradient accumulation).")] = None,
    zero: Annotated[int | None, typer.Option(help="ZeRO stage 0-3.")] = None,
    checkpoint: Annotated[Checkpoint | None, typer.Option(
        help="Activation recomputation.")] = None,
    sp: Annotated[bool | None, typer.Option(
        "--sp/--no-sp", help="Sequence parallelism (needs tp > 1).")] = None,
    schedule: Annotated[Schedule | None, typer.Option(help="Pipeline schedule.")] = None,
    virtual_stages: Annotated[int | None, typer.Option(
        help="Model chunks per device for the interleaved schedule.")] = None,
    search: Annotated[bool, typer.Option(
        "--search", help="Try every valid layout (the options above pin dimensions).")] = False,
    top: Annotated[int, typer.Option(help="Rows of the ranking to show with --search.")] = 10,
    per_node: Annotated[int | None, typer.Option(
        help="Devices per node (default: the device's usual system).")] = None,
    intra: Annotated[str | None, typer.Option(
        help="Intra-node link, e.g. nvlink3, pcie4 (default: the device's system).")] = None,
    inter: Annotated[str | None, typer.Option(
        help="Inter-node link, e.g. ib-hdr, roce-400g (default: the device's system).")] = None,
    output: Annotated[Path | None, typer.Option(
        help="With --search: write every costed layout to this .csv file.")] = None,
) -> None:
    """Time and memory per device of a DP/TP/PP/ZeRO layout, or the best layouts (--search)."""
    from bertscope.config import get_model
    from bertscope.parallel.layouts import evaluate
    from bertscope.parallel.search import search as run_search

    if top < 1:
        raise BertscopeError(f"--top must be >= 1, got {top}")
    if output is not None and not search:
        raise BertscopeError("--output needs --search")
    if output is not None and output.suffix.lower() != ".csv":
        raise BertscopeError(f"{output}: the output must be a .csv file")
    workload = Workload(model=get_model(model), global_batch=global_batch, seq=seq,
                        precision=precision, optimizer=optimizer)
    cluster = Cluster.build(device, devices, devices_per_node=per_node, intra=intra,
                            inter=inter)
    out = make_console()
    if search:
        space = SearchSpace(dp=dp, tp=tp, pp=pp, micro_batches=microbatches,
                            zero=None if zero is None else _zero(zero), checkpoint=checkpoint,
                            sequence_parallel=sp, schedule=schedule,
                            virtual_stages=virtual_stages)
        result = run_search(workload, cluster, space)
        print_search(result, workload, cluster, out, top=top)
        best = result.best()
        if best is not None:
            out.print()
            print_layout(evaluate(best, workload, cluster), workload, cluster, out,
                         title="Best layout")
        if output is not None:
            from bertscope.io import atomic_write

            atomic_write(output, result.frame.to_csv(index=False).encode())
            out.print(f"wrote {result.evaluated} layouts to {output}")
        return
    t, p = tp or 1, pp or 1
    if dp is None:
        if devices % (t * p):
            raise BertscopeError(f"tp x pp = {t * p} does not divide {devices} devices; give "
                                 f"--tp/--pp that do, or --dp")
        dp = devices // (t * p)
    sched = schedule or Schedule.ONE_F_ONE_B
    v = virtual_stages if virtual_stages is not None else (
        2 if sched is Schedule.INTERLEAVED else 1)
    layout = Layout(dp=dp, tp=t, pp=p, micro_batches=microbatches or 1,
                    zero=_zero(zero or 0), checkpoint=checkpoint or Checkpoint.NONE,
                    sequence_parallel=bool(sp), schedule=sched, virtual_stages=v)
    print_layout(evaluate(layout, workload, cluster), workload, cluster, out)


def _zero(stage: int) -> ZeroStage:
    try:
        return ZeroStage(stage)
    except ValueError:
        raise BertscopeError(f"--zero must be 0, 1, 2 or 3, got {stage}") from None


# -- rendering ----------------------------------------------------------------------------------
def _header(workload: Workload, cluster: Cluster, console: Console) -> None:
    from bertscope.report.tables import si

    topo = cluster.topology
    dev = cluster.profile.device
    console.print(
        f"[bold]{workload.model.name}[/] global batch {workload.global_batch} x seq "
        f"{workload.seq}, {workload.precision.value}, {workload.optimizer.value} on "
        f"[bold]{cluster.devices} x {dev.sku}[/] ({dev.name})")
    console.print(
        f"topology {topo.name}: {topo.devices_per_node} per node on {topo.intra.name} "
        f"({si(topo.intra.bandwidth, 'B/s')}/direction, {topo.intra.latency * 1e6:.3g} µs/hop), "
        f"nodes on {topo.nics} x {topo.inter.name} ({si(topo.inter.bandwidth, 'B/s')}, "
        f"{topo.inter.latency * 1e6:.3g} µs/hop); {topo.algorithm.value} collectives")
    if topo.notes:
        console.print(f"note: {topo.notes}")


def print_layout(result: LayoutResult, workload: Workload, cluster: Cluster, console: Console,
                 *, title: str = "Layout") -> None:
    """Print one layout's iteration time split and memory per device."""
    from bertscope.report.tables import binary, si

    if title == "Layout":
        _header(workload, cluster, console)
    fits = "[green]fits[/]" if result.fits else "[red]does not fit[/]"
    console.print(
        f"[bold]{title}: {result.layout.label()}[/], micro-batch {result.micro_batch}: "
        f"iteration [bold]{si(result.iteration_s, 's')}[/], [bold]{si(result.tokens_per_s)}"
        f"[/] tokens/s, bubble {100 * result.bubble_fraction:.1f}% of the pipeline; memory "
        f"{binary(result.memory_bytes)} of {binary(result.memory_capacity)} per device, {fits}")
    t = Table(title="Iteration time per device", title_justify="left", header_style="bold")
    for col in ("part", "time", "share"):
        t.add_column(col, justify="left" if col == "part" else "right")
    for key, label in _TIME_LABELS.items():
        value = result.time[key]
        t.add_row(label, si(value, "s"), f"{100 * value / result.iteration_s:.1f}%")
        if key == "compute_s" and result.time["recompute_s"] > 0:
            rec = result.time["recompute_s"]
            t.add_row("  of which recompute", si(rec, "s"),
                      f"{100 * rec / result.iteration_s:.1f}%")
    t.add_row("[bold]iteration[/]", si(result.iteration_s, "s"), "100.0%")
    m = Table(title="Memory per device (peak pipeline stage)", title_justify="left",
              header_style="bold")
    for col in ("part", "bytes", "share"):
        m.add_column(col, justify="left" if col == "part" else "right")
    for key in MEMORY_KEYS:
        value = result.memory[key]
        m.add_row(_MEMORY_LABELS[key], binary(value),
                  f"{100 * value / result.memory_bytes:.1f}%")
    m.add_row("[bold]total[/]", binary(result.memory_bytes), "100.0%")
    m.add_row("device capacity", binary(result.memory_capacity), "")
    console.print(t)
    console.print(m)


def print_search(result: SearchResult, workload: Workload, cluster: Cluster, console: Console,
                 *, top: int = 10) -> None:
    """Print a search's summary line and its top layouts."""
    from bertscope.report.tables import binary, si

    _header(workload, cluster, console)
    console.print(f"searched [bold]{result.evaluated:,}[/] layouts in "
                  f"{result.seconds * 1e3:.0f} ms; {result.fitting:,} fit in "
                  f"{binary(cluster.memory_bytes)} per device")
    if result.fitting == 0:
        console.print("[red]no layout fits device memory[/]: try more devices, more "
                      "micro-batches, or unpin --tp/--pp/--microbatches/--checkpoint")
        frame = result.frame.nsmallest(top, "memory_bytes")
        what = f"The {len(frame)} smallest-memory layouts"
    else:
        frame = result.frame[result.frame["fits"]].head(top)
        what = f"Top {len(frame)} layouts by throughput"
    t = Table(title=f"{what}: m micro-batches of b "
                    f"sequences per replica; % columns are shares of the iteration; memory "
                    f"per device", title_justify="left", header_style="bold",
              box=box.SIMPLE_HEAD)
    cols = ("dp", "tp", "pp", "sched", "m", "b", "zero", "ckpt", "tokens/s", "iter",
            "comp%", "TP%", "PP%", "DP%", "bubble%", "opt%", "GiB")
    for col in cols:
        t.add_column(col, justify="left" if col in ("sched", "ckpt") else "right",
                     no_wrap=True)
    for r in frame.to_dict("records"):
        it = r["iteration_s"]

        def pct(key: str, it: float = it, r: dict = r) -> str:
            return f"{100 * r[key] / it:.1f}"

        sched = "-" if r["pp"] == 1 else r["schedule"] + (
            f" v{r['virtual_stages']}" if r["virtual_stages"] > 1 else "")
        t.add_row(str(r["dp"]), f"{r['tp']}{' sp' if r['sp'] else ''}", str(r["pp"]), sched,
                  str(r["micro_batches"]), str(r["micro_batch"]), str(r["zero"]),
                  r["checkpoint"], si(r["tokens_per_s"]), si(it, "s"), pct("compute_s"),
                  pct("tp_comm_s"), pct("pp_comm_s"), pct("dp_comm_s"), pct("bubble_s"),
                  pct("optimizer_s"), f"{r['memory_bytes'] / 2**30:.1f}")
    console.print(t)


def register(app: typer.Typer) -> None:
    """Add `distributed` to a typer app."""
    app.command("distributed")(distributed_cmd)


__all__ = ["distributed_cmd", "print_layout", "print_search", "register"]
