"""Links, node designs and hierarchical collectives: how long a collective takes on a cluster.

The catalog (`bertscope/data/interconnects.toml`) holds links (NVLink 2-5, PCIe 3-5 x16,
InfiniBand EDR/HDR/NDR, RoCE 100-400G, TPU ICI v3/v4) with a source per figure, and systems
(DGX nodes, TPU pods) that say which links join which devices.

A `Topology` is a node design: `devices_per_node` devices joined by the `intra` link, nodes
joined by `nics_per_node` ports of the `inter` link. Ranks are numbered with tensor parallel
fastest, then data parallel, then pipeline stages (Megatron-LM's default order), so a group
of `size` ranks at `stride` has g = clamp(devices_per_node / stride, 1, size) members per node
on k = size / g nodes. Its collectives are hierarchical (the two-level scheme of NCCL and
Horovod; Jia et al., Highly Scalable Deep Learning Training System with Mixed-Precision,
2018, section 3.3; Thakur et al. 2005 for each flat step):

    all-reduce      = intra reduce-scatter(n, g) + inter all-reduce(n/g, k) + intra all-gather(n, g)
    reduce-scatter  = intra reduce-scatter(n, g) + inter reduce-scatter(n/g, k)
    all-gather      = inter all-gather(n/g, k) + intra all-gather(n, g)
    send/recv       = over the inter link when the group spans nodes, else the intra link

With k = 1 these are the flat intra-node collectives; with g = 1 the flat inter-node ones.
Each device's share of the inter-node link is inter.bandwidth x nics_per_node /
devices_per_node: every device of a node communicates at once (all data-parallel groups
reduce together), so they share the node's NICs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from decimal import Decimal
from enum import StrEnum
from functools import cache
from importlib.resources import files
from typing import Any

import numpy as np

from bertscope.bounded import loads_toml
from bertscope.errors import BertscopeError, is_positive_int, is_positive_number, parse_enum
from bertscope.hardware import Device
from bertscope.parallel.collectives import Algorithm, ArrayLike, Collective, collective_time


class LinkScope(StrEnum):
    """Where a link sits: inside a node (NVLink, PCIe, ICI) or between nodes (a NIC)."""

    INTRA = "intra"
    INTER = "inter"


@dataclass(kw_only=True, frozen=True, slots=True)
class Link:
    """One kind of link, seen from one device (or one NIC for inter-node links)."""

    name: str
    """Catalog key, e.g. "nvlink3"."""
    description: str
    """What the figures describe."""
    scope: LinkScope
    """intra (inside a node) or inter (between nodes)."""
    bandwidth: float
    """Bytes/s per device (per NIC) per direction."""
    latency: float
    """Seconds per hop (the alpha of the alpha-beta model)."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Citation per figure ("bandwidth", "latency")."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "scope", parse_enum(LinkScope, self.scope, "link scope"))
        if not is_positive_number(self.bandwidth):
            raise BertscopeError(f"link {self.name!r}: bandwidth must be a positive number of "
                                 f"bytes/s, got {self.bandwidth!r}")
        if not (is_positive_number(self.latency) or self.latency == 0):
            raise BertscopeError(f"link {self.name!r}: latency must be >= 0 seconds, got "
                                 f"{self.latency!r}")

    def __hash__(self) -> int:
        return hash((self.name, self.scope, self.bandwidth, self.latency))

    def scaled(self, *, bandwidth: float = 1.0, latency: float = 1.0) -> Link:
        """A copy with bandwidth and latency multiplied by the given factors."""
        return replace(self, name=f"{self.name}*", bandwidth=self.bandwidth * bandwidth,
                       latency=self.latency * latency)


@dataclass(kw_only=True, frozen=True, slots=True)
class Topology:
    """A node design: devices per node, the links inside and between nodes."""

    name: str
    """System name, e.g. "dgx-a100", or "custom"."""
    devices_per_node: int
    """Devices joined by the intra-node link."""
    intra: Link
    """Link between devices of one node."""
    inter: Link
    """Link between nodes (one NIC port)."""
    nics_per_node: int | None = None
    """Ports of `inter` per node (None: one per device)."""
    algorithm: Algorithm = Algorithm.AUTO
    """Ring, tree, or the faster of both for every collective."""
    notes: str = field(default="", compare=False)
    """Caveats about the system."""

    def __post_init__(self) -> None:
        for f in ("devices_per_node", "nics_per_node"):
            value = getattr(self, f)
            if value is None and f == "nics_per_node":
                continue
            if not is_positive_int(value):
                raise BertscopeError(f"topology {self.name!r}: {f} must be a positive integer, "
                                     f"got {value!r}")
        object.__setattr__(self, "algorithm",
                           parse_enum(Algorithm, self.algorithm, "algorithm"))

    @property
    def nics(self) -> int:
        """Inter-node ports per node."""
        return self.nics_per_node if self.nics_per_node is not None else self.devices_per_node

    @property
    def inter_bandwidth(self) -> float:
        """Each device's share of the node's inter-node bandwidth, bytes/s per direction."""
        return self.inter.bandwidth * self.nics / self.devices_per_node

    def fit(self, devices: int) -> Topology:
        """This topology for a cluster of `devices` (a partial node when fewer than a node)."""
        if devices >= self.devices_per_node:
            return self
        nics = max(1, round(self.nics * devices / self.devices_per_node))
        return replace(self, devices_per_node=devices, nics_per_node=nics)

    def scaled(self, *, bandwidth: float = 1.0, latency: float = 1.0) -> Topology:
        """A copy with both links' bandwidth and latency multiplied by the factors."""
        return replace(self, intra=self.intra.scaled(bandwidth=bandwidth, latency=latency),
                       inter=self.inter.scaled(bandwidth=bandwidth, latency=latency))

    def span(self, size: ArrayLike, stride: ArrayLike = 1) -> tuple[np.ndarray, np.ndarray]:
        """(members per node g, nodes k) of a group of `size` ranks `stride` apart."""
        s = np.asarray(size, dtype=float)
        st = np.maximum(np.asarray(stride, dtype=float), 1.0)
        g = np.clip(np.floor(self.devices_per_node / st), 1.0, s)
        return g, np.ceil(s / g)

    def time(self, kind: Collective, nbytes: ArrayLike, size: ArrayLike,
             stride: ArrayLike = 1) -> np.ndarray:
        """Seconds for a (hierarchical) collective of `nbytes` over a group of `size` ranks
        `stride` apart (see the module docstring). Arrays broadcast; size 1 costs nothing."""
        kind = Collective(kind)
        n = np.asarray(nbytes, dtype=float)
        g, k = self.span(size, stride)
        a = self.algorithm
        ib, il = self.intra.bandwidth, self.intra.latency
        eb, el = self.inter_bandwidth, self.inter.latency

        def intra(c: Collective, m: np.ndarray) -> np.ndarray:
            return np.asarray(collective_time(c, m, g, ib, il, a))

        def inter(c: Collective, m: np.ndarray) -> np.ndarray:
            return np.asarray(collective_time(c, m, k, eb, el, a))

        if kind is Collective.ALL_REDUCE:
            t = (intra(Collective.REDUCE_SCATTER, n) + inter(Collective.ALL_REDUCE, n / g)
                 + intra(Collective.ALL_GATHER, n))
            # one node: a flat intra all-reduce (a tree may beat reduce-scatter + all-gather)
            t = np.where(k > 1, t, intra(Collective.ALL_REDUCE, n))
        elif kind is Collective.REDUCE_SCATTER:
            t = intra(kind, n) + inter(kind, n / g)
        elif kind is Collective.ALL_GATHER:
            t = inter(kind, n / g) + intra(kind, n)
        else:
            t = np.where(k > 1, collective_time(kind, n, 2, eb, el, a),
                         collective_time(kind, n, 2, ib, il, a))
            t = np.where(np.asarray(size) > 1, t, 0.0)
        return t


# -- catalog ------------------------------------------------------------------------------------
_BANDWIDTH_UNITS = {"GBps": 10**9, "Gbitps": 10**9 // 8, "TBps": 10**12}
_LINK_KEYS = frozenset({"description", "scope", "latency_us", "sources",
                        *(f"bandwidth_{u}" for u in _BANDWIDTH_UNITS)})
_SYSTEM_KEYS = frozenset({"devices", "devices_per_node", "intra", "inter", "nics_per_node",
                          "notes", "sources"})


@dataclass(kw_only=True, frozen=True, slots=True)
class System:
    """A catalog node design and the devices it is built from."""

    name: str
    devices: tuple[str, ...]
    """Catalog device names this system holds."""
    topology: Topology
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


@cache
def _catalog() -> tuple[dict[str, Link], dict[str, System]]:
    text = (files("bertscope") / "data" / "interconnects.toml").read_text(encoding="utf-8")
    return parse_catalog(text, origin="interconnects.toml")


def parse_catalog(text: str, *, origin: str = "<text>") -> tuple[dict[str, Link],
                                                                   dict[str, System]]:
    """Parse interconnect-catalog TOML into links and systems (see the data file's header).

    Raises `BertscopeError` when a figure lacks a source or a field is unknown."""
    raw = loads_toml(text, origin)
    refs = raw.get("references", {})
    links = {name: _link(name, body, refs, origin)
             for name, body in raw.get("links", {}).items()}
    systems = {name: _system(name, body, links, refs, origin)
               for name, body in raw.get("systems", {}).items()}
    return links, systems


def _cite(value: Any, refs: dict[str, str], where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BertscopeError(f"{where} has no source; cite where the figure comes from")
    value = value.strip()
    if not value.startswith("@"):
        return value
    ref, _, detail = value[1:].partition(",")
    if ref.strip() not in refs:
        raise BertscopeError(f"{where}: unknown reference @{ref.strip()}")
    return f"{refs[ref.strip()]}; {detail.strip()}" if detail.strip() else refs[ref.strip()]


def _link(name: str, body: dict[str, Any], refs: dict[str, str], origin: str) -> Link:
    where = f"{origin}: link {name!r}"
    unknown = sorted(set(body) - _LINK_KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_LINK_KEYS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise BertscopeError(f"{where}: unknown field {unknown[0]!r}{hint}")
    units = [u for u in _BANDWIDTH_UNITS if f"bandwidth_{u}" in body]
    if len(units) != 1:
        raise BertscopeError(f"{where}: give exactly one of "
                             f"{', '.join('bandwidth_' + u for u in _BANDWIDTH_UNITS)}")
    bw_key = f"bandwidth_{units[0]}"
    sources = body.get("sources", {})
    for key in (bw_key, "latency_us"):
        if key not in body:
            raise BertscopeError(f"{where}: missing {key}")
        if not is_positive_number(body[key]):
            raise BertscopeError(f"{where}: {key} must be a positive number, got {body[key]!r}")
    return Link(
        name=name,
        description=str(body.get("description", name)),
        scope=parse_enum(LinkScope, body.get("scope", ""), f"{where}: scope"),
        bandwidth=float(Decimal(str(body[bw_key])) * _BANDWIDTH_UNITS[units[0]]),
        latency=float(Decimal(str(body["latency_us"])) / 10**6),
        sources={"bandwidth": _cite(sources.get(bw_key), refs, f"{where}: {bw_key}"),
                 "latency": _cite(sources.get("latency_us"), refs, f"{where}: latency_us")},
    )


def _system(name: str, body: dict[str, Any], links: dict[str, Link], refs: dict[str, str],
            origin: str) -> System:
    where = f"{origin}: system {name!r}"
    unknown = sorted(set(body) - _SYSTEM_KEYS)
    if unknown:
        raise BertscopeError(f"{where}: unknown field {unknown[0]!r}")
    for key in ("intra", "inter"):
        if body.get(key) not in links:
            raise BertscopeError(f"{where}: {key} link {body.get(key)!r} is not in [links]")
    sources = body.get("sources", {})
    cited = {k: _cite(sources.get(k), refs, f"{where}: {k}")
             for k in ("devices_per_node", "nics_per_node") if k in body}
    topo = Topology(name=name, devices_per_node=body.get("devices_per_node", 0),
                    intra=links[body["intra"]], inter=links[body["inter"]],
                    nics_per_node=body.get("nics_per_node"), notes=str(body.get("notes", "")))
    return System(name=name, devices=tuple(body.get("devices", [])), topology=topo,
                  sources=cited)


def links() -> dict[str, Link]:
    """Every catalog link by name."""
    return dict(_catalog()[0])


def systems() -> dict[str, System]:
    """Every catalog system by name."""
    return dict(_catalog()[1])


def load_link(name: str) -> Link:
    """A catalog link by name (case-insensitive); unknown names suggest close ones."""
    known = _catalog()[0]
    key = str(name).strip().lower()
    if key in known:
        return known[key]
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BertscopeError(f"unknown link {name!r}; {hint}catalog: {', '.join(known)}")


def topology_for(device: Device, *, devices_per_node: int | None = None,
                 intra: str | Link | None = None, inter: str | Link | None = None) -> Topology:
    """The node design a device usually comes in (its catalog system), with any of
    `devices_per_node`, `intra`, `inter` overridden.

    A device no system holds gets a generic node: 8 devices joined at half its published
    (both-directions) interconnect figure, or PCIe 4.0 x16 where it publishes none, and one
    InfiniBand HDR port per device; `notes` says so."""
    system = next((s for s in _catalog()[1].values() if device.name in s.devices), None)
    if system is not None:
        topo = system.topology
    else:
        if device.interconnect_bandwidth is not None:
            pcie = load_link("pcie4")
            link = Link(name=f"{device.name}-link",
                        description=device.interconnect_note or "device interconnect",
                        scope=LinkScope.INTRA, bandwidth=device.interconnect_bandwidth / 2,
                        latency=pcie.latency,
                        sources={"bandwidth": "device catalog figure, halved (both directions "
                                              "summed there)",
                                 "latency": "assumed default: the PCIe per-hop latency"})
        else:
            link = load_link("pcie4")
        topo = Topology(name="generic", devices_per_node=8, intra=link,
                        inter=load_link("ib-hdr"),
                        notes=f"no catalog system holds {device.name}: assumed 8 per node, "
                              f"{link.name} inside, one ib-hdr port per device between nodes")
    changes: dict[str, Any] = {}
    if devices_per_node is not None:
        changes["devices_per_node"] = devices_per_node
        changes["nics_per_node"] = None
    if intra is not None:
        changes["intra"] = intra if isinstance(intra, Link) else load_link(intra)
    if inter is not None:
        changes["inter"] = inter if isinstance(inter, Link) else load_link(inter)
    if changes:
        topo = replace(topo, name=f"{topo.name} (custom)", **changes)
    return topo


__all__ = ["Link", "LinkScope", "System", "Topology", "links", "load_link", "parse_catalog",
           "systems", "topology_for"]
