"""`bertscope study`: the paper's characterization as one command (parse, run, say where)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bertscope.cli.options import (
    DeviceListOpt,
    PrecisionListOpt,
    app_command,
    check_command_paths,
    model_file,
)
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.cli.sweep import parse_choices, parse_words
from bertscope.config import Precision
from bertscope.requirements import install_command, installed, require


def study_cmd(
    output: Annotated[Path, typer.Option(help="The folder to write (must not exist or be "
                                              "empty).")] = Path("study"),
    models: Annotated[str, typer.Option(help="Comma list of presets or config.json paths.")
                      ] = "bert-base,bert-large",
    device: DeviceListOpt = "v100,a100,h100,b200,mi250x,mi300x,tpu-v3,tpu-v4,tpu-v5p",
    precision: PrecisionListOpt = "fp32,bf16",
    quick: Annotated[bool, typer.Option("--quick", help="A small measured model and one "
                                                        "iteration (under a minute).")] = False,
    measure: Annotated[bool | None, typer.Option(
        "--measure/--no-measure", help="Profile this machine for the measured part (needs "
        "torch). Default: measure when torch is installed; without it the study writes its "
        "predicted sections and says how to add the measured part.")] = None,
    from_trace: Annotated[Path | None, typer.Option(help="Use this trace as the measured "
                                                         "part instead of profiling.")] = None,
    store: StoreOpt = None,
    no_store: NoStoreOpt = False,
) -> None:
    """The paper's characterization: measured here, projected on catalog accelerators, as
    an HTML report with figures, tables and findings computed from the data."""
    from bertscope.report.progress import progress_bar
    from bertscope.report.tables import make_console
    from bertscope.studies.study import REPORT_LIBRARIES, StudyConfig, study

    require("study", *REPORT_LIBRARIES)  # before any work: the measured part takes minutes
    if measure and from_trace is None:
        require("study --measure", "torch", otherwise="or pass --no-measure")
    skipped = measure is None and from_trace is None and not installed("torch")
    measure = not skipped if measure is None else measure
    cfg = StudyConfig(output=output, models=tuple(parse_words(models, "models")),
                      devices=tuple(parse_words(device, "device")),
                      precisions=tuple(parse_choices(Precision)(precision, "precision")),
                      quick=quick,
                      measure=measure, from_trace=from_trace)
    check_command_paths({"--models": [model_file(m) for m in models.split(",")],
                         "--device": device.split(","), "--from-trace": from_trace},
                        {"--output": output}, store, no_store)
    st = open_store(store, no_store)
    with progress_bar() as tell:
        result = study(cfg, progress=tell)
    console = make_console()
    from bertscope.report.study_text import print_study

    print_study(result, console)
    if skipped:  # one line, after the report, on stderr: what is missing and how to add it
        typer.echo(f"note: no measured part (torch is not installed): {install_command('torch')}"
                   f", then run the study again to add it", err=True)
    record(st, console, "study", model=models, device=device,
           inputs={"output": str(output), "models": models, "devices": device,
                   "precisions": precision, "quick": quick, "measure": measure,
                   "from_trace": str(from_trace) if from_trace else None},
           summary={"folder": str(result.folder), "seconds": result.seconds,
                    "findings": {s.title: s.findings for s in result.sections}})


def register(app: typer.Typer) -> None:
    """Add `study` to a typer app."""
    app_command(app, "study")(study_cmd)


__all__ = ["register", "study_cmd"]
