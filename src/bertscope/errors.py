"""The one error type users see (a one-line message that says what is wrong and how to fix it),
and the two checks every config and loader shares: an enum value, a positive integer."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)


class BertscopeError(ValueError):
    """Bad input (config, preset name, file, CLI value). The CLI prints it as one line, exit 2."""


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
        raise BertscopeError(f"{where}unknown {what} {value!r}; choose one of: "
                             f"{choices}") from None


def is_positive_int(value: Any) -> bool:
    """True for an int (not a bool) above zero."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def is_positive_number(value: Any) -> bool:
    """True for a finite int or float (not a bool) above zero."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


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
            raise BertscopeError(f"{prefix}{name} must be a positive integer, got {value!r}")
        cap = (limits or {}).get(name, MAX_SIZE)
        if value > cap:
            raise BertscopeError(f"{prefix}{name} {value} exceeds the supported maximum "
                                 f"{cap:,}")


__all__ = ["MAX_SIZE", "BertscopeError", "check_positive_ints", "is_positive_int",
           "is_positive_number", "parse_enum"]
