"""`bertscope calibrate` and `bertscope validate`: fit the local device's efficiency models,
and check predictions against measurements of held-out configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from bertscope.cli.options import MeasureOnOpt, app_command, check_command_paths
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_output
from bertscope.report.tables import make_console
from bertscope.requirements import require
from bertscope.trace.attribute import Statistic


def calibrate_cmd(
    measure_on: MeasureOnOpt = "cpu",
    from_results: Annotated[list[Path] | None, typer.Option(
        "--from", help="`bertscope profile` JSON results to fit the models to (repeatable).")
    ] = None,
    from_trace: Annotated[list[Path] | None, typer.Option(
        "--from-trace", help="Fit to Kineto traces recorded with shapes (record_shapes=True; "
                             "NVIDIA, AMD or CPU-only) instead of this machine: GEMM "
                             "efficiency and bandwidth per category from their kernels. "
                             "No microbenchmarks, no torch.")] = None,
    quick: Annotated[bool, typer.Option(help="Fewer microbenchmark shapes.")] = False,
    allow_inconsistent: Annotated[bool, typer.Option(
        "--allow-inconsistent",
        help="Fit --from results that disagree with each other (each predicted by the fit "
             "of the others off by more than 1.5x: measured under load) instead of "
             "refusing.")] = False,
    output: Annotated[Path, typer.Option(help="Device profile JSON to write.")] = Path(
        "local-profile.json"),
    more_traces: Annotated[list[Path] | None, typer.Argument(
        hidden=True, help="More trace files after --from-trace TRACE.")] = None,
) -> None:
    """Microbenchmark the local device and fit its efficiency models (optionally to measured
    op tables), or fit them to traces (--from-trace TRACE [TRACE ...]); `bertscope predict
    --device FILE` then uses the profile."""
    traces = [*(from_trace or []), *(more_traces or [])]
    if more_traces and not from_trace:
        raise BertscopeError(f"unexpected argument {more_traces[0]}; trace files go after "
                             f"--from-trace")
    check_command_paths({"--from": from_results, "--from-trace": traces}, {"--output": output})
    if traces:
        if from_results:
            raise BertscopeError("--from and --from-trace: give one (profile results or "
                                 "traces)")
        return _calibrate_from_traces(traces, output)
    require("calibrate (measuring this machine)", "torch",
            otherwise="or calibrate --from-trace TRACE")
    check_output(output)
    from bertscope.report.studies import print_calibration
    from bertscope.studies.local_calibration import calibrate_local
    from bertscope.studies.measured import load_result

    results = [load_result(p) for p in from_results or []]
    for path, result in zip(from_results or [], results, strict=True):
        if result.facts.partial:  # a stopped measurement (`bertscope.stop`): never complete
            raise BertscopeError(f"{path}: a partial result (its measurement was stopped "
                                 f"after {result.facts.iters or 0} iteration(s)); measure the "
                                 f"config again with bertscope profile, or leave it out")
    out = make_console()
    profile, report = calibrate_local(measure_on.lower(), results, quick=quick,
                                      allow_inconsistent=allow_inconsistent,
                                      log=lambda s: out.print(f"[dim]{escape(s)}[/]"))
    profile.save(output)
    print_calibration(profile, report, out)
    out.print(f"wrote {escape(str(output))}")


def _calibrate_from_traces(traces: list[Path], output: Path) -> None:
    check_output(output)
    from bertscope.report.studies import print_trace_calibration
    from bertscope.studies.trace_calibration import calibrate_from_traces

    profile, report = calibrate_from_traces(traces)
    profile.save(output)
    out = make_console()
    print_trace_calibration(profile, report, out)
    out.print(f"wrote {escape(str(output))}")


def validate_cmd(
    calibrate: Annotated[str, typer.Option(
        help="Configs to calibrate on, MODEL:BATCH:SEQ[:FIELD...][,...]; fields: a "
             "precision, an optimizer, ckpt, mbN, nodropout, masked.")] = (
        "bert-mini:16:128,bert-small:8:128,bert-medium:4:128"),
    check: Annotated[str, typer.Option(
        "--validate", help="Held-out configs to predict and compare, "
                           "MODEL:BATCH:SEQ[:FIELD...][,...] (e.g. bert-base:2:128:bf16:lamb).")
    ] = "bert-base:2:128,bert-base:4:64,bert-medium:8:64,bert-small:4:256",
    measure_on: MeasureOnOpt = "cpu",
    iters: Annotated[int, typer.Option(help="Measured iterations per config.")] = 5,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations per config.")] = 2,
    statistic: Annotated[Statistic, typer.Option(
        help="Each op's time over the iterations: min (the least: noise on a shared machine "
             "only adds time), median (robust to a slow iteration) or mean.")
    ] = Statistic.MIN,
    rounds: Annotated[int, typer.Option(
        help="Measure every config this many times, all configs in turn, and take the "
             "least (the median with --statistic median or mean): a shared machine's slow "
             "spells then fall on all configs alike.")] = 1,
    output: Annotated[Path | None, typer.Option(help="Write the full report (JSON).")] = None,
    results_dir: Annotated[Path | None, typer.Option(
        help="Keep each config's profile result, and the microbenchmarks "
             "(microbench.json), here and reuse those already there.")] = None,
    store: StoreOpt = None,
    no_store: NoStoreOpt = False,
) -> None:
    """Profile calibration configs, fit the model, then predict held-out configs and compare:
    per-config error, MAPE, per-category share error, per-op error."""
    require("validate (measuring this machine)", "torch")
    check_output(output)
    if results_dir is not None and not results_dir.is_dir():
        raise BertscopeError(f"--results-dir {results_dir}: no such folder; create it first")
    check_command_paths({}, {"--output": output, "--results-dir": results_dir}, store,
                        no_store)
    st = open_store(store, no_store)
    from bertscope.report.studies import print_validation
    from bertscope.studies.measured import parse_specs
    from bertscope.studies.validate import validate

    out = make_console()
    device = measure_on.lower()
    report = validate(parse_specs(calibrate), parse_specs(check), device=device, iters=iters,
                      warmup=warmup, statistic=statistic, rounds=rounds,
                      results_dir=results_dir,
                      log=lambda s: out.print(f"[dim]{escape(s)}[/]"))
    print_validation(report, out)
    if output is not None:
        atomic_write(output, json.dumps(report, indent=1, default=str).encode())
        out.print(f"wrote {escape(str(output))}")
    record(st, out, "validate", device=device,
           inputs={"calibrate": calibrate, "validate": check, "iters": iters,
                   "rounds": rounds},
           summary={"mape": report["mape"], "max_share_error_pp": report["max_share_error_pp"],
                    "results": [{k: r[k] for k in ("config", "measured_iteration_s",
                                                   "predicted_s", "error")}
                                for r in report["results"]]})


def register(app: typer.Typer) -> None:
    """Add `calibrate` and `validate` to a typer app."""
    app_command(app, "calibrate")(calibrate_cmd)
    app_command(app, "validate")(validate_cmd)


__all__ = ["calibrate_cmd", "register", "validate_cmd"]
