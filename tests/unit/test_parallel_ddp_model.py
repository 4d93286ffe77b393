"""The distributed model's DDP all-reduce on hand-made numbers: the link fit from two timings,
bucket arithmetic and the prediction (torch-free)."""

from __future__ import annotations

import pytest

from bertscope.analytic import parameter_count
from bertscope.errors import BertscopeError
from bertscope.parallel.collectives import Algorithm
from bertscope.parallel.ddp_model import (
    bucket_count,
    comm_shares,
    fit_link,
    link_bucket_bytes,
    predict_all_reduce,
)
from bertscope.parallel.layouts import DDP_BUCKET_BYTES
from bertscope.parallel.topology import Link, LinkScope
from tests.conftest import tiny


def link(bandwidth: float = 1e9, latency: float = 0.0) -> Link:
    return Link(name="test", description="test link", scope=LinkScope.INTRA,
                bandwidth=bandwidth, latency=latency, sources={"bandwidth": "t", "latency": "t"})


# -- prediction ----------------------------------------------------------------------------------
def test_fit_link_recovers_alpha_and_bandwidth() -> None:
    # p = 2 ring: t = 2 alpha + n / B with alpha = 50 us, B = 1 GB/s
    n0, n1 = 4096, 16e6
    t0, t1 = 100e-6 + n0 / 1e9, 100e-6 + n1 / 1e9
    fitted = fit_link([n0, n1], [t0, t1], 2, description="d", source="s")
    assert fitted.bandwidth == pytest.approx(1e9)
    assert fitted.latency == pytest.approx(50e-6)
    # p = 4: t = 6 alpha + 1.5 n / B
    t0, t1 = 6 * 10e-6 + 1.5 * n0 / 2e9, 6 * 10e-6 + 1.5 * n1 / 2e9
    fitted = fit_link([n0, n1], [t0, t1], 4, description="d", source="s")
    assert fitted.bandwidth == pytest.approx(2e9)
    assert fitted.latency == pytest.approx(10e-6)
    with pytest.raises(BertscopeError):
        fit_link([n0, n1], [0.0, t1], 2, description="d", source="s")


def test_prediction_one_bucket_is_all_exposed() -> None:
    # bert-tiny: 4 x 4,433,468 = 17,733,872 B < 25 MiB: one bucket; ring over 2 ranks on
    # 1 GB/s with no latency: 2 (p-1)/p n / B = n / B = 17.733872 ms, all exposed
    grads = 4.0 * 4_433_468
    p = predict_all_reduce(grad_bytes=grads, world=2, link=link(), backward_s=0.05,
                           iteration_s=0.2, exposed_s=0.01, algorithm=Algorithm.RING)
    assert p["calls"] == 1
    assert p["all_reduce_s"] == pytest.approx(0.017733872)
    assert p["exposed_s"] == pytest.approx(p["all_reduce_s"])
    assert p["overlap_s"] == pytest.approx(0.0)
    assert p["iteration_s"] == pytest.approx(0.2 - 0.01 + 0.017733872)
    assert p["exposed_share"] == pytest.approx(0.017733872 / p["iteration_s"])


def test_prediction_overlaps_all_but_the_last_bucket() -> None:
    # 60 MiB = 3 buckets of 20 MiB (25 MiB cap), 20.97152 ms each on 1 GB/s over 2 ranks:
    # C = 62.91456 ms; window 60 ms: exposed = max(C/3, C - 60 x 2/3) = 22.91456 ms
    grads = 60 * 2**20
    p = predict_all_reduce(grad_bytes=grads, world=2, link=link(), backward_s=0.06,
                           iteration_s=0.5, exposed_s=0.0, algorithm=Algorithm.RING)
    assert grads / DDP_BUCKET_BYTES == pytest.approx(2.4)
    assert p["calls"] == 3
    assert p["all_reduce_s"] == pytest.approx(0.06291456)
    assert p["exposed_s"] == pytest.approx(0.02291456)
    assert p["overlap_s"] == pytest.approx(0.04)
    # a long backward hides all but the last bucket: C / 3
    p = predict_all_reduce(grad_bytes=grads, world=2, link=link(), backward_s=10.0,
                           iteration_s=10.5, exposed_s=0.0, algorithm=Algorithm.RING)
    assert p["exposed_s"] == pytest.approx(0.06291456 / 3)


def test_buckets_are_equal_and_capped_at_25_mib() -> None:
    assert DDP_BUCKET_BYTES == 25 * 2**20
    assert bucket_count(1.0) == 1 and bucket_count(0.0) == 1
    assert bucket_count(DDP_BUCKET_BYTES) == 1 and bucket_count(DDP_BUCKET_BYTES + 1) == 2
    assert bucket_count(60 * 2**20) == 3
    # the link microbenchmark's large message: one of the equal buckets
    assert link_bucket_bytes(60 * 2**20) == 20 * 2**20
    grads = 4 * parameter_count(tiny())
    assert link_bucket_bytes(grads) == grads  # one bucket holds a tiny model's gradients
    assert link_bucket_bytes(10 * DDP_BUCKET_BYTES) == DDP_BUCKET_BYTES


def test_comm_shares_of_the_iteration_and_of_the_all_reduce() -> None:
    d = comm_shares({"all_reduce_s": 0.04, "overlap_s": 0.01, "exposed_s": 0.03,
                     "iteration_s": 0.2})
    assert d["share"] == pytest.approx(0.2)
    assert d["exposed_share"] == pytest.approx(0.15)
    assert d["overlap_fraction"] == pytest.approx(0.25)
    empty = comm_shares({"all_reduce_s": 0.0, "overlap_s": 0.0, "exposed_s": 0.0,
                         "iteration_s": 0.0})
    assert (empty["share"], empty["exposed_share"], empty["overlap_fraction"]) == (0, 0, 0)
