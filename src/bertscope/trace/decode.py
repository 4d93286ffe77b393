"""Decoded trace events -> typed columns: the per-event work of the trace reader.

Each event dict is reduced at once to a few numbers appended to typed `array`s (8 bytes a
field, no Python object per event) and then dropped. One decoder (`Columns.adder`) reads
every field, as a closure over local names for speed; an event it cannot take as it is
(another phase than "X", a category in other case, a number written as a string, ...) goes
to `_odd`, which rewrites it into the plain form from the declared fields (`events.py`) and
hands it back, so each field is decoded in one place.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.bounded import check_value
from bertscope.errors import MAX_SIZE, BertscopeError
from bertscope.trace.events import (
    CANONICAL_CATEGORY,
    CATEGORIES,
    COLUMNS,
    CORRELATION,
    DEVICE,
    DUR,
    EVENT_ARGS,
    EVENT_FIELDS,
    FLOW_COLUMNS,
    GROUP_SIZE,
    INPUT_DIMS,
    INPUT_TYPE,
    MEMORY_COLUMNS,
    MEMORY_DEVICE,
    MEMORY_NAME,
    MEMORY_TOTAL,
    MSG_DTYPE,
    MSG_IN,
    MSG_OUT,
    SEQUENCE,
    STREAM,
    TS,
    Events,
    Kind,
    as_id,
    as_time,
    kind_of,
)

_FLOW = "ac2g"
"""Category of Kineto's launch -> kernel flow events."""
_FWDBWD = "fwdbwd"
"""Category of Kineto's forward op -> backward node flow events."""
_MODULE = "nn.Module: "
"""Name prefix of the python_function events kept (module calls)."""
_MAX_SPELLINGS = 1024
"""Category spellings remembered (a trace has a handful; this bounds a malformed one)."""


class Columns:
    """Typed arrays that events are appended to while the file streams by."""

    def __init__(self, keep_dims: Callable[[str], bool]) -> None:
        self.cols = {c: array(code) for c, (code, _) in COLUMNS.items()}
        self.flows = tuple(array(code) for code, _ in FLOW_COLUMNS)
        self.links = tuple(array(code) for code, _ in FLOW_COLUMNS)
        self.memory = tuple(array(code) for code, _ in MEMORY_COLUMNS)
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.ids: list[Any] = []
        self._id_ids: dict[Any, int] = {}
        self.dims: dict[int, list[Any]] = {}
        self.types: dict[int, list[Any]] = {}
        self.messages: dict[int, tuple[int, int, str, int]] = {}
        self._gemm_like: dict[int, bool] = {}
        self._shapes: dict[tuple[Any, ...], list[Any]] = {}
        self._keep_dims = keep_dims
        self._open: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        self._kinds: dict[Any, int] = dict(CATEGORIES)
        """Category as spelled -> kind, 0 for a dropped one: `CATEGORIES`, and the other
        spellings met so far (`Kernel`, `python_function`), so the fast path knows them."""
        self.seen = 0
        """Events decoded (kept or not); the reader counts them."""

    def __len__(self) -> int:
        return len(self.cols["kind"])

    def _intern_shapes(self, shapes: list[Any]) -> list[Any]:
        """One list object per distinct input-shapes value (GEMM shapes repeat a lot)."""
        try:
            key = tuple(tuple(x) if type(x) is list else x for x in shapes)
            known = self._shapes.get(key)
            if known is None:
                _check_sizes(shapes)
                known = self._shapes[key] = shapes
            return known
        except TypeError:  # unhashable odd content: keep as is
            _check_sizes(shapes)
            return shapes

    def _intern_name(self, name: str) -> int:
        nid = self._name_ids[name] = len(self.names)
        self.names.append(name)
        self._gemm_like[nid] = self._keep_dims(name)
        return nid

    def _intern_id(self, v: Any) -> int:
        if v is not None and type(v) is not int and type(v) is not str:
            raise ValueError(f"not a trace: a lane id (pid, tid, device or stream) is a "
                             f"{type(v).__name__}, {str(v)[:40]!r}; expected a number or string")
        i = self._id_ids.get(v)
        if i is None:
            i = self._id_ids[v] = len(self.ids)
            self.ids.append(v)
        return i

    def adder(self) -> Callable[[Any], None]:
        """`add(event)`: reduce one decoded event to its columns (or drop it). A closure over
        local names: the per-event cost of the reader. Events it cannot take as they are
        go to `_odd`, which checks and rewrites them and calls `add` again."""
        kind_of_cat = self._kinds.get
        name_id, new_name = self._name_ids.get, self._intern_name
        lane_id, new_lane = self._id_ids.get, self._intern_id
        gemm_like = self._gemm_like
        dims, types = self.dims, self.types
        c = self.cols
        kinds = c["kind"]
        k_app, n_app, p_app, t_app = (kinds.append, c["name"].append, c["pid"].append,
                                      c["tid"].append)
        ts_app, d_app, c_app, s_app, e_app = (c["ts"].append, c["dur"].append, c["corr"].append,
                                              c["seq"].append, c["numel"].append)
        sinks = {cat: tuple(a.append for a in arrays)  # (start ts, start id, end ts, end id)
                 for cat, arrays in ((_FLOW, self.flows), (_FWDBWD, self.links))}
        intern = self._intern_shapes
        odd = self._odd
        num = (float, int)
        empty: dict[str, Any] = {}
        cpu, runtime, device = int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.KERNEL)
        module = int(Kind.MODULE)
        ts_key, dur_key, dur_none = TS.key, DUR.key, DUR.default
        corr_key, corr_none = CORRELATION.key, CORRELATION.default
        seq_key, seq_none = SEQUENCE.key, SEQUENCE.default
        dims_key, device_key, stream_key = INPUT_DIMS.key, DEVICE.key, STREAM.key
        types_key = INPUT_TYPE.key
        msg_key = MSG_IN.key
        message = self._message

        def add(e: Any) -> None:
            if type(e) is not dict:
                return odd(e, add)
            ph = e.get("ph")
            if ph != "X":
                if ph == "s" or ph == "f":
                    fid, ts = e.get("id"), e.get(ts_key)
                    if type(fid) is not int or type(ts) not in num:
                        return odd(e, add)
                    sink = sinks.get(e.get("cat"))  # type: ignore[arg-type]
                    if sink is not None:
                        at = 0 if ph == "s" else 2
                        sink[at](ts)
                        sink[at + 1](fid)
                    return None
                return odd(e, add)
            kind = kind_of_cat(e.get("cat"))
            if not kind:
                return None if kind == 0 else odd(e, add)  # a dropped category, or new
            name, ts, dur = e.get("name"), e.get(ts_key), e.get(dur_key, dur_none)
            if kind == module and (type(name) is not str or not name.startswith(_MODULE)):
                return None  # a Python stack frame, not a module call
            args = e.get("args", empty)
            if type(args) is not dict or type(ts) not in num or type(dur) not in num:
                return odd(e, add)
            if type(name) is not str:
                return odd(e, add)
            nid = name_id(name)
            if nid is None:
                nid = new_name(name)
            corr, seq = corr_none, seq_none
            numel = 0
            if device <= kind < module:
                # the device and stream are in args; pid/tid are display lanes in some writers
                lane, sub = args.get(device_key), args.get(stream_key)
                if lane is None:
                    lane = e.get("pid")
                if sub is None:
                    sub = e.get("tid")
                corr = args.get(corr_key, corr_none)
                if msg_key in args:  # a collective that says its message sizes
                    message(len(kinds), args)
            else:
                lane, sub = e.get("pid"), e.get("tid")
                if kind == cpu:
                    seq = args.get(seq_key, seq_none)
                    shapes = args.get(dims_key)
                    if type(shapes) is list and shapes:
                        if gemm_like[nid]:
                            dims[len(kinds)] = intern(shapes)
                            dtypes = args.get(types_key)
                            if type(dtypes) is list:
                                types[len(kinds)] = intern(dtypes)
                        numel = _numel(shapes[0])
                elif kind == runtime:
                    corr = args.get(corr_key, corr_none)
            if type(corr) is not int or type(seq) is not int:
                return odd(e, add)
            try:
                pi = lane_id(lane)
                ti = lane_id(sub)
            except TypeError:  # unhashable: a list or an object
                pi = ti = None
            if pi is None:
                pi = new_lane(lane)
            if ti is None:
                ti = new_lane(sub)
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

    def _message(self, at: int, args: dict[str, Any]) -> None:
        """Keep a collective kernel's message args (`MESSAGE_ARGS`) for event `at`; numbers
        written as strings are read, a message without a readable size is not kept."""
        n_in, n_out = as_id(args.get(MSG_IN.key)), as_id(args.get(MSG_OUT.key))
        if n_in < 0:
            return
        dtype = args.get(MSG_DTYPE.key)
        self.messages[at] = (n_in, n_out, dtype if isinstance(dtype, str) else "",
                             as_id(args.get(GROUP_SIZE.key)))

    def _odd(self, e: Any, add: Callable[[Any], None]) -> None:
        """An event the fast path cannot take as it is: checked, rewritten into the plain
        form (which `add` always takes) and added, or dropped."""
        if not isinstance(e, dict):
            raise ValueError("not a trace: an event is not a JSON object")
        ph = e.get("ph")
        if ph == "X":
            cat = e.get("cat")
            if type(cat) is str and len(self._kinds) < _MAX_SPELLINGS:
                self._kinds[cat] = kind_of(cat)
            plain = _plain(e, e.get(DUR.key, DUR.default))
            if plain is not None:
                add(plain)
        elif ph in ("s", "f"):
            fid = as_id(e.get("id"))
            if e.get("cat") in (_FLOW, _FWDBWD) and fid >= 0:
                add({"ph": ph, "cat": e["cat"], "id": fid, TS.key: as_time(e.get(TS.key))})
        elif ph in ("i", "I") and e.get("name") == MEMORY_NAME:
            args = e.get("args")
            if isinstance(args, dict):
                for a, v in zip(self.memory, (as_time(e.get(TS.key)),
                                              as_id(args.get(MEMORY_DEVICE.key)),
                                              as_id(args.get(MEMORY_TOTAL.key))), strict=True):
                    a.append(v)
        elif ph == "B":
            self._open.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        elif ph == "E":
            stack = self._open.get((e.get("pid"), e.get("tid")))
            if stack:
                b = stack.pop()
                plain = _plain(b, as_time(e.get(TS.key)) - as_time(b.get(TS.key)))
                if plain is not None:
                    add(plain)

    def finish(self, path: Path, header: dict[str, Any]) -> Events:
        """The columns as numpy arrays (no copy of the data)."""
        def np_(a: array, dtype: Any) -> np.ndarray:
            return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)

        cols = {c: np_(self.cols[c], dtype) for c, (_, dtype) in COLUMNS.items()}
        flows = tuple(np_(a, dtype) for a, (_, dtype) in zip(self.flows, FLOW_COLUMNS,
                                                               strict=True))
        links = tuple(np_(a, dtype) for a, (_, dtype) in zip(self.links, FLOW_COLUMNS,
                                                               strict=True))
        memory = tuple(np_(a, dtype) for a, (_, dtype) in zip(self.memory, MEMORY_COLUMNS,
                                                                strict=True))
        _check_times(path, cols["ts"], cols["dur"], flows[0], flows[2], links[0], links[2],
                     memory[0])
        return Events(path=path, **cols, names=self.names, ids=self.ids, dims=self.dims,
                      types=self.types, messages=self.messages, header=header, flows=flows,  # type: ignore[arg-type]
                      links=links,  # type: ignore[arg-type]
                      memory=memory)  # type: ignore[arg-type]


MAX_TIME_US = 1e18
"""Largest |timestamp| or duration accepted, in us (about 31,700 years; epoch-based
timestamps in us are about 1.7e15)."""


def _check_times(path: Path, *columns: np.ndarray) -> None:
    """Refuse times no real trace has: NaN, infinite, beyond `MAX_TIME_US`, or (durations, the
    second column) negative, in one line naming the file and how many events."""
    ts, dur = columns[0], columns[1]
    for what, col in (("timestamp", np.concatenate([ts, *columns[2:]])), ("duration", dur)):
        bad = ~np.isfinite(col) | (np.abs(col) > MAX_TIME_US)
        if bad.any():
            raise BertscopeError(f"{path}: {int(bad.sum()):,} event(s) have a {what} that is "
                                 f"NaN, infinite or beyond {MAX_TIME_US:.0e} us; not a "
                                 f"trace a profiler wrote")
    negative = dur < 0
    if negative.any():
        raise BertscopeError(f"{path}: {int(negative.sum()):,} event(s) have a negative "
                             f"duration (first: {float(dur[negative][0]):g} us); not a trace "
                             f"a profiler wrote")


def _plain(e: dict[str, Any], dur: Any) -> dict[str, Any] | None:
    """A complete event of a kept kind in the form the fast path takes: canonical category,
    string name, every declared field parsed (times as floats, ids as ints); None to drop."""
    kind = kind_of(e.get("cat"))
    if not kind:
        return None
    args = e.get("args")
    if not isinstance(args, dict):
        args = {}
    name = e.get("name")
    plain = {f.key: f.parse(dur if f is DUR else e.get(f.key, f.default)) for f in EVENT_FIELDS}
    plain.update(ph="X", cat=CANONICAL_CATEGORY[kind],
                 name=name if isinstance(name, str) else str(check_value(name, "an event's name")),
                 args={a.key: a.parse(args.get(a.key, a.default)) for a in EVENT_ARGS})
    return plain


def _check_sizes(shapes: list[Any]) -> None:
    """Refuse an Input Dims value nested deeper than `bounded.MAX_DEPTH`, with a negative
    size or a tensor of more than `MAX_SIZE` elements (nested lists, as TensorList arguments
    record them, are checked each; walked with a stack, not recursion)."""
    check_value(shapes, "Input Dims")
    todo = [x for x in shapes if type(x) is list]
    while todo:
        x = todo.pop()
        n = 1
        for d in x:
            if type(d) is list:
                todo.append(d)
            elif type(d) in (int, float):
                if not 0 <= d <= MAX_SIZE:
                    raise ValueError(f"Input Dims size {d:g} is out of range [0, 2^40]")
                n *= d
        if n > MAX_SIZE:
            raise ValueError(f"Input Dims {str(x)[:80]} hold {n:.3g} elements, more than "
                             f"bertscope's limit of 2^40; not a shape a profiler wrote")


def _numel(shape: Any) -> int:
    if not isinstance(shape, list) or not shape:
        return 0
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return 0
        n *= d
    return n


__all__ = ["Columns"]
