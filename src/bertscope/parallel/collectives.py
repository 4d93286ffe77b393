"""Collective communication time in the alpha-beta (latency-bandwidth) model.

Notation: p devices, n bytes, B bytes/s a device sends per direction while it receives at the
same rate, alpha seconds per step (one message hop). `n` is always the whole buffer: each
device's input of an all-reduce, the unsharded input of a reduce-scatter, the unsharded output
of an all-gather, the message of a send/recv.

Ring (Thakur, Rabenseifner and Gropp, Optimization of Collective Communication Operations in
MPICH, IJHPCA 19(1), 2005, sections 4.1 and 4.4-4.5; Patarasuk and Yuan, Bandwidth optimal
all-reduce algorithms, JPDC 69(2), 2009; NCCL's docs, "Performance reported by NCCL tests":
bus bandwidth = algorithm bandwidth x 2(p-1)/p for all-reduce, (p-1)/p for the others):

    reduce-scatter, all-gather    (p-1) alpha + (p-1)/p n/B
    all-reduce                   2(p-1) alpha + 2(p-1)/p n/B     (reduce-scatter + all-gather)

Tree / logarithmic (latency-optimal):

    all-reduce                   2 ceil(log2 p) alpha + 2 n/B    NCCL's pipelined double binary
                                 tree (Sanders, Speck and Traff, Parallel Computing 35(12), 2009):
                                 reduce up, broadcast down, each tree carrying half the data
    reduce-scatter               ceil(log2 p) alpha + (p-1)/p n/B   recursive halving
    all-gather                   ceil(log2 p) alpha + (p-1)/p n/B   recursive doubling
                                 (Thakur et al. 2005, sections 4.1 and 4.3; exact for p a power
                                 of two, ceil(log2 p) rounds otherwise)

Send/recv: alpha + n/B.  `Algorithm.AUTO` takes the faster of ring and tree, as NCCL's tuner
picks per message size. The reduction arithmetic (gamma term) is left out: GPUs and TPUs reduce
at memory speed, far above link speed. Every function takes numbers or numpy arrays
(broadcast together) and returns the same, so a layout search costs all layouts at once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import overload

import numpy as np

from bertscope.errors import BertscopeError

ArrayLike = float | int | np.ndarray


class Collective(StrEnum):
    """A communication pattern."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    SEND_RECV = "send_recv"


class Algorithm(StrEnum):
    """How a collective is carried out: a ring, a tree (logarithmic), or the faster of both."""

    RING = "ring"
    TREE = "tree"
    AUTO = "auto"


def _log2_ceil(p: np.ndarray) -> np.ndarray:
    return np.ceil(np.log2(np.maximum(p, 1.0)))


def ring_time(kind: Collective, nbytes: ArrayLike, p: ArrayLike, bandwidth: ArrayLike,
              latency: ArrayLike) -> np.ndarray:
    """Ring algorithm time in seconds (see the module docstring for the formulas)."""
    n, pp, bw, a = (np.asarray(x, dtype=float) for x in (nbytes, p, bandwidth, latency))
    steps = np.maximum(pp - 1.0, 0.0)
    frac = steps / np.maximum(pp, 1.0)  # (p-1)/p
    if kind is Collective.ALL_REDUCE:
        return 2.0 * steps * a + 2.0 * frac * n / bw
    if kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return steps * a + frac * n / bw
    return np.where(pp > 1, a + n / bw, 0.0)


def tree_time(kind: Collective, nbytes: ArrayLike, p: ArrayLike, bandwidth: ArrayLike,
              latency: ArrayLike) -> np.ndarray:
    """Tree / recursive halving-doubling time in seconds (see the module docstring)."""
    n, pp, bw, a = (np.asarray(x, dtype=float) for x in (nbytes, p, bandwidth, latency))
    rounds = _log2_ceil(pp)
    frac = np.maximum(pp - 1.0, 0.0) / np.maximum(pp, 1.0)
    if kind is Collective.ALL_REDUCE:
        t = 2.0 * rounds * a + 2.0 * n / bw
    elif kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        t = rounds * a + frac * n / bw
    else:
        t = a + n / bw
    return np.where(pp > 1, t, 0.0)


@overload
def collective_time(kind: Collective, nbytes: float | int, p: float | int,
                    bandwidth: float | int, latency: float | int,
                    algorithm: Algorithm = ...) -> float: ...
@overload
def collective_time(kind: Collective, nbytes: ArrayLike, p: ArrayLike, bandwidth: ArrayLike,
                    latency: ArrayLike, algorithm: Algorithm = ...) -> np.ndarray: ...
def collective_time(kind: Collective, nbytes: ArrayLike, p: ArrayLike, bandwidth: ArrayLike,
                    latency: ArrayLike, algorithm: Algorithm = Algorithm.AUTO) -> ArrayLike:
    """Seconds for one collective over p devices on one flat link (B bytes/s per direction,
    `latency` seconds per hop). Scalars in, float out; arrays in, array out."""
    kind, algorithm = Collective(kind), Algorithm(algorithm)
    if np.any(np.asarray(bandwidth) <= 0):
        raise BertscopeError("link bandwidth must be positive")
    if np.any(np.asarray(latency) < 0):
        raise BertscopeError("link latency must be >= 0")
    if np.any(np.asarray(nbytes) < 0):
        raise BertscopeError("message size must be >= 0 bytes")
    if algorithm is Algorithm.RING:
        t = ring_time(kind, nbytes, p, bandwidth, latency)
    elif algorithm is Algorithm.TREE:
        t = tree_time(kind, nbytes, p, bandwidth, latency)
    else:
        t = np.minimum(ring_time(kind, nbytes, p, bandwidth, latency),
                       tree_time(kind, nbytes, p, bandwidth, latency))
    t = np.where(np.asarray(nbytes, dtype=float) > 0, t, 0.0)
    return float(t) if np.ndim(t) == 0 else t


def exposed_beyond(comm_s: ArrayLike, hideable_s: ArrayLike) -> np.ndarray:
    """Communication left exposed when `comm_s` seconds run beside `hideable_s` seconds of
    independent compute on another stream: max(0, comm - hideable). Overlap never hides more
    than the compute it runs beside (contention, which slows the compute a little, is left
    out)."""
    c, h = (np.asarray(x, dtype=float) for x in (comm_s, hideable_s))
    return np.maximum(0.0, c - h)


def pipelined_exposed(comm_s: ArrayLike, gemm_s: ArrayLike, chunks: ArrayLike) -> np.ndarray:
    """Exposed time of a collective pipelined with the GEMM it feeds or drains, both split
    into `chunks` equal pieces (Transformer Engine's userbuffer ring-exchange overlap, one
    chunk per tensor-parallel rank; `transformer_engine/common/userbuffers/
    comm_gemm_overlap.h`, `SPLIT_PIPELINED_AG_P2P` / `SPLIT_PIPELINED_RS_P2P`, NVIDIA/
    TransformerEngine): one GEMM chunk runs on local data with no transfer beside it (an
    all-gather's own shard first, a reduce-scatter's own shard last), the other k - 1 hide
    the transfers: exposed = max(0, comm - gemm (k - 1)/k)."""
    k = np.maximum(np.asarray(chunks, dtype=float), 1.0)
    return exposed_beyond(comm_s, np.asarray(gemm_s, dtype=float) * (k - 1.0) / k)


def bucketed_exposed(total_s: ArrayLike, buckets: ArrayLike, window_s: ArrayLike) -> np.ndarray:
    """Communication left exposed when `buckets` equal buckets taking `total_s` in all are
    launched as backward produces them, evenly over `window_s` seconds (PyTorch DDP's gradient
    buckets, Li et al., PyTorch Distributed, VLDB 2020).

    Bucket i is ready at window x i/k and the link runs one bucket at a time, so with
    c = total/k the last bucket ends max(c, total - window (k-1)/k) after the window: the last
    bucket is always exposed, and all that does not fit under the window is too. By symmetry
    the same holds for buckets needed in turn by a window of compute (an all-gather of
    parameters ahead of the forward that uses them): the first bucket is always exposed."""
    c_total, k, w = (np.asarray(x, dtype=float) for x in (total_s, buckets, window_s))
    k = np.maximum(k, 1.0)
    return np.maximum(c_total / k, exposed_beyond(c_total, w * (k - 1.0) / k))


__all__ = ["Algorithm", "Collective", "bucketed_exposed", "collective_time", "exposed_beyond",
           "pipelined_exposed", "ring_time", "tree_time"]
