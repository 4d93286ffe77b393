"""`bertscope models` and `bertscope ops`: the presets, and the analytic op table of a job."""

from __future__ import annotations

import typer
from rich.markup import escape

from bertscope.cli.options import (
    FormatOpt,
    OutputOpt,
    TopOpt,
    add_job_command,
    check_top,
    job_command,
    output_format_of,
    table_output,
)
from bertscope.io import check_output
from bertscope.job import Job
from bertscope.report.tables import make_console


def models_cmd() -> None:
    """List the model presets."""
    from bertscope.analytic import parameter_count
    from bertscope.presets import PRESETS
    from bertscope.report.tables import print_models

    print_models([(m, parameter_count(m)) for m in PRESETS.values()], make_console())


@job_command(outputs=("output",))
def ops_cmd(
    job: Job,
    top: TopOpt = 10,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Every op of one training iteration, with totals by category, sublayer and phase
    (with --fusion, as fused kernels run them). With --format csv, json or jsonl and no
    --output, the rows go to stdout alone."""
    from bertscope.analytic import build
    from bertscope.perf import fuse
    from bertscope.report.tables import print_optable

    check_top(top)
    form = output_format_of(fmt, output)
    check_output(output)
    table = build(job)
    if job.run.fusion:
        table = fuse(table)
    if form.file is not None and output is None:  # the data alone, for a pipe
        typer.echo(table.to_bytes(form.file).decode(), nl=False)
        return
    with table_output(output if form.file is None else None) as console:
        print_optable(table, console, top=top)
        if form.file is not None:
            path = table.export(output, form.file)  # type: ignore[arg-type]
            console.print(f"wrote {len(table)} rows to {escape(str(path))}")


def register(app: typer.Typer) -> None:
    """Add `models` and `ops` to a typer app."""
    app.command("models")(models_cmd)
    add_job_command(app, "ops", ops_cmd)


__all__ = ["models_cmd", "ops_cmd", "register"]
