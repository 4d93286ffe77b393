"""`bertscope sweep`: every configuration of a grid, predicted on every device, in one run.

Each axis takes a comma list (`--batch 8,16,32`) or an inclusive integer range
(`--batch 1..256`); model presets (or config.json paths) are a comma list in the first
argument. Parsing only: the grid is checked and evaluated by `bertscope.sweep`.

The axis options are generated from the config fields when the command is registered: the
model dimensions (`--num-layers`, `--hidden`, `--heads`, `--intermediate`, `--vocab-size`),
every `RunConfig` field under its name with dashes (or its `setting` flag) and its help,
parsed by its type (integers and ranges, on/off, or the enum's words), the layout fields
`--dp`, `--tp`, `--pp`, `--zero` and the knobs. A field added to the run config is an option
here with no change to this file.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from bertscope.cli.options import (
    DeviceListOpt,
    FormatOpt,
    OutputFormat,
    OutputOpt,
    SchedulerOpt,
    check_command_paths,
    check_top,
    model_file,
    notice_console,
    output_format_of,
    table_output,
)
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_output
from bertscope.job import Layout
from bertscope.sweep.grid import KNOB_AXES, LAYOUT_AXES, MODEL_AXES, run_axes

_RANGE_MAX = 10_000_000
"""Most values one `A..B` range may hold."""


def parse_ints(text: str, what: str) -> list[int]:
    """'8,16,32' or '1..256' (inclusive; may be mixed: '1..4,8')."""
    out: list[int] = []
    for part in _parts(text, what):
        lo, sep, hi = part.partition("..")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise BertscopeError(f"--{what}: {part!r} is not an integer or an A..B range"
                                 ) from None
        if b < a:
            raise BertscopeError(f"--{what}: the range {part} is empty; write A..B with "
                                 f"A <= B")
        if b - a >= _RANGE_MAX:
            raise BertscopeError(f"--{what}: the range {part} holds more than "
                                 f"{_RANGE_MAX:,} values")
        out += range(a, b + 1)
    return out


def parse_floats(text: str, what: str) -> list[float]:
    """'0.5,1,2': multipliers."""
    try:
        return [float(p) for p in _parts(text, what)]
    except ValueError:
        raise BertscopeError(f"--{what}: write numbers separated by commas, got {text!r}"
                             ) from None


def parse_words(text: str, what: str) -> list[str]:
    """'fp32,bf16'."""
    return list(_parts(text, what))


_BOOLS = {"on": True, "true": True, "yes": True, "off": False, "false": False, "no": False}


def parse_bools(text: str, what: str) -> list[bool]:
    """'on,off' (or true/false, yes/no)."""
    out = []
    for p in _parts(text, what):
        if p.lower() not in _BOOLS:
            raise BertscopeError(f"--{what}: {p!r} is not on/off (or true/false, yes/no)")
        out.append(_BOOLS[p.lower()])
    return out


def _parts(text: str, what: str) -> list[str]:
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise BertscopeError(f"--{what}: an empty value in {text!r}; write a comma list")
    return parts


def parse_choices(kind: type[Enum]) -> Callable[[str, str], list[str]]:
    """A parser of comma lists of an enum's values ('fp32,bf16' for `Precision`)."""

    def parse(text: str, what: str) -> list[str]:
        words = [p.lower() for p in _parts(text, what)]
        names = [str(m.value) for m in kind]
        bad = [w for w in words if w not in names]
        if bad:
            raise BertscopeError(f"--{what}: {bad[0]!r} is not one of {', '.join(names)}")
        return words

    return parse


@dataclass(frozen=True, slots=True)
class AxisOption:
    """One sweep axis on the command line: the axis (a config field's name), its option
    name, help, default text (None: each model's own, or the field's None) and parser."""

    axis: str
    flag: str
    help: str
    default: str | None
    parse: Callable[[str, str], list[Any]]


_MODEL_HELP = {"num_layers": "Layers of the (encoder or decoder) stack (default: each "
                             "model's).",
               "hidden": "Hidden size (default: each model's).",
               "heads": "Attention heads (default: each model's).",
               "intermediate": "Feed-forward inner size (default: the model's ratio to hidden).",
               "vocab_size": "Vocabulary size (default: each model's)."}
"""`ModelConfig` dimensions' help (the model config's fields carry docstrings only)."""
_KNOB_HELP = {"gemm_peak": "What-if: x the GEMM peak.",
              "bandwidth": "What-if: x the memory bandwidth.",
              "overhead": "What-if: x the per-launch overhead.",
              "memory": "What-if: x the memory capacity."}


def _parser(kind: type) -> tuple[Callable[[str, str], list[Any]], str]:
    """The parser of a field type and how its values are written (for the help)."""
    if kind is bool:
        return parse_bools, "on, off"
    if isinstance(kind, type) and issubclass(kind, Enum) and not issubclass(kind, int):
        return parse_choices(kind), ", ".join(str(m.value) for m in kind)
    if isinstance(kind, type) and issubclass(kind, int):
        return parse_ints, "integers, A..B ranges"
    if kind is float:
        return parse_floats, "numbers"
    return parse_words, "words"


def _text(value: Any) -> str | None:
    """A field default as the option's default text (None for None and "": the grid takes
    the field's default, as an empty comma list cannot say it)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def axis_options() -> list[AxisOption]:
    """Every sweep axis as an option, read from the config classes now: the model
    dimensions, every `RunConfig` field (its `setting` help and flag), the layout's
    dp/tp/pp/zero (`Layout`'s help) and the knobs."""
    out = [AxisOption(a, a.replace("_", "-"), _MODEL_HELP[a], None, parse_ints)
           for a in MODEL_AXES]
    for a in run_axes():
        parse, words = _parser(a.kind)
        out.append(AxisOption(a.name, a.flag, f"{a.help} Values: {words}.", _text(a.default),
                              parse))
    hints = typing.get_type_hints(Layout)
    for f in dataclasses.fields(Layout):
        if f.name in LAYOUT_AXES:
            parse, words = _parser(hints[f.name])
            # unset (None) unless given, so a recipe's layout default can apply (`sweep.multi`)
            default = _text(int(f.default) if f.name == "zero" else f.default)
            recipe = ", or the recipe's where it applies" if f.name == "zero" else ""
            out.append(AxisOption(f.name, f.metadata.get("flag") or f.name.replace("_", "-"),
                                  f"{f.metadata.get('help', '')} Values: {words} (default: "
                                  f"{default}{recipe}).", None, parse))
    out += [AxisOption(k, k.replace("_", "-"), _KNOB_HELP[k], "1", parse_floats)
            for k in KNOB_AXES]
    return out


ROWS_NEED_A_FILE = ("every row goes to a file; stdout takes the best --top rows as --format "
                    "table or json")
"""Why `sweep --format csv/jsonl` needs --output (`options.output_format_of`)."""


def _run_sweep(models: str, device: str, axes: dict[str, Any], sort: str, top: int,
               fmt: OutputFormat | None, output: Path | None, yes: bool,
               scheduler: str | None, store: Path | None, no_store: bool) -> None:
    """Evaluate the grid and print, write and record it: every row to --output in csv, jsonl
    or parquet (the table on the terminal), or the best rows as the table or a JSON document
    (to --output, else the terminal or stdout)."""
    from bertscope.cluster import check_scheduler
    from bertscope.report.progress import progress_bar
    from bertscope.report.sweep import print_sweep, sweep_json
    from bertscope.sweep import MAX_CONFIGS, check_sort, sweep_to

    check_top(top, 0)
    check_sort(sort)
    form = output_format_of(fmt, output, need_file={OutputFormat.CSV: ROWS_NEED_A_FILE,
                                                    OutputFormat.JSONL: ROWS_NEED_A_FILE})
    check_command_paths({"MODELS": [model_file(m) for m in models.split(",")],
                         "--device": device.split(",")}, {"--output": output}, store, no_store)
    check_output(output)
    check_scheduler(scheduler)
    st = open_store(store, no_store)
    every_row = form not in (OutputFormat.TABLE, OutputFormat.JSON)
    with progress_bar() as tell:  # rows streamed to --output; only the best kept here
        result = sweep_to(output if every_row else None, parse_words(models, "models"),
                          parse_words(device, "device"), fmt=form.file, sort=sort, top=top,
                          max_configs=None if yes else MAX_CONFIGS, progress=tell,
                          scheduler=scheduler, **axes)
    console = None
    if form is OutputFormat.JSON and output is None:  # the document alone, for a pipe
        typer.echo(sweep_json(result, sort=sort).decode(), nl=False)
    else:
        with table_output(output if form is OutputFormat.TABLE else None) as console:
            print_sweep(result, result.top, console, sort=sort)
            if form is OutputFormat.JSON:
                atomic_write(output, sweep_json(result, sort=sort))  # type: ignore[arg-type]
                console.print(f"wrote the best {len(result.top):,} rows to "
                              f"{escape(str(output))}")
            elif every_row:
                console.print(f"wrote {result.evaluated:,} rows to {escape(str(output))}")
    # the grid's axes and its best rows (the full frame stays in --output)
    record(st, notice_console(form, output, console), "sweep", model=models, device=device,
           inputs={"models": models, "devices": device, **axes},
           summary={"evaluated": result.evaluated, "skipped": result.skipped,
                    "seconds": result.seconds, "sort": sort,
                    "best": result.top[:5]})


def sweep_command() -> Callable[..., None]:
    """The `sweep` command with one option per axis (`axis_options`, read now)."""
    options = axis_options()
    K = inspect.Parameter.KEYWORD_ONLY
    fixed = [
        inspect.Parameter("models", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[
            str, typer.Argument(metavar="MODELS",
                                help="Comma list of presets or config.json paths.")]),
        inspect.Parameter("device", K, default="a100", annotation=DeviceListOpt),
    ]
    tail = [
        inspect.Parameter("sort", K, default="tokens_per_s", annotation=Annotated[
            str, typer.Option(help="Rank by this column.")]),
        inspect.Parameter("top", K, default=10, annotation=Annotated[
            int, typer.Option(help="Show the N best rows.")]),
        inspect.Parameter("fmt", K, default=None, annotation=FormatOpt),
        inspect.Parameter("output", K, default=None, annotation=OutputOpt),
        inspect.Parameter("yes", K, default=False, annotation=Annotated[bool, typer.Option(
            "--yes", help="Evaluate a grid above 2,000,000 configurations.")]),
        inspect.Parameter("scheduler", K, default=None, annotation=SchedulerOpt),
        inspect.Parameter("store", K, default=None, annotation=StoreOpt),
        inspect.Parameter("no_store", K, default=False, annotation=NoStoreOpt),
    ]
    taken = {p.name for p in (*fixed, *tail)}
    clash = [o.axis for o in options if o.axis in taken]
    if clash:
        raise ValueError(f"sweep axes {clash} clash with the command's own options")
    axes = [inspect.Parameter(o.axis, K, default=o.default, annotation=Annotated[
        str | None, typer.Option(f"--{o.flag}", help=o.help)]) for o in options]
    params = [*fixed, *axes, *tail]

    def sweep_cmd(**kw: Any) -> None:
        """Predict every configuration of a grid (models x run settings x layouts x devices
        x knobs). Every axis takes a comma list or an A..B integer range. Every row goes to
        --output as csv, jsonl or parquet; --format table or json gives the best --top
        rows (json: with the grid's axes and counts, to stdout without --output)."""
        parsed = {o.axis: o.parse(kw.pop(o.axis), o.flag) for o in options
                  if kw[o.axis] is not None}
        for o in options:
            kw.pop(o.axis, None)
        _run_sweep(axes=parsed, **kw)

    sweep_cmd.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    sweep_cmd.__annotations__ = {p.name: p.annotation for p in params}
    return sweep_cmd


def register(app: typer.Typer) -> None:
    """Add `sweep` to a typer app (its axis options read from the config classes now)."""
    app.command("sweep")(sweep_command())


__all__ = ["AxisOption", "axis_options", "parse_bools", "parse_choices", "parse_floats",
           "parse_ints", "parse_words", "register", "sweep_command"]
