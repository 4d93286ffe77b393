"""The `bertscope` command: `app` (typer) and `main` (the entry point).

Each command lives in a short module of this package that only parses, calls the public API
and hands the result to `bertscope.report`; options shared by commands are declared once in
`cli.options`. Bad input is a `BertscopeError`, printed by `main` as one line on stderr with
exit code 2.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import MutableMapping
from typing import Annotated, Any

import typer

from bertscope.errors import BertscopeError
from bertscope.stop import INTERRUPTED_EXIT, STOP, Interrupted, handle_signals

try:  # typer >= 0.22 vendors click as typer._click; older typer uses click itself
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[no-redef]

MODULES = ("study", "ops", "profile", "predict", "calibrate", "distributed", "trace", "sweep",
           "runs")
"""The command modules, in the order help lists their commands."""
COMMANDS = {"study": "study", "models": "ops", "ops": "ops", "profile": "profile",
            "predict": "predict", "devices": "predict", "calibrate": "calibrate",
            "validate": "calibrate", "distributed": "distributed", "trace": "trace",
            "sweep": "sweep", "runs": "runs"}
"""Command name -> the module that registers it: a command imports only its own module
(`bertscope trace` does not load the distributed model), help imports them all."""
BLAS_FREE = frozenset({"trace", "ops", "models", "predict", "devices", "distributed", "sweep",
                       "runs"})
"""Commands that do no BLAS work (elementwise numpy, no torch): for them numpy's bundled
OpenBLAS starts one thread rather than one per core unless the user chose
(OPENBLAS_NUM_THREADS): starting the pool was ~50 ms of numpy's ~110 ms import here, more than
the rest of `bertscope trace` on a small trace (bench/bench_trace.py --startup)."""

MEASURING = frozenset({"profile", "validate", "calibrate", "study"})
"""Commands that time kernels on the host: on glibc they run with one malloc arena from
process start (`one_arena`)."""


def one_arena(args: list[str]) -> dict[str, str] | None:
    """The environment to re-execute a measuring command in, or None: glibc reads
    MALLOC_ARENA_MAX when the process starts, and threads' own arenas fault pages in again
    in every iteration of some runs (bench/results/bench_loss_microbatch.txt; setting it
    later with mallopt, as `measure.allocator` does, leaves arenas already attached). Not
    when the user set MALLOC_ARENA_MAX, chose `--host-allocator system`, or off glibc."""
    if not args or args[0] not in MEASURING or "MALLOC_ARENA_MAX" in os.environ:
        return None
    import itertools
    import platform

    if ("--host-allocator=system" in args
            or any(p == ("--host-allocator", "system") for p in itertools.pairwise(args))
            or platform.libc_ver()[0] != "glibc"):
        return None
    return {**os.environ, "MALLOC_ARENA_MAX": "1"}


def build_app(modules: tuple[str, ...] = MODULES) -> typer.Typer:
    """The typer app with the commands of `modules` (all of them by default)."""
    built = typer.Typer(
        name="bertscope",
        help="Where the time, bytes and FLOPs of Transformer training go.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    built.callback()(_group)  # a group even with one command: `bertscope trace FILE`
    for name in modules:
        importlib.import_module(f"bertscope.cli.{name}").register(built)
    return built


def installed_version() -> str:
    """The installed bertscope's version (its package metadata); the source tree's
    `bertscope.__version__` when run from a checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertscope")
    except PackageNotFoundError:
        import bertscope

        return bertscope.__version__


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"bertscope {installed_version()}")
        raise typer.Exit(0)


def _group(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_show_version,
        help="Print the installed version and exit.")] = False,
) -> None:
    """Where the time, bytes and FLOPs of Transformer training go."""


_FULL: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, built on first use
        global _FULL
        if _FULL is None:
            _FULL = build_app()
        return _FULL
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app. Exit codes: 0 done; 2 bad input (one line on stderr, nothing
    written); 3 a measuring command interrupted by SIGINT or SIGTERM after it kept something
    measured (a result marked partial in its content and its `*.partial.json` name); 130
    interrupted with nothing to keep. SIGINT and SIGTERM ask the measuring loop in progress to
    stop (`bertscope.stop`); a command that was asked never exits 0."""
    with handle_signals():
        rc = _run(argv)
        if STOP and rc == 0:  # the request was lost somewhere (a finalizer): still honoured
            print("bertscope: interrupted", file=sys.stderr)
            return INTERRUPTED_EXIT
        return rc


MIN_COLUMNS, MAX_COLUMNS = 20, 1000
"""The console widths a COLUMNS (or TERMINAL_WIDTH) value is kept within (`check_console_env`)."""
SIZES = {"COLUMNS": (MIN_COLUMNS, MAX_COLUMNS), "TERMINAL_WIDTH": (MIN_COLUMNS, MAX_COLUMNS),
         "LINES": (1, 100_000)}
"""The environment variables that size the console (rich reads COLUMNS and LINES, typer's
help TERMINAL_WIDTH), each with the range its value is kept within."""


def check_console_env(environ: MutableMapping[str, str]) -> None:
    """Make the console's size variables usable before anything prints: rich and typer take
    them as they are, so `COLUMNS=0` gave a zero-wide console on which every table, line and
    help page printed as nothing (a command that succeeded silently), `TERMINAL_WIDTH=abc` a
    traceback, and a huge value made every rule that long. A value that is not a whole
    number above zero is dropped (the terminal's size, or the piped default, as if unset); a
    usable one is kept within its `SIZES` range."""
    for name, (low, high) in SIZES.items():
        text = environ.get(name)
        if text is None:
            continue
        digits = text.strip()
        if not (digits.isdecimal() and digits.isascii()) or int(digits[:9]) == 0:
            del environ[name]
            continue
        environ[name] = str(high if len(digits) > 9 else min(max(int(digits), low), high))


def check_repeated(command: Any, args: list[str]) -> None:
    """Refuse an option given twice with different values (`--batch 8 --batch 16`), or both
    spellings of a switch (`--dropout --no-dropout`): the parser would let the last one win
    silently. `command` is the click command (group) `args` are for; the subcommands named
    in `args` are followed; every spelling of an option counts as that option, its old
    (deprecated) spellings included."""
    i = 0  # click's classes are read by their attributes (typer may vendor its own click)
    while i < len(args) and args[i] in (getattr(command, "commands", None) or {}):
        command, i = command.commands[args[i]], i + 1
    spellings = {}
    for param in getattr(command, "params", ()):
        if (getattr(param, "param_type_name", "") == "option"
                and not (getattr(param, "multiple", False) or getattr(param, "count", False))):
            for opt in (*param.opts, *param.secondary_opts):
                spellings[opt] = param
    for old, new in (getattr(command, "aliases", None) or {}).items():  # `options.DEPRECATED`
        if new in spellings:
            spellings[old] = spellings[new]
    seen: dict[str, tuple[str, str]] = {}
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            break
        name, eq, value = token.partition("=")
        param = spellings.get(name)
        if param is None:
            continue
        if param.is_flag and not eq:
            value = "on" if name in param.opts else "off"
        elif not eq:
            value = " ".join(args[i:i + param.nargs])
            i += param.nargs
        given = f"{name}={value}" if not param.is_flag else name
        if param.name in seen and seen[param.name][1] != value:
            fix = "keep one" if param.is_flag else f"give {param.opts[0]} once"
            raise BertscopeError(f"{seen[param.name][0]} and {given} given together; {fix}")
        seen.setdefault(param.name or name, (given, value))


MAX_ERROR_CHARS = 400
"""Longest error message printed whole; a longer one (a 100,000-character path or name quoted
in it) keeps its start and end around an ellipsis, so the line still says what and how."""


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`message` as the one line an error prints: whitespace runs (newlines included) become
    one space, and past `limit` characters the middle is cut to " ... "."""
    text = " ".join(message.split())
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


def os_error_line(e: OSError) -> str:
    """An operating-system error that reached the command line, as its one line: what the
    system said, the file it said it of, and what to do."""
    what = e.strerror or type(e).__name__
    names = [n for n in (e.filename, e.filename2) if n is not None]
    where = " -> ".join(repr(os.fsdecode(n)) for n in names)
    return f"{what}: {where}; check the path (and that its folder exists and is writable)" \
        if where else f"{what}; check the paths given and the free space"


def _run(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check_console_env(os.environ)
    module = COMMANDS.get(args[0]) if args else None
    env = one_arena(args) if argv is None else None  # a real invocation, not main([...])
    if env is not None:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    if args and args[0] in BLAS_FREE and "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        if args[:1] == ["--version"]:  # no command module to import
            module = None
            runner = build_app(())
        else:
            runner = build_app((module,)) if module is not None else __getattr__("app")
        if module is not None:
            check_repeated(typer.main.get_command(runner), args)
        rv = runner(args=args, standalone_mode=False)
    except BertscopeError as e:
        print(f"bertscope: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # a path the checks let through (a name too long, a vanished folder)
        print(f"bertscope: error: {one_line(os_error_line(e))}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"bertscope: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code
    except NoArgsIsHelpError:
        return 0
    except UsageError as e:
        cmd = e.ctx.command_path if e.ctx is not None else "bertscope"
        msg = one_line(e.format_message())
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


__all__ = ["app", "installed_version", "main"]
