"""Terminal tables (rich) for op tables and their summaries."""

from __future__ import annotations

import io
import math
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.analytic.memory import MemoryEstimate
from bertscope.config import ModelConfig, RunConfig
from bertscope.families import model_types
from bertscope.optable import Grouped, OpTable, ProfileFacts, Provenance, is_frame
from bertscope.packing import describe
from bertscope.recipes import Recipe

if TYPE_CHECKING:
    import pandas as pd

WIDE = 132
"""Console columns tables are laid out for when stdout is not a terminal and COLUMNS is unset
(rich would use 80 and cut op names short in piped output)."""
NAME_WIDTH = 60
"""Widest an op or kernel name column gets in a terminal table; a longer name ends in "…"
(never folded onto the next line mid-word)."""

_TRAILING = re.compile(r"[ \t]+$")


class _TrimmedStdout(io.TextIOBase):
    """sys.stdout (as it is at each write: capture and redirection follow), or the text
    stream given, with no line ending in spaces: rich pads table titles and borderless rows
    to the table's width."""

    def __init__(self, stream: io.TextIOBase | io.StringIO | None = None) -> None:
        self._spaces = ""  # trailing spaces of an unfinished line, written if text follows
        self._stream = stream

    def write(self, text: str) -> int:
        """Write `text` with each finished line's trailing spaces dropped."""
        lines = (self._spaces + text).split("\n")
        last = lines.pop()
        body = last.rstrip(" \t")
        self._spaces = last[len(body):]
        out = "".join(_TRAILING.sub("", line) + "\n" for line in lines) + body
        (self._stream or sys.stdout).write(out)
        return len(text)

    def flush(self) -> None:
        """Flush sys.stdout (or the stream)."""
        (self._stream or sys.stdout).flush()

    def isatty(self) -> bool:
        """Never a terminal (this console is for redirected output)."""
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """sys.stdout's encoding."""
        return getattr(sys.stdout, "encoding", None) or "utf-8"


class PlainConsole(Console):
    """The console for output that is not a terminal (a file, a pipe): text is never wrapped
    (a line is a line, whatever COLUMNS says), a table's title is a line of its own above
    it rather than wrapped to the table's width, and no line ends in spaces. Tables are
    laid out for COLUMNS, else `WIDE` columns."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """`Console.print`, text unwrapped and a table's title on a line of its own."""
        if len(objects) == 1 and isinstance(objects[0], Table) and objects[0].title:
            table = objects[0]
            title = table.title
            super().print(title, soft_wrap=True)
            table.title = None
            try:
                super().print(table, **kwargs)
            finally:
                table.title = title
            return
        if kwargs.get("soft_wrap") is None and all(isinstance(o, str) for o in objects):
            kwargs["soft_wrap"] = True
        super().print(*objects, **kwargs)


def make_console() -> Console:
    """A console for command output: the terminal's, or a `PlainConsole` when stdout is
    not a terminal (plain unwrapped lines, no trailing spaces; tables laid out for COLUMNS,
    else WIDE columns)."""
    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS")
    return PlainConsole(file=_TrimmedStdout(), width=None if columns else WIDE)


def text_console(buffer: io.StringIO) -> Console:
    """A console that writes into `buffer` what `make_console` writes to a redirected
    stdout (plain unwrapped lines, no trailing spaces, tables `WIDE` columns wide): a
    report saved as a text file reads as `> FILE` would have made it."""
    return PlainConsole(file=_TrimmedStdout(buffer), width=WIDE)


def si(x: float | None, unit: str = "") -> str:
    """A number with an SI prefix and three significant digits: 1.23 G, 45.6 M, 12.3 m,
    4.5 µ ... (999.7 k is 1 M, never 1e+03 k)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0:
        return f"0 {unit}".rstrip()
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"),
                           (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")):
        if abs(x) >= factor * 0.9995:  # what rounds to 1000 of the prefix below is 1 of this
            return f"{x / factor:.3g} {prefix}{unit}".rstrip()
    return f"{x:.3g} {unit}".rstrip()


def binary(x: float) -> str:
    """Bytes with a binary prefix, the one way sizes are written on the terminal: one
    decimal below 100 ("1.0 GiB", "57.5 GiB"), whole numbers from 100 to 999 ("681 GiB"),
    bytes below 1,000 ("512 B"): at most three digits, so 1,020 MiB is "1.0 GiB", never
    "1.02e+03 MiB" or "1020 MiB"."""
    for factor, prefix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= factor * 999.5 / 1024:  # what the unit below would show as 1000+
            v = x / factor
            return f"{v:.1f} {prefix}" if abs(v) < 99.95 else f"{v:.0f} {prefix}"
    return f"{x:.0f} B"


def segment_part(mem: MemoryEstimate) -> str:
    """", segment memory N" where the model carries the previous segment's states
    (Transformer-XL, XLNet), "" otherwise: the memory line's part for it."""
    return f", segment memory {binary(mem.segment_memory)}" if mem.segment_memory else ""


def name_column(table: Table, header: str = "op", **kwargs: Any) -> None:
    """Add a name column (op, kernel, module) to `table`: one line per name, at most
    `NAME_WIDTH` wide, a longer name cut with "…" (never folded mid-word)."""
    table.add_column(header, no_wrap=True, overflow="ellipsis",
                     max_width=kwargs.pop("max_width", NAME_WIDTH), **kwargs)


def shape(r: Mapping[str, Any]) -> str:
    """A row's shape: MxNxK[xbatch] for GEMMs, else its element count."""
    if r["batch"]:
        return f"{r['m']}x{r['n']}x{r['k']}" + (f"x{r['batch']}" if r["batch"] > 1 else "")
    return f"{r['elements']:,}"


def _grouped(summary: Grouped | pd.DataFrame) -> Grouped:
    """A summary frame (`OpTable.summary`) in the pandas-free form (`OpTable.grouped`)."""
    if not is_frame(summary):
        return summary
    by = tuple(summary.index.names) if summary.index.nlevels > 1 else (summary.index.name,)
    return Grouped(by, list(summary.index), {c: summary[c].to_numpy() for c in summary.columns})


def summary_table(summary: Grouped | pd.DataFrame, title: str) -> Table:
    """A rich table of a summary (`OpTable.grouped`, or the frame of `OpTable.summary`): time
    (where known), ops, FLOPs, bytes (where known), their shares and intensity."""
    summary = _grouped(summary)
    timed = "time_s" in summary.columns
    has_bytes = bool(summary.columns["bytes"].sum() > 0)
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column(summary.by[0] if len(summary.by) == 1 and summary.by[0] else "key",
                 no_wrap=True)
    cols = (["time", "time %"] if timed else []) + ["ops", "FLOPs", "FLOP %"]
    if has_bytes:
        cols += ["bytes", "bytes %", "FLOP/B"]
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for key, r in summary.rows():
        cells = [si(r["time_s"], "s"), f"{100 * r['time_share']:.1f}"] if timed else []
        cells += [f"{int(r['count'])}", si(r["flops"]), f"{100 * r['flops_share']:.1f}"]
        if has_bytes:
            intensity = r["flops"] / r["bytes"] if r["bytes"] else 0.0
            cells += [binary(r["bytes"]), f"{100 * r['bytes_share']:.1f}", f"{intensity:.1f}"]
        t.add_row(escape(str(key)), *cells)
    return t


def top_table(table: OpTable, n: int, by: str = "flops") -> Table:
    """A rich table of the n largest rows."""
    what = "time" if by == "time_s" else by
    t = Table(title=f"Top {n} ops by {what} (shape: MxNxK\\[xbatch] for GEMMs, else elements)",
              title_justify="left", header_style="bold")
    timed = by == "time_s"
    cols = ["layer", "sublayer", "phase", "shape", "FLOPs"]
    cols += ["time"] if timed else ["bytes", "FLOP/B"]
    name_column(t)
    for col in cols:
        t.add_column(col, justify="left" if col in ("sublayer", "phase") else "right",
                     no_wrap=True)
    c = table.columns
    for i in table.top_positions(n, by):
        r = {name: col[i] for name, col in c.items()}
        tail = ([si(r["time_s"], "s")] if timed else
                [binary(r["bytes_read"] + r["bytes_written"]), f"{r['intensity']:.1f}"])
        t.add_row(escape(str(r["name"])), "-" if r["layer"] < 0 else str(r["layer"]),
                  str(r["sublayer"]), str(r["phase"]), shape(r), si(r["flops"]), *tail)
    return t


def print_models(models: list[tuple[ModelConfig, int]], console: Console) -> None:
    """Print the model presets: (config, parameter count) pairs."""
    t = Table(title="Model presets", title_justify="left", header_style="bold")
    for col in ("name", "family", "layers", "hidden", "heads", "FFN", "vocab", "params"):
        t.add_column(col, justify="left" if col in ("name", "family") else "right",
                     no_wrap=col == "name")
    for m, params in models:
        t.add_row(escape(m.name), m.family.value, str(m.num_layers), str(m.hidden), str(m.heads),
                  str(m.intermediate), str(m.vocab_size), f"{params / 1e6:.1f} M")
    console.print(t)
    console.print(f"Any Hugging Face config.json ({', '.join(model_types())}) works too: "
                  "bertscope ops path/to/config.json")


def recipe_note(run: RunConfig) -> str:
    """", fused recipe" for a run under a recipe other than the default (eager), else ""."""
    return f", {run.recipe} recipe" if run.recipe is not Recipe.EAGER else ""


def job_line(table: OpTable) -> str:
    """The headline of a table's job: model (bold), batch x seq x micro-batches, precision,
    optimizer, the recipe where it is not the default (eager); "?" where the table carries
    no job."""
    if table.job is None:
        return "[bold]?[/]"
    m, run = table.model, table.run
    lengths = describe(run)  # real sequence lengths, when the run states them
    recipe = recipe_note(run)
    return (f"[bold]{escape(m.name)}[/] batch {run.batch} x seq {run.seq} x {run.micro_batches} "
            f"micro-batch(es), {run.precision}, {run.optimizer}{recipe}"
            + (f"; {escape(lengths)}" if lengths else ""))


def print_breakdowns(table: OpTable, console: Console, *, categories: bool = True) -> None:
    """Print the summary tables by category (unless `categories` is False), sublayer group
    and phase."""
    if categories:
        console.print(summary_table(table.grouped("category"), "By category"))
    console.print(summary_table(table.grouped("group"), "By sublayer group"))
    console.print(summary_table(table.grouped("phase"), "By phase"))


def print_optable(table: OpTable, console: Console, top: int = 10) -> None:
    """Print totals, the breakdowns by category, sublayer group, sublayer and phase, and the
    top ops."""
    tot = table.totals()
    console.print(job_line(table))
    line = (f"params {Provenance.of(table).params:,}   FLOPs/iteration {si(tot['flops'])}   "
            f"bytes moved {binary(tot['bytes_read'] + tot['bytes_written'])}   "
            f"ops {tot['ops']:,}")
    console.print(line)
    mem = MemoryEstimate.on(table)
    if mem:
        console.print(
            f"memory: weights {binary(mem.weights + mem.master_weights)}, "
            f"grads {binary(mem.gradients)}, optimizer {binary(mem.optimizer_states)}, "
            f"activations {binary(mem.activations)}{segment_part(mem)}, "
            f"peak ~ {binary(mem.peak)}")
    print_breakdowns(table, console)
    if top > 0:
        console.print(top_table(table, top))


def comparison_table(comp: pd.DataFrame) -> Table:
    """Measured time per category beside measured and analytic FLOPs and achieved rates."""
    t = Table(title="By category: measured vs analytic (bytes/s = analytic bytes / measured "
              "time)", title_justify="left", header_style="bold")
    for col in ("category", "time", "time %", "FLOPs measured", "FLOPs analytic",
                "FLOP/s", "bytes/s"):
        t.add_column(col, justify="left" if col == "category" else "right", no_wrap=True)
    for key, r in comp.iterrows():
        t.add_row(escape(str(key)), si(r["time_s"], "s"), f"{100 * r['time_share']:.1f}",
                  si(r["flops_measured"]), si(r["flops_analytic"]),
                  si(r["flops_per_s"], "FLOP/s") if r["flops_measured"] else "-",
                  si(r["bytes_per_s"], "B/s"))
    return t


def print_profile(result: Any, console: Console, top: int = 10) -> None:
    """Print a measured profile: iteration facts, category comparison, sublayer groups,
    phases, top ops by time, and the unattributed share."""
    table = result.table
    facts = ProfileFacts.of(table)
    status = " [yellow](partial: interrupted)[/]" if facts.partial else ""
    console.print(
        f"{job_line(table)} on {escape(str(facts.device))} ({facts.threads} threads), "
        f"{facts.iters} measured iteration(s){status}")
    console.print(
        f"iteration {si(facts.iteration_s, 's')}   tokens/s {facts.tokens_per_s:,.0f}   "
        f"op time {si(facts.op_time_s, 's')}   unattributed "
        f"{100 * facts.unattributed_share:.2f}%   framework/profiler gaps "
        f"{100 * facts.framework_share:.1f}% of the profiled iteration")
    if facts.unprofiled_iteration_s is not None:
        n = len(facts.unprofiled_iteration_times_s or ())
        console.print(f"without the profiler: iteration {si(facts.unprofiled_iteration_s, 's')}"
                      f"   tokens/s {table.run.tokens / facts.unprofiled_iteration_s:,.0f}"
                      f"   ({facts.statistic} of {n} warm-up iteration(s) after the first)")
    console.print(comparison_table(result.comparison()))
    print_breakdowns(table, console, categories=False)
    layers = table.df[table.df["layer"] >= 0]["time_s"].sum()
    stack = {"encoder": "encoder layers", "decoder": "decoder layers"}.get(
        str(table.model.family.architecture), "layers")
    console.print(f"{stack}: {100 * layers / facts.op_time_s:.1f}% of op time; "
                  f"optimizer: {100 * _share(table, 'phase', 'optimizer'):.1f}%")
    if top > 0:
        console.print(top_table(table, top, by="time_s"))


def _share(table: OpTable, col: str, value: str) -> float:
    d = table.df
    total = d["time_s"].sum()
    return float(d.loc[d[col] == value, "time_s"].sum() / total) if total else 0.0


__all__ = [
    "NAME_WIDTH",
    "WIDE",
    "PlainConsole",
    "binary",
    "comparison_table",
    "job_line",
    "make_console",
    "name_column",
    "print_breakdowns",
    "print_optable",
    "print_profile",
    "shape",
    "si",
    "summary_table",
    "text_console",
    "top_table",
]
