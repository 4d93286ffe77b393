"""The one error type users see (a one-line message that says what is wrong and how to fix it),
and the checks every config, loader and public function shares: an enum value, a positive
integer, one value or a list of values (`as_values`), a value shown short (`shown`)."""

from __future__ import annotations

import itertools
import math
import os
import reprlib
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)


class BertscopeError(ValueError):
    """Bad input (config, preset name, file, CLI value). The CLI prints it as one line, exit 2."""


Error = BertscopeError
"""`bertscope.Error`: the public API's name for `BertscopeError` (the same class, not a
second hierarchy): `except bertscope.Error` catches every bad-input error the package raises."""


def parse_enum(kind: type[E], value: Any, what: str, origin: str = "") -> E:
    """`value` as a member of the enum `kind` (a member, or its value); otherwise a
    `BertscopeError` "ORIGIN: unknown WHAT 'value'; choose one of: ..." (no prefix without
    `origin`)."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except (ValueError, TypeError):
        choices = ", ".join(str(m.value) for m in kind)
        where = f"{origin}: " if origin else ""
        raise BertscopeError(f"{where}unknown {what} {shown(value)}; choose one of: "
                             f"{choices}") from None


def is_positive_int(value: Any) -> bool:
    """True for an int (not a bool) above zero."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_finite_number(value: Any) -> bool:
    """True for an int or float (not a bool) that is finite as a float: an int beyond
    float's range (10**400) is not, and says so instead of raising OverflowError."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def is_positive_number(value: Any) -> bool:
    """True for a finite int or float (not a bool) above zero."""
    return is_finite_number(value) and value > 0


_SHORT = reprlib.Repr()
for _limit, _value in (("maxstring", 40), ("maxother", 40), ("maxlong", 40), ("maxlist", 4),
                       ("maxtuple", 4), ("maxset", 4), ("maxdict", 4), ("maxlevel", 2)):
    setattr(_SHORT, _limit, _value)


def shown(value: Any) -> str:
    """A value as an error line shows it: its repr cut short (a 100,000-character name, a
    10**400 integer or a long list stays a few dozen characters)."""
    try:
        return _SHORT.repr(value)
    except Exception:  # a repr that fails, or an int past Python's digit limit
        return f"<{type(value).__name__}>"


MAX_VALUES = 10_000_000
"""Most values `as_values` takes from one argument (as many as a command-line range)."""


def as_values(value: Any, what: str) -> tuple[Any, ...]:
    """An argument that takes one value or several, as a tuple: a list, tuple, range, set,
    array or other iterable gives its items; a string, bytes or a path is ONE value (never
    its characters), and so is anything not iterable (`batch=8` is `batch=[8]`). A mapping
    is refused (its keys would be taken silently), and so is an iterable of more than
    `MAX_VALUES` items (an endless generator included)."""
    if isinstance(value, str | bytes | bytearray | os.PathLike):
        return (value,)
    if isinstance(value, Mapping):
        raise BertscopeError(f"{what}: expected a value or a list of values, got a "
                             f"{type(value).__name__} {shown(value)}")
    try:
        items = iter(value)
    except TypeError:  # a number, a config object, a 0-d array: one value
        return (value,)
    out = tuple(itertools.islice(items, MAX_VALUES + 1))
    if len(out) > MAX_VALUES:
        raise BertscopeError(f"{what}: more than {MAX_VALUES:,} values; give fewer")
    return out


def check_path(value: Any, what: str) -> str:
    """A public function's path argument as text: a non-empty str or os.PathLike naming a
    str path; anything else (a number, bytes, None) is refused in one line."""
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if not isinstance(text, str) or not text.strip():
        raise BertscopeError(f"{what}: expected a file path, got {type(value).__name__} "
                             f"{shown(value)}")
    return text


REQUIRED: Any = object()
"""`expect`'s default: the field must be present."""

_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
               dict: "an object", list: "a list"}


def expect(doc: dict[str, Any], key: str, kind: type, origin: str, default: Any = REQUIRED, *,
           nullable: bool = False, minimum: float | None = None) -> Any:
    """Field `key` of a loaded file's object, checked to be of `kind` (int excludes bool; float
    takes ints and refuses NaN and infinities): the one schema check of every loader, whose
    error reads "ORIGIN: KEY: expected X, got Y". A missing field takes `default` (or is an
    error when there is none); `nullable` lets JSON null through as None; `minimum` bounds a
    number from below ("expected a number >= 0, got -1.0")."""
    if key not in doc:
        if default is REQUIRED:
            raise BertscopeError(f"{origin}: missing {key}")
        return default
    value = doc[key]
    if value is None and nullable:
        return None
    if kind is float:
        ok = is_finite_number(value)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    low = ok and minimum is not None and value < minimum
    if not ok or low:
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise BertscopeError(f"{origin}: {key}: expected {_KIND_NAMES.get(kind, kind.__name__)}"
                             f"{bound}, got {shown(value)} ({type(value).__name__})")
    return float(value) if kind is float else value


MAX_SIZE = 2**40
"""Largest size bertscope accepts for any count (layers, hidden, batch, sequence, devices, global
batch, ...): about 1.1e12, far beyond any real model or run, small enough that products of a
few sizes stay exact in float64 and fit numpy's int64."""


def check_positive_ints(obj: Any, names: tuple[str, ...], prefix: str = "", *,
                        limits: dict[str, int] | None = None) -> None:
    """Raise `BertscopeError` unless each attribute `names` of `obj` is an integer in
    [1, limit] (`limits[name]`, default `MAX_SIZE`); the message starts with `prefix` (e.g.
    "model 'x': ") and states the cap when one is exceeded."""
    for name in names:
        value = getattr(obj, name)
        if not is_positive_int(value):
            raise BertscopeError(f"{prefix}{name} must be a positive integer, got "
                                 f"{shown(value)}")
        cap = (limits or {}).get(name, MAX_SIZE)
        if value > cap:
            raise BertscopeError(f"{prefix}{name} {value} exceeds the supported maximum "
                                 f"{cap:,}")


def printable(text: object) -> str:
    """`text` safe for a terminal: control characters, lone surrogates (undecodable bytes)
    and other unprintable characters escaped as Python writes them (`\\x1b`, `\\udcff`);
    printable text, non-ASCII included, as it is."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


__all__ = [
    "MAX_SIZE",
    "BertscopeError",
    "Error",
    "as_values",
    "check_path",
    "check_positive_ints",
    "expect",
    "is_finite_number",
    "is_positive_int",
    "is_positive_number",
    "parse_enum",
    "printable",
    "shown",
]
