"""What kernel fusion would buy: chains of memory-bound rows merged into one launch each.

`fuse(table)` returns a table in which

1. **Activation chains** become one row: maximal runs of adjacent rows with the same layer,
   count, element count, sublayer group, phase family (`Phase.family`: forward or backward;
   data- and weight-gradient rows of one block fuse together, as a fused layernorm backward
   computes dx and dgamma/dbeta in one pass) and recompute flag (recompute is forward work,
   but a separate execution: it never fuses with the forward rows beside it), whose
   categories are elementwise, dropout, softmax, layernorm, activation or reduction. GEMMs,
   embedding gathers/scatters and the loss break chains. Examples from the encoder: scale +
   mask + softmax + dropout of the attention scores and its backward; dropout + residual +
   layernorm and its backward (with the residual gradient sum before it); add + add +
   layernorm + dropout of the embeddings. (Bias + GELU: the analytic model already counts
   the bias add inside the GEMM, as addmm runs it, so the activation stands alone between
   two GEMMs; fusing it into the GEMM's epilogue is out of scope here.)
   Where the run's `chain_fusion` is off (an eager model whose only fused kernels are the
   named ones the table already has as single rows, such as NVIDIA's apex-era BERT), no
   activation chain forms and only step 2 applies.
2. **The optimizer step** becomes one row per stage over all parameter groups (a multi-tensor
   fused Adam/LAMB, as apex's FusedAdam/FusedLAMB): within a group, a reduction or copy that
   re-reads what the update just touched rides along in the same pass (LAMB's per-tensor
   norms of w and u in the moments pass; the copy of the master weights to 16 bits in the
   update pass); then each stage of every group is one launch.

Bytes elided in an activation chain, per execution, with X = elements x activation bytes
(the tensor the chain streams):

- every member after the first gets its streamed input from the previous member on chip:
  one read of X fewer;
- in the forward family (forward and recompute), a member's output that the next member
  consumes is not written, unless backward needs it: the producer saves its output (softmax)
  or the consumer saves its input (layernorm, activation); dropout masks are separate
  outputs and stay written (they are part of `bytes_written` beyond X). Members of other
  categories that save anything keep their writes (the table cannot tell what they saved).
- in backward, gradients produced inside a chain may also flow down the residual path (the
  op table records no consumers), so every write stays; only re-reads are elided.

Hand check, forward dropout + residual + layernorm over e elements of a bytes each:
dropout -> residual: write and read of X elided (2ae); residual -> layernorm: layernorm
saves its input, so the write stays and only the read goes (ae): 3ae elided in all.

Fusion never makes an iteration slower, by construction rather than by clamping: a fused row
has the members' summed FLOPs, at most their summed bytes, the same count and one launch per
execution instead of n. Under the contract in `efficiency.py` (a fraction f and the time
w / f(w) both non-decreasing in a launch's work w), each of the compute, memory and overhead
times of the fused row is at most the sum of the members', hence so is their max.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.optable import OpTable, Record, as_column, bytes_moved, intensity
from bertscope.taxonomy import NORMALIZATIONS, Category, Issuer, Phase, PhaseFamily, Sublayer

C = Category

FUSABLE: frozenset[Category] = frozenset(
    {C.ELEMENTWISE, C.DROPOUT, C.SOFTMAX, C.ACTIVATION, C.REDUCTION, *NORMALIZATIONS})
"""Categories that can join an activation chain."""

SIDE_CONSUMERS: frozenset[Category] = frozenset({C.REDUCTION})
"""Chain members that read the streamed tensor but do not pass a new one on."""

SAVES_OUTPUT: frozenset[Category] = frozenset({C.SOFTMAX})
"""Keep their output for backward (Korthikanti et al. 2022, section 4.1)."""

SAVES_INPUT: frozenset[Category] = frozenset({C.ACTIVATION, *NORMALIZATIONS})
"""Keep their input for backward."""

SAVES_SEPARATELY: frozenset[Category] = frozenset({C.DROPOUT})
"""Save a separate output (the mask), written in any case."""

_PRIORITY = (C.OPTIMIZER, C.LAYERNORM, C.RMSNORM, C.BATCHNORM, C.SOFTMAX, C.ACTIVATION,
             C.DROPOUT, C.ELEMENTWISE, C.REDUCTION, C.DATA_MOVEMENT)
"""The fused row takes the category (and sublayer) of its first member earliest here."""

_CHAINED: frozenset[PhaseFamily] = frozenset({PhaseFamily.FORWARD, PhaseFamily.BACKWARD})
"""Phase families whose rows form activation chains (the optimizer is fused apart)."""
_GROUP = {s.value: s.group for s in Sublayer}
_RANK = {c.value: i for i, c in enumerate(_PRIORITY)}
# StrEnum members hash and compare as their values, so the lookups below accept a column of
# enum members or of plain strings (a table read back from CSV) alike.

FUSED_COLUMN = "fused"
"""Column `fuse` adds: how many original rows a row stands for (1: not fused)."""


class _Member(NamedTuple):
    row: dict[str, Any]
    elided_read: float  # per execution
    elided_write: float


def _saves_main(cat: str, saved: float, *, as_output: bool) -> bool:
    """Whether a row keeps the streamed tensor for backward (its output or its input)."""
    if cat in SAVES_OUTPUT:
        return as_output
    if cat in SAVES_INPUT:
        return not as_output
    if cat in SAVES_SEPARATELY:
        return False
    return bool(np.any(np.asarray(saved) > 0))  # unknown: conservative


def _chain_key(r: dict[str, Any]) -> tuple[Any, ...] | None:
    """What adjacent rows must share to fuse: layer, phase family and whether the row is a
    recompute (a rerun of forward work, fused apart from the forward pass), sublayer group,
    count and elements; None for a row that joins no chain."""
    if r["category"] not in FUSABLE or np.any(np.asarray(r["elements"]) <= 0):
        return None
    phase = Phase(r["phase"])
    if phase.family not in _CHAINED:
        return None
    return (r["layer"], phase.family, phase is Phase.RECOMPUTE, _GROUP[r["sublayer"]],
            r["count"], r["elements"])


def _elide_chain(rows: list[dict[str, Any]], act_bytes: int,
                 family: PhaseFamily) -> list[_Member]:
    """Bytes each member no longer moves when the chain runs as one kernel (per execution);
    only the forward family (forward, recompute) elides writes."""
    x = act_bytes * rows[0]["elements"]
    reads = [0.0] * len(rows)
    writes = [0.0] * len(rows)
    producer: int | None = None
    for i, r in enumerate(rows):
        count = r["count"]
        if i > 0:
            reads[i] = np.minimum(x, r["bytes_read"] / count)
        cat = r["category"]
        if cat in SIDE_CONSUMERS:
            continue
        if producer is not None and family is PhaseFamily.FORWARD:
            p = rows[producer]
            keep = (_saves_main(p["category"], p["saved_bytes"], as_output=True)
                    or _saves_main(cat, r["saved_bytes"], as_output=False))
            if not keep:
                writes[producer] = np.minimum(x, p["bytes_written"] / p["count"])
        producer = i
    return [_Member(r, reads[i], writes[i]) for i, r in enumerate(rows)]


def _merge(members: list[_Member], name: str | None = None, *, layer: int | None = None,
           phase: Phase | None = None) -> dict[str, Any]:
    """One row standing for all members."""
    rows = [m.row for m in members]
    first = rows[0]
    lead = min(rows, key=lambda r: _RANK.get(r["category"], len(_RANK)))
    phases = {Phase(r["phase"]) for r in rows}
    count = first["count"]
    out = dict(first)
    out.update(
        name=name if name is not None else "+".join(r["name"] for r in rows),
        layer=first["layer"] if layer is None else layer,
        sublayer=lead["sublayer"],
        category=lead["category"],
        phase=phase if phase is not None else (phases.pop() if len(phases) == 1
                                               else Phase.BACKWARD),
        m=0, n=0, k=0, batch=0,
        flops=sum(r["flops"] for r in rows),
        bytes_read=sum(r["bytes_read"] for r in rows) - count * sum(m.elided_read
                                                                    for m in members),
        bytes_written=sum(r["bytes_written"] for r in rows) - count * sum(m.elided_write
                                                                         for m in members),
        saved_bytes=sum(r["saved_bytes"] for r in rows),
        time_s=float("nan"),
        # one launch: framework work around it unless autocast issued every member
        issuer=(Issuer.AUTOCAST if all(r.get("issuer") == Issuer.AUTOCAST for r in rows)
                else Issuer.FRAMEWORK),
    )
    out[FUSED_COLUMN] = sum(r.get(FUSED_COLUMN, 1) for r in rows)
    return out


def _optimizer_stages(rows: list[dict[str, Any]]) -> list[list[_Member]]:
    """Split one parameter group's optimizer rows into passes over its tensors: a reduction or
    copy that only re-reads what the previous update pass read or wrote joins that pass."""
    stages: list[list[_Member]] = []
    for r in rows:
        cat = r["category"]
        if stages:
            head = stages[-1][0].row
            rides = (head["category"] == C.OPTIMIZER
                     and cat in (C.REDUCTION, C.DATA_MOVEMENT)
                     and same(r["count"], head["count"])
                     and bool(np.all(np.asarray(r["bytes_read"])
                                     <= head["bytes_read"] + head["bytes_written"])))
            if rides:
                stages[-1].append(_Member(r, r["bytes_read"] / r["count"], 0.0))
                continue
        stages.append([_Member(r, 0.0, 0.0)])
    return stages


def _fuse_optimizer(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Multi-tensor optimizer: each stage of every parameter group in one launch."""
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for r in rows:  # a sweep's layer index may be an array (T5's decoder: after L layers)
        layer = r["layer"] if np.ndim(r["layer"]) == 0 else np.asarray(r["layer"]).tobytes()
        groups.setdefault((r["name"].split(".", 1)[0], layer), []).append(r)
    by_kind: dict[tuple[Any, ...], list[list[_Member]]] = {}
    for grp in groups.values():
        for stage in _optimizer_stages(grp):
            kind = (tuple(m.row["name"].split(".", 1)[-1] for m in stage),
                    np.asarray(stage[0].row["count"], dtype=float).tobytes())
            by_kind.setdefault(kind, []).append(stage)
    out = []
    for (names, _), stages in by_kind.items():
        row = _merge([m for stage in stages for m in stage],
                     name="optimizer." + "+".join(names), layer=-1, phase=Phase.OPTIMIZER)
        row["elements"] = sum(stage[0].row["elements"] for stage in stages)  # parameters
        out.append(row)
    return out


def same(a: Any, b: Any) -> bool:
    """Whether two row values (numbers, or arrays over a sweep's configurations) are equal
    everywhere."""
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return bool(a == b)
    return bool(np.array_equal(*np.broadcast_arrays(a, b)))


def chain_key(r: dict[str, Any]) -> tuple[Any, ...] | None:
    """What adjacent rows must share to fuse (None: the row joins no chain); see
    `joins_chain`."""
    return _chain_key(r)


def joins_chain(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> bool:
    """Whether a row with chain key `b` continues the chain of a row with key `a`: every
    part equal (count and elements arrays equal for every configuration)."""
    return a is not None and b is not None and all(same(x, y) for x, y in zip(a, b,
                                                                                strict=True))


def fuse_records(records: list[dict[str, Any]], act_bytes: int, joins: Any = None, *,
                 chains_too: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows (dicts of op-table fields; numbers, or arrays over configurations) as a
    fusing compiler would run them, and counts of what was fused. `joins(i)` decides whether
    row i + 1 continues row i's chain (default: `joins_chain` of their keys); the sweep
    passes decisions of its own where the keys agree only for some configurations. With
    `chains_too` False (`RunConfig.chain_fusion`) only the optimizer step is fused: every
    other row stays its own kernel, as an eager model with a multi-tensor optimizer runs."""
    out: list[dict[str, Any]] = []
    chains = merged = 0
    launches: Any = 0
    opt_rows = [r for r in records if r["phase"] == Phase.OPTIMIZER]
    opt_done = False
    keys = [_chain_key(r) if chains_too else None for r in records]

    def join(i: int) -> bool:
        return joins(i) if joins is not None else joins_chain(keys[i], keys[i + 1])

    i = 0
    while i < len(records):
        r = records[i]
        if r["phase"] == Phase.OPTIMIZER:
            if not opt_done:
                fused_opt = _fuse_optimizer(opt_rows)
                out.extend(fused_opt)
                chains += sum(1 for f in fused_opt if f[FUSED_COLUMN] > 1)
                merged += sum(f[FUSED_COLUMN] for f in fused_opt if f[FUSED_COLUMN] > 1)
                launches = launches + sum(r2["count"] for r2 in opt_rows) - sum(
                    f["count"] for f in fused_opt)
                opt_done = True
            i += 1
            continue
        j = i + 1
        if keys[i] is not None:
            while j < len(records) and keys[j] is not None and join(j - 1):
                j += 1
        if j - i == 1:
            out.append({**r, FUSED_COLUMN: r.get(FUSED_COLUMN, 1)})
        else:
            members = _elide_chain(records[i:j], act_bytes, keys[i][1])  # type: ignore[index]
            out.append(_merge(members))
            chains += 1
            merged += j - i
            launches = launches + (j - i - 1) * r["count"]
        i = j
    return out, {"chains": chains, "ops_merged": merged, "launches_saved": launches}


@dataclass(frozen=True, slots=True)
class FusionStats(Record):
    """What `fuse` merged: chains, ops merged into them, launches saved and bytes of traffic
    elided (a fused table's record, exported as meta "fusion")."""

    KEYS: ClassVar[tuple[str, ...]] = ("fusion",)
    chains: int
    ops_merged: int
    launches_saved: int
    bytes_elided: float

    def to_dict(self) -> dict[str, Any]:
        """{"fusion": {...}}, as exports write it."""
        return {"fusion": {"chains": self.chains, "ops_merged": self.ops_merged,
                           "launches_saved": self.launches_saved,
                           "bytes_elided": self.bytes_elided}}

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """From meta "fusion"."""
        return cls(**entries["fusion"])


def fuse(table: OpTable) -> OpTable:
    """The table as a fusing compiler would run it: activation chains and the optimizer step
    merged (see the module docstring; the chains only where the run's `chain_fusion` is on).
    Adds the column `fused` (original rows per row) and its `FusionStats` record (chains,
    launches saved, bytes elided). A fused table is returned as is."""
    if FusionStats.on(table) is not None:
        return table.with_columns({})
    if table.job is None:
        raise BertscopeError("fuse needs the table's run (its precision sizes the tensors a "
                             "chain keeps on chip): build it with a job")
    act_bytes = table.run.precision.act_bytes
    src = table.columns
    columns = list(src)
    records = [dict(zip(columns, values, strict=True))
               for values in zip(*(src[c].tolist() for c in columns), strict=True)]
    out, stats = fuse_records(records, act_bytes, chains_too=table.run.chain_fusion)
    names = [*(c for c in columns if c != FUSED_COLUMN), FUSED_COLUMN]
    cols = {c: as_column([r[c] for r in out]) for c in names}
    if "intensity" in cols:
        cols["intensity"] = intensity(cols)
    cols[FUSED_COLUMN] = cols[FUSED_COLUMN].astype(int)
    fusion = FusionStats(chains=stats["chains"], ops_merged=stats["ops_merged"],
                         launches_saved=int(stats["launches_saved"]),
                         bytes_elided=float(np.sum(bytes_moved(src)) - np.sum(bytes_moved(cols))))
    return OpTable.from_columns(cols, (*table.records, fusion), job=table.job)


__all__ = [
    "FUSABLE",
    "FUSED_COLUMN",
    "SAVES_INPUT",
    "SAVES_OUTPUT",
    "FusionStats",
    "chain_key",
    "fuse",
    "fuse_records",
    "joins_chain",
    "same",
]
