"""`bertscope models` and `bertscope ops`: the presets, and the analytic op table of a job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from bertscope.cli.options import TopOpt, add_job_command, check_export, check_top, job_command
from bertscope.errors import BertscopeError
from bertscope.io import Format
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
    fmt: Annotated[Format | None, typer.Option(
        "--format", help="Export format (default: from the output suffix).")] = None,
    output: Annotated[Path | None, typer.Option(help="Write the op table to this file.")] = None,
) -> None:
    """Every op of one training iteration, with totals by category, sublayer and phase
    (with --fusion, as fused kernels run them)."""
    from bertscope.analytic import build
    from bertscope.perf import fuse
    from bertscope.report.tables import print_optable

    if fmt is not None and output is None:
        raise BertscopeError("--format needs --output FILE")
    check_top(top)
    check_export(output, fmt)
    table = build(job)
    if job.run.fusion:
        table = fuse(table)
    console = make_console()
    print_optable(table, console, top=top)
    if output is not None:
        path = table.export(output, fmt)
        console.print(f"wrote {len(table)} rows to {escape(str(path))}")


def register(app: typer.Typer) -> None:
    """Add `models` and `ops` to a typer app."""
    app.command("models")(models_cmd)
    add_job_command(app, "ops", ops_cmd)


__all__ = ["models_cmd", "ops_cmd", "register"]
