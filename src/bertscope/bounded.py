"""Bounded parsing of the JSON and TOML documents bertscope reads (model configs, device
files, calibrated profiles, pattern and module files, saved results, trace headers): one
reader that refuses, in one line naming the file and the limit, a document nested deeper than
`MAX_DEPTH` or holding a number longer than `MAX_NUMBER_CHARS` characters.

The limits are checked so that no bad document costs more than its text: a number's length
is checked on its characters before they are converted (the JSON parser's `parse_int` /
`parse_float` hooks, TOML's `parse_float`; a TOML integer beyond Python's own digit limit is
refused by `int` before conversion, and one below it is compared with 10**100); a
document too deep for Python's parsers (which recurse) is caught as the `RecursionError` they
raise and refused like one just past the limit, whose depth is measured by an iterative walk
of the parsed value (never by recursion).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from bertscope.errors import BertscopeError
from bertscope.io import read_text

MAX_DEPTH = 100
"""Deepest nesting of lists and objects (tables) accepted in any document bertscope reads:
its own files nest fewer than ten levels, a Kineto trace header or event about five."""

MAX_NUMBER_CHARS = 100
"""Longest number accepted, in characters (sign, digits, point and exponent): an int64 id
has 20, a float written in full about 25."""

_INT_LIMIT = 10 ** MAX_NUMBER_CHARS
"""The least int with more than `MAX_NUMBER_CHARS` digits."""


class NumberTooLong(ValueError):
    """A number longer than `MAX_NUMBER_CHARS` characters (raised before conversion)."""

    def __init__(self) -> None:
        super().__init__(f"a number longer than {MAX_NUMBER_CHARS} characters; no real file "
                         f"has one")


def checked_int(text: str) -> int:
    """`int(text)`, refused before conversion when longer than `MAX_NUMBER_CHARS`."""
    if len(text) > MAX_NUMBER_CHARS:
        raise NumberTooLong
    return int(text)


def checked_float(text: str) -> float:
    """`float(text)`, refused before conversion when longer than `MAX_NUMBER_CHARS` (as
    json's `parse_float` hook it costs no more than the default: the trace reader's events
    use it)."""
    if len(text) > MAX_NUMBER_CHARS:
        raise NumberTooLong
    return float(text)


JSON_DECODER = json.JSONDecoder(parse_int=checked_int, parse_float=checked_float)
"""A JSON decoder whose numbers are length-checked before conversion (`raw_decode` for a
value inside a stream: the trace reader's header)."""


def too_deep(origin: str) -> BertscopeError:
    """The one-line error for a document nested deeper than `MAX_DEPTH`."""
    return BertscopeError(f"{origin}: nested deeper than {MAX_DEPTH} levels (lists or objects "
                          f"inside each other); not a file bertscope reads")


def too_long(origin: str) -> BertscopeError:
    """The one-line error for a number longer than `MAX_NUMBER_CHARS` (also for Python's own
    int digit-limit error, whose advice does not apply)."""
    return BertscopeError(f"{origin}: {NumberTooLong()}")


def is_digit_limit(e: BaseException) -> bool:
    """Whether `e` is Python's own refusal of an over-long integer string (a `ValueError`
    raised by `int` before converting: "Exceeds the limit (4300 digits) ...")."""
    return (isinstance(e, ValueError) and not isinstance(e, NumberTooLong)
            and "integer string conversion" in str(e))


def check_value(value: Any, origin: str) -> Any:
    """`value` (a parsed document or part of one) if it nests at most `MAX_DEPTH` levels and
    every int in it has at most `MAX_NUMBER_CHARS` digits (a TOML integer, converted by
    tomllib itself within Python's own digit limit); else a one-line error. Walked
    with an explicit stack, so any depth is safe to check."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if type(v) is dict:
            items: Any = v.values()
        elif type(v) is list:
            items = v
        else:
            if type(v) is int and not -_INT_LIMIT < v < _INT_LIMIT:
                raise too_long(origin)
            continue
        if depth >= MAX_DEPTH:
            raise too_deep(origin)
        stack.extend((c, depth + 1) for c in items if type(c) in (dict, list, int))
    return value


def loads_json(text: str, origin: str, fix: str = "") -> Any:
    """Parse JSON text within the limits; a one-line error (naming `origin`, then `fix`
    after "; " when given) for invalid JSON, too deep a nesting or too long a number."""
    try:
        doc = json.loads(text, parse_int=checked_int, parse_float=checked_float)
    except json.JSONDecodeError as e:
        raise BertscopeError(f"{origin}: not valid JSON ({e.msg} at line {e.lineno})"
                             + (f"; {fix}" if fix else "")) from None
    except RecursionError:
        raise too_deep(origin) from None
    except NumberTooLong:
        raise too_long(origin) from None
    return check_value(doc, origin)


def loads_toml(text: str, origin: str, fix: str = "") -> dict[str, Any]:
    """Parse TOML text within the limits; one-line errors as `loads_json`'s."""
    try:
        doc = tomllib.loads(text, parse_float=checked_float)
    except tomllib.TOMLDecodeError as e:
        raise BertscopeError(f"{origin}: not valid TOML ({e})"
                             + (f"; {fix}" if fix else "")) from None
    except RecursionError:
        raise too_deep(origin) from None
    except ValueError as e:  # NumberTooLong, or int's own digit limit
        if isinstance(e, NumberTooLong) or is_digit_limit(e):
            raise too_long(origin) from None
        raise
    return check_value(doc, origin)


def read_json(path: str | Path, *, missing: str = "", fix: str = "") -> Any:
    """A JSON file's document, read with `io.read_text`'s size cap and parsed within the
    limits (`missing`: the hint when the file does not exist; `fix`: after a parse error)."""
    return loads_json(read_text(path, missing=missing), str(path), fix)


def read_toml(path: str | Path, *, missing: str = "", fix: str = "") -> dict[str, Any]:
    """A TOML file's document, read and parsed as `read_json`'s."""
    return loads_toml(read_text(path, missing=missing), str(path), fix)


__all__ = ["JSON_DECODER", "MAX_DEPTH", "MAX_NUMBER_CHARS", "NumberTooLong", "check_value",
           "checked_float", "checked_int",
           "is_digit_limit", "loads_json", "loads_toml", "read_json", "read_toml", "too_deep",
           "too_long"]
