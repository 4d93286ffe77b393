"""`bertscope profile`: real pretraining iterations under torch.profiler, broken down (with
`--nproc N`, DistributedDataParallel under torchrun beside the distributed model)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from bertscope.cli.options import (
    MeasureOnOpt,
    TopOpt,
    add_job_command,
    check_suffix,
    check_top,
    job_command,
)
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.config import HostAllocator
from bertscope.errors import BertscopeError
from bertscope.io import check_output
from bertscope.job import Job
from bertscope.report.progress import progress_bar
from bertscope.report.tables import make_console
from bertscope.requirements import require
from bertscope.stop import PARTIAL_EXIT, STOP, partial_path
from bertscope.trace.attribute import Statistic

if TYPE_CHECKING:
    from bertscope.measure.profile import ProfileResult

MAX_PROCS_PER_CORE = 4
"""`--nproc` beyond this many processes per CPU core needs `--oversubscribe`."""

StatisticOpt = Annotated[Statistic, typer.Option(
    help="Each op's time over the measured iterations: mean, median (robust to a slow "
         "iteration on a shared machine) or min (the least: noise only adds time).")]


@job_command(batch=4, outputs=("output", "trace_out"))
def profile_cmd(
    job: Job,
    iters: Annotated[int, typer.Option(help="Measured iterations.")] = 3,
    warmup: Annotated[int, typer.Option(help="Unmeasured warm-up iterations.")] = 1,
    hf: Annotated[bool, typer.Option(
        "--hf", help="Profile the Hugging Face model instead of the reference one.")] = False,
    measure_on: MeasureOnOpt = "cpu",
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
    top: TopOpt = 10,
    output: Annotated[Path | None, typer.Option(
        help="Write the JSON result here (nothing is written without it).")] = None,
    trace_out: Annotated[Path | None, typer.Option(
        help="Also write the Chrome/Perfetto trace (JSON) here (with --nproc: a folder, one "
             "trace per rank).")] = None,
    nproc: Annotated[int, typer.Option(
        help="Processes: N > 1 trains with DistributedDataParallel under torchrun (gloo on "
             "CPU, NCCL on CUDA) and compares the all-reduce with the distributed model.")] = 1,
    link: Annotated[str | None, typer.Option(
        help="With --nproc: catalog link for the prediction, e.g. nvlink4 (default: the "
             "link measured between the ranks).")] = None,
    oversubscribe: Annotated[bool, typer.Option(
        "--oversubscribe",
        help=f"Allow --nproc beyond {MAX_PROCS_PER_CORE} processes per CPU core.")] = False,
    statistic: StatisticOpt = Statistic.MEAN,
    host_allocator: Annotated[HostAllocator, typer.Option(
        help="CPU runs: keep freed memory in the process (no page faults charged to ops, as "
             "with a caching allocator) or leave the C library's defaults.")] = (
        HostAllocator.KEEP),
    store: StoreOpt = None,
    no_store: NoStoreOpt = False,
) -> None:
    """Run real pretraining iterations under torch.profiler and break them down."""
    require("profile --hf" if hf else "profile", "torch", *(("transformers",) if hf else ()))
    check_top(top)
    # fail before minutes of work, not after: the JSON result and the trace (a folder with
    # --nproc: one trace per rank), which must not be the same path (`job_command` checks)
    check_suffix(output, (".json",), "the result")
    check_output(output)
    check_output(trace_out, folder=nproc > 1)
    st = open_store(store, no_store)
    if threads is not None and threads < 1:
        raise BertscopeError(f"--threads must be >= 1, got {threads}")
    if nproc < 1:
        raise BertscopeError(f"--nproc must be >= 1, got {nproc}")
    cores = os.cpu_count() or 1
    if nproc > MAX_PROCS_PER_CORE * cores and not oversubscribe:
        raise BertscopeError(f"--nproc {nproc} is more than {MAX_PROCS_PER_CORE} processes per "
                             f"core on this {cores}-core machine; add --oversubscribe to run "
                             f"it anyway")
    if nproc == 1 and link is not None:
        raise BertscopeError("--link needs --nproc 2 or more")
    console = make_console()
    # the measurement and its output are one measuring loop of the stop protocol
    # (`bertscope.stop`): a stop while the result is printed or written keeps it whole
    with STOP.graceful():
        _measure(job, st, console, iters=iters, warmup=warmup, hf=hf, device=measure_on.lower(),
                 threads=threads, top=top, output=output, trace_out=trace_out, nproc=nproc,
                 link=link, statistic=statistic, host_allocator=host_allocator)


def _measure(job: Job, st: Any, console: Console, *, iters: int, warmup: int, hf: bool,
             device: str, threads: int | None, top: int, output: Path | None,
             trace_out: Path | None, nproc: int, link: str | None, statistic: Statistic,
             host_allocator: HostAllocator) -> None:
    """Profile (one process, or DDP under torchrun), print, record and write the result."""
    from bertscope.report.tables import print_profile

    m, run = job.model, job.run
    if nproc > 1:
        from bertscope.report.ddp import print_ddp
        from bertscope.studies.ddp import profile_ddp

        with Console(stderr=True).status(f"training on {nproc} processes (torchrun) ..."):
            ddp = profile_ddp(m, run, nproc=nproc, iters=iters, warmup=warmup, device=device,
                              hf=hf, threads=threads, link=link, trace_dir=trace_out,
                              statistic=statistic, host_allocator=host_allocator)
        print_profile(ddp.profile, console, top=top)
        print_ddp(ddp, console)
        _finish(ddp.profile, output, console, traces=f"one trace per rank in {trace_out}/"
                if trace_out else None,
                record=lambda: _record(st, console, job, ddp.profile, hf=hf, iters=iters,
                                       warmup=warmup, nproc=nproc,
                                       ddp={"measured": ddp.measured,
                                            "predicted": ddp.predicted}))
        return
    from bertscope.measure.profile import profile as run_profile

    if threads is not None:
        from bertscope.measure import set_threads

        set_threads(threads)
    with progress_bar() as tell:
        result = run_profile(m, run, iters=iters, warmup=warmup, device=device, hf=hf,
                             trace_out=trace_out, progress=tell, statistic=statistic,
                             host_allocator=host_allocator)
    print_profile(result, console, top=top)
    _finish(result, output, console, traces=f"trace {trace_out}" if trace_out else None,
            record=lambda: _record(st, console, job, result, hf=hf, iters=iters,
                                   warmup=warmup, nproc=1))


def _record(st: Any, console: Console, job: Job, result: ProfileResult, *, hf: bool,
            iters: int, warmup: int, nproc: int, ddp: dict[str, Any] | None = None) -> None:
    """Record a profile (single process, or DDP's op table averaged over ranks with the
    measured and predicted all-reduce in its summary) in the runs store."""
    facts = result.facts
    summary: dict[str, Any] = {"iteration_s": facts.iteration_s,
                               "tokens_per_s": facts.tokens_per_s, "partial": facts.partial,
                               "statistic": facts.statistic, "threads": facts.threads}
    if ddp is not None:
        summary["ddp"] = ddp
    record(st, console, "profile", result.table, device=str(facts.device),
           inputs={**job.as_dict(), "hf": hf, "iters": iters, "warmup": warmup,
                   "nproc": nproc}, summary=summary)


def _finish(result: ProfileResult, output: Path | None, console: Console, *,
            traces: str | None, record: Callable[[], object]) -> None:
    """Write the result where asked and say where; then `record` it in the runs store (last:
    a store that fails costs a warning, never the result); then end as the run did: a trace
    that could not be written is exit 2 (one line); a run asked to stop (SIGINT, SIGTERM) is
    exit 3 (`PARTIAL_EXIT`) with its result kept: when incomplete, marked partial in its
    content (`ProfileFacts.partial`) and its file name (`stop.partial_path`:
    out.partial.json), so it is never taken for a complete one."""
    wrote = []
    facts = result.facts
    dest = partial_path(output) if output is not None and facts.partial else output
    if dest is not None:
        wrote.append(str(result.write_json(dest)))
    trace_error = facts.trace_error
    if traces and not trace_error:
        wrote.append(traces)
    if wrote:
        console.print("wrote " + " and ".join(map(escape, wrote)))
    record()
    if trace_error:
        raise BertscopeError(f"{trace_error} (the measurement itself was "
                             f"{'written to ' + str(dest) if dest else 'printed'})")
    if facts.partial or STOP:
        n = facts.iters
        what = (f"partial result of {n} measured iteration(s)" if facts.partial
                else f"the complete result ({n} measured iteration(s))")
        print(f"bertscope: interrupted: {what} "
              f"{'written to ' + str(dest) if dest else 'printed above'}", file=sys.stderr)
        raise typer.Exit(PARTIAL_EXIT)


def register(app: typer.Typer) -> None:
    """Add `profile` to a typer app."""
    add_job_command(app, "profile", profile_cmd)


__all__ = ["profile_cmd", "register"]
