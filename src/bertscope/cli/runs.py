"""`bertscope runs`: the recorded runs — list, show, compare, export, remove."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bertscope.cli.options import check_export

StoreOpt = Annotated[Path | None, typer.Option(
    "--store", help="The runs store file (default: $BERTSCOPE_STORE, else the user's data "
                    "folder).")]
NoStoreOpt = Annotated[bool, typer.Option("--no-store", help="Do not record this run.")]

app = typer.Typer(help="Recorded runs: list, show, compare, export, rm.", no_args_is_help=True)


def open_store(store: Path | None, no_store: bool) -> Any:
    """The store a command records into (checked before the work starts), or None with
    `--no-store` or $BERTSCOPE_STORE=off."""
    from bertscope.store import Store, recording

    if no_store or (store is None and not recording()):
        return None
    return Store.open(store)


def record(st: Any, console: Any, kind: str, table: object = None, **fields: object) -> None:
    """Record a run into an open store (if any) and say its id."""
    if st is None:
        return
    try:
        rid = st.record(kind, table, **fields)
    finally:
        st.close()
    console.print(f"recorded as run {rid} (bertscope runs show {rid})")


@app.command("list")
def list_cmd(store: StoreOpt = None,
             kind: Annotated[str | None, typer.Option(help="Only this kind.")] = None,
             model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
             device: Annotated[str | None, typer.Option(help="Only this device.")] = None
             ) -> None:
    """The runs, newest first."""
    from bertscope.report.runs import print_runs
    from bertscope.report.tables import make_console
    from bertscope.store import Store

    s = Store.open(store)
    print_runs(s.list(kind=kind, model=model, device=device), s.path, make_console())


@app.command("show")
def show_cmd(run_id: Annotated[str, typer.Argument(metavar="ID")], store: StoreOpt = None
             ) -> None:
    """One run: what it was, its summary, its largest ops."""
    from bertscope.report.runs import print_run
    from bertscope.report.tables import make_console
    from bertscope.store import Store

    s = Store.open(store)
    print_run(s.get(run_id), s.ops(run_id), make_console())


@app.command("compare")
def compare_cmd(a: Annotated[str, typer.Argument(metavar="A")],
                b: Annotated[str, typer.Argument(metavar="B")], store: StoreOpt = None,
                top: Annotated[int, typer.Option(help="Op keys to show.")] = 10) -> None:
    """B against A: per category and sublayer group (time, share), per op key (error)."""
    from bertscope.report.runs import print_compare
    from bertscope.report.tables import make_console
    from bertscope.store import Store
    from bertscope.store.compare import compare_ops

    s = Store.open(store)
    ra, rb = s.get(a), s.get(b)
    print_compare(ra, rb, compare_ops(s.ops(a), s.ops(b)), make_console(), top=top)


@app.command("export")
def export_cmd(run_id: Annotated[str, typer.Argument(metavar="ID")],
               output: Annotated[Path, typer.Argument(metavar="FILE",
                                                      help=".csv, .json or .parquet")],
               store: StoreOpt = None) -> None:
    """Write a run's op rows to a file."""
    from bertscope.io import atomic_write, frame_bytes, output_format
    from bertscope.store import Store

    check_export(output)
    s = Store.open(store)
    df = s.ops(run_id)
    atomic_write(output, frame_bytes(df, output_format(output), meta=s.get(run_id)))
    typer.echo(f"wrote {len(df)} rows of run {run_id} to {output}")


@app.command("rm")
def rm_cmd(run_id: Annotated[str, typer.Argument(metavar="ID")], store: StoreOpt = None
           ) -> None:
    """Delete a run."""
    from bertscope.store import Store

    Store.open(store).remove(run_id)
    typer.echo(f"removed run {run_id}")


def register(root: typer.Typer) -> None:
    """Add `runs` to a typer app."""
    root.add_typer(app, name="runs")


__all__ = ["NoStoreOpt", "StoreOpt", "open_store", "record", "register"]
