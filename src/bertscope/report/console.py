"""The consoles command output is printed on: their width, from COLUMNS checked.

rich takes COLUMNS as it is: `COLUMNS=0` gives a console zero columns wide, on which every
table and line prints as nothing (a command that "succeeds" silently), and a huge value
makes every rule that long. Here a COLUMNS that is not a whole number above zero is ignored
(as if unset), and a usable one is kept within [MIN_WIDTH, MAX_WIDTH].
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from rich.console import Console

MIN_WIDTH = 20
"""Narrowest console: below this a table has no room for a single column."""
MAX_WIDTH = 1000
"""Widest console (a rule or a padded table is this long at most)."""
DEFAULT_WIDTH = 80
"""rich's own width for a terminal that reports none."""


def console_width(piped: int, *, stream: int = 1,
                  environ: Mapping[str, str] | None = None) -> int:
    """The width to print at: COLUMNS when it is a whole number above zero (kept within
    [MIN_WIDTH, MAX_WIDTH]); else the terminal's width when `stream` (a file descriptor) is
    one; else `piped`."""
    env = os.environ if environ is None else environ
    text = env.get("COLUMNS", "").strip()
    columns = int(text) if text.isdecimal() and len(text) <= 9 else 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(stream).columns if os.isatty(stream) else piped
        except (OSError, ValueError):
            columns = piped
    return min(max(columns or DEFAULT_WIDTH, MIN_WIDTH), MAX_WIDTH)


def checked_console(piped: int = DEFAULT_WIDTH, *, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) whose width is `console_width`'s."""
    return Console(stderr=stderr, width=console_width(piped, stream=2 if stderr else 1))


__all__ = ["DEFAULT_WIDTH", "MAX_WIDTH", "MIN_WIDTH", "checked_console", "console_width"]
