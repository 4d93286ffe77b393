"""Collective costs (alpha-beta), the interconnect catalog and hierarchical collectives."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.errors import BertscopeError
from bertscope.hardware import load_device
from bertscope.parallel import (
    Algorithm,
    Collective,
    Link,
    LinkScope,
    Topology,
    bucketed_exposed,
    collective_time,
    links,
    load_link,
    systems,
    topology_for,
)
from bertscope.parallel.topology import parse_catalog

AR, RS, AG, P2P = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                   Collective.SEND_RECV)
GB = 1e9
US = 1e-6


def test_ring_formulas_by_hand() -> None:
    # p = 8, n = 1 GB, B = 100 GB/s, alpha = 1 us
    # all-reduce: 2 x 7 x 1 us + 2 x 7/8 x 1e9 / 1e11 = 14 us + 17.5 ms
    assert collective_time(AR, GB, 8, 100 * GB, US, Algorithm.RING) == pytest.approx(
        14e-6 + 17.5e-3)
    # reduce-scatter / all-gather: 7 x 1 us + 7/8 x 10 ms = 7 us + 8.75 ms
    for kind in (RS, AG):
        assert collective_time(kind, GB, 8, 100 * GB, US, Algorithm.RING) == pytest.approx(
            7e-6 + 8.75e-3)


def test_tree_formulas_by_hand() -> None:
    # all-reduce: 2 x log2(8) x 1 us + 2 x 1e9 / 1e11 = 6 us + 20 ms
    assert collective_time(AR, GB, 8, 100 * GB, US, Algorithm.TREE) == pytest.approx(
        6e-6 + 20e-3)
    # recursive halving / doubling: 3 x 1 us + 7/8 x 10 ms
    assert collective_time(RS, GB, 8, 100 * GB, US, Algorithm.TREE) == pytest.approx(
        3e-6 + 8.75e-3)
    # p = 6 is not a power of two: ceil(log2 6) = 3 rounds
    assert collective_time(AG, 6e6, 6, 100 * GB, US, Algorithm.TREE) == pytest.approx(
        3e-6 + 5 / 6 * 6e6 / (100 * GB))


def test_send_recv_and_trivial_groups() -> None:
    # alpha + n / B = 1 us + 1e6 / 1e11 = 11 us
    assert collective_time(P2P, 1e6, 2, 100 * GB, US) == pytest.approx(11e-6)
    for kind in Collective:
        assert collective_time(kind, GB, 1, 100 * GB, US) == 0.0  # one device: nothing to do
        assert collective_time(kind, 0, 8, 100 * GB, US) == 0.0  # nothing to send


def test_auto_takes_the_faster_algorithm() -> None:
    small, large = 1e3, 1e9
    for n in (small, large):
        ring = collective_time(AR, n, 64, 25 * GB, 4 * US, Algorithm.RING)
        tree = collective_time(AR, n, 64, 25 * GB, 4 * US, Algorithm.TREE)
        assert collective_time(AR, n, 64, 25 * GB, 4 * US) == min(ring, tree)
    # latency-bound small messages go to the tree, bandwidth-bound large ones to the ring
    assert (collective_time(AR, small, 64, 25 * GB, 4 * US, Algorithm.TREE)
            < collective_time(AR, small, 64, 25 * GB, 4 * US, Algorithm.RING))
    assert (collective_time(AR, large, 64, 25 * GB, 4 * US, Algorithm.RING)
            < collective_time(AR, large, 64, 25 * GB, 4 * US, Algorithm.TREE))


def test_arrays_broadcast() -> None:
    t = collective_time(AR, np.array([1e6, 1e9]), np.array([2, 8]), 100 * GB, US)
    assert isinstance(t, np.ndarray) and t.shape == (2,)
    assert t[0] == collective_time(AR, 1e6, 2, 100 * GB, US)


def test_bad_figures_raise() -> None:
    with pytest.raises(BertscopeError, match="bandwidth must be positive"):
        collective_time(AR, GB, 8, 0, US)
    with pytest.raises(BertscopeError, match="latency"):
        collective_time(AR, GB, 8, GB, -1.0)


def test_bucketed_exposed_by_hand() -> None:
    # 5 buckets of 2 s under a 100 s window: only the last bucket shows
    assert bucketed_exposed(10.0, 5, 100.0) == pytest.approx(2.0)
    # 4 buckets of 25 s, window 40 s: the link is the bottleneck: 100 - 40 x 3/4 = 70
    assert bucketed_exposed(100.0, 4, 40.0) == pytest.approx(70.0)
    assert bucketed_exposed(0.0, 3, 1.0) == 0.0


# -- catalog -------------------------------------------------------------------------------------
def test_catalog_has_the_links_with_sources() -> None:
    cat = links()
    for name in ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5", "ib-edr",
                 "ib-hdr", "ib-ndr", "roce-100g", "roce-200g", "roce-400g", "tpu-ici-v3",
                 "tpu-ici-v4"):
        link = cat[name]
        assert link.bandwidth > 0 and link.latency > 0
        assert link.sources["bandwidth"].strip() and link.sources["latency"].strip()
    assert cat["nvlink3"].bandwidth == 300e9  # 600 GB/s both directions, halved
    assert cat["pcie4"].bandwidth == 31.5e9  # 16 GT/s x 16 x 128/130 / 8
    assert cat["ib-hdr"].bandwidth == 25e9  # 200 Gbit/s
    assert cat["ib-hdr"].scope is LinkScope.INTER and cat["nvlink4"].scope is LinkScope.INTRA
    assert "assumed default" in cat["tpu-ici-v4"].sources["latency"]


def test_systems_and_topology_for() -> None:
    assert "dgx-a100" in systems()
    topo = topology_for(load_device("a100"))
    assert (topo.name, topo.devices_per_node, topo.intra.name, topo.inter.name) == (
        "dgx-a100", 8, "nvlink3", "ib-hdr")
    generic = topology_for(load_device("mi300x"))
    assert generic.name == "generic" and "mi300x" in generic.notes
    assert generic.intra.bandwidth == pytest.approx(896e9 / 2)
    custom = topology_for(load_device("a100"), devices_per_node=4, inter="roce-400g")
    assert custom.devices_per_node == 4 and custom.inter.name == "roce-400g"
    with pytest.raises(BertscopeError, match="did you mean"):
        load_link("nvlink33")


def test_catalog_rejects_missing_sources() -> None:
    text = """
[links.x]
scope = "intra"
bandwidth_GBps = 10
latency_us = 1
[links.x.sources]
bandwidth_GBps = "a datasheet"
"""
    with pytest.raises(BertscopeError, match="latency_us has no source"):
        parse_catalog(text)
    with pytest.raises(BertscopeError, match="unknown field"):
        parse_catalog("[links.x]\nbandwidth_Gbps = 1\n")


# -- hierarchical collectives --------------------------------------------------------------------
def _topo() -> Topology:
    intra = Link(name="in", description="", scope=LinkScope.INTRA, bandwidth=100 * GB,
                 latency=1 * US)
    inter = Link(name="out", description="", scope=LinkScope.INTER, bandwidth=10 * GB,
                 latency=5 * US)
    return Topology(name="t", devices_per_node=8, intra=intra, inter=inter, nics_per_node=8,
                    algorithm=Algorithm.RING)


def test_group_span_follows_rank_order() -> None:
    topo = _topo()
    assert [float(x) for x in topo.span(8, 1)] == [8.0, 1.0]  # a TP group: one node
    assert [float(x) for x in topo.span(8, 8)] == [1.0, 8.0]  # DP across nodes at stride 8
    assert [float(x) for x in topo.span(4, 4)] == [2.0, 2.0]  # 2 per node on 2 nodes


def test_hierarchical_all_reduce_by_hand() -> None:
    topo = _topo()
    n = 1.6e9
    # 16 devices = 2 nodes x 8: intra reduce-scatter of n over 8, inter all-reduce of n/8 over
    # 2 nodes at 10 GB/s x 8 NICs / 8 devices, intra all-gather of n over 8
    rs = 7 * 1e-6 + 7 / 8 * n / 100e9
    inter = 2 * 1 * 5e-6 + 2 * 1 / 2 * (n / 8) / 10e9
    expected = rs + inter + rs
    assert float(topo.time(AR, n, 16)) == pytest.approx(expected)
    # within one node it is the flat ring all-reduce
    assert float(topo.time(AR, n, 8)) == pytest.approx(2 * rs)
    # send/recv: intra inside a node, inter across
    assert float(topo.time(P2P, 1e6, 2, 4)) == pytest.approx(1e-6 + 1e6 / 100e9)
    assert float(topo.time(P2P, 1e6, 2, 8)) == pytest.approx(5e-6 + 1e6 / 10e9)


def test_fewer_nics_than_devices_share_them() -> None:
    topo = Topology(name="t", devices_per_node=8, intra=_topo().intra, inter=_topo().inter,
                    nics_per_node=4)
    assert topo.inter_bandwidth == pytest.approx(5 * GB)  # 4 x 10 GB/s over 8 devices
    assert topo.fit(4).devices_per_node == 4 and topo.fit(16) is topo


def test_topology_validates() -> None:
    with pytest.raises(BertscopeError, match="devices_per_node"):
        Topology(name="t", devices_per_node=0, intra=_topo().intra, inter=_topo().inter)
    with pytest.raises(BertscopeError, match="bandwidth"):
        Link(name="x", description="", scope="intra", bandwidth=0.0, latency=0.0)


def test_systems_name_catalog_devices() -> None:
    from bertscope.hardware import catalog

    names = {d.name for d in catalog()}
    for system in systems().values():
        assert set(system.devices) <= names, system.name
        assert system.sources["devices_per_node"].strip()
