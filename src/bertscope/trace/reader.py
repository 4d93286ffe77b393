"""Streaming reader of Kineto / Chrome trace JSON into numpy columns, in bounded memory.

A trace is one JSON object `{"schemaVersion": ..., "distributedInfo": ..., "traceEvents":
[...], ...}` (or a bare `[...]` of events), plain or gzipped. The file is read in chunks of
`CHUNK` characters; each event object is decoded on its own with `json.JSONDecoder.
raw_decode` and reduced at once to a few numbers appended to typed `array`s (8 bytes a
field, no Python object per event); the dict is then dropped. Peak memory is therefore the
columns (~60 bytes per kept event) + one chunk + the distinct names, not the parsed
document (which takes ~10x the file size as Python objects).

Kept: complete events (`ph` "X", and "B"/"E" pairs) of CPU ops, user annotations, CUDA/HIP
runtime calls, GPU kernels, memcpy and memset; `ac2g` flow events (launch -> kernel links,
used where a kernel lacks a `correlation` arg) in their own small columns. Dropped:
python_function stacks, counters, instants, metadata, GPU-side annotations (they span
kernels and would double count).
Input shapes are kept only for GEMM-like CPU ops (what attribution needs); other ops keep
the element count of their first input.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import re
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from bertscope.errors import BertscopeError

CHUNK = 1 << 22
"""Characters read per chunk (4 Mi): bounds the text held besides the columns."""


class Kind(IntEnum):
    """What an event is (the `kind` column)."""

    CPU_OP = 1
    ANNOTATION = 2
    """A user annotation (record_function) on a CPU thread."""
    RUNTIME = 3
    """A CUDA/HIP runtime or driver call (cudaLaunchKernel ...): links to kernels."""
    KERNEL = 4
    MEMCPY = 5
    MEMSET = 6


CPU_KINDS = (Kind.CPU_OP, Kind.ANNOTATION, Kind.RUNTIME)
DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

_CATEGORIES: dict[str, int] = {
    # Kineto (torch >= 1.8) spellings, then the older profiler's and other tools'
    "cpu_op": Kind.CPU_OP, "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "cuda_runtime": Kind.RUNTIME, "cuda_driver": Kind.RUNTIME, "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME, "cuda runtime": Kind.RUNTIME, "hip runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL, "gpu kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY, "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET, "memset": Kind.MEMSET,
}


def _kind_of(cat: Any) -> int:
    """Kind code of an event category (0 = not kept)."""
    if not isinstance(cat, str):
        return 0
    return _CATEGORIES.get(cat.lower(), 0)


_GEMM_SUFFIXES = ("::mm", "::addmm", "::_addmm_activation", "::linear", "::bmm", "::baddbmm",
                  "::matmul")


@dataclass(slots=True)
class Events:
    """The kept events of one trace file, as columns (one entry per event)."""

    path: Path
    kind: np.ndarray
    """`Kind` code (uint8)."""
    name: np.ndarray
    """Index into `names` (int32)."""
    pid: np.ndarray
    """Index into `ids` (int32): the process (CPU) or device (GPU) lane."""
    tid: np.ndarray
    """Index into `ids` (int32): the thread (CPU) or stream (GPU) lane."""
    ts: np.ndarray
    """Start, microseconds (float64)."""
    dur: np.ndarray
    """Duration, microseconds (float64)."""
    corr: np.ndarray
    """Correlation id of runtime calls and device events; -1 (int64)."""
    seq: np.ndarray
    """Autograd sequence number of CPU ops; -1 (int64)."""
    numel: np.ndarray
    """Elements of a CPU op's first input; 0 (int64)."""
    names: list[str]
    ids: list[Any]
    """Distinct pid/tid values (ints or strings), indexed by the `pid`/`tid` columns."""
    dims: dict[int, list[Any]] = field(default_factory=dict)
    """Input shapes of GEMM-like CPU ops, by event index."""
    flows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(
        default_factory=lambda: tuple(np.zeros(0) for _ in range(4)))  # type: ignore[arg-type]
    """`ac2g` flows (start ts, start id, end ts, end id): launch -> kernel links, used where
    runtime calls or kernels lack a `correlation` arg."""
    header: dict[str, Any] = field(default_factory=dict)
    """Top-level keys other than traceEvents (schemaVersion, distributedInfo, ...)."""

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def end(self) -> np.ndarray:
        """End of each event, microseconds."""
        return self.ts + self.dur

    @property
    def rank(self) -> int | None:
        """The rank from `distributedInfo`, when the trace has it."""
        info = self.header.get("distributedInfo")
        r = info.get("rank") if isinstance(info, dict) else None
        return int(r) if isinstance(r, int | str) and str(r).isdigit() else None


class _Columns:
    """Typed arrays that events are appended to while the file streams by."""

    def __init__(self, keep_dims: Callable[[str], bool]) -> None:
        self.kind = array("B")
        self.name = array("i")
        self.pid = array("i")
        self.tid = array("i")
        self.ts = array("d")
        self.dur = array("d")
        self.corr = array("q")
        self.seq = array("q")
        self.numel = array("q")
        self.flows = (array("d"), array("q"), array("d"), array("q"))
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.ids: list[Any] = []
        self._id_ids: dict[Any, int] = {}
        self.dims: dict[int, list[Any]] = {}
        self._gemm_like: dict[int, bool] = {}
        self._shapes: dict[tuple[Any, ...], list[Any]] = {}
        self._keep_dims = keep_dims
        self._open: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        self.seen = 0

    def _intern_shapes(self, shapes: list[Any]) -> list[Any]:
        """One list object per distinct input-shapes value (GEMM shapes repeat a lot)."""
        try:
            key = tuple(tuple(x) if type(x) is list else x for x in shapes)
            return self._shapes.setdefault(key, shapes)
        except TypeError:  # unhashable odd content: keep as is
            return shapes

    def _intern_id(self, v: Any) -> int:
        i = self._id_ids.get(v)
        if i is None:
            i = self._id_ids[v] = len(self.ids)
            self.ids.append(v)
        return i

    def fast_adder(self) -> Callable[[Any], None]:
        """`add` for the common case (a complete event of a known category, name and lane,
        numeric times), as a closure over local names: the per-event cost of the reader.
        Anything else (first sight of a name, other phases, odd types) goes to `add`."""
        kind_of = _CATEGORIES.get
        name_id = self._name_ids.get
        lane_id = self._id_ids.get
        gemm_like = self._gemm_like
        dims = self.dims
        kinds = self.kind
        appends = (kinds.append, self.name.append, self.pid.append, self.tid.append,
                   self.ts.append, self.dur.append, self.corr.append, self.seq.append,
                   self.numel.append)
        k_app, n_app, p_app, t_app, ts_app, d_app, c_app, s_app, e_app = appends
        slow = self.add
        intern = self._intern_shapes
        num = (float, int)
        empty: dict[str, Any] = {}
        cpu, runtime, device = int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.KERNEL)

        fs_ts, fs_id, fe_ts, fe_id = (a.append for a in self.flows)

        def add(e: Any) -> None:
            if type(e) is not dict:
                return slow(e)
            ph = e.get("ph")
            if ph != "X":
                if ph == "s" or ph == "f":
                    fid, ts = e.get("id"), e.get("ts")
                    if e.get("cat") != "ac2g" or type(fid) is not int or type(ts) not in num:
                        return slow(e)
                    if ph == "s":
                        fs_ts(ts)
                        fs_id(fid)
                    else:
                        fe_ts(ts)
                        fe_id(fid)
                    return None
                return slow(e)
            kind = kind_of(e.get("cat"))  # type: ignore[arg-type]
            name, ts, dur = e.get("name"), e.get("ts"), e.get("dur", 0.0)
            args = e.get("args", empty)
            if (kind is None or type(args) is not dict or type(ts) not in num
                    or type(dur) not in num):
                return slow(e)
            nid = name_id(name)  # type: ignore[arg-type]
            if nid is None:
                return slow(e)
            corr = seq = -1
            numel = 0
            if kind >= device:
                lane, sub = args.get("device"), args.get("stream")
                if lane is None:
                    lane = e.get("pid")
                if sub is None:
                    sub = e.get("tid")
                corr = args.get("correlation", -1)
            else:
                lane, sub = e.get("pid"), e.get("tid")
                if kind == cpu:
                    seq = args.get("Sequence number", -1)
                    shapes = args.get("Input Dims")
                    if type(shapes) is list and shapes:
                        if gemm_like.get(nid):
                            dims[len(kinds)] = intern(shapes)
                        numel = _numel(shapes[0])
                elif kind == runtime:
                    corr = args.get("correlation", -1)
            pi, ti = lane_id(lane), lane_id(sub)
            if pi is None or ti is None or type(corr) is not int or type(seq) is not int:
                return slow(e)
            k_app(kind)
            n_app(nid)
            p_app(pi)
            t_app(ti)
            ts_app(ts)
            d_app(dur)
            c_app(corr)
            s_app(seq)
            e_app(numel)
            return None

        return add

    def add(self, e: Any) -> None:
        """Reduce one decoded event to its columns (or drop it), checking types."""
        if not isinstance(e, dict):
            raise ValueError("not a trace: an event is not a JSON object")
        ph = e.get("ph")
        if ph == "X":
            self._complete(e, e.get("dur", 0.0))
        elif ph in ("s", "f"):
            fid = _int(e.get("id"))
            if e.get("cat") == "ac2g" and fid >= 0:
                ts = _num(e.get("ts"))
                at = 0 if ph == "s" else 2
                self.flows[at].append(ts)
                self.flows[at + 1].append(fid)
        elif ph == "B":
            self._open.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        elif ph == "E":
            stack = self._open.get((e.get("pid"), e.get("tid")))
            if stack:
                b = stack.pop()
                self._complete(b, _num(e.get("ts")) - _num(b.get("ts")))

    def _complete(self, e: dict[str, Any], dur: Any) -> None:
        kind = _CATEGORIES.get(e.get("cat"))  # type: ignore[arg-type]
        if kind is None:
            kind = _kind_of(e.get("cat"))
            if not kind:
                return
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        name = e.get("name")
        if not isinstance(name, str):
            name = str(name)
        corr, seq, numel = -1, -1, 0
        if kind == Kind.CPU_OP:
            seq = _int(args.get("Sequence number"))
            shapes = args.get("Input Dims")
            if isinstance(shapes, list) and shapes:
                nid = self._name_ids.get(name)
                gemm = self._gemm_like.get(nid) if nid is not None else None
                if gemm is None:
                    gemm = self._keep_dims(name)
                if gemm:
                    self.dims[len(self.kind)] = self._intern_shapes(shapes)
                numel = _numel(shapes[0])
        elif kind != Kind.ANNOTATION:
            corr = _int(args.get("correlation"))
        if kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET):
            # the device and stream are in args; pid/tid are display lanes in some writers
            dev, stream = args.get("device"), args.get("stream")
            self._append(kind, name, e, dur, corr, seq, numel,
                         dev if dev is not None else e.get("pid"),
                         stream if stream is not None else e.get("tid"))
            return
        self._append(kind, name, e, dur, corr, seq, numel)

    def _append(self, kind: int, name: str, e: dict[str, Any], dur: Any, corr: int,
                seq: int, numel: int, pid: Any = None, tid: Any = None) -> None:
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self._name_ids[name] = len(self.names)
            self.names.append(name)
            self._gemm_like[nid] = self._keep_dims(name)
        self.kind.append(kind)
        self.name.append(nid)
        self.pid.append(self._intern_id(e.get("pid") if pid is None else pid))
        self.tid.append(self._intern_id(e.get("tid") if tid is None else tid))
        self.ts.append(_num(e.get("ts")))
        self.dur.append(_num(dur))
        self.corr.append(corr)
        self.seq.append(seq)
        self.numel.append(numel)

    def finish(self, path: Path, header: dict[str, Any]) -> Events:
        """The columns as numpy arrays (no copy of the data)."""
        def np_(a: array, dtype: Any) -> np.ndarray:
            return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)

        return Events(path=path, kind=np_(self.kind, np.uint8), name=np_(self.name, np.int32),
                      pid=np_(self.pid, np.int32), tid=np_(self.tid, np.int32),
                      ts=np_(self.ts, np.float64), dur=np_(self.dur, np.float64),
                      corr=np_(self.corr, np.int64), seq=np_(self.seq, np.int64),
                      numel=np_(self.numel, np.int64), names=self.names, ids=self.ids,
                      dims=self.dims, header=header,
                      flows=(np_(self.flows[0], np.float64), np_(self.flows[1], np.int64),
                             np_(self.flows[2], np.float64), np_(self.flows[3], np.int64)))


def _num(v: Any) -> float:
    if isinstance(v, float | int):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"not a trace: an event has a non-numeric time {v!r}") from None


def _int(v: Any) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _numel(shape: Any) -> int:
    if not isinstance(shape, list) or not shape:
        return 0
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return 0
        n *= d
    return n


def gemm_like(name: str) -> bool:
    """Whether attribution needs this CPU op's input shapes (the GEMM ops it can size)."""
    return name.endswith(_GEMM_SUFFIXES)


# --- the JSON stream --------------------------------------------------------------------------

MAX_EVENT = 1 << 26
"""Longest single JSON value accepted (64 Mi characters): beyond it the file is malformed."""

_WS = re.compile(r"[ \t\n\r]*")
_GAP = re.compile(r"[ \t\n\r,]*")


class _Bad(Exception):
    """What is wrong with a file; `read_events` adds the file name and position."""


class _Stream:
    """Characters of a (possibly gzipped) text file, a chunk at a time, with a cursor."""

    def __init__(self, f: TextIO, chunk: int) -> None:
        self.f, self.chunk = f, chunk
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
                if len(self.buf) - self.pos > MAX_EVENT:
                    raise _Bad(f"a JSON value longer than {MAX_EVENT >> 20} Mi characters "
                               f"({e.msg}): malformed") from None
                last = (e.msg, e.pos)
                self.more(grow)
                grow *= 2  # one huge value: double the reads, not a read per retry
                continue
            if end == len(self.buf) and not isinstance(v, dict | list | str) and not self.eof:
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


def read_events(path: str | Path, *, keep_dims: Callable[[str], bool] = gemm_like,
                chunk: int = CHUNK, header_only: bool = False) -> Events:
    """Stream one trace file into columns. Bad files raise a one-line `BertscopeError` that
    names the file and what is wrong (empty, truncated, not JSON, not a trace).

    `header_only` stops at the traceEvents key (to find a file's rank cheaply)."""
    p = Path(path)
    if not p.is_file():
        raise BertscopeError(f"{p}: no such trace file")
    cols = _Columns(keep_dims)
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
    except json.JSONDecodeError as e:
        at = (s.offset if s is not None else 0) + e.pos
        raise BertscopeError(f"{p}: not valid JSON: {e.msg} at character {at:,} "
                             f"({_count(cols)})") from None
    except (_Bad, ValueError) as e:
        raise BertscopeError(f"{p}: {e} ({_count(cols)})") from None
    if not header_only and not len(cols.kind):
        what = "no events" if not cols.seen else (
            f"{cols.seen:,} events, none of them CPU ops, annotations, kernels or copies")
        raise BertscopeError(f"{p}: the trace has {what}")
    return cols.finish(p, header)


def _count(cols: _Columns) -> str:
    return f"after {cols.seen:,} events" if cols.seen else "before the first event"


def _parse(s: _Stream, cols: _Columns, header: dict[str, Any], header_only: bool) -> None:
    decode = json.JSONDecoder().raw_decode
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
            header[key] = s.value(decode)
    if not found:
        keys = ", ".join(sorted(header)[:6]) or "none"
        raise _Bad(f"not a trace: no traceEvents array (top-level keys: {keys})")


def _events(s: _Stream, cols: _Columns, decode: Callable[[str, int], tuple[Any, int]]) -> None:
    add = cols.fast_adder()
    gap = _GAP.match
    seen = cols.seen
    collecting = gc.isenabled()
    gc.disable()  # events are freed at once; no cycles to find, only time to lose
    try:
        while True:
            # fast path: decode events straight from the buffer until its end
            buf, pos = s.buf, s.pos
            end = len(buf)
            while True:
                pos = gap(buf, pos).end()  # type: ignore[union-attr]
                if pos >= end or buf[pos] != "{":
                    break
                try:
                    v, pos = decode(buf, pos)
                except json.JSONDecodeError:
                    break
                seen += 1
                add(v)
            s.pos = pos
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
