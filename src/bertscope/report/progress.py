"""Progress bars on stderr, shown only where stderr is a terminal.

A transient rich bar on a pipe or file still leaves a blank line behind; logs and test
captures should get bertscope's messages and nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

Tell = Callable[[str, int, int], None]


@contextlib.contextmanager
def progress_bar() -> Iterator[Tell]:
    """Yield `tell(stage, done, total)`: one bar per stage on stderr while the block runs,
    cleared at the end; nothing at all when stderr is not a terminal."""
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        tasks: dict[str, object] = {}

        def tell(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done)  # type: ignore[arg-type]

        yield tell


__all__ = ["Tell", "progress_bar"]
