"""A predicted iteration as a Chrome/Perfetto trace: open it in ui.perfetto.dev or read it back
with `bertscope trace`.

Rows run one after another on one stream (the prediction's assumption), so each op is a
slice starting where the previous one ended, lasting its predicted time, with its category,
sublayer, phase, FLOPs, bytes and bound as args. The slices are written the way a profiled
bertscope run records them, so the trace reader attributes them the same way: the iteration
in a `bertscope.iter::0` scope, each run of one phase in a `bertscope.phase::<phase>` scope,
forward and recompute ops in `bertscope::<layer>::<sublayer>` scopes, and each op named by an
ATen op of its category (`OP_NAMES`) so the pattern table classifies it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write
from bertscope.optable import OpTable
from bertscope.perf.predict import Prediction
from bertscope.taxonomy import Category, Phase

C = Category
OP_NAMES: dict[Category, str] = {
    C.GEMM: "aten::mm", C.BATCHED_GEMM: "aten::bmm", C.SOFTMAX: "aten::_softmax",
    C.LAYERNORM: "aten::native_layer_norm", C.DROPOUT: "aten::native_dropout",
    C.ACTIVATION: "aten::gelu", C.ELEMENTWISE: "aten::add", C.EMBEDDING: "aten::embedding",
    C.REDUCTION: "aten::sum", C.LOSS: "aten::nll_loss", C.OPTIMIZER: "aten::_foreach_add_",
    C.DATA_MOVEMENT: "aten::copy_"}
"""The ATen op a predicted row of each category is named after (the reader's patterns map it
back to the category)."""
PID, TID = 1, 1


def _slice(name: str, cat: str, ts: float, dur: float, args: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
                         "pid": PID, "tid": TID}
    if args:
        e["args"] = args
    return e


def timeline(table: OpTable) -> dict[str, Any]:
    """The predicted table (`predict(...)`) as a Chrome trace document."""
    cols = table.columns
    if "bound" not in cols:
        raise BertscopeError("the table has no predictions; run predict() first")
    t = np.asarray(cols["time_s"], dtype=float) * 1e6  # us
    if not np.all(np.isfinite(t)):
        raise BertscopeError("a row has no predicted time (no link figure for a communication "
                             "row); a timeline needs every row timed")
    start = np.concatenate([[0.0], np.cumsum(t)[:-1]])
    events: list[dict[str, Any]] = []
    phases = [Phase(p) for p in cols["phase"]]
    i, n = 0, len(t)
    while i < n:  # one phase scope per run of rows in the same phase
        j = i
        while j < n and phases[j] is phases[i]:
            j += 1
        events.append(_slice(f"bertscope.phase::{phases[i].value}", "user_annotation",
                             start[i], start[j - 1] + t[j - 1] - start[i]))
        for r in range(i, j):
            cat = Category(cols["category"][r])
            args = {"bertscope.name": str(cols["name"][r]), "category": cat.value,
                    "sublayer": str(cols["sublayer"][r]), "phase": phases[r].value,
                    "flops": float(cols["flops"][r]),
                    "bytes": float(cols["bytes_read"][r] + cols["bytes_written"][r]),
                    "bound": str(cols["bound"][r]), "count": int(cols["count"][r])}
            if phases[r].family.value == "forward":
                events.append(_slice(f"bertscope::{int(cols['layer'][r])}::"
                                     f"{cols['sublayer'][r]}", "user_annotation", start[r], t[r]))
            events.append(_slice(OP_NAMES.get(cat, "aten::add"), "cpu_op", start[r], t[r],
                                 args))
        i = j
    total = float(start[-1] + t[-1]) if n else 0.0
    events.insert(0, _slice("bertscope.iter::0", "user_annotation", 0.0, total))
    events.insert(0, {"ph": "M", "name": "process_name", "pid": PID, "tid": TID,
                      "args": {"name": "predicted: compute stream"}})
    pred = Prediction.on(table)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "bertscope": {"producer": "predicted", "device": pred and pred.device,
                          "time_s": pred and pred.time_s}}


def write_timeline(table: OpTable, path: str | Path) -> Path:
    """Write `timeline(table)` to `path` (JSON) atomically."""
    p = Path(path)
    atomic_write(p, json.dumps(timeline(table)).encode())
    return p


__all__ = ["OP_NAMES", "timeline", "write_timeline"]
