"""The study on the terminal: each section's findings and where the report is."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape


def print_study(result: Any, console: Console) -> None:
    """Section titles with their findings, then the folder and its files."""
    for i, sec in enumerate(result.sections, 1):
        console.print(f"[bold]{i}. {escape(sec.title)}[/bold]")
        for f in sec.findings:
            console.print(f"  - {escape(f)}")
    console.print(f"wrote {escape(str(result.folder))}/report.html and {len(result.files) - 1} "
                  f"more files in {result.seconds:.1f} s")


__all__ = ["print_study"]
