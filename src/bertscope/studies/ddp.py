"""Measured data-parallel training beside the distributed model: `bertscope profile MODEL
--nproc N`.

    result = profile_ddp(get_model("bert-tiny"), RunConfig(batch=2, seq=16), nproc=2)
    result.measured["exposed_share"], result.predicted["exposed_share"]

`bertscope.measure.ddp` runs the ranks under torchrun and returns each rank's result; this
module merges them (the mean over ranks: rows by `combine(..., Combine.MEAN_MAX_COUNT)`, run
facts and all-reduce figures averaged; per-rank figures kept in `DdpFacts.ranks`) and
puts the distributed model's prediction for the same run beside the measurement
(`bertscope.parallel.ddp_model.predict_all_reduce`: DDP's buckets on one link, launched
evenly over the measured backward window). The link is measured by default (all-reduces of
4 KiB and of one bucket between the ranks before training, fitted to the ring formula by
`fit_link`) or taken from the catalog (`link=`). Compute is not predicted: the backward window
and the rest of the iteration are this run's measured ones, so the comparison isolates the
communication model. The measuring side is imported on use, so this module imports without
torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from bertscope.analytic import build, parameter_count
from bertscope.config import ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import (
    Combine,
    OpTable,
    ProfileFacts,
    Provenance,
    Record,
    combine,
    table_from_doc,
)
from bertscope.parallel.collectives import Algorithm
from bertscope.parallel.ddp_model import comm_shares, fit_link, predict_all_reduce
from bertscope.parallel.topology import Link, load_link

if TYPE_CHECKING:
    from bertscope.measure.profile import ProfileResult

_MEAN_KEYS = ("iteration_s", "tokens_per_s", "op_time_s", "unattributed_s",
              "unattributed_share", "framework_share")

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class DdpFacts(Record):
    """A merged DDP run's distributed facts (its op table's record; exported as meta "ddp"
    and "global_tokens_per_s"; read back as they are, not registered for loading)."""

    world_size: int
    backend: str
    measured: Mapping[str, float]
    """Mean over ranks of each rank's `comm_summary`."""
    predicted: Mapping[str, float]
    """`predict_all_reduce` for the same run."""
    ranks: tuple[Mapping[str, float], ...]
    """Each rank's `comm_summary`."""
    link: Mapping[str, Any]
    """The link the prediction used: name, description, bandwidth, latency, sources,
    algorithm."""
    assumptions: tuple[str, ...]
    """What the prediction assumed, in words."""
    rank_meta: tuple[Mapping[str, Any], ...]
    """Each rank's own run facts (the averaged ones and its iteration times)."""
    global_tokens_per_s: float
    KEYS: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """{"ddp": {...}, "global_tokens_per_s": ...}, as `profile --nproc` writes it."""
        return {"ddp": {"world_size": self.world_size, "backend": self.backend,
                        "measured": dict(self.measured), "predicted": dict(self.predicted),
                        "ranks": [dict(r) for r in self.ranks], "link": dict(self.link),
                        "assumptions": list(self.assumptions),
                        "rank_meta": [dict(r) for r in self.rank_meta]},
                "global_tokens_per_s": self.global_tokens_per_s}

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """From "ddp" and "global_tokens_per_s" as `to_dict` writes them."""
        d = dict(entries["ddp"])
        return cls(**{**d, "ranks": tuple(d["ranks"]), "assumptions": tuple(d["assumptions"]),
                      "rank_meta": tuple(d["rank_meta"])},
                   global_tokens_per_s=float(entries["global_tokens_per_s"]))


@dataclass
class DdpResult:
    """A measured DDP run: the profile averaged over ranks, the all-reduce measured and as
    the distributed model predicts it, and what the prediction assumed."""

    profile: ProfileResult
    """`ProfileResult` with the mean op table over ranks (its `DdpFacts` hold the rest)."""
    measured: dict[str, float]
    """Mean over ranks of each rank's `comm_summary`."""
    predicted: dict[str, float]
    """`predict_all_reduce` for the same run."""
    ranks: list[dict[str, float]] = field(default_factory=list)
    """Each rank's `comm_summary`."""
    assumptions: list[str] = field(default_factory=list)
    """What the prediction assumed, in words."""

    @property
    def facts(self) -> DdpFacts:
        """The merged run's distributed facts (world size, backend, global tokens/s, ...)."""
        return DdpFacts.of(self.profile.table)


def peer_wait(buckets: Sequence[Sequence[Sequence[Interval]]]) -> list[float] | None:
    """Per rank, the all-reduce time per iteration spent waiting for a slower rank to join:
    buckets[rank][iteration][bucket] = (start, end) of each bucket's all-reduce work in
    launch order. A bucket ends on every rank at about the same time, so its shortest
    duration over the ranks is the collective itself and the rest of a rank's interval is
    waiting: the wait is the union of the intervals minus the union of their last `shortest`
    seconds (buckets on gloo's two threads may overlap). None when the buckets do not line
    up across ranks."""
    from bertscope.measure.ddp import iteration_comm

    if not buckets or not buckets[0] or any(len(b) != len(buckets[0]) for b in buckets):
        return None
    waits = [0.0] * len(buckets)
    for i in range(len(buckets[0])):
        per_rank = [list(b[i]) for b in buckets]
        if any(len(x) != len(per_rank[0]) for x in per_rank):
            return None
        shortest = [min(e - s for s, e in col) for col in zip(*per_rank, strict=True)]
        for r, work in enumerate(per_rank):
            core = [(e - d, e) for (_, e), d in zip(work, shortest, strict=True)]
            waits[r] += iteration_comm(work, [])[0] - iteration_comm(core, [])[0]
    return [w / len(buckets[0]) for w in waits]


def merge_comm(ranks: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean over ranks of each figure of `comm_summary` (shares recomputed from the mean
    times)."""
    if not ranks:
        raise BertscopeError("no rank results to merge")
    out = {k: float(np.mean([r[k] for r in ranks])) for k in ranks[0]}
    return comm_shares(out)


def merge_rows(docs: Sequence[dict[str, Any]]) -> OpTable:
    """The mean op table over ranks' result documents (`Combine.MEAN_MAX_COUNT`: rows
    missing on a rank count 0, count the largest over ranks)."""
    return combine([table_from_doc(d) for d in docs], Combine.MEAN_MAX_COUNT, records=())


def merge_ranks(docs: Sequence[dict[str, Any]], *, link: Link, link_note: str,
                algorithm: Algorithm) -> DdpResult:
    """Merge the ranks' result documents (`ProfileResult.write_json` of each rank) and
    predict the same run's all-reduce."""
    from bertscope.measure.profile import ProfileResult

    # the ranks' documents are read here (load): each rank's "ddp" entry as written by
    # `ddp_worker`, its rows and run facts through `table_from_doc`
    docs = sorted(docs, key=lambda d: d["meta"]["ddp"]["rank"])
    rank_ddp = [d["meta"]["ddp"] for d in docs]
    tables = [table_from_doc(d) for d in docs]
    facts = [ProfileFacts.of(t) for t in tables]
    m, run = tables[0].model, tables[0].run
    world = len(docs)
    ranks = [dict(r["comm"]) for r in rank_ddp]
    waits = peer_wait([r.get("buckets_s", []) for r in rank_ddp])
    for r, w in zip(ranks, waits or [math.nan] * world, strict=True):
        r["peer_wait_s"] = w
    measured = merge_comm(ranks)
    n_params = parameter_count(m)
    grad_bytes = 4.0 * n_params  # DDP reduces the fp32 .grad of every parameter, autocast or not
    predicted = predict_all_reduce(
        grad_bytes=grad_bytes, world=world, link=link, backward_s=measured["backward_s"],
        iteration_s=measured["iteration_s"], exposed_s=measured["exposed_s"],
        algorithm=algorithm)
    k = int(predicted["calls"])
    assumptions = (
        f"{k} equal bucket(s) of {grad_bytes / k / 2**20:.3g} MiB (DDP's 25 MiB cap; "
        f"{n_params:,} fp32 gradients), launched evenly over the measured backward window of "
        f"{measured['backward_s'] * 1e3:.3g} ms; exposed = max(C/k, C - W(k-1)/k)",
        f"{algorithm.value} all-reduce over {world} ranks on {link_note}",
        "compute not predicted: the rest of the iteration is this run's measurement",
    )
    mean = {key: float(np.mean([getattr(f, key) for f in facts])) for key in _MEAN_KEYS}
    every = tuple(t for f in facts for t in f.iteration_times_s or ())
    merged = replace(facts[0], **mean, iteration_times_s=every,
                     partial=any(f.partial for f in facts))
    ddp = DdpFacts(
        world_size=world, backend=rank_ddp[0]["backend"], measured=measured,
        predicted=predicted, ranks=tuple(ranks),
        link={"name": link.name, "description": link.description,
              "bandwidth_Bps": link.bandwidth, "latency_s": link.latency,
              "sources": link.sources, "algorithm": algorithm.value},
        assumptions=assumptions,
        rank_meta=tuple({**{key: getattr(f, key) for key in _MEAN_KEYS},
                         "iteration_times_s": list(f.iteration_times_s or ())} for f in facts),
        global_tokens_per_s=world * run.tokens / mean["iteration_s"])
    kept = [r for r in (Provenance.on(tables[0]), merged, ddp) if r is not None]
    table = merge_rows(docs).with_records(*kept)
    result = ProfileResult(table=table, analytic=build(m, run))
    return DdpResult(profile=result, measured=measured, predicted=predicted, ranks=ranks,
                     assumptions=list(assumptions))


def profile_ddp(m: ModelConfig, run: RunConfig, *, nproc: int, iters: int = 3,
                warmup: int = 1, device: str = "cpu", hf: bool = False, seed: int = 0,
                threads: int | None = None, link: str | None = None,
                trace_dir: str | Path | None = None, statistic: str = "mean",
                host_allocator: str = "keep") -> DdpResult:
    """Train `m` with DistributedDataParallel on `nproc` local processes under torchrun,
    profile every rank and merge them, with the model's prediction beside them (see the
    module docstring). `link` names a catalog link for the prediction (default: the link
    measured between the ranks); `trace_dir` (created) receives each rank's trace as
    rank<R>.json, which `bertscope trace` reads. `statistic` and `host_allocator` are passed
    to every rank's `profile`."""
    from bertscope.measure.ddp import check_request, run_ranks

    check_request(m, run, nproc=nproc, iters=iters, warmup=warmup)
    catalog_link = load_link(link) if link is not None else None  # fail before launching
    docs = run_ranks(m, run, nproc=nproc, iters=iters, warmup=warmup, device=device, hf=hf,
                     seed=seed, threads=threads, trace_dir=trace_dir, statistic=statistic,
                     host_allocator=host_allocator)
    if catalog_link is not None:
        use, note, algo = (catalog_link, f"catalog link {catalog_link.name} "
                           f"({catalog_link.description})", Algorithm.AUTO)
    else:
        ml = docs[0]["meta"]["ddp"]["link"]
        use = fit_link(ml["sizes"], ml["times"], nproc, description=ml["description"],
                       source=ml["source"])
        note = (f"the link measured between the ranks before training ({ml['description']}: "
                f"{use.bandwidth / 1e9:.3g} GB/s, alpha {use.latency * 1e6:.3g} us)")
        algo = Algorithm.RING  # the fit assumed the ring formula
    return merge_ranks(docs, link=use, link_note=note, algorithm=algo)


__all__ = ["DdpFacts", "DdpResult", "merge_comm", "merge_ranks", "merge_rows", "peer_wait",
           "profile_ddp"]
