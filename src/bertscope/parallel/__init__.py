"""The distributed model: collectives, topologies, DP/TP/PP/ZeRO layouts, memory, search.

    >>> from bertscope.config import RunConfig
    >>> from bertscope.job import Job, Layout
    >>> from bertscope.parallel import Cluster, Workload, evaluate, search
    >>> from bertscope.presets import get_model
    >>> run = RunConfig(batch=32, seq=128, precision="bf16", micro_batches=8)
    >>> job = Job(model=get_model("bert-large"), run=run, layout=Layout(dp=16, tp=4))
    >>> cluster = Cluster.build("a100", 64)                # DGX A100 nodes: NVLink 3 + HDR
    >>> r = evaluate(job, cluster)                         # global batch 32 x 8 x 16 = 4096
    >>> r.tokens_per_s, r.time, r.memory, r.fits
    >>> best = search(Workload.of(job), cluster).frame.head(10)  # every layout, ranked

Modules: `collectives` (alpha-beta costs of ring/tree collectives), `topology` (link catalog,
node designs, hierarchical collectives), `memory` (ZeRO static memory, Korthikanti et al.
activations, parameters per device), `pipeline` (schedules, bubble, micro-batches in flight),
`job` (layout, workload, cluster), `compute` (op-table roles -> per-device compute times),
`evaluation` (iteration time and memory of layouts), `layouts` (the public face of the last
four), `search` (every valid layout at once).
"""

from __future__ import annotations

from bertscope.job import Job, Layout, Schedule, ZeroStage, zero_stage
from bertscope.parallel.collectives import (
    Algorithm,
    Collective,
    bucketed_exposed,
    collective_time,
)
from bertscope.parallel.layouts import (
    Cluster,
    LayoutResult,
    Workload,
    bubble_fraction,
    bubble_overhead,
    check_layout,
    evaluate,
    in_flight,
)
from bertscope.parallel.memory import (
    Checkpoint,
    layer_activation_bytes,
    segment_memory_per_device,
    zero_static_bytes,
)
from bertscope.parallel.search import SearchResult, SearchSpace, search
from bertscope.parallel.topology import (
    Link,
    LinkScope,
    Topology,
    links,
    load_link,
    systems,
    topology_for,
)

__all__ = [
    "Algorithm",
    "Checkpoint",
    "Cluster",
    "Collective",
    "Job",
    "Layout",
    "LayoutResult",
    "Link",
    "LinkScope",
    "Schedule",
    "SearchResult",
    "SearchSpace",
    "Topology",
    "Workload",
    "ZeroStage",
    "bubble_fraction",
    "bubble_overhead",
    "bucketed_exposed",
    "check_layout",
    "collective_time",
    "evaluate",
    "in_flight",
    "layer_activation_bytes",
    "links",
    "load_link",
    "search",
    "segment_memory_per_device",
    "systems",
    "topology_for",
    "zero_stage",
    "zero_static_bytes",
]
