"""The distributed model's DDP all-reduce, for comparing with a measured DDP run.

    link = fit_link([4096, bucket], [t_small, t_bucket], world, description=..., source=...)
    p = predict_all_reduce(grad_bytes=4 * params, world=2, link=link, backward_s=bwd,
                           iteration_s=it, exposed_s=measured_exposed)

With `bertscope.parallel`'s rule for DDP (as `layouts.evaluate_arrays` costs ZeRO stage 0):
ceil(gradient bytes / 25 MiB) equal buckets (`bucket_count`), each an all-reduce over the N
ranks on one link (`Topology.time`), launched evenly over the backward window, exposed =
max(C/k, C - W(k-1)/k) (`collectives.bucketed_exposed`). A measured link is fitted from two
all-reduce timings (4 KiB, and one bucket: `link_bucket_bytes`) to the ring formula
2(p-1) alpha + 2(p-1)/p n/B (`fit_link`). Compute is not predicted: the backward window and the
rest of the iteration are the measured run's, so a comparison isolates the communication
model. Summaries of all-reduce time (measured or predicted) share one form, with shares of the
iteration from `comm_shares`. Pure arithmetic: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bertscope.errors import BertscopeError
from bertscope.parallel.collectives import Algorithm, Collective, bucketed_exposed
from bertscope.parallel.layouts import DDP_BUCKET_BYTES
from bertscope.parallel.topology import Link, LinkScope, Topology


def comm_shares(d: dict[str, float]) -> dict[str, float]:
    """Add to an all-reduce summary (all_reduce_s, overlap_s, exposed_s, iteration_s, ...)
    its shares: share and exposed_share of the iteration, overlap_fraction of the all-reduce
    time (0 where the denominator is not positive). Returns `d`, updated in place."""
    it = d["iteration_s"]
    d["share"] = d["all_reduce_s"] / it if it > 0 else 0.0
    d["exposed_share"] = d["exposed_s"] / it if it > 0 else 0.0
    d["overlap_fraction"] = d["overlap_s"] / d["all_reduce_s"] if d["all_reduce_s"] > 0 else 0.0
    return d


def bucket_count(grad_bytes: float) -> int:
    """DDP's gradient buckets for `grad_bytes` of gradients: ceil(bytes / 25 MiB), at least 1."""
    return max(1, math.ceil(grad_bytes / DDP_BUCKET_BYTES))


def link_bucket_bytes(grad_bytes: float) -> int:
    """The link microbenchmark's large message: one of the equal gradient buckets of
    `grad_bytes` of gradients (at most DDP's 25 MiB cap)."""
    return int(min(grad_bytes / math.ceil(grad_bytes / DDP_BUCKET_BYTES), DDP_BUCKET_BYTES))


def fit_link(sizes: Sequence[float], times: Sequence[float], world: int, *,
             description: str, source: str) -> Link:
    """A link from two all-reduce timings (small, large message; seconds) over `world`
    ranks, fitted to the ring formula t = 2(p-1) alpha + 2(p-1)/p n/B."""
    (n0, n1), (t0, t1) = sizes, times
    p = max(world, 2)
    f = 2.0 * (p - 1) / p
    if not (n1 > n0 > 0 and t1 > 0 and t0 > 0):
        raise BertscopeError(f"cannot fit a link to all-reduce timings {times} of {sizes} B")
    inv_bw = (t1 - t0) / (f * (n1 - n0)) if t1 > t0 else t1 / (f * n1)
    alpha = max(0.0, (t0 - f * n0 * inv_bw) / (2.0 * (p - 1)))
    return Link(name="measured", description=description, scope=LinkScope.INTRA,
                bandwidth=1.0 / inv_bw, latency=alpha,
                sources={"bandwidth": source, "latency": source})


def predict_all_reduce(*, grad_bytes: float, world: int, link: Link, backward_s: float,
                       iteration_s: float, exposed_s: float,
                       algorithm: Algorithm = Algorithm.AUTO) -> dict[str, float]:
    """The distributed model's DDP all-reduce for a measured run (see the module docstring):
    time, overlap, exposed time and shares, with the iteration's measured exposed time
    `exposed_s` replaced by the predicted one."""
    topo = Topology(name=link.name, devices_per_node=world, intra=link, inter=link,
                    algorithm=algorithm)
    k = bucket_count(grad_bytes)
    total = k * float(topo.time(Collective.ALL_REDUCE, grad_bytes / k, world))
    exposed = float(bucketed_exposed(total, k, backward_s))
    return comm_shares({"all_reduce_s": total, "overlap_s": total - exposed,
                        "exposed_s": exposed, "iteration_s": iteration_s - exposed_s + exposed,
                        "backward_s": backward_s, "calls": float(k),
                        "bytes": float(grad_bytes)})


__all__ = ["bucket_count", "comm_shares", "fit_link", "link_bucket_bytes", "predict_all_reduce"]
