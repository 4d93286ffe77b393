"""The `bertscope` command: parse, call the API, render. Bad input: one line, exit 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from bertscope.cli_calibrate import register as register_calibrate
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
from bertscope.cli_parallel import register as register_parallel
from bertscope.cli_perf import register
from bertscope.cli_trace import register as register_trace
from bertscope.config import (
    PRESETS,
    HostAllocator,
    ModelConfig,
    Optimizer,
    Precision,
    RunConfig,
)
from bertscope.errors import BertscopeError
from bertscope.io import Format, check_folder
from bertscope.report.tables import make_console
from bertscope.trace.attribute import Statistic

try:  # typer >= 0.22 vendors click as typer._click; older typer uses click itself
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[no-redef]

app = typer.Typer(
    name="bertscope",
    help="Where the time, bytes and FLOPs of Transformer training go.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = make_console()


@app.command()
def models() -> None:
    """List the model presets."""
    from bertscope.analytic import parameter_count

    t = Table(title="Model presets", title_justify="left", header_style="bold")
    for col in ("name", "family", "layers", "hidden", "heads", "FFN", "vocab", "params"):
        t.add_column(col, justify="left" if col in ("name", "family") else "right",
                     no_wrap=col == "name")
    for m in PRESETS.values():
        t.add_row(m.name, m.family.value, str(m.num_layers), str(m.hidden), str(m.heads),
                  str(m.intermediate), str(m.vocab_size), f"{parameter_count(m) / 1e6:.1f} M")
    console.print(t)
    console.print("Any Hugging Face config.json (bert, roberta, albert) works too: "
                  "bertscope ops path/to/config.json")


@app.command()
def ops(
    model: ModelArg,
    batch: BatchOpt = 8,
    seq: SeqOpt = 128,
    precision: PrecisionOpt = Precision.FP32,
    optimizer: OptimizerOpt = Optimizer.ADAM,
    dropout: DropoutOpt = True,
    checkpointing: CheckpointingOpt = False,
    micro_batches: MicroBatchesOpt = 1,
    masked_lm_only: MaskedLmOnlyOpt = False,
    top: Annotated[int, typer.Option(help="Show the N largest ops.")] = 10,
    fmt: Annotated[Format | None, typer.Option(
        "--format", help="Export format (default: from the output suffix).")] = None,
    output: Annotated[Path | None, typer.Option(help="Write the op table to this file.")] = None,
) -> None:
    """Every op of one training iteration, with totals by category, sublayer and phase."""
    from bertscope.analytic import ops as build_ops
    from bertscope.report.tables import print_optable

    if fmt is not None and output is None:
        raise BertscopeError("--format needs --output FILE")
    if top < 0:
        raise BertscopeError(f"--top must be >= 0, got {top}")
    table = build_ops(model, batch=batch, seq=seq, precision=precision, optimizer=optimizer,
                      dropout=dropout, checkpointing=checkpointing, micro_batches=micro_batches,
                      masked_lm_only=masked_lm_only)
    print_optable(table, console, top=top)
    if output is not None:
        path = table.export(output, fmt)
        console.print(f"wrote {len(table)} rows to {path}")


@app.command()
def profile(
    model: ModelArg,
    batch: BatchOpt = 4,
    seq: SeqOpt = 128,
    precision: PrecisionOpt = Precision.FP32,
    optimizer: OptimizerOpt = Optimizer.ADAM,
    iters: Annotated[int, typer.Option(help="Measured iterations.")] = 3,
    warmup: Annotated[int, typer.Option(help="Unmeasured warm-up iterations.")] = 1,
    dropout: DropoutOpt = True,
    checkpointing: CheckpointingOpt = False,
    micro_batches: MicroBatchesOpt = 1,
    hf: Annotated[bool, typer.Option(
        "--hf", help="Profile the Hugging Face model instead of the reference one.")] = False,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
    top: Annotated[int, typer.Option(help="Show the N slowest ops.")] = 10,
    output: Annotated[Path | None, typer.Option(
        help="JSON result (default: profile-MODEL-bB-sS-PRECISION.json).")] = None,
    trace_out: Annotated[Path | None, typer.Option(
        help="Also write the Chrome/Perfetto trace (JSON) here (with --nproc: a folder, one "
             "trace per rank).")] = None,
    nproc: Annotated[int, typer.Option(
        help="Processes: N > 1 trains with DistributedDataParallel under torchrun (gloo on "
             "CPU, NCCL on CUDA) and compares the all-reduce with the distributed model.")] = 1,
    link: Annotated[str | None, typer.Option(
        help="With --nproc: catalog link for the prediction, e.g. nvlink4 (default: the "
             "link measured between the ranks).")] = None,
    statistic: Annotated[Statistic, typer.Option(
        help="Each op's time over the measured iterations: mean, or median (robust to a "
             "slow iteration on a shared machine).")] = Statistic.MEAN,
    host_allocator: Annotated[HostAllocator, typer.Option(
        help="CPU runs: keep freed memory in the process (no page faults charged to ops, as "
             "with a caching allocator) or leave the C library's defaults.")] = (
        HostAllocator.KEEP),
) -> None:
    """Run real pretraining iterations under torch.profiler and break them down."""
    from bertscope.config import get_model
    from bertscope.report.tables import print_profile

    m = get_model(model)
    run = RunConfig(batch=batch, seq=seq, precision=precision, optimizer=optimizer,
                    dropout=dropout, checkpointing=checkpointing, micro_batches=micro_batches)
    run.check(m)
    for path in (output, trace_out):  # fail before minutes of work, not after
        check_folder(path)
    if threads is not None and threads < 1:
        raise BertscopeError(f"--threads must be >= 1, got {threads}")
    if nproc < 1:
        raise BertscopeError(f"--nproc must be >= 1, got {nproc}")
    if nproc == 1 and link is not None:
        raise BertscopeError("--link needs --nproc 2 or more")
    try:
        import torch
    except ImportError:
        raise BertscopeError("profile needs PyTorch: pip install 'bertscope[torch]'") from None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from bertscope.measure.profile import profile as run_profile

    if nproc > 1:
        _profile_ddp(m, run, nproc=nproc, iters=iters, warmup=warmup, device=device, hf=hf,
                     threads=threads, link=link, top=top, output=output, trace_out=trace_out,
                     statistic=statistic, host_allocator=host_allocator)
        return
    if threads is not None:
        torch.set_num_threads(threads)
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=err, transient=True) as bar:
        tasks: dict[str, object] = {}

        def tell(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)  # type: ignore[arg-type]

        result = run_profile(m, run, iters=iters, warmup=warmup, device=device, hf=hf,
                             trace_out=trace_out, progress=tell, statistic=statistic,
                             host_allocator=host_allocator)
    print_profile(result, console, top=top)
    path = output or Path(f"profile-{m.name.replace('/', '_')}-b{batch}-s{seq}-"
                          f"{precision.value}.json")
    result.write_json(path)
    console.print(f"wrote {path}" + (f" and trace {trace_out}" if trace_out else ""))


def _profile_ddp(m: ModelConfig, run: RunConfig, *, nproc: int, iters: int, warmup: int,
                 device: str, hf: bool, threads: int | None, link: str | None, top: int,
                 output: Path | None, trace_out: Path | None, statistic: Statistic,
                 host_allocator: HostAllocator) -> None:
    """`profile --nproc N`: DDP under torchrun, merged over ranks, measured vs predicted."""
    from bertscope.measure.ddp import profile_ddp
    from bertscope.report.ddp import print_ddp
    from bertscope.report.tables import print_profile

    err = Console(stderr=True)
    with err.status(f"training on {nproc} processes (torchrun) ..."):
        result = profile_ddp(m, run, nproc=nproc, iters=iters, warmup=warmup, device=device,
                             hf=hf, threads=threads, link=link, trace_dir=trace_out,
                             statistic=statistic, host_allocator=host_allocator)
    print_profile(result.profile, console, top=top)
    print_ddp(result, console)
    path = output or Path(f"profile-{m.name.replace('/', '_')}-b{run.batch}-s{run.seq}-"
                          f"{run.precision.value}-ddp{nproc}.json")
    result.profile.write_json(path)
    console.print(f"wrote {path}" + (f" and one trace per rank in {trace_out}/"
                                     if trace_out else ""))


register(app)  # predict, devices
register_calibrate(app)  # calibrate, validate
register_parallel(app)  # distributed
register_trace(app)  # trace


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; bad input becomes one line on stderr and exit code 2."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except BertscopeError as e:
        print(f"bertscope: error: {e}", file=sys.stderr)
        return 2
    except NoArgsIsHelpError:
        return 0
    except UsageError as e:
        cmd = e.ctx.command_path if e.ctx is not None else "bertscope"
        msg = " ".join(e.format_message().split())
        print(f"bertscope: error: {msg} (see: {cmd} --help)", file=sys.stderr)
        return 2
    except typer.Abort:
        print("bertscope: aborted", file=sys.stderr)
        return 130
    except typer.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        print("bertscope: interrupted", file=sys.stderr)
        return 130
    # typer returns an Exit's code instead of raising it here, Ctrl-C's included (130)
    if rv == 130:
        print("bertscope: interrupted", file=sys.stderr)
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
