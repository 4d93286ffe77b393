"""Terminal report of the distributed model: one layout's time and memory, a search's ranking."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.packing import describe
from bertscope.parallel.layouts import MEMORY_KEYS, Cluster, LayoutResult, Workload
from bertscope.parallel.search import SearchResult
from bertscope.perf.predict import provenance
from bertscope.perf.roofline import select_peaks
from bertscope.report.tables import binary, recipe_note, si

_TIME_LABELS = {
    "compute_s": "compute (incl. recompute, grad accumulation)",
    "tp_comm_s": "tensor-parallel communication",
    "pp_comm_s": "pipeline send/recv",
    "bubble_s": "pipeline bubble",
    "dp_comm_s": "data-parallel / ZeRO communication (exposed)",
    "optimizer_s": "optimizer step",
}
_MEMORY_LABELS = {
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states (incl. fp32 master)",
    "activations": "activations",
    "segment_memory": "segment memory (previous segment's states)",
    "transient": "largest transient buffer",
}

_IF_ANY = frozenset({"segment_memory"})
"""Memory parts shown only where they are not zero."""


def _header(workload: Workload, cluster: Cluster, console: Console) -> None:
    """What is modelled: the model, the batch, the devices (and real sequence lengths)."""
    dev = cluster.profile.device
    console.print(
        f"[bold]{escape(workload.model.name)}[/] global batch {workload.global_batch} x seq "
        f"{workload.seq}, {workload.precision.value}, {workload.optimizer.value}"
        f"{recipe_note(workload.run)} on "
        f"[bold]{cluster.devices} x {escape(dev.sku)}[/] ({escape(dev.name)})")
    lengths = describe(workload.run)  # real sequence lengths: tokens/s counts real tokens
    if lengths:
        console.print(f"sequences {escape(lengths)}; tokens/s counts real tokens, not padding")


def _provenance(workload: Workload, cluster: Cluster, console: Console, verbose: bool) -> None:
    """Where the figures come from: the topology in one line (with `verbose`: its links'
    bandwidths and latencies, its notes and the sources of the device's peaks and models)."""
    topo = cluster.topology
    if not verbose:
        console.print(f"topology {escape(topo.name)}: {topo.devices_per_node} per node on "
                      f"{escape(topo.intra.name)}, nodes on {escape(topo.inter.name)}; "
                      f"{topo.algorithm.value} collectives (links and sources: --verbose)")
        return
    console.print(
        f"topology {escape(topo.name)}: {topo.devices_per_node} per node on "
        f"{escape(topo.intra.name)} "
        f"({si(topo.intra.bandwidth, 'B/s')}/direction, {topo.intra.latency * 1e6:.3g} µs/hop), "
        f"nodes on {topo.nics} x {escape(topo.inter.name)} ({si(topo.inter.bandwidth, 'B/s')}, "
        f"{topo.inter.latency * 1e6:.3g} µs/hop); {topo.algorithm.value} collectives")
    if topo.notes:
        console.print(f"note: {escape(topo.notes)}")
    peaks = select_peaks(cluster.profile.device, workload.precision)
    console.print(f"sources: {escape(provenance(cluster.profile, peaks))}")


def memory_line(result: LayoutResult) -> str:
    """The fits / does not fit verdict of a layout: needed vs available memory per device."""
    need, have = binary(result.memory_bytes), binary(result.memory_capacity)
    if result.fits:
        return f"memory: fits, {need} of {have} per device"
    return (f"[bold red]memory: does not fit, needs {need} of {have} per device[/]: add "
            f"devices, raise --tp/--pp/--zero, or add --checkpoint full")


def print_layout(result: LayoutResult, cluster: Cluster, console: Console,
                 *, title: str = "Layout", verbose: bool = False) -> None:
    """Print one job's result first (iteration time, tokens/s, whether it fits: needed vs
    available memory per device), where the figures come from (one line; all with
    `verbose`), then the iteration time split and memory per device."""
    workload = Workload.of(result.job)
    if title == "Layout":
        _header(workload, cluster, console)
    console.print(
        f"[bold]{title}: {result.job.label()}[/], micro-batch {result.micro_batch}: "
        f"iteration [bold]{si(result.iteration_s, 's')}[/], [bold]{si(result.tokens_per_s)}"
        f"[/] tokens/s, bubble {100 * result.bubble_fraction:.1f}% of the pipeline")
    console.print(memory_line(result))
    if title == "Layout":
        _provenance(workload, cluster, console, verbose)
    t = Table(title="Iteration time per device", title_justify="left", header_style="bold")
    for col in ("part", "time", "share"):
        t.add_column(col, justify="left" if col == "part" else "right")
    for key, label in _TIME_LABELS.items():
        value = result.time[key]
        t.add_row(label, si(value, "s"), f"{100 * value / result.iteration_s:.1f}%")
        if key == "compute_s" and result.time["recompute_s"] > 0:
            rec = result.time["recompute_s"]
            t.add_row("  of which recompute", si(rec, "s"),
                      f"{100 * rec / result.iteration_s:.1f}%")
    t.add_row("[bold]iteration[/]", si(result.iteration_s, "s"), "100.0%")
    m = Table(title="Memory per device (peak pipeline stage)", title_justify="left",
              header_style="bold")
    for col in ("part", "bytes", "share"):
        m.add_column(col, justify="left" if col == "part" else "right")
    for key in MEMORY_KEYS:
        value = result.memory[key]
        if key in _IF_ANY and not value:
            continue  # a model without memory has no segment-memory line
        m.add_row(_MEMORY_LABELS[key], binary(value),
                  f"{100 * value / result.memory_bytes:.1f}%")
    m.add_row("[bold]total[/]", binary(result.memory_bytes), "100.0%")
    m.add_row("device capacity", binary(result.memory_capacity), "")
    console.print(t)
    console.print(m)


def print_search(result: SearchResult, cluster: Cluster, console: Console,
                 *, top: int = 10, verbose: bool = False) -> None:
    """Print a search's summary line (how many layouts fit the memory per device), where
    the figures come from (one line; all with `verbose`) and its top layouts."""
    _header(result.workload, cluster, console)
    console.print(f"searched [bold]{result.evaluated:,}[/] layouts in "
                  f"{result.seconds * 1e3:.0f} ms; {result.fitting:,} fit in "
                  f"{binary(cluster.memory_bytes)} per device")
    _provenance(result.workload, cluster, console, verbose)
    if result.fitting == 0:
        console.print("[red]no layout fits device memory[/]: try more devices, more "
                      "micro-batches, or unpin --tp/--pp/--micro-batches/--checkpoint")
        frame = result.frame.nsmallest(top, "memory_bytes")
        what = f"The {len(frame)} smallest-memory layouts"
    else:
        frame = result.frame[result.frame["fits"]].head(top)
        what = f"Top {len(frame)} layouts by throughput"
    t = Table(title=f"{what}: m micro-batches of b "
                    f"sequences per replica; % columns are shares of the iteration; memory "
                    f"per device", title_justify="left", header_style="bold",
              box=box.SIMPLE_HEAD)
    cols = ("dp", "tp", "pp", "sched", "m", "b", "zero", "ckpt", "tokens/s", "iter",
            "comp%", "TP%", "PP%", "DP%", "bubble%", "opt%", "memory")
    for col in cols:
        t.add_column(col, justify="left" if col in ("sched", "ckpt") else "right",
                     no_wrap=True)
    for r in frame.to_dict("records"):
        it = r["iteration_s"]

        def pct(key: str, it: float = it, r: dict = r) -> str:
            return f"{100 * r[key] / it:.1f}"

        sched = "-" if r["pp"] == 1 else r["schedule"] + (
            f" v{r['virtual_stages']}" if r["virtual_stages"] > 1 else "")
        t.add_row(str(r["dp"]), f"{r['tp']}{' sp' if r['sp'] else ''}", str(r["pp"]), sched,
                  str(r["micro_batches"]), str(r["micro_batch"]), str(r["zero"]),
                  r["checkpoint"], si(r["tokens_per_s"]), si(it, "s"), pct("compute_s"),
                  pct("tp_comm_s"), pct("pp_comm_s"), pct("dp_comm_s"), pct("bubble_s"),
                  pct("optimizer_s"), binary(r["memory_bytes"]))
    console.print(t)


__all__ = ["memory_line", "print_layout", "print_search"]
