"""A command's inputs and outputs checked as a set, before any work: no output may be one of
its inputs or another of its outputs, and none may lie inside a folder the command reads as a
whole or writes as a whole.

"The same file" is decided as the file system decides it: two paths that both exist are the
same when they are the same inode (`os.stat`'s st_dev and st_ino: hard links, symbolic
links, `./x` and `x`, a case-insensitive volume); otherwise when their resolved absolute
paths (symbolic links followed, `..` folded) are equal. An input that does not exist is a
name (a preset, a catalog device), not a file, and is not compared.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bertscope.errors import BertscopeError

PathLike = str | os.PathLike[str]
Given = PathLike | Iterable[PathLike | None] | None
"""One path, several (a repeatable option, a comma list), or None (not given)."""


@dataclass(frozen=True)
class _Place:
    """One path of a command, as given and as the file system sees it."""

    label: str
    """How the user gave it: an option (--output) or an argument (the model)."""
    given: str
    real: Path
    """Absolute, symbolic links resolved."""
    inode: tuple[int, int] | None
    """(st_dev, st_ino) when it exists."""
    folder: bool
    """An existing folder: a path inside it is part of it."""

    def same(self, other: _Place) -> bool:
        """Whether the two are the same file or folder."""
        if self.inode is not None and other.inode is not None:
            return self.inode == other.inode
        return self.real == other.real

    def holds(self, other: _Place) -> bool:
        """Whether `other` lies inside this folder (not being it)."""
        return self.folder and other.real != self.real and other.real.is_relative_to(self.real)


def _place(label: str, path: PathLike) -> _Place:
    p = Path(path)
    try:
        real = p.resolve()
    except (OSError, RuntimeError, ValueError):  # a link loop, a NUL: compare it as written
        real = p.absolute()
    try:
        st = p.stat()
        inode: tuple[int, int] | None = (st.st_dev, st.st_ino)
        folder = p.is_dir()
    except (OSError, ValueError):
        inode, folder = None, False
    return _Place(label, str(path), real, inode, folder)


def _places(given: Mapping[str, Given]) -> list[_Place]:
    out = []
    for label, value in given.items():
        if value is None:
            continue
        values = [value] if isinstance(value, str | os.PathLike) else list(value)
        out += [_place(label, v) for v in values if v is not None and str(v) != ""]
    return out


def check_paths(inputs: Mapping[str, Given] | None = None,
                outputs: Mapping[str, Given] | None = None) -> None:
    """Refuse, in one line and before any work, a set of paths in which an output is an
    input, two outputs are the same file, an output lies inside an input folder or an output
    folder, or an input lies inside an output folder. `inputs` and `outputs` map each path's
    label (the option that gave it, e.g. "--output") to its path, paths or None; inputs that
    do not exist are names, not files, and are skipped."""
    ins = [p for p in _places(inputs or {}) if p.inode is not None]
    outs = _places(outputs or {})
    for i, o in enumerate(outs):
        for other in outs[:i]:
            if o.same(other):
                raise BertscopeError(f"{o.given}: {other.label} and {o.label} are the same "
                                     f"file; give each its own path")
            for a, b in ((other, o), (o, other)):
                if a.holds(b):
                    raise BertscopeError(f"{b.given}: {b.label} is inside {a.label} {a.given}, "
                                         f"which this command writes; give a path outside it")
        for src in ins:
            if o.same(src):
                raise BertscopeError(f"{o.given}: {o.label} is the input {src.given} "
                                     f"({src.label}); writing it would destroy the input; "
                                     f"give another path")
            if src.holds(o):
                raise BertscopeError(f"{o.given}: {o.label} is inside the input folder "
                                     f"{src.given} ({src.label}); give a path outside it")
            if o.holds(src):
                raise BertscopeError(f"{src.given}: the input ({src.label}) is inside "
                                     f"{o.label} {o.given}, which this command writes; move "
                                     f"it or write elsewhere")


__all__ = ["check_paths"]
