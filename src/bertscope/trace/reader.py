"""Streaming reader of Kineto / Chrome trace JSON into numpy columns, in bounded memory.

A trace is one JSON object `{"schemaVersion": ..., "distributedInfo": ..., "traceEvents":
[...], ...}` (or a bare `[...]` of events), plain or gzipped. The file is read in chunks of
`CHUNK` characters; each event object is decoded on its own with `json.JSONDecoder.
raw_decode` and reduced at once to a few numbers appended to typed `array`s (8 bytes a
field, no Python object per event; `decode.py`); the dict is then dropped. Peak memory is
therefore the columns (~60 bytes per kept event) + one chunk + the distinct names, not the
parsed document (which takes ~10x the file size as Python objects).

Kept: complete events (`ph` "X", and "B"/"E" pairs) of CPU ops, user annotations, CUDA/HIP
runtime calls, GPU kernels, memcpy and memset; `ac2g` flow events (launch -> kernel links,
used where a kernel lacks a `correlation` arg) and the allocator's `[memory]` instants (ts,
device, total allocated) in their own small columns, and the message args of collective
kernels (`Events.messages`). Dropped: python_function stacks,
counters, other instants, metadata, GPU-side annotations (they span
kernels and would double count). The fields read and the columns are declared in
`events.py`.
Input shapes are kept only for the GEMM-like CPU ops of the registry (`gemm_ops.py`, what
attribution sizes); other ops keep the element count of their first input.

Bounds (`bertscope.bounded`): header values are decoded with numbers length-checked before
conversion and their nesting checked; events, the hot path, with the plain decoder, whose
own limits are turned into the same one-line errors (nesting beyond what Python's parser
allows, an integer beyond Python's digit limit); a number cut by a chunk's end is refused once
it is longer than `MAX_NUMBER_CHARS`, so a huge number is never read on to its end. The
kept shapes are checked for depth where they are interned (`decode.py`).
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from bertscope.bounded import (
    JSON_DECODER,
    MAX_NUMBER_CHARS,
    NumberTooLong,
    check_value,
    checked_float,
    is_digit_limit,
    too_deep,
)
from bertscope.errors import BertscopeError
from bertscope.trace.decode import Columns
from bertscope.trace.events import CPU_KINDS, DEVICE_KINDS, Events, Kind
from bertscope.trace.gemm_ops import has_gemm_shape

CHUNK = 1 << 20
"""Characters read per chunk (1 Mi): bounds the text held besides the columns (a 4 Mi
chunk read no faster and held ~6 MiB more at its peak: the buffer, the new text and their join)."""

gemm_like = has_gemm_shape
"""Whether attribution needs a CPU op's input shapes: the GEMM ops the registry sizes
(`gemm_ops.has_gemm_shape`, under its old name)."""


# --- the JSON stream --------------------------------------------------------------------------

MAX_EVENT = 1 << 26
"""Longest single JSON value accepted (64 Mi characters): beyond it the file is malformed."""

_TAIL = 1 << 16
"""Most characters left undecoded at a buffer's end before the next chunk is read (`_events`):
an event cut by the buffer's end is decoded only after a JSONDecodeError, which counts the
lines of the whole buffer (CPython's error position), ~1.5 ms per 1 Mi chunk: reading on first
keeps that to events longer than this."""
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER_RUN = re.compile(r"[-+.eE0-9]*")
"""Characters a JSON number is written with (`_Stream.value` measures a cut number's run)."""
_GAP = re.compile(r"[ \t\n\r,]*")


class _Bad(Exception):
    """What is wrong with a file; `read_events` adds the file name and position."""


class _Stream:
    """Characters of a (possibly gzipped) text file, a chunk at a time, with a cursor."""

    def __init__(self, f: TextIO, chunk: int) -> None:
        self.f, self.chunk = f, chunk
        self.tail = min(_TAIL, chunk >> 6)
        """Within this many characters of the buffer's end (and not at EOF), read on before
        decoding (`_events`)."""
        self.buf = ""
        self.pos = 0
        self.offset = 0
        """Characters dropped before `buf` (for error positions)."""
        self.eof = False

    def more(self, size: int | None = None) -> bool:
        """Read another chunk, dropping what the cursor has passed; False at end of file."""
        if self.eof:
            return False
        text = self.f.read(size or self.chunk)
        self.offset += self.pos
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        if not text:
            self.eof = True
        return bool(text)

    def skip(self, pattern: re.Pattern[str]) -> str:
        """Move past `pattern` (whitespace, separators); the next character, "" at EOF."""
        while True:
            self.pos = pattern.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def check_number_tail(self) -> None:
        """Refuse a number that runs on to the buffer's end and is already longer than
        `MAX_NUMBER_CHARS`, instead of reading on to its end."""
        start = len(self.buf) - MAX_NUMBER_CHARS - 1
        if start >= self.pos and _NUMBER_RUN.fullmatch(self.buf, start):
            raise NumberTooLong

    def value(self, decode: Callable[[str, int], tuple[Any, int]]) -> Any:
        """Decode one JSON value at the cursor, reading on until it is complete."""
        grow, last = self.chunk, None
        while True:
            try:
                v, end = decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if self.eof:
                    if e.msg.startswith("Unterminated") or e.pos >= len(self.buf) - 1:
                        raise _Bad("truncated: the file ends inside an event") from None
                    raise
                # the value may be cut by the chunk end; the same error again after reading
                # on is a real one (except inside a very long string, which starts there)
                if (e.msg, e.pos) == last and not e.msg.startswith("Unterminated string"):
                    raise
                if not e.msg.startswith("Unterminated string"):
                    self.check_number_tail()
                if len(self.buf) - self.pos > MAX_EVENT:
                    raise _Bad(f"a JSON value longer than {MAX_EVENT >> 20} Mi characters "
                               f"({e.msg}): malformed") from None
                last = (e.msg, e.pos)
                self.more(grow)
                grow *= 2  # one huge value: double the reads, not a read per retry
                continue
            if end == len(self.buf) and not isinstance(v, dict | list | str) and not self.eof:
                if end - self.pos > MAX_NUMBER_CHARS:
                    raise NumberTooLong
                self.more(grow)  # a number or literal may continue in the next chunk
                continue
            self.pos = end
            return v


def _open_text(path: Path) -> TextIO:
    raw = path.open("rb")
    magic = raw.read(2)
    raw.seek(0)
    binary: Any = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace")


def read_events(path: str | Path, *, keep_dims: Callable[[str], bool] = has_gemm_shape,
                chunk: int = CHUNK, header_only: bool = False) -> Events:
    """Stream one trace file into columns. Bad files raise a one-line `BertscopeError` that
    names the file and what is wrong (empty, truncated, not JSON, not a trace).

    `header_only` stops at the traceEvents key (to find a file's rank cheaply)."""
    p = Path(path)
    if not p.is_file():
        raise BertscopeError(f"{p}: no such trace file")
    cols = Columns(keep_dims)
    header: dict[str, Any] = {}
    s: _Stream | None = None
    try:
        with _open_text(p) as f:
            s = _Stream(f, chunk)
            _parse(s, cols, header, header_only)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise BertscopeError(f"{p}: cannot decompress ({e}): truncated or corrupt gzip file"
                             ) from None
    except OSError as e:
        raise BertscopeError(f"{p}: cannot read ({e.strerror or e})") from None
    except RecursionError:  # Python's parser recurses: an event nested ~1,000 deep
        raise BertscopeError(f"{too_deep(str(p))} ({_count(cols)})") from None
    except json.JSONDecodeError as e:
        at = (s.offset if s is not None else 0) + e.pos
        raise BertscopeError(f"{p}: not valid JSON: {e.msg} at character {at:,} "
                             f"({_count(cols)})") from None
    except (_Bad, ValueError) as e:
        if is_digit_limit(e):
            e = NumberTooLong()
        raise BertscopeError(f"{p}: {e} ({_count(cols)})") from None
    except OverflowError:  # an id, count or shape beyond 64 bits
        raise BertscopeError(f"{p}: a number in the trace is beyond 64 bits (an id, a count "
                             f"or a shape); not a trace a profiler wrote ({_count(cols)})"
                             ) from None
    if not header_only and not len(cols):
        what = "no events" if not cols.seen else (
            f"{cols.seen:,} events, none of them CPU ops, annotations, kernels or copies")
        raise BertscopeError(f"{p}: the trace has {what}")
    return cols.finish(p, header)


def _count(cols: Columns) -> str:
    return f"after {cols.seen:,} events" if cols.seen else "before the first event"


def _parse(s: _Stream, cols: Columns, header: dict[str, Any], header_only: bool) -> None:
    decode = json.JSONDecoder(parse_float=checked_float).raw_decode  # ints: Python's limit
    first = s.skip(_WS)
    if first == "":
        raise _Bad("empty file")
    if first == "[":  # a bare array of events (the Chrome trace format's other form)
        s.pos += 1
        if not header_only:
            _events(s, cols, decode)
        return
    if first != "{":
        raise _Bad(f"not JSON: starts with {s.buf[s.pos:s.pos + 12]!r}")
    s.pos += 1
    found = False
    while True:
        c = s.skip(_GAP)
        if c == "}":
            break
        if c == "":
            raise _Bad("truncated: the file ends inside the top-level object")
        key = s.value(decode)
        if not isinstance(key, str):
            raise _Bad("not a trace: the top-level object has a non-string key")
        if s.skip(_WS) != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", s.buf, s.pos)
        s.pos += 1
        c = s.skip(_WS)
        if c == "":
            raise _Bad("truncated: the file ends inside the top-level object")
        if key == "traceEvents":
            if c != "[":
                raise _Bad("not a trace: traceEvents is not an array")
            found = True
            if header_only:
                return
            s.pos += 1
            _events(s, cols, decode)
        else:
            header[key] = check_value(s.value(JSON_DECODER.raw_decode), f"header {key[:40]!r}")
    if not found:
        keys = ", ".join(sorted(header)[:6]) or "none"
        raise _Bad(f"not a trace: no traceEvents array (top-level keys: {keys})")


def _events(s: _Stream, cols: Columns, decode: Callable[[str, int], tuple[Any, int]]) -> None:
    add = cols.adder()
    gap = _GAP.match
    seen = cols.seen
    collecting = gc.isenabled()
    gc.disable()  # events are freed at once; no cycles to find, only time to lose
    try:
        while True:
            # fast path: decode events straight from the buffer until its end
            buf, pos = s.buf, s.pos
            end = len(buf)
            low = end if s.eof else end - s.tail
            while True:
                pos = gap(buf, pos).end()  # type: ignore[union-attr]
                if pos >= end or buf[pos] != "{" or pos > low:
                    break
                try:
                    v, pos = decode(buf, pos)
                except json.JSONDecodeError:
                    break
                seen += 1
                add(v)
            s.pos = pos
            if pos > low and s.more():
                continue  # near the buffer's end: read on before decoding what is there
            c = s.skip(_GAP)
            if c == "{":
                seen += 1
                add(s.value(decode))  # cut by the chunk end: read on
                continue
            if c == "]":
                s.pos += 1
                return
            if c == "":
                raise _Bad("truncated: the file ends inside traceEvents")
            raise _Bad(f"not a trace: traceEvents holds {s.buf[s.pos:s.pos + 12]!r}, "
                       f"not event objects")
    finally:
        cols.seen = seen
        if collecting:
            gc.enable()


def read_rank(path: str | Path) -> int | None:
    """A trace file's rank from its header (distributedInfo), read without its events."""
    try:
        return read_events(path, header_only=True).rank
    except BertscopeError:
        return None


def trace_files(path: str | Path) -> list[Path]:
    """The trace files at `path`: the file itself, or a folder's *.json / *.json.gz files."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir()
                       if f.is_file() and f.name.endswith((".json", ".json.gz")))
        if not files:
            raise BertscopeError(f"{p}: no .json or .json.gz trace files in this folder")
        return files
    if not p.exists():
        raise BertscopeError(f"{p}: no such trace file or folder")
    return [p]


_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: Path) -> int | None:
    """A rank written in a file name (rank3, rank_3, worker3), when there is one."""
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


__all__ = ["CHUNK", "CPU_KINDS", "DEVICE_KINDS", "Events", "Kind", "gemm_like", "rank_from_name",
           "read_events", "read_rank", "trace_files"]
