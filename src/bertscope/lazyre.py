"""Regular expressions compiled on first use, with a literal prefilter that skips the compile
where a name cannot match.

The built-in name tables hold over a hundred expressions, most of them anchored ATen rows
(`^aten::(addmm|mm|linear)$`); a table is searched in order until one matches, so classifying
`aten::add` would compile every row before it (about a millisecond each). `prefilter` reads,
from the expression's text alone, a literal prefix every match starts with and the literal
stems one of which follows it; `Regex.search` returns None at once for a name that does not
start so (exactly what the compiled expression would return), and compiles only the rows a
name could match."""

from __future__ import annotations

import re
from collections.abc import Mapping

_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")
_QUANTIFIERS = frozenset("*?{+")

Prefilter = tuple[str, tuple[str, ...]]
"""(prefix, stems): every string the expression matches starts with `prefix` followed by one
of `stems` (an empty stem: anything)."""


def _literal(text: str, i: int) -> str:
    """The run of literal characters at `text[i:]`, less its last one where a quantifier
    follows it (`ab*`: only `a` is required)."""
    j = i
    while j < len(text) and text[j] in _LITERAL:
        j += 1
    if j > i and j < len(text) and text[j] in _QUANTIFIERS:
        j -= 1
    return text[i:j]


def _structure(text: str) -> list[tuple[int, str, int]] | None:
    """The parentheses and `|`s of `text` with their index and the depth before them
    (escapes `\\x` and classes `[...]` skipped over); None where it is not balanced."""
    out, depth, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            first = i + 1 + text.startswith("^", i + 1)  # a `]` here (after `[` or `[^`)
            end = text.find("]", first + 1)  # is a literal, not the class's end
            if end < 0:
                return None
            i = end + 1
            continue
        if c in "(|)":
            out.append((i, c, depth))
            depth += {"(": 1, ")": -1, "|": 0}[c]
            if depth < 0:
                return None
        i += 1
    return out if depth == 0 else None


def _alternatives(text: str) -> list[str] | None:
    """`text` split at its top-level `|`s; None where it is not balanced."""
    marks = _structure(text)
    if marks is None:
        return None
    cuts = [i for i, c, depth in marks if c == "|" and depth == 0]
    return [text[a + 1:b] for a, b in zip([-1, *cuts], [*cuts, len(text)], strict=True)]


def prefilter(pattern: str) -> Prefilter | None:
    """What every match of `pattern` (searched without flags) starts with; None where that
    cannot be read off simply (not anchored at `^`, a top-level `|`, inline flags, named
    groups, lookarounds): such an expression is always compiled and searched."""
    if not pattern.startswith("^") or "(?" in pattern.replace("(?:", ""):
        return None
    whole = _alternatives(pattern)
    if whole is None or len(whole) != 1:
        return None
    prefix = _literal(pattern, 1)
    rest = pattern[1 + len(prefix):]
    marks = _structure(rest) if rest.startswith("(") else None
    if not marks:
        return prefix, ("",)
    end = next(i for i, c, depth in marks if c == ")" and depth == 1)  # closes rest[0]
    if end + 1 < len(rest) and rest[end + 1] in _QUANTIFIERS:  # an optional group
        return prefix, ("",)
    body = rest[3 if rest.startswith("(?:") else 1:end]
    return prefix, tuple(_literal(a, 0) for a in _alternatives(body) or [""])


class Regex:
    """A regular expression compiled on first use (`search`, `pattern` and `groupindex` as
    `re.Pattern`'s): the built-in tables hold over a hundred, compiling them all costs more
    than reading a small trace, and a trace reaches only the rows its names get to. `check`
    compiles at once (a user's file: a bad regex is an error where it is read). `search`
    answers None without compiling for a text the expression's literal prefix rules out."""

    __slots__ = ("_compiled", "_filter", "pattern")

    def __init__(self, pattern: str, *, check: bool = False) -> None:
        self.pattern = pattern
        self._compiled: re.Pattern[str] | None = re.compile(pattern) if check else None
        self._filter: Prefilter | bool | None = False  # False: not read yet

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled expression."""
        if self._compiled is None:
            self._compiled = re.compile(self.pattern)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        """`re.Pattern.search`."""
        f = self._filter
        if f is False:
            f = self._filter = prefilter(self.pattern)
        if f is not None and not (text.startswith(f[0])  # type: ignore[index]
                                  and text.startswith(f[1], len(f[0]))):  # type: ignore[index]
            return None
        return self.compiled.search(text)

    @property
    def groupindex(self) -> Mapping[str, int]:
        """`re.Pattern.groupindex`."""
        return self.compiled.groupindex

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Regex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"
