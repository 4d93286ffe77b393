"""`bertscope predict` and `bertscope devices`: a job's predicted iteration on a device, and
the hardware catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from bertscope.cli.options import (
    DeviceOpt,
    FormatOpt,
    OutputOpt,
    TopOpt,
    VerboseOpt,
    add_job_command,
    check_suffix,
    check_top,
    job_command,
    notice_console,
    output_format_of,
    table_output,
)
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.io import check_output
from bertscope.job import Job
from bertscope.report.tables import make_console
from bertscope.requirements import require


@job_command(inputs=("device",), outputs=("plot", "output", "timeline"))
def predict_cmd(
    job: Job,
    device: DeviceOpt,
    top: TopOpt = 10,
    plot: Annotated[Path | None, typer.Option(
        help="Write a roofline plot of every op (.png or .svg).")] = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    timeline: Annotated[Path | None, typer.Option(
        help="Write the predicted iteration as a Chrome/Perfetto trace (.json): open it in "
             "ui.perfetto.dev or read it with `bertscope trace`.")] = None,
    verbose: VerboseOpt = False,
    store: StoreOpt = None,
    no_store: NoStoreOpt = False,
) -> None:
    """Predicted iteration time on a device, whether the job fits its memory, tokens/s,
    breakdowns, each op's bound. With --output FILE.csv (json, jsonl, parquet) the op table
    with its predicted times is written too; with --format csv, json or jsonl and no
    --output, those rows go to stdout alone."""
    from bertscope.analytic import build
    from bertscope.perf import Prediction, fuse, load_profile, predict
    from bertscope.report.predict import print_prediction

    check_top(top)
    check_suffix(plot, (".png", ".svg"), "the plot")
    if plot is not None:
        require("predict --plot", "matplotlib")
    check_output(plot)
    form = output_format_of(fmt, output)
    check_output(output)
    check_suffix(timeline, (".json",), "the timeline")
    check_output(timeline)
    st = open_store(store, no_store)
    profile = load_profile(device)
    table = build(job)
    fusion = job.run.fusion
    unfused = predict(table, profile)
    result = predict(fuse(table), profile) if fusion else unfused
    pred = Prediction.of(result)
    summary = {"time_s": pred.time_s, "tokens_per_s": pred.tokens_per_s,
               "achieved_flops": pred.achieved_flops, "peak_fraction": pred.peak_fraction,
               "precision": pred.precision.value, "gemm_format": pred.gemm_format.value}
    if form.file is not None and output is None:  # the rows alone, for a pipe
        typer.echo(result.to_bytes(form.file).decode(), nl=False)
        quiet = notice_console(form, output, None)  # stdout holds the rows alone
        _side_files(result, plot, timeline, quiet)
        record(st, quiet, "predict", result, device=pred.device,
               inputs={**job.as_dict(), "device": device}, summary=summary)
        return
    with table_output(output if form.file is None else None) as out:
        print_prediction(result, out, top=top, unfused=unfused if fusion else None,
                         capacity=profile.device.memory_bytes, verbose=verbose)
        _side_files(result, plot, timeline, out)
        if form.file is not None:
            path = result.export(output, form.file)  # type: ignore[arg-type]
            out.print(f"wrote {len(result)} rows with predictions to {escape(str(path))}")
    record(st, notice_console(form, output, out), "predict", result, device=pred.device,
           inputs={**job.as_dict(), "device": device}, summary=summary)


def _side_files(result: Any, plot: Path | None, timeline: Path | None, out: Any) -> None:
    """Write the roofline plot and the predicted timeline where asked, saying so on `out`."""
    if plot is not None:
        from bertscope.report.roofline import plot_roofline

        out.print(f"wrote roofline plot to {escape(str(plot_roofline(result, plot)))}")
    if timeline is not None:
        from bertscope.perf.iteration_trace import write_timeline

        written = write_timeline(result, timeline)
        out.print(f"wrote the predicted timeline to {escape(str(written))}")


def devices_cmd() -> None:
    """List the hardware catalog: peaks, memory bandwidth, ridge points."""
    from bertscope.hardware import list_devices
    from bertscope.report.predict import print_devices

    print_devices(list_devices(), make_console())


def register(app: typer.Typer) -> None:
    """Add `predict` and `devices` to a typer app."""
    add_job_command(app, "predict", predict_cmd)
    app.command("devices")(devices_cmd)


__all__ = ["devices_cmd", "predict_cmd", "register"]
