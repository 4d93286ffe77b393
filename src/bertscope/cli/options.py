"""Options the commands share, declared once: the job's options (generated from the config's
fields), the device, precision and output options, and the old spellings still accepted.

One vocabulary in every command: `--device` is the catalog device(s) to predict for (one, or
a comma list where a command takes several), `--measure-on` the local device a measuring
command times kernels on (cpu, cuda, auto), `--devices N` a number of devices, `--precision`
one precision or a comma list, in any case; `--format` what a command writes (`OutputFormat`:
the terminal table or rows as csv, json, jsonl or parquet), chosen by one rule
(`output_format_of`). Spellings retired for this (`DEPRECATED`) still work, with one warning
line on stderr, and are not shown in help.

A command that takes a job is written `f(job: Job, ...)` (or, with `layout=True`, `f(model,
run, layout, ...)` with the unpinned settings as None), marked `@job_command(...)` and
registered with `add_job_command(app, name, f)`: its command line gains the model argument
and one option per field of `config.RunConfig` (and of `job.Layout` with `layout=True`),
named, typed and explained by the field itself (`config.setting`'s help and flag). The
options are generated when the command is registered, from the classes as they are then, so
adding a job field touches the config and the producer that uses it, no file here.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, fields
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand

import bertscope.config as config
from bertscope.cluster import ENV
from bertscope.errors import BertscopeError
from bertscope.io import Format
from bertscope.job import Job, Layout
from bertscope.paths import check_paths
from bertscope.presets import PRESETS, get_model
from bertscope.requirements import require_format

F = TypeVar("F", bound=Callable[..., Any])

ModelArg = Annotated[str, typer.Argument(help="Preset name or path to a HF config.json.")]
DeviceOpt = Annotated[str, typer.Option(
    help="Catalog device (see `bertscope devices`), a .toml/.json device file, or a profile "
         "JSON with calibrated efficiency models.")]
DeviceListOpt = Annotated[str, typer.Option(
    "--device", help="Comma list of catalog devices, device files or calibrated profiles.")]
DevicesOpt = Annotated[int, typer.Option("--devices", help="Devices in all.")]
MeasureOnOpt = Annotated[str, typer.Option(
    "--measure-on", help="The local device to measure on: cpu, cuda (or cuda:N) or auto.")]
PrecisionListOpt = Annotated[str, typer.Option(
    "--precision", help="Comma list of precisions (fp32, fp16, bf16, ...; any case).")]
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", "-v", help="Also print where every figure comes from (each peak's and "
                            "model's source; links and topology notes).")]
TopOpt = Annotated[int, typer.Option(help="Show the N largest entries.")]
SchedulerOpt = Annotated[str | None, typer.Option(
    envvar=ENV, show_envvar=False, metavar="ADDRESS",
    help=f"Run on the Dask cluster of this scheduler (tcp://HOST:8786; default: ${ENV}, else "
         f"locally). Its workers need bertscope and the input files at the same paths.")]


class OutputFormat(StrEnum):
    """What a command writes (`--format`): the terminal report, or rows in a file format
    (`io.Format`). The same word means the same thing in every command that takes it."""

    TABLE = "table"
    """The report a person reads (on the terminal, or as text in --output FILE.txt)."""
    CSV = "csv"
    JSON = "json"
    """One JSON document, {"meta": {...}, "rows": [...]}."""
    JSONL = "jsonl"
    """JSON Lines: one object per row, nothing else."""
    PARQUET = "parquet"

    @property
    def file(self) -> Format | None:
        """The export format of the rows (None for the table)."""
        return None if self is OutputFormat.TABLE else Format(self.value)


SUFFIXES = {".txt": OutputFormat.TABLE, **{f".{f.value}": OutputFormat(f.value) for f in Format}}
"""--output suffixes and the format each means (`output_format_of`)."""

FormatOpt = Annotated[OutputFormat | None, typer.Option(
    "--format", case_sensitive=False,
    help="table (the terminal report), csv, json, jsonl (a JSON object per line) or parquet; "
         "default: from the --output suffix (.txt: table), else table.")]

OutputOpt = Annotated[Path | None, typer.Option(
    help="Write to this file; its suffix gives the format (.csv, .json, .jsonl, .parquet; "
         ".txt: the table) unless --format is given.")]


def output_format_of(fmt: OutputFormat | None, output: Path | None, *,
                     need_file: dict[OutputFormat, str] | None = None) -> OutputFormat:
    """What a command writes, by one rule: `--format` when given, else `--output`'s suffix
    (`SUFFIXES`), else the terminal table. Refused in one line: a suffix naming another
    format than `--format`, an unknown suffix without `--format`, and without `--output`
    a format in `need_file` (parquet always: it is binary; the value says why), and a format
    whose library is missing (`requirements.require_format`)."""
    need = {OutputFormat.PARQUET: "parquet is binary", **(need_file or {})}
    suffix = output.suffix.lower() if output is not None else ""
    named = SUFFIXES.get(suffix)
    if fmt is not None and named is not None and named is not fmt:
        raise BertscopeError(f"{output}: the suffix {suffix} says {named}, --format says {fmt}; "
                             f"make them agree")
    if fmt is None and output is not None and named is None:
        raise BertscopeError(f"{output}: unknown format {suffix.lstrip('.')!r}; name a "
                             f"{', '.join(SUFFIXES)} file, or give --format")
    got = fmt or named or OutputFormat.TABLE
    if output is None and got in need:
        raise BertscopeError(f"--format {got}: {need[got]}; give --output FILE.{got}")
    if got.file is not None:
        require_format(got.file, f"{output or 'stdout'}: {got} output")
    return got


def notice_console(form: OutputFormat, output: Path | None, report: Any) -> Any:
    """Where a command's closing lines (the runs store's) go: nowhere when stdout carries the
    data alone (a file format without --output), the terminal when the report went to
    --output FILE.txt, else `report`, the console the report was printed on."""
    if output is None and form.file is not None:
        from rich.console import Console

        return Console(quiet=True)
    if output is not None and form is OutputFormat.TABLE:
        from bertscope.report.tables import make_console

        return make_console()
    return report


@contextlib.contextmanager
def table_output(output: Path | None) -> Iterator[Any]:
    """A console for a command's terminal report; with `output` (`--format table --output
    FILE.txt`) the report goes to that file instead, as the terminal's text would be
    redirected there (`report.tables.text_console`), written atomically when the block ends
    (nothing when it fails)."""
    import io

    from bertscope.io import atomic_write
    from bertscope.report.tables import make_console, text_console

    if output is None:
        yield make_console()
        return
    buffer = io.StringIO()
    yield text_console(buffer)
    atomic_write(output, buffer.getvalue().encode())


_MARK = "__job_command__"

DEPRECATED: dict[str, dict[str, str]] = {
    "profile": {"--device": "--measure-on"},
    "calibrate": {"--device": "--measure-on"},
    "validate": {"--device": "--measure-on"},
    "study": {"--devices": "--device", "--precisions": "--precision"},
}
"""Per command, old spellings -> the option they became (one vocabulary, issue 32): still
accepted so scripts keep working, with one warning line on stderr; never in help."""


def renamed(command: str, args: list[str], warn: bool = True) -> list[str]:
    """`args` of `command` with its old spellings (`DEPRECATED`, as `--old V` or `--old=V`)
    replaced by the new ones; with `warn`, one line on stderr per old spelling used."""
    aliases = DEPRECATED.get(command, {})
    out: list[str] = []
    used: list[str] = []
    rest = iter(args)
    for token in rest:
        if token == "--":
            out += [token, *rest]
            break
        name, eq, value = token.partition("=")
        if name in aliases:
            if name not in used:
                used.append(name)
            token = f"{aliases[name]}{eq}{value}"
        out.append(token)
    if warn:
        for name in used:
            typer.echo(f"bertscope: warning: {command} {name} is deprecated; use "
                       f"{aliases[name]}", err=True)
    return out


class AliasedCommand(TyperCommand):
    """A command that accepts its old option spellings (`DEPRECATED`) with a warning."""

    @property
    def aliases(self) -> dict[str, str]:
        """Old spelling -> new of this command."""
        return DEPRECATED.get(self.name or "", {})

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse `args` after renaming the old spellings (one warning each)."""
        return super().parse_args(ctx, renamed(self.name or "", args))


def app_command(app: typer.Typer, name: str) -> Callable[[F], F]:
    """`app.command(name)` for a command of this vocabulary (old spellings accepted)."""
    return app.command(name, cls=AliasedCommand)


def job_command(*, layout: bool = False, inputs: tuple[str, ...] = (),
                outputs: tuple[str, ...] = (), **defaults: Any) -> Callable[[F], F]:
    """Mark a command that takes a job; `add_job_command` gives it the job's options.
    `defaults` override a run field's default for this command (`batch=4`). With
    `layout=False` the command is called as `f(job=Job, ...)`; with `layout=True` as
    `f(model=ModelConfig, run={field: value or None}, layout={field: value or None}, ...)`:
    None where the user did not pin a setting (a layout search chooses it). `inputs` and
    `outputs` name the command's parameters that are input files (besides the model) and
    output paths: they, the model and the runs store are checked as a set
    (`paths.check_paths`) before anything else."""
    def mark(f: F) -> F:
        setattr(f, _MARK, (layout, inputs, outputs, defaults))
        return f

    return mark


def flag_of(name: str) -> str:
    """The command-line spelling of parameter `name` (--trace-out)."""
    return "--" + name.replace("_", "-")


def store_file(store: Path | None, no_store: bool) -> Path | None:
    """The runs store file a command will record into, or None when it records nothing (an
    output like any other for `check_paths`)."""
    if no_store:
        return None
    from bertscope.store import recording
    from bertscope.store.access import store_path

    if store is None and not recording():
        return None
    return store_path(store)


def check_command_paths(inputs: dict[str, Any], outputs: dict[str, Any],
                        store: Path | None = None, no_store: bool = True) -> None:
    """`paths.check_paths` of a command's inputs and outputs, the runs store it records into
    (unless `no_store`) among the outputs."""
    check_paths(inputs, {**outputs, "the runs store": store_file(store, no_store)})


def _flag(f: Field[Any]) -> str:
    return "--" + (f.metadata.get("flag") or f.name).replace("_", "-")


def _option_type(kind: Any) -> Any:
    """The command-line type of a field's annotation: IntEnum fields take their integer
    (typer's choices are names), `X | None` its X."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if isinstance(kind, type) and issubclass(kind, enum.IntEnum):
        return int
    return kind


def _help(f: Field[Any], kind: Any) -> str:
    text = f.metadata.get("help", "")
    if isinstance(kind, type) and issubclass(kind, enum.IntEnum):
        text += f" ({', '.join(str(int(v)) for v in kind)})"
    return text


def field_parameters(cls: type, defaults: dict[str, Any], unpinned: bool = False
                     ) -> list[inspect.Parameter]:
    """One keyword parameter per field of the config dataclass `cls`, typed and helped for
    typer: `--name` (or the field's flag), `--name/--no-name` for booleans, the enum's choices
    for enums. Defaults are the field's (or `defaults`'), or None with `unpinned`."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        kind = _option_type(hints[f.name])
        flag = _flag(f)
        decl = f"{flag}/--no-{flag[2:]}" if kind is bool else flag
        option = typer.Option(decl, help=_help(f, hints[f.name]),  # --precision BF16 too
                              case_sensitive=False)
        default = f.default if f.default is not MISSING else None
        default = None if unpinned else defaults.get(f.name, default)
        annotation = kind if default is not None else kind | None
        out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                     annotation=Annotated[annotation, option], default=default))
    return out


def add_job_command(app: typer.Typer, name: str, f: Callable[..., Any]) -> None:
    """Register the `@job_command` `f` as `name` on `app`, with the model argument and the
    job's options generated from `config.RunConfig` (and `job.Layout`) as they are now."""
    layout, inputs, outputs, defaults = getattr(f, _MARK)
    run_cls = config.RunConfig
    unknown = set(defaults) - {fl.name for fl in fields(run_cls)}
    if unknown:
        raise ValueError(f"{name}: no run fields {sorted(unknown)}")
    sig = inspect.signature(f, eval_str=True)
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()
           if p.name not in ("job", "model", "run", "layout")]
    model = inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              annotation=ModelArg)
    run = field_parameters(run_cls, defaults, unpinned=layout)
    lay = field_parameters(Layout, {}, unpinned=True) if layout else []
    run_names = [p.name for p in run]
    lay_names = [p.name for p in lay]
    clash = {p.name for p in own} & {*run_names, *lay_names}
    if clash:
        raise ValueError(f"{name}: options {sorted(clash)} are job fields")

    @functools.wraps(f)
    def command(**kw: Any) -> Any:
        check_command_paths({"the model": model_file(kw["model"]),
                             **{flag_of(n): kw[n] for n in inputs}},
                            {flag_of(n): kw[n] for n in outputs}, kw.get("store"),
                            kw.get("no_store", "store" not in kw))
        settings = {n: kw.pop(n) for n in run_names}
        m = get_model(kw.pop("model"))
        if layout:
            return f(model=m, run=settings, layout={n: kw.pop(n) for n in lay_names}, **kw)
        given = {k: v for k, v in settings.items() if v is not None}
        return f(job=Job(model=m, run=run_cls(**given)), **kw)

    del command.__wrapped__  # typer must read the new signature, not f's
    params = [model, *run, *lay, *own]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    app_command(app, name)(command)


def model_file(model: str) -> Path | None:
    """The file a model argument reads: a config.json (a folder's), None for a preset."""
    if model in PRESETS:
        return None
    p = Path(model)
    try:
        return p / "config.json" if p.is_dir() else p
    except (OSError, ValueError):  # a name too long or with a NUL: no file (the loader says)
        return None


def check_top(top: int, least: int = 0) -> None:
    """Refuse a `--top` below `least` in one line."""
    if top < least:
        raise BertscopeError(f"--top must be >= {least}, got {top}")


def check_suffix(path: Path | None, suffixes: tuple[str, ...], what: str) -> None:
    """Refuse an output path whose suffix is not one of `suffixes` in one line."""
    if path is not None and path.suffix.lower() not in suffixes:
        raise BertscopeError(f"{path}: {what} must be a {' or '.join(suffixes)} file")


__all__ = [
    "DEPRECATED",
    "SUFFIXES",
    "AliasedCommand",
    "DeviceListOpt",
    "DeviceOpt",
    "DevicesOpt",
    "FormatOpt",
    "MeasureOnOpt",
    "ModelArg",
    "OutputFormat",
    "OutputOpt",
    "PrecisionListOpt",
    "TopOpt",
    "VerboseOpt",
    "add_job_command",
    "app_command",
    "check_command_paths",
    "check_suffix",
    "check_top",
    "field_parameters",
    "flag_of",
    "job_command",
    "model_file",
    "notice_console",
    "output_format_of",
    "renamed",
    "store_file",
    "table_output",
]
