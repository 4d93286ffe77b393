"""Property tests (hypothesis) of the distributed model's invariants."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bertscope.config import Family, Precision, RunConfig
from bertscope.parallel import (
    Algorithm,
    Cluster,
    Schedule,
    Workload,
    bubble_fraction,
    bubble_overhead,
    collective_time,
    zero_static_bytes,
)
from bertscope.parallel.collectives import Collective
from bertscope.parallel.layouts import evaluate_arrays
from bertscope.parallel.search import enumerate_layouts
from tests.conftest import MODELLED, tiny

FAST = settings(max_examples=30, deadline=None)

families = st.sampled_from(MODELLED)
devices = st.sampled_from([4, 8, 16])
per_node = st.sampled_from([2, 4, 8])
factors = st.floats(1.0, 100.0)
schedules = st.sampled_from(list(Schedule))


def _job(family: Family, batch: int = 16) -> Workload:
    m = tiny(family, num_layers=4, heads=4, hidden=64, intermediate=256)
    seq = m.max_seq if family is Family.VIT else 32  # a ViT's sequence is its patches + 1
    return Workload(model=m, run=RunConfig(batch=1, seq=seq, precision=Precision.BF16),
                    global_batch=batch)


@FAST
@given(families, devices, per_node, factors, factors, st.sampled_from(list(Algorithm)))
def test_more_bandwidth_never_slows_an_iteration(family, n, node, f_intra, f_inter, algo):
    job = _job(family)
    base = Cluster.build("a100", n, devices_per_node=node)
    base = replace(base, topology=replace(base.topology, algorithm=algo))
    faster = replace(base, topology=replace(
        base.topology, intra=base.topology.intra.scaled(bandwidth=f_intra),
        inter=base.topology.inter.scaled(bandwidth=f_inter)))
    layouts = enumerate_layouts(job, base)
    slow = evaluate_arrays(job, base, layouts)["iteration_s"]
    fast = evaluate_arrays(job, faster, layouts)["iteration_s"]
    assert np.all(fast <= slow * (1 + 1e-12))


@FAST
@given(st.sampled_from(list(Collective)), st.floats(1.0, 1e10), st.integers(1, 4096),
       st.floats(1e8, 1e12), st.floats(0.0, 1e-4), factors, st.sampled_from(list(Algorithm)))
def test_collectives_never_slow_down_with_bandwidth(kind, n, p, bw, lat, f, algo):
    assert collective_time(kind, n, p, bw * f, lat, algo) <= collective_time(
        kind, n, p, bw, lat, algo) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(schedules, st.integers(1, 64), st.integers(1, 512), st.integers(1, 64),
       st.integers(2, 8))
def test_more_micro_batches_never_raise_the_bubble(schedule, p, m, extra, v):
    for fn in (bubble_fraction, bubble_overhead):
        assert float(fn(schedule, p, m + extra, v)) <= float(fn(schedule, p, m, v))
        assert 0.0 <= float(bubble_fraction(schedule, p, m, v)) < 1.0


@settings(max_examples=100, deadline=None)
@given(st.floats(1e3, 1e12), st.integers(1, 4096), st.floats(0.0, 1.0),
       st.sampled_from(list(Precision)))
def test_zero_stages_never_raise_static_memory(params, dp, layer_share, precision):
    from bertscope.config import Optimizer

    totals = [float(sum(zero_static_bytes(params, dp, z, precision=precision,
                                          optimizer=Optimizer.ADAM,
                                          layer_params=params * layer_share).values()))
              for z in range(4)]
    assert all(b <= a * (1 + 1e-12) for a, b in pairwise(totals))


@FAST
@given(families, devices, st.sampled_from([8, 16, 32]))
def test_memory_per_device_falls_as_zero_stage_rises(family, n, batch):
    job = _job(family, batch)
    cluster = Cluster.build("a100", n)
    layouts = enumerate_layouts(job, cluster)
    base = {k: v[(layouts["pp"] == 1) & (layouts["zero"] == 0)] for k, v in layouts.items()}
    mem = []
    for z in range(4):
        arrays = dict(base, zero=np.full(len(base["dp"]), z))
        mem.append(evaluate_arrays(job, cluster, arrays)["memory_bytes"])
    for lower, higher in pairwise(mem):
        assert np.all(higher <= lower * (1 + 1e-12))
