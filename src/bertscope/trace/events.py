"""What the trace reader keeps of an event, declared once: the event kinds (by category), the
fields it reads (top-level and in `args`, in the style of Holistic Trace Analysis' declared
event args), and the typed columns they end up in (`Events`).

`decode.py` fills the columns from decoded events; `reader.py` streams the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np


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
    MODULE = 7
    """A module call (`nn.Module: BertLayer_3`, a python_function event): a scope of the
    module path. Other python_function events (stack frames) are dropped."""


CPU_KINDS = (Kind.CPU_OP, Kind.ANNOTATION, Kind.RUNTIME, Kind.MODULE)
DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

CATEGORIES: dict[str, int] = {
    # Kineto (torch >= 1.8) spellings, then the older profiler's and other tools'
    "cpu_op": Kind.CPU_OP, "operator": Kind.CPU_OP,
    "user_annotation": Kind.ANNOTATION,
    "python_function": Kind.MODULE,
    "cuda_runtime": Kind.RUNTIME, "cuda_driver": Kind.RUNTIME, "runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME, "cuda runtime": Kind.RUNTIME, "hip runtime": Kind.RUNTIME,
    "kernel": Kind.KERNEL, "gpu kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY, "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET, "memset": Kind.MEMSET,
}
"""Event category (`cat`, matched without case) -> kind; other categories are dropped."""

CANONICAL_CATEGORY: dict[int, str] = {k: c for c, k in reversed(CATEGORIES.items())}
"""Kind -> its first spelling in `CATEGORIES` (what an odd event's category is rewritten to)."""


def kind_of(cat: Any) -> int:
    """Kind code of an event category (0 = not kept)."""
    if not isinstance(cat, str):
        return 0
    return CATEGORIES.get(cat.lower(), 0)


# --- the fields read ---------------------------------------------------------------------


def as_time(v: Any) -> float:
    """A time or duration (us) as a float; a `ValueError` for a non-number."""
    if isinstance(v, float | int):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"not a trace: an event has a non-numeric time {v!r}") from None


def as_id(v: Any) -> int:
    """An id or sequence number as an int; -1 when absent or not a number."""
    if type(v) is int:
        return v
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return -1


def as_is(v: Any) -> Any:
    """A field kept as written (lanes, shapes: the decoder checks their types)."""
    return v


@dataclass(frozen=True, slots=True)
class Arg:
    """One field the reader reads: its key, the value it has when absent, and how an odd
    value (a number written as a string, a bool) is made into the type the decoder's fast
    path expects."""

    key: str
    """Its key in the event (top-level fields) or in the event's `args`."""
    default: Any
    parse: Callable[[Any], Any]
    doc: str = ""


TS = Arg("ts", None, as_time, "start, us")
DUR = Arg("dur", 0.0, as_time, "duration, us ('B'/'E' pairs: E.ts - B.ts)")
PID = Arg("pid", None, as_is, "CPU events: the process lane; device events: a display lane")
TID = Arg("tid", None, as_is, "CPU events: the thread lane; device events: a display lane")
EVENT_FIELDS = (TS, DUR, PID, TID)
"""Top-level fields read besides `ph`, `cat` and `name`."""

CORRELATION = Arg("correlation", -1, as_id,
                  "runtime calls and device events: links a launch to what it launched")
SEQUENCE = Arg("Sequence number", -1, as_id,
               "CPU ops: the autograd sequence number (backward node -> forward op)")
INPUT_DIMS = Arg("Input Dims", None, as_is,
                 "CPU ops: input shapes; the first one's element count, all for GEMM ops")
INPUT_TYPE = Arg("Input type", None, as_is,
                 "CPU ops: input dtypes (kept with Input Dims: bytes moved, GEMM format)")
DEVICE = Arg("device", None, as_is, "device events: the device lane (else pid)")
STREAM = Arg("stream", None, as_is, "device events: the stream lane (else tid)")
MSG_IN = Arg("In msg nelems", None, as_is,
             "collective kernels (torch >= 2.1, NCCL/RCCL): elements of the input message")
MSG_OUT = Arg("Out msg nelems", None, as_is, "collective kernels: elements of the output")
MSG_DTYPE = Arg("dtype", None, as_is, "collective kernels: the messages' element type "
                                      "(Float, BFloat16, ...)")
GROUP_SIZE = Arg("Group size", None, as_is, "collective kernels: ranks in the process group")
MESSAGE_ARGS = (MSG_IN, MSG_OUT, MSG_DTYPE, GROUP_SIZE)
"""What a collective kernel says of its messages (HTA's `nccl::` args); kept in
`Events.messages`."""
EVENT_ARGS = (CORRELATION, SEQUENCE, INPUT_DIMS, INPUT_TYPE, DEVICE, STREAM, *MESSAGE_ARGS)
"""The `args` entries read; every other arg is dropped."""

DTYPE_BYTES: dict[str, int] = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16,
    "ComplexHalf": 4, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8,
}
"""Bytes per element of the c10 scalar type names a trace's `dtype` arg uses."""


def message_bytes(nelems: int, dtype: str) -> float:
    """Bytes of a message of `nelems` elements of `dtype` (NaN for a dtype not in
    `DTYPE_BYTES`)."""
    size = DTYPE_BYTES.get(dtype)
    return float(nelems * size) if size is not None else float("nan")


# --- the columns -------------------------------------------------------------------------

COLUMNS: dict[str, tuple[str, type[np.generic]]] = {
    "kind": ("B", np.uint8), "name": ("i", np.int32), "pid": ("i", np.int32),
    "tid": ("i", np.int32), "ts": ("d", np.float64), "dur": ("d", np.float64),
    "corr": ("q", np.int64), "seq": ("q", np.int64), "numel": ("q", np.int64),
}
"""`Events` column -> (the `array` typecode it is appended to, its numpy dtype)."""
FLOW_COLUMNS: tuple[tuple[str, type[np.generic]], ...] = (
    ("d", np.float64), ("q", np.int64), ("d", np.float64), ("q", np.int64))
"""Typecode and dtype of `Events.flows` (start ts, start id, end ts, end id)."""
MEMORY_NAME = "[memory]"
"""Name of the allocator's instant events (Kineto, `profile_memory=True`)."""
MEMORY_DEVICE = Arg("Device Id", -1, as_id, "[memory] instants: the device (-1: the CPU)")
MEMORY_TOTAL = Arg("Total Allocated", 0, as_id,
                   "[memory] instants: bytes allocated on that device after the event")
MEMORY_COLUMNS: tuple[tuple[str, type[np.generic]], ...] = (
    ("d", np.float64), ("q", np.int64), ("q", np.int64))
"""Typecode and dtype of `Events.memory` (ts, device id, total allocated bytes)."""


def _no_flows() -> tuple[np.ndarray, ...]:
    return tuple(np.zeros(0, dtype) for _, dtype in FLOW_COLUMNS)


def _no_memory() -> tuple[np.ndarray, ...]:
    return tuple(np.zeros(0, dtype) for _, dtype in MEMORY_COLUMNS)


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
    """Input shapes of GEMM-like CPU ops (of every op the reader's `keep_dims` keeps), by
    event index."""
    types: dict[int, list[Any]] = field(default_factory=dict)
    """Input dtypes ("float", "c10::BFloat16", "Scalar", ...) of the same ops, by event index."""
    messages: dict[int, tuple[int, int, str, int]] = field(default_factory=dict)
    """Collective kernels that say their messages (`MESSAGE_ARGS`), by event index: input
    and output elements, dtype ("" when absent), group size (-1 when absent)."""
    flows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(
        default_factory=_no_flows)  # type: ignore[arg-type]
    """`ac2g` flows (start ts, start id, end ts, end id): launch -> kernel links, used where
    runtime calls or kernels lack a `correlation` arg."""
    links: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(
        default_factory=_no_flows)  # type: ignore[arg-type]
    """`fwdbwd` flows, same layout: forward op -> its backward node, used where CPU ops lack
    a `Sequence number` arg."""
    header: dict[str, Any] = field(default_factory=dict)
    """Top-level keys other than traceEvents (schemaVersion, distributedInfo, ...)."""
    memory: tuple[np.ndarray, np.ndarray, np.ndarray] = field(
        default_factory=_no_memory)  # type: ignore[arg-type]
    """`[memory]` instants (ts us, device id, total allocated bytes), in file order."""

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


__all__ = ["CANONICAL_CATEGORY", "CATEGORIES", "COLUMNS", "CORRELATION", "CPU_KINDS", "DEVICE",
           "DEVICE_KINDS", "DTYPE_BYTES", "DUR", "EVENT_ARGS", "EVENT_FIELDS", "FLOW_COLUMNS",
           "GROUP_SIZE", "INPUT_DIMS", "INPUT_TYPE", "MEMORY_COLUMNS", "MEMORY_DEVICE",
           "MEMORY_NAME", "MEMORY_TOTAL", "MESSAGE_ARGS", "MSG_DTYPE", "MSG_IN", "MSG_OUT", "PID",
           "SEQUENCE", "STREAM", "TID", "TS", "Arg", "Events", "Kind", "as_id", "as_is",
           "as_time", "kind_of", "message_bytes"]
