"""`bertscope distributed`: time and memory per device of a DP/TP/PP/ZeRO layout, or every
valid layout ranked (`--search`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from bertscope.cli.options import (
    DeviceOpt,
    DevicesOpt,
    FormatOpt,
    OutputOpt,
    VerboseOpt,
    add_job_command,
    check_suffix,
    check_top,
    job_command,
    notice_console,
    output_format_of,
    table_output,
)
from bertscope.config import Checkpoint, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.io import check_output
from bertscope.job import Job, Layout, with_recipe_layout

if TYPE_CHECKING:
    from rich.console import Console

    from bertscope.parallel import Cluster

_SEARCHED = ("batch", "micro_batches", "checkpoint")
"""Run settings a layout search chooses when they are not pinned."""


@job_command(layout=True, inputs=("device",), outputs=("output", "timeline"))
def distributed_cmd(
    model: ModelConfig,
    run: dict[str, Any],
    layout: dict[str, Any],
    devices: DevicesOpt,
    device: DeviceOpt,
    global_batch: Annotated[int | None, typer.Option(
        help="Sequences per optimizer step (or give --batch, the micro-batch per replica; "
             "needed with --search).")] = None,
    search: Annotated[bool, typer.Option(
        "--search", help="Try every valid layout (the options above pin dimensions).")] = False,
    top: Annotated[int, typer.Option(help="Rows of the ranking to show with --search.")] = 10,
    per_node: Annotated[int | None, typer.Option(
        help="Devices per node (default: the device's usual system).")] = None,
    intra: Annotated[str | None, typer.Option(
        help="Intra-node link, e.g. nvlink3, pcie4 (default: the device's system).")] = None,
    inter: Annotated[str | None, typer.Option(
        help="Inter-node link, e.g. ib-hdr, roce-400g (default: the device's system).")] = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    timeline: Annotated[Path | None, typer.Option(
        help="Write the per-device schedule (pipeline stages, forward/backward micro-batches, "
             "bubbles, exposed communication) as a Chrome/Perfetto trace (.json); with "
             "--search, the best layout's.")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Time and memory per device of a DP/TP/PP/ZeRO layout (does it fit?), or the best
    layouts (--search). With --search, --output FILE.csv (json, jsonl, parquet) also writes
    every costed layout; --format csv, json or jsonl without --output sends them to stdout
    alone."""
    from bertscope.parallel import Cluster, SearchSpace, Workload, evaluate
    from bertscope.parallel import search as run_search
    from bertscope.report.parallel import print_layout, print_search

    check_top(top, least=1)
    form = output_format_of(fmt, output)
    if form.file is not None and not search:
        what = f"--output {output}" if output is not None else f"--format {form}"
        raise BertscopeError(f"{what} writes the costed layouts of --search: add --search "
                             f"(one layout's report goes to --output FILE.txt)")
    check_output(output)
    check_suffix(timeline, (".json",), "the timeline")
    check_output(timeline)
    if global_batch is not None and run["batch"] is not None:
        raise BertscopeError("give --global-batch (sequences per step) or --batch (per "
                             "micro-batch and replica), not both")
    if global_batch is None and (search or run["batch"] is None):
        raise BertscopeError("give --global-batch N: the sequences per optimizer step"
                             + ("" if search else " (or --batch, per micro-batch)"))
    template = RunConfig(**{k: v for k, v in run.items()
                            if v is not None and k not in _SEARCHED})
    cluster = Cluster.build(device, devices, devices_per_node=per_node, intra=intra,
                            inter=inter)
    if not search:
        lay = Layout.fill(devices, **layout)
        mb = 1 if run["micro_batches"] is None else run["micro_batches"]
        ck = Checkpoint.NONE if run["checkpoint"] is None else run["checkpoint"]
        if global_batch is not None:
            job = Workload(model=model, run=template, global_batch=global_batch).job(lay, mb, ck)
        else:
            job = Job(model=model, layout=lay, run=RunConfig(
                **{**{k: v for k, v in run.items() if v is not None},
                   "micro_batches": mb, "checkpoint": ck}))
        job = with_recipe_layout(job, layout)  # the recipe's layout where it applies
        with table_output(output) as out:
            print_layout(evaluate(job, cluster), cluster, out, verbose=verbose)
            _write_timeline(timeline, job, cluster, out)
        return
    space = SearchSpace(micro_batches=run["micro_batches"], checkpoint=run["checkpoint"],
                        **layout)
    result = run_search(Workload(model=model, run=template, global_batch=global_batch),
                        cluster, space)
    best = result.best()
    if timeline is not None and best is None:
        raise BertscopeError("no layout fits, so there is no timeline to write (nothing "
                             "written)")
    if form.file is not None and output is None:  # the rows alone, for a pipe
        typer.echo(result.to_bytes(form.file).decode(), nl=False)
        if best is not None:  # stdout holds the rows alone
            _write_timeline(timeline, best, cluster, notice_console(form, output, None))
        return
    with table_output(output if form.file is None else None) as out:
        print_search(result, cluster, out, top=top, verbose=verbose)
        if best is not None:
            out.print()
            print_layout(evaluate(best, cluster), cluster, out, title="Best layout")
        if form.file is not None:
            path = result.export(output, form.file)  # type: ignore[arg-type]
            out.print(f"wrote {result.evaluated} layouts to {escape(str(path))}")
        if best is not None:
            _write_timeline(timeline, best, cluster, out)


def _write_timeline(path: Path | None, job: Job, cluster: Cluster, out: Console) -> None:
    if path is None:
        return
    from bertscope.parallel.schedule_trace import write_layout_timeline

    written = write_layout_timeline(job, cluster, path)
    out.print(f"wrote the per-device timeline to {escape(str(written))} (open it in "
              f"ui.perfetto.dev)")


def register(app: typer.Typer) -> None:
    """Add `distributed` to a typer app."""
    add_job_command(app, "distributed", distributed_cmd)


__all__ = ["distributed_cmd", "register"]
