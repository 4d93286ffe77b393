"""Section 10: the paper's stack (`eager`) beside modern ones (`fused`, `megatron`): what
changes in an iteration when the same model trains on another software stack.

Each studied device runs the narrowest precision column in its own format (16-bit: fp16 on a
V100, bf16 elsewhere) under every `recipes.Recipe`; `megatron` on one device is its [run]
settings only (its [layout] ones need tensor, pipeline or data parallelism). The findings and
the figure use the largest model in the last phase; the tables hold every model and phase.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from bertscope.config import recipe_run
from bertscope.recipes import Recipe, load
from bertscope.studies.sections.context import MEMORY_BOUND_AT, Ctx, Section, pct
from bertscope.taxonomy import Sublayer

EAGER, FUSED, MEGATRON = (r.value for r in (Recipe.EAGER, Recipe.FUSED, Recipe.MEGATRON))
GROWS_AT = 0.001
"""A category "grows" under fused when it takes at least this share of the eager iteration
more (mean over devices): smaller changes (an embedding over a padded vocabulary) are not
named."""
_KEYS = ["model", "phase", "precision", "format", "device", "recipe"]
_GROUPS = {s.value: s.group.value for s in Sublayer}


def _iteration(ctx: Ctx) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per model, phase, device and recipe: the iteration (time, speedup over eager, shares
    by bound) and its time by category and sublayer group (with the memory-bound part)."""
    rows, parts = [], []
    low = ctx.low
    for m in ctx.models:
        for ph in ctx.phases:
            for dev in ctx.running(low):
                fmt = ctx.on(dev, low)
                eager = 0.0
                for recipe in Recipe:
                    cols = ctx.pred(m, ctx.run(ph, low, recipe=recipe), dev).columns
                    t = cols["time_s"].astype(float)
                    total = float(t.sum())
                    eager = eager or total  # eager is the first recipe
                    bound = cols["bound"].astype(str)
                    keys = (m.name, ph.name, ctx.label(low), fmt.value if fmt else "",
                            dev.device.name, recipe.value)
                    mem = float(t[bound == "memory"].sum())
                    rows.append((*keys, total, eager / total, mem / total, mem,
                                 float(t[bound == "compute"].sum()) / total,
                                 float(t[bound == "overhead"].sum()) / total))
                    by = pd.DataFrame({"category": cols["category"].astype(str),
                                       "group": pd.Series(cols["sublayer"].astype(str)
                                                          ).map(_GROUPS),
                                       "time_s": t, "memory_bound_s": np.where(
                                           bound == "memory", t, 0.0)}
                                      ).groupby(["category", "group"], sort=False).sum()
                    parts += [(*keys, c, g, ts, ms, ts / eager)
                              for (c, g), ts, ms in zip(by.index, by["time_s"],
                                                        by["memory_bound_s"], strict=True)]
    return (pd.DataFrame(rows, columns=[*_KEYS, "iteration_s", "speedup", "memory_bound",
                                        "memory_bound_s", "compute_bound", "overhead_bound"]),
            pd.DataFrame(parts, columns=[*_KEYS, "category", "group", "time_s",
                                         "memory_bound_s", "of_eager"]))


def _by_device(it: pd.DataFrame, values: str) -> pd.DataFrame:
    """`values` per device (rows, in the table's order) and recipe (columns)."""
    order = list(dict.fromkeys(it["device"]))
    return it.pivot(index="device", columns="recipe", values=values).reindex(order)


def _times(v: float) -> str:
    """A speedup as a sentence shows it."""
    return f"{v:.2f}x"


def _devices(n: int) -> str:
    """"1 device", "9 devices"."""
    return f"{n} device{'s' if n != 1 else ''}"


def _span(values: pd.Series, fmt: Any, *, where: bool = True) -> str:
    """The range of a device-indexed series: "a (dev) to b (dev)", or one value where all
    are shown alike; `where`: name the devices."""
    lo, hi = fmt(values.min()), fmt(values.max())
    if lo == hi:
        return lo + (f" ({values.idxmin()})" if where and len(values) == 1 else "")
    if not where:
        return f"{lo} to {hi}"
    return f"{lo} ({values.idxmin()}) to {hi} ({values.idxmax()})"


def _listing(values: pd.Series, fmt: Any) -> str:
    """"dev a, dev b" from a device-indexed series, each value shown by `fmt`."""
    return ", ".join(f"{d} {fmt(v)}" for d, v in values.items())


def _speedups(it: pd.DataFrame, where: str) -> list[str]:
    """The fused and megatron speedups over eager per device."""
    sp = _by_device(it, "speedup")
    fused = sp[FUSED]
    slower = fused[fused < 1]
    out = [f"{where}: the fused stack runs the iteration "
           + ("faster than eager on every device" if slower.empty else
              f"slower than eager on {', '.join(slower.index)}")
           + f": {_listing(fused, lambda v: f'{v:.2f}x')}."]
    if MEGATRON in sp:
        meg = sp[MEGATRON]
        out.append(f"The megatron stack on one device: {_span(meg, _times)} over eager, "
                   f"{_span(meg / fused, _times, where=False)} over fused.")
    return out


def _memory_bound(it: pd.DataFrame) -> str:
    """How the memory-bound share and time move from eager to fused."""
    share = _by_device(it, "memory_bound")
    secs = _by_device(it, "memory_bound_s")
    drop = share[EAGER] - share[FUSED]
    falls, rises = drop[drop > 0], drop[drop < 0]
    cut = 1 - secs[FUSED] / secs[EAGER]
    mean_e, mean_f = share[EAGER].mean(), share[FUSED].mean()
    text = (f"Memory-bound share of the iteration: {pct(mean_e)} under eager, {pct(mean_f)} "
            f"under fused (mean of {_devices(len(share))}); it falls on {len(falls)} of "
            f"{len(share)} devices")
    if len(falls):
        d = falls.idxmax()
        text += (f", most on {d} ({pct(share.loc[d, EAGER])} -> "
                 f"{pct(share.loc[d, FUSED])}, {100 * falls.max():.0f} points)")
    if len(rises):
        text += " and rises on " + ", ".join(f"{d} (+{-100 * v:.1f} points)"
                                             for d, v in rises.items())
    iteration = _by_device(it, "iteration_s")
    rest = 1 - (iteration[FUSED] - secs[FUSED]) / (iteration[EAGER] - secs[EAGER])
    text += (f". In time, fusion removes {_span(cut, pct)} of the memory-bound work and up to "
             f"{pct(rest.max())} ({rest.idxmax()}) of the rest")
    if MEGATRON in share:
        meg = share[MEGATRON]
        text += f"; under megatron the share is {_span(meg, pct)}"
    return text + "."


def _shrinks(cat: pd.DataFrame) -> list[str]:
    """Which category (and sublayer group within it) shrinks most from eager to fused per
    device, as a share of the eager iteration; categories that stop running kernels of their
    own and those that grow."""
    by = cat.pivot_table(index=["device", "category"], columns="recipe", values="of_eager",
                         aggfunc="sum", fill_value=0.0, sort=False)
    drop = (by[EAGER] - by[FUSED]).unstack("category")
    top = drop.idxmax(axis=1)
    grp = cat.pivot_table(index=["device", "category", "group"], columns="recipe",
                          values="of_eager", aggfunc="sum", fill_value=0.0, sort=False)
    gdrop = grp[EAGER] - grp[FUSED]
    winners: dict[tuple[str, str], list[str]] = {}
    for dev, c in top.items():
        g = gdrop.loc[(dev, c)].idxmax()
        winners.setdefault((c, g), []).append(dev)
    parts = []
    for (c, g), devs in winners.items():
        amount = drop.loc[devs, c]
        parts.append(f"{c} ({g}) on {', '.join(devs)} ({pct(amount.min())}"
                     + (f" to {pct(amount.max())}" if len(devs) > 1 else "")
                     + " of the eager iteration)")
    out = ["The category that shrinks most from eager to fused: " + "; ".join(parts) + "."]
    total = by.groupby(level="category", sort=False).sum()
    gone = [c for c in total.index if total.loc[c, EAGER] > 0 and total.loc[c, FUSED] == 0]
    growth = (-drop).mean()  # mean over devices, of the eager iteration
    grows = growth[growth >= GROWS_AT].sort_values(ascending=False)
    if gone:
        out.append(f"Under fused, {', '.join(gone)} runs no kernel of its own (a fused chain "
                   f"counts under its lead category)"
                   + (": " + ", ".join(f"{c} grows by {pct(v)}" for c, v in grows.items())
                      + " of the eager iteration (mean over devices)" if len(grows) else "")
                   + ".")
    return out


def _remains(it: pd.DataFrame, cat: pd.DataFrame) -> str:
    """What is still memory-bound after fusion: the share per device and the categories
    that hold most of it (mean over devices)."""
    share = it[it["recipe"] == FUSED].set_index("device")["memory_bound"]
    f = cat[cat["recipe"] == FUSED]
    iteration = it[it["recipe"] == FUSED].set_index("device")["iteration_s"]
    per = (f.groupby(["device", "category"], sort=False)["memory_bound_s"].sum()
           .unstack("category").fillna(0.0).div(iteration, axis=0).mean())
    lead = per[per > 0].sort_values(ascending=False).head(3)
    heavy = share[share >= MEMORY_BOUND_AT]
    text = (f"After fusion, {_span(share, pct)} of the iteration is still memory-bound (at "
            f"least {pct(MEMORY_BOUND_AT)} on {len(heavy)} of {_devices(len(share))})")
    if lead.empty:
        return text + "."
    text += (f", mostly {', '.join(f'{c} ({pct(v)})' for c, v in lead.items())} of the "
             f"iteration (mean over devices)")
    if MEGATRON in set(cat["recipe"]):
        m = cat[cat["recipe"] == MEGATRON]
        it_m = it[it["recipe"] == MEGATRON].set_index("device")["iteration_s"]
        per_m = (m.groupby(["device", "category"], sort=False)["memory_bound_s"].sum()
                 .unstack("category").reindex(columns=per.index).fillna(0.0)
                 .div(it_m, axis=0).mean())
        cut = (per - per_m).sort_values(ascending=False)
        text += (f"; the megatron stack cuts the memory-bound {cut.index[0]} most "
                 f"({pct(per[cut.index[0]])} -> {pct(per_m[cut.index[0]])} of its iteration)")
    return text + "."


def _value(v: Any) -> str:
    """A recipe setting as a note shows it."""
    return ("on" if v else "off") if isinstance(v, bool) else str(getattr(v, "value", v))


def _notes(ctx: Ctx) -> list[str]:
    """What each recipe changes from eager (read from the recipe files), what megatron means
    on one device, and the devices the stacks were not written for."""
    base = recipe_run(Recipe.EAGER)
    notes = []
    for r in (Recipe.FUSED, Recipe.MEGATRON):
        own = recipe_run(r)
        diff = [f"{k} {_value(base[k])} -> {_value(v)}" for k, v in own.items() if v != base[k]]
        notes.append(f"{r.value} differs from eager in: {', '.join(diff)} "
                     f"(src/bertscope/data/recipes/{r.value}.toml cites each).")
    layout = list(load(Recipe.MEGATRON)["layout"])
    if layout:
        notes.append(f"megatron on one device (tp = pp = dp = 1): its layout settings "
                     f"({', '.join(layout)}) need tensor, pipeline or data parallelism and "
                     f"do not apply; its run settings above do.")
    other = [d.device.name for d in ctx.running(ctx.low) if d.device.vendor != "NVIDIA"]
    if other:
        notes.append(f"The recipes are NVIDIA software stacks; on {', '.join(other)} the same "
                     f"kernels are a what-if.")
    return notes + ctx.skipped_in(ctx.low)


def recipe_stacks(ctx: Ctx) -> Section:
    """10. The same iteration under the eager, fused and megatron recipes: speedups, the
    memory-bound share, which category shrinks and what stays memory-bound."""
    it, cat = _iteration(ctx)
    big, ph = ctx.big.name, ctx.phases[-1].name
    sel_it = it[(it["model"] == big) & (it["phase"] == ph)]
    sel_cat = cat[(cat["model"] == big) & (cat["phase"] == ph)]
    where = f"{big}, {ph}, {ctx.label(ctx.low)}"
    findings = [*_speedups(sel_it, where), _memory_bound(sel_it), *_shrinks(sel_cat),
                _remains(sel_it, sel_cat)]
    return Section("recipes", "Training recipes: the paper's stack and fused stacks", findings,
                   {"recipes": it, "recipe_time": cat}, "recipes", notes=_notes(ctx))


__all__ = ["recipe_stacks"]
