"""`bertscope distributed`: time and memory per device of a DP/TP/PP/ZeRO layout, or every
valid layout ranked (`--search`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bertscope.cli.options import (
    DeviceOpt,
    LayoutCheckpointOpt,
    LayoutMicroBatchesOpt,
    MicroBatchesAlias,
    check_export,
    check_suffix,
    check_top,
    job_command,
)
from bertscope.errors import BertscopeError
from bertscope.io import check_output
from bertscope.job import Job, Schedule
from bertscope.report.tables import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from bertscope.parallel import Cluster, Layout, Workload


@job_command("seq", "decoder_seq", "precision", "optimizer", batch=1)
def distributed_cmd(
    job: Job,
    devices: Annotated[int, typer.Option(help="Devices in all.")],
    device: DeviceOpt,
    global_batch: Annotated[int, typer.Option(help="Sequences per optimizer step.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
    dp: Annotated[int | None, typer.Option(
        help="Data-parallel replicas (default: devices / (tp x pp)).")] = None,
    micro_batches: LayoutMicroBatchesOpt = None,
    microbatches: MicroBatchesAlias = None,
    zero: Annotated[int | None, typer.Option(help="ZeRO stage 0-3.")] = None,
    checkpoint: LayoutCheckpointOpt = None,
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
        help="With --search: write every costed layout here (.csv, .json or .parquet).")] = None,
    timeline: Annotated[Path | None, typer.Option(
        help="Write the per-device schedule (pipeline stages, forward/backward micro-batches, "
             "bubbles, exposed communication) as a Chrome/Perfetto trace (.json); with "
             "--search, the best layout's.")] = None,
) -> None:
    """Time and memory per device of a DP/TP/PP/ZeRO layout, or the best layouts (--search)."""
    from bertscope.job import zero_stage
    from bertscope.parallel import Cluster, Layout, SearchSpace, Workload, evaluate
    from bertscope.parallel import search as run_search
    from bertscope.report.parallel import print_layout, print_search

    check_top(top, least=1)
    if output is not None and not search:
        raise BertscopeError("--output needs --search")
    check_suffix(output, (".csv", ".json", ".parquet"), "the output")
    check_export(output)
    check_suffix(timeline, (".json",), "the timeline")
    check_output(timeline)
    if zero is not None and zero not in (0, 1, 2, 3):
        raise BertscopeError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if micro_batches is None:
        micro_batches = microbatches
    workload = Workload(model=job.model, run=job.run, global_batch=global_batch)
    cluster = Cluster.build(device, devices, devices_per_node=per_node, intra=intra,
                            inter=inter)
    out = make_console()
    if not search:
        layout = Layout.fill(devices, dp=dp, tp=tp, pp=pp, micro_batches=micro_batches,
                             zero=zero, checkpoint=checkpoint, sequence_parallel=sp,
                             schedule=schedule, virtual_stages=virtual_stages)
        print_layout(evaluate(layout, workload, cluster), workload, cluster, out)
        _write_timeline(timeline, layout, workload, cluster, out)
        return
    space = SearchSpace(dp=dp, tp=tp, pp=pp, micro_batches=micro_batches,
                        zero=None if zero is None else zero_stage(zero),
                        checkpoint=checkpoint, sequence_parallel=sp, schedule=schedule,
                        virtual_stages=virtual_stages)
    result = run_search(workload, cluster, space)
    print_search(result, workload, cluster, out, top=top)
    best = result.best()
    if best is not None:
        out.print()
        print_layout(evaluate(best, workload, cluster), workload, cluster, out,
                     title="Best layout")
    if timeline is not None and best is None:
        raise BertscopeError("no layout fits, so there is no timeline to write (nothing "
                             "written)")
    if output is not None:
        path = result.export(output)
        out.print(f"wrote {result.evaluated} layouts to {path}")
    if best is not None:
        _write_timeline(timeline, best, workload, cluster, out)


def _write_timeline(path: Path | None, layout: Layout, workload: Workload, cluster: Cluster,
                    out: Console) -> None:
    if path is None:
        return
    from bertscope.parallel.schedule_trace import write_layout_timeline

    written = write_layout_timeline(layout, workload, cluster, path)
    out.print(f"wrote the per-device timeline to {written} (open it in ui.perfetto.dev)")


def register(app: typer.Typer) -> None:
    """Add `distributed` to a typer app."""
    app.command("distributed")(distributed_cmd)


__all__ = ["distributed_cmd", "register"]
