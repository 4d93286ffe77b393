"""`bertscope trace`: a profiler trace broken down by category, sublayer and phase, as a
terminal report or the op-table rows in an export format."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from bertscope.cli.options import (
    FormatOpt,
    OutputOpt,
    SchedulerOpt,
    TopOpt,
    check_command_paths,
    check_suffix,
    check_top,
    output_format_of,
    table_output,
)
from bertscope.cli.runs import NoStoreOpt, StoreOpt, open_store, record
from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_output

VIEWS = ("category", "sublayer", "phase", "module", "rank")
"""`--by`: the one breakdown the terminal report shows (module: the module tree; rank: the
ranks side by side, `trace.ranks`)."""


def trace_cmd(
    path: Annotated[Path, typer.Argument(
        help="A Kineto/Chrome trace (.json or .json.gz) or a folder of per-rank traces.")],
    rank: Annotated[int | None, typer.Option(help="Only this rank (default: every rank).")] = (
        None),
    fmt: FormatOpt = None,
    patterns: Annotated[Path | None, typer.Option(
        help="TOML file of \\[\\[pattern]] regex/category rows, tried before the built-in "
             "ones.")] = None,
    output: OutputOpt = None,
    top: TopOpt = 10,
    by: Annotated[str | None, typer.Option(
        help="Show only this breakdown: category, sublayer, phase, module (the tree of "
             "module calls and record_function scopes, with times) or rank (ranks side by "
             "side: compute/comm/copy/idle, overlap, idle causes, stragglers, launch delays, "
             "peak memory).")] = None,
    plot: Annotated[Path | None, typer.Option(
        help="With --by rank: write a heat map of ranks x time categories (.png or "
             ".svg).")] = None,
    scheduler: SchedulerOpt = None,
    store: StoreOpt = None,
    no_store: NoStoreOpt = False,
) -> None:
    """Break a profiler trace down by category, sublayer and phase; streams, overlap, idle."""
    from bertscope.cluster import check_scheduler
    from bertscope.trace import analyze_trace

    check_top(top)
    if by is not None and by not in VIEWS:
        raise BertscopeError(f"--by: expected one of {', '.join(VIEWS)}, got {by!r}")
    if rank is not None and rank < 0:
        raise BertscopeError(f"--rank must be >= 0, got {rank}")
    file_format = output_format_of(fmt, output).file
    if by is not None and file_format is not None:
        raise BertscopeError("--by shapes the terminal report (--format table); exported rows "
                             "carry every column, module included")
    if plot is not None and by != "rank":
        raise BertscopeError("--plot draws the ranks side by side: give it with --by rank")
    check_suffix(plot, (".png", ".svg"), "the plot")
    check_command_paths({"the trace": path, "--patterns": patterns},
                        {"--output": output, "--plot": plot}, store, no_store)
    check_output(output)
    check_output(plot)
    check_scheduler(scheduler)
    st = open_store(store, no_store)
    result = analyze_trace(path, rank=rank, patterns=patterns, scheduler=scheduler)
    if file_format is None:
        from bertscope.report.trace import print_headline, print_trace

        with table_output(output) as console:
            if by == "rank":
                from bertscope.report.ranks import plot_ranks, print_ranks

                report = result.cross_rank()
                print_headline(result, console)
                print_ranks(report, console, top=top)
                if plot is not None:
                    console.print(f"wrote the rank heat map to {plot_ranks(report, plot)}")
            else:
                print_trace(result, console, top=top, by=by)
        _record(st, result, path, to_stdout=False)
        return
    data = result.table.to_bytes(file_format)
    if output is None:
        typer.echo(data.decode(), nl=False)
    else:
        atomic_write(output, data)
    _record(st, result, path, to_stdout=output is None)


def _record(st: object, result: object, path: Path, *, to_stdout: bool) -> None:
    """Record the trace's op table (said on the terminal, except when the data itself goes
    to stdout: then quietly, so a pipe gets the data alone). Without a store, nothing (a
    large trace is not read again for its digest)."""
    if st is None:
        return
    digest = ""
    try:
        if path.is_file():
            digest = _sha256(path)
    except OSError:
        pass  # the trace went away meanwhile: recorded without its digest
    record(st, _run_line_console(quiet=to_stdout), "trace",
           result.table,  # type: ignore[attr-defined]
           inputs={"trace": str(path), "sha256": digest},
           summary={"ranks": len(getattr(result, "ranks", []) or [])})


class _PlainLines:
    """What `record` prints its line with when stdout is no terminal: `print`, as rich's
    console prints a line of plain text there (rich is not imported for an export)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def print(self, text: str) -> None:
        """Print `text` on stdout (nothing when quiet)."""
        if not self.quiet:
            print(text)


def _run_line_console(*, quiet: bool) -> Any:
    """The console the run's "recorded as run N" line goes to after an export: rich's on a
    terminal (its colours), else plain lines; quiet when the data itself went to stdout."""
    if quiet or not sys.stdout.isatty():
        return _PlainLines(quiet)
    from rich.console import Console

    return Console()


BUILTIN_SHA256_MAX = 64 << 20
"""Files up to this size are hashed with the interpreter's built-in sha256 (`_sha2`, or
`_sha256` before Python 3.12), larger ones with hashlib's: hashlib loads OpenSSL (~3.5 MiB
resident, more than a small trace's columns), which hashes a large file faster."""


def _sha256(path: Path) -> str:
    """The sha256 hex digest of the file at `path` (`BUILTIN_SHA256_MAX`)."""
    import importlib

    new = None
    if path.stat().st_size <= BUILTIN_SHA256_MAX:
        for name in ("_sha2", "_sha256"):
            try:
                new = importlib.import_module(name).sha256
                break
            except (ImportError, AttributeError):
                continue
    if new is None:
        import hashlib

        new = hashlib.sha256
    h = new()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def register(app: typer.Typer) -> None:
    """Add `trace` to a typer app."""
    app.command("trace")(trace_cmd)


__all__ = ["register", "trace_cmd"]
