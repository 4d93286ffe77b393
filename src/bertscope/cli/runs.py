"""`bertscope runs`: the recorded runs — list, show, compare, export, remove; and how the
other commands record into the store (`open_store` before the work, `record` after it)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bertscope.cli.options import SUFFIXES, output_format_of
from bertscope.errors import BertscopeError

if TYPE_CHECKING:
    from bertscope.store import Store

StoreOpt = Annotated[Path | None, typer.Option(
    "--store", help="The runs store file (default: $BERTSCOPE_STORE, else the user's data "
                    "folder).")]
NoStoreOpt = Annotated[bool, typer.Option("--no-store", help="Do not record this run.")]

app = typer.Typer(help="Recorded runs: list, show, compare, export, rm.", no_args_is_help=True)


@dataclass
class StoreTarget:
    """Where a command records its run: the store file (an existing one was opened and
    checked before the work); a new store is made only when the run is recorded, so a
    command that fails leaves no store behind."""

    path: Path


def open_store(store: Path | None, no_store: bool) -> StoreTarget | None:
    """Where a command records (checked before the work starts: a bad `--store` or a store
    that cannot be used fails first, exit 2), or None with `--no-store` or
    $BERTSCOPE_STORE=off."""
    from bertscope.store import Store, recording
    from bertscope.store.access import busy_timeout, guarded, quoted, store_path

    if no_store or (store is None and not recording()):
        return None
    p = store_path(store)
    busy_timeout()  # a bad $BERTSCOPE_STORE_TIMEOUT fails first too
    with guarded(p):
        exists = p.exists()
        if not exists:  # the folder it goes in: made when recording, but not under a file
            up = p.parent
            while not up.exists() and up.parent != up:
                up = up.parent
            if not up.is_dir():
                raise BertscopeError(f"the runs store {quoted(p, 120)} cannot be made: "
                                     f"{quoted(up, 120)} is not a folder; give another --store "
                                     f"FILE, or pass --no-store")
    if exists:  # checked (and migrated) now, reopened to record: no connection is held
        Store.open(p).close()  # through the work, which may fail before it records
    return StoreTarget(p)


def record(target: StoreTarget | None, console: Any, kind: str, table: object = None,
           **fields: object) -> str | None:
    """Record a run into the command's store (if any), after the command's own output is
    written, and say its id. A failure costs nothing but the record: one warning line on
    stderr, and the command goes on to its own exit code. The run's id, or None."""
    from bertscope.store import Store
    from bertscope.store.access import printable, quoted

    if target is None:
        return None
    try:
        with Store.open(target.path) as st:
            rid = st.record(kind, table, **fields)  # type: ignore[arg-type]
    except Exception as e:
        why = getattr(e, "reason", None) or (
            str(e) if isinstance(e, BertscopeError) else f"{type(e).__name__}: {printable(e)}")
        print(f"bertscope: warning: not recorded in the runs store {quoted(target.path, 120)}: "
              f"{why[:500]}", file=sys.stderr)
        return None
    console.print(f"recorded as run {rid} (bertscope runs show {rid})")
    return rid


def _read(store: Path | None) -> Store:
    """The store opened read-only (nothing written; a missing store is an error, not made)."""
    from bertscope.store import Store

    return Store.open(store, write=False)


def _check_kind(s: Store, kind: str | None) -> None:
    """Refuse a --kind that no command records and no run in the store has."""
    from bertscope.store import KINDS
    from bertscope.store.access import quoted

    if kind is not None and kind not in KINDS and kind not in s.kinds():
        raise BertscopeError(f"--kind: unknown kind {quoted(kind)}; choose one of: "
                             f"{', '.join(KINDS)}")


@app.command("list")
def list_cmd(store: StoreOpt = None,
             kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
             model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
             device: Annotated[str | None, typer.Option(help="Only this device.")] = None
             ) -> None:
    """The runs, newest first."""
    from bertscope.report.runs import print_runs
    from bertscope.report.tables import make_console

    with _read(store) as s:
        _check_kind(s, kind)
        print_runs(s.list(kind=kind, model=model, device=device), s.path, make_console())


@app.command("show")
def show_cmd(run_id: Annotated[str, typer.Argument(metavar="ID")], store: StoreOpt = None
             ) -> None:
    """One run: what it was, its summary, its largest ops."""
    from bertscope.report.runs import print_run
    from bertscope.report.tables import make_console
    from bertscope.store.access import check_run_id

    check_run_id(run_id)
    with _read(store) as s:
        print_run(s.get(run_id), s.ops(run_id), make_console())


@app.command("compare")
def compare_cmd(a: Annotated[str, typer.Argument(metavar="A")],
                b: Annotated[str, typer.Argument(metavar="B")], store: StoreOpt = None,
                top: Annotated[int, typer.Option(help="Op keys to show.")] = 10) -> None:
    """B against A: per category and sublayer group (time, share), per op key (error)."""
    from bertscope.report.runs import print_compare
    from bertscope.report.tables import make_console
    from bertscope.store.access import check_run_id
    from bertscope.store.compare import compare_ops

    check_run_id(a)
    check_run_id(b)
    if top < 0:
        raise BertscopeError(f"--top must be >= 0, got {top}")
    with _read(store) as s:
        ra, rb = s.get(a), s.get(b)
        print_compare(ra, rb, compare_ops(s.ops(a), s.ops(b)), make_console(), top=top)


@app.command("export")
def export_cmd(run_id: Annotated[str, typer.Argument(metavar="ID")],
               output: Annotated[Path, typer.Argument(metavar="FILE",
                                                      help=".csv, .json, .jsonl or "
                                                           ".parquet")],
               store: StoreOpt = None) -> None:
    """Write a run's op rows to a file."""
    from bertscope.io import atomic_write, check_output, frame_bytes
    from bertscope.paths import check_paths
    from bertscope.store.access import check_run_id

    check_run_id(run_id)
    named = SUFFIXES.get(output.suffix.lower())  # the suffixes every command reads
    if named is None or named.file is None:
        raise BertscopeError(f"{output}: a run's rows go to a .csv, .json, .jsonl or .parquet "
                             f"file")
    fmt = output_format_of(named, output).file  # its library checked as everywhere
    check_output(output)
    with _read(store) as s:
        # the store (or a hard link to it, or a folder holding it) is never the export
        check_paths({"the runs store": s.path}, {"FILE": output})
        df = s.ops(run_id)
        meta = s.get(run_id)
    atomic_write(output, frame_bytes(df, fmt, meta=meta))
    typer.echo(f"wrote {len(df)} rows of run {run_id} to {output}")


@app.command("rm")
def rm_cmd(run_id: Annotated[str, typer.Argument(metavar="ID")], store: StoreOpt = None
           ) -> None:
    """Delete a run."""
    from bertscope.store import Store
    from bertscope.store.access import check_run_id

    check_run_id(run_id)
    with Store.open(store, create=False) as s:
        s.remove(run_id)
    typer.echo(f"removed run {run_id}")


def register(root: typer.Typer) -> None:
    """Add `runs` to a typer app."""
    root.add_typer(app, name="runs")


__all__ = ["NoStoreOpt", "StoreOpt", "StoreTarget", "open_store", "record", "register"]
