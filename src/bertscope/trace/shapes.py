"""Calibration points from a trace recorded with shapes (`record_shapes=True`).

The trace reader already links each kernel to the CPU op that launched it (correlation id or
`ac2g` flow, `breakdown.launch_keys`) to give kernels their layer, sublayer and phase. Here
the link also carries the launching op's recorded inputs ("Input Dims", "Input type"):

- **GEMM points**: per attributed GEMM op row (aten::mm, addmm, bmm, baddbmm, matmul,
  linear, and the same ops inside backward nodes; `gemm_ops.py` sizes them), its
  (M, N, K, batch), FLOPs 2 M N K batch per launch, number format from the input dtype
  (fp32 becomes tf32 where a kernel name says tf32), and the time of every kernel it
  launched. On a CPU-only trace the op itself carries the time.
- **Memory points**: per attributed memory-bound op row, its category and phase, the bytes it
  moves (`op_bytes`) and the time of its kernels (CPU-only: the op's time).

Times and counts are per iteration (the trace's total over its iterations, divided by
them), as `read_trace` reports them. Torch-free; the fits are `perf.fit`'s, applied by
`bertscope.studies.trace_calibration`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Classifier, Phase
from bertscope.trace.attribute import numel
from bertscope.trace.breakdown import _Place, _Placer, _walk, kernel_place, launch_keys
from bertscope.trace.events import Events, Kind
from bertscope.trace.reader import read_events

HOW_TO_RECORD = ("record one with torch.profiler.profile(record_shapes=True) (or "
                 "`bertscope profile --trace FILE`)")
"""The advice a trace without shapes gets."""

DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8,
    "int": 4, "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8,
}
"""Bytes per element of the dtypes Kineto writes in "Input type" (c10 type names)."""

DTYPE_FORMAT: dict[str, str] = {
    "float": "fp32", "double": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
}
"""GEMM number format of an input dtype (double GEMMs are counted at the fp32 peak)."""


def gemm_format(types: list[Any], kernels: list[str]) -> str:
    """Number format of a GEMM op from its input dtypes (the first floating one), tf32 where
    it is fp32 and one of its kernels' names says tf32 (cuBLAS's `..._tf32f32_...`)."""
    fmt = next((DTYPE_FORMAT[t] for t in types if isinstance(t, str) and t in DTYPE_FORMAT),
               "fp32")
    if fmt == "fp32" and any("tf32" in k.lower() for k in kernels):
        return "tf32"
    return fmt


def op_bytes(shapes: list[Any], types: list[Any], name: str = "") -> float:
    """Bytes a memory-bound op moves, from its recorded inputs: every tensor input read once
    (elements x dtype size) and one output the size of its largest input written (what an
    elementwise op, a norm, softmax or dropout writes; ops whose output differs, such as
    reductions, are approximated). An embedding lookup (`name` ...::embedding, inputs
    weight [V, H] and indices) reads its indices and the rows they pick and writes those
    rows. Inputs of unknown dtype count 4 bytes an element; 0 without shapes."""
    if name.endswith("::embedding") and len(shapes) >= 2 and shapes[0] and shapes[1]:
        row = float(shapes[0][-1]) * DTYPE_BYTES.get(str(types[0]) if types else "", 4)
        picked = float(numel(shapes[1]))
        return picked * DTYPE_BYTES.get(str(types[1]) if len(types) > 1 else "", 8) \
            + 2 * picked * row
    sizes = []
    for i, s in enumerate(shapes):
        if isinstance(s, list) and s:  # scalars and scalar lists record []
            t = types[i] if i < len(types) else None
            sizes.append(float(numel(s)) * DTYPE_BYTES.get(t if isinstance(t, str) else "", 4))
    return sum(sizes) + max(sizes) if sizes else 0.0


VIEW_NOTE = "views:"
"""How the pattern table's note on view ops (`data/patterns.toml`: view, reshape, permute,
...) starts: metadata only, they move no bytes."""


class _ShapePlacer(_Placer):
    """The trace reader's placer, also summing each row's bytes (`op_bytes`; 0 for views) and
    noting its input dtypes, per instance."""

    def __init__(self, classify: Classifier, n: int) -> None:
        super().__init__(classify, n)
        self.bytes: dict[int, float] = {}
        self.types: dict[int, list[Any]] = {}

    def _add(self, evt: Any, phase: Phase, where: Any) -> tuple[tuple[Any, ...], float]:
        key, t = super()._add(evt, phase, where)
        kid = self.key_ids[key]
        types = list(getattr(evt, "input_types", None) or [])
        hit = self.classify.match(evt.name)
        if hit is None or not hit.note.startswith(VIEW_NOTE):
            self.bytes[kid] = self.bytes.get(kid, 0.0) + op_bytes(list(evt.input_shapes), types,
                                                               evt.name)
        self.types.setdefault(kid, types)
        return key, t


@dataclass
class TracePoints:
    """What one trace offers a calibration: GEMM and memory-bound points (records, per
    iteration) and where they came from."""

    path: Path
    sha256: str
    device: str
    """The device the trace ran on: `deviceProperties` names, else "cpu" (a CPU-only trace)."""
    time_source: str
    """"device" (kernel time) or "cpu" (CPU op time: no device events)."""
    iterations: int
    gemm: list[dict[str, Any]] = field(default_factory=list)
    """Per GEMM row: name, layer, sublayer, phase, category, m, n, k, batch, count, flops,
    format, time_s, kernels (launches timed: kernels, or CPU ops on a CPU trace)."""
    memory: list[dict[str, Any]] = field(default_factory=list)
    """Per memory-bound row: name, category, phase, bytes, count, time_s, kernels."""
    unsized_gemm_s: float = 0.0
    """GEMM time per iteration whose launching op had no shape the registry reads."""

    @property
    def gemm_s(self) -> float:
        """GEMM time per iteration in the points."""
        return sum(p["time_s"] for p in self.gemm)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (streamed)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def device_name(header: dict[str, Any]) -> str:
    """The device names in a trace's `deviceProperties` (distinct, joined by " + "), else
    "cpu"."""
    props = header.get("deviceProperties")
    names = []
    for p in props if isinstance(props, list) else []:
        n = p.get("name") if isinstance(p, dict) else None
        if isinstance(n, str) and n.strip() and n.strip() not in names:
            names.append(n.strip())
    return " + ".join(names) if names else "cpu"


def trace_points(path: str | Path, classify: Classifier | None = None) -> TracePoints:
    """GEMM and memory-bound calibration points of one trace file; a trace without shapes
    raises a one-line error saying how to record one."""
    p = Path(path)
    classify = classify or Classifier()
    ev = read_events(p, keep_dims=lambda _name: True)
    if not ev.dims:
        raise BertscopeError(f"{p}: the trace has no input shapes (no \"Input Dims\" on its "
                             f"CPU ops); {HOW_TO_RECORD}")
    w = _walk(ev, classify, _ShapePlacer)
    placer = w.placer
    assert isinstance(placer, _ShapePlacer)
    keys = list(placer.key_ids)
    its = w.iterations
    device = bool(np.isin(ev.kind, np.array([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET],
                                            dtype=np.uint8)).any())
    groups = _device_groups(ev, w, classify, keys) if device else _cpu_groups(placer, keys)
    out = TracePoints(path=p, sha256=file_sha256(p), device=device_name(ev.header),
                      time_source="device" if device else "cpu", iterations=its)
    for (kid, cat), (time_us, kernels, names) in groups.items():
        name, layer, sub, _cat, phase, m, n, k, b, _el, _module = keys[kid]
        launches = placer.rows[keys[kid]][0]
        base = {"name": name, "layer": layer, "sublayer": sub.value, "phase": phase.value,
                "category": cat.value, "count": launches / its, "time_s": time_us * 1e-6 / its,
                "kernels": kernels}
        if cat.is_gemm:
            if m <= 0 or n <= 0 or k <= 0:
                out.unsized_gemm_s += base["time_s"]
                continue
            out.gemm.append(base | {"m": m, "n": n, "k": k, "batch": max(b, 1),
                                    "flops": 2.0 * m * n * k * max(b, 1) * launches / its,
                                    "format": gemm_format(placer.types.get(kid, []), names)})
        elif cat is not Category.COMMUNICATION and phase is not Phase.COMMUNICATION:
            out.memory.append(base | {"bytes": placer.bytes.get(kid, 0.0) / its})
    return out


Groups = dict[tuple[int, Category], tuple[float, int, list[str]]]
"""(row key index, category) -> (time us over the trace, kernels, kernel names)."""


def _device_groups(ev: Events, w: Any, classify: Classifier, keys: list[Any]) -> Groups:
    """Kernel time per launching row and kernel category (the category `kernel_place` gives
    the kernel: the launcher's, unless that is generic)."""
    dev, kid = launch_keys(ev, w)
    on = kid >= 0
    dev, kid = dev[on], kid[on]
    pair = ev.name[dev].astype(np.int64) * (len(keys) + 1) + kid
    uniq, first, inv = np.unique(pair, return_index=True, return_inverse=True)
    time_us = np.bincount(inv, weights=ev.dur[dev], minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    memory_op = (ev.kind[dev[first]] != Kind.KERNEL).tolist()
    out: dict[tuple[int, Category], list[Any]] = {}
    user = set(classify.extra)
    for u, t, c, mem in zip(uniq.tolist(), time_us.tolist(), count.tolist(), memory_op,
                            strict=True):
        name, k = ev.names[u // (len(keys) + 1)], u % (len(keys) + 1)
        _n, layer, sub, cat, phase, *_, module = keys[k]
        hit = classify.match(name)
        pl = kernel_place(hit, _Place(layer, sub, cat, phase, module), memory_op=mem,
                          user=hit is not None and hit in user)
        acc = out.setdefault((k, pl.category), [0.0, 0, []])
        acc[0] += t
        acc[1] += c
        acc[2].append(name)
    return {key: (t, c, names) for key, (t, c, names) in out.items()}


def _cpu_groups(placer: _ShapePlacer, keys: list[Any]) -> Groups:
    """CPU op time per row (a CPU-only trace: the ops are the work)."""
    out: Groups = {}
    for kid, key in enumerate(keys):
        launches = int(placer.rows[key][0])
        out[(kid, key[3])] = (sum(placer.times[key].values()), launches, [key[0]])
    return out


__all__ = ["DTYPE_BYTES", "DTYPE_FORMAT", "HOW_TO_RECORD", "TracePoints", "device_name",
           "file_sha256", "gemm_format", "op_bytes", "trace_points"]
