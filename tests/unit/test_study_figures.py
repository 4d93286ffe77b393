"""The study's figures: one colour per category from one map, used by every figure; legends
outside the axes; shares on 0-100 % axes; the paper's per-GEMM bars; one roofline per device
with its published ceilings; the optimizer's share one line per sequence length."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.colors import to_rgb

from bertscope.analytic import build
from bertscope.config import Precision, RunConfig
from bertscope.perf import load_profile, predict
from bertscope.presets import get_model
from bertscope.report.palette import CATEGORY_COLORS, category_color
from bertscope.report.study_figures import RENDERERS, measured_title
from bertscope.studies import sections as s
from bertscope.studies.study import PHASES
from bertscope.sweep import sweep
from bertscope.taxonomy import Category

CATEGORY_NAMES = {c.value for c in Category}


@pytest.fixture(scope="module")
def figures():
    """Every section's figure for bert-base on an A100 and a V100 (fp32 and 16-bit), with a
    trace as the measured part; closed after the module."""
    import matplotlib.pyplot as plt

    trace = predict(build(get_model("bert-base"), RunConfig(batch=2, seq=32)),
                    load_profile("a100"))
    ctx = s.Ctx(models=[get_model("bert-base")],
                devices=[load_profile("v100"), load_profile("a100")],
                precisions=[Precision.FP32, Precision.BF16], phases=list(PHASES),
                measured=[s.MeasuredPart(label="trace x.json", model="trace", phase="trace",
                                         precision="trace", table=trace, note="a trace")])
    steps = (s.where_time_goes, s.bound_share, s.gemm_shapes,
             lambda c: s.optimizer_share(c, sweep), s.mixed_precision,
             lambda c: s.scaling(c, sweep), lambda c: s.checkpointing(c, sweep),
             s.distributed, lambda c: s.implications(c, sweep), s.recipe_stacks)
    out = {}
    for step in steps:
        sec = step(ctx)
        fig = RENDERERS[sec.figure](sec)
        fig.canvas.draw()
        out[sec.key] = (sec, fig)
    yield out
    for _, fig in out.values():
        plt.close(fig)


def _rgb(color) -> tuple[float, float, float]:
    return tuple(round(v, 4) for v in to_rgb(color))


def test_every_category_has_its_own_colour() -> None:
    assert set(CATEGORY_COLORS) == set(Category)
    assert len({_rgb(c) for c in CATEGORY_COLORS.values()}) == len(Category)
    # dropout, loss and the optimizer (three similar pinks in the issue) far apart: at least
    # a third of the RGB cube's diagonal (sqrt(3) / 3 = 0.577) between any two
    trio = [to_rgb(CATEGORY_COLORS[c]) for c in (Category.DROPOUT, Category.LOSS,
                                                  Category.OPTIMIZER)]
    for a, b in itertools.combinations(trio, 2):
        assert sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5 > 0.577


def _artists_by_label(fig):
    """(label, face colour) of every category's bar, area and legend handle in `fig`."""
    for ax in fig.axes:
        for bars in ax.containers:  # a bar() call: its label, a patch per bar
            if bars.get_label() in CATEGORY_NAMES:
                yield from ((bars.get_label(), p.get_facecolor()) for p in bars)
        for art in ax.collections:
            label = art.get_label()
            if label in CATEGORY_NAMES:
                face = art.get_facecolor()
                yield label, face[0] if getattr(face, "ndim", 1) == 2 else face
    for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        for handle, text in zip(leg.legend_handles, leg.get_texts(), strict=True):
            if text.get_text() in CATEGORY_NAMES:
                face = (handle.get_color() if hasattr(handle, "get_color") and
                        not hasattr(handle, "get_facecolor") else handle.get_facecolor())
                if hasattr(handle, "get_markerfacecolor"):
                    face = handle.get_markerfacecolor()
                yield text.get_text(), face[0] if getattr(face, "ndim", 1) == 2 else face


def test_every_figure_colours_categories_from_the_one_map(figures) -> None:
    seen = 0
    for key, (_, fig) in figures.items():
        for label, face in _artists_by_label(fig):
            assert _rgb(face) == _rgb(category_color(label)), (key, label)
            seen += 1
    assert seen > 100  # stacked bars, areas and legends of four figures were checked
    # the roofline points: every scatter point has its category's colour
    palette = {_rgb(c) for c in CATEGORY_COLORS.values()}
    _, fig = figures["bound"]
    points = [_rgb(f) for ax in fig.axes for col in ax.collections
              for f in col.get_facecolors()]
    assert points and set(points) <= palette


def test_no_legend_over_the_axes(figures) -> None:
    for key, (_, fig) in figures.items():
        legends = list(fig.legends)
        for sub in getattr(fig, "subfigs", []):
            legends += sub.legends
        legends += [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        assert legends, key
        for leg, ax in itertools.product(legends, [a for a in fig.axes if a.get_visible()]):
            lb, ab = leg.get_window_extent(), ax.get_window_extent()
            # overlap by more than a pixel either way
            assert (lb.x1 <= ab.x0 + 1 or ab.x1 <= lb.x0 + 1 or lb.y1 <= ab.y0 + 1
                    or ab.y1 <= lb.y0 + 1), (key, ax.get_title())


def test_percent_axes_run_within_0_to_100(figures) -> None:
    n = 0
    for key, (_, fig) in figures.items():
        for ax in fig.axes:
            if "%" not in ax.get_ylabel():
                continue
            lo, hi = ax.get_ylim()
            assert 0 <= lo < hi <= 100, (key, ax.get_ylabel(), lo, hi)
            n += 1
    assert n >= 8
    # stacked category shares are shares of one whole: each bar tops out at 100%
    _, fig = figures["time"]
    for ax in fig.axes:
        tops = {}
        for p in ax.patches:
            x = round(p.get_x(), 6)
            tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
        assert tops and all(t == pytest.approx(100, abs=1e-6) for t in tops.values())


def test_per_gemm_bars_name_the_papers_gemms_and_passes(figures) -> None:
    """Pati et al. (IISWC 2022) break BERT's GEMMs into QKV, attention scores and context,
    attention output, FC1, FC2 and the MLM head, each in forward, data- and weight-gradient
    passes."""
    _, fig = figures["gemm"]
    time_ax, eff_ax = fig.axes[:2]
    names = [t.get_text() for t in time_ax.get_xticklabels()]
    assert {"QKV", "scores", "context", "attention output", "FC1", "FC2",
            "MLM head"} <= set(names)
    assert names.index("QKV") < names.index("FC1") < names.index("FC2")
    passes = [t.get_text() for t in fig.legends[0].get_texts()]
    assert passes == ["forward", "data gradient", "weight gradient"]
    # the time panel's bars are shares of all GEMM time: they add up to 100%
    assert sum(p.get_height() for p in time_ax.patches) == pytest.approx(100, rel=1e-9)
    # scores and context (activation x activation) have no weight gradient: 2 bars, not 3
    width = time_ax.patches[0].get_width()
    x_scores = names.index("scores")
    bars = [p for p in time_ax.patches if p.get_height() > 0
            and abs(p.get_x() + width / 2 - x_scores - width) < 1.5 * width]
    assert len(bars) == 2
    assert all(0 <= p.get_height() <= 100 for p in eff_ax.patches)


def test_one_roofline_per_device_with_its_ceilings(figures) -> None:
    """A100 SXM4 bf16: 312 TFLOP/s dense tensor peak, 2,039 GB/s HBM2e (NVIDIA A100 datasheet),
    ridge 312e12 / 2039e9 = 153 FLOP/byte; V100 SXM2 fp16: 125 TFLOP/s, 900 GB/s (V100
    datasheet), ridge 139."""
    _, fig = figures["bound"]
    roof_axes = [ax for ax in fig.axes if ax.get_xscale() == "log" and ax.get_visible()]
    assert len(roof_axes) == 2
    for short, peak, ridge in (("a100 (bf16)", 312e12, 153.0), ("v100 (fp16)", 125e12, 139.0)):
        ax = next(a for a in roof_axes if a.get_title().startswith(short))
        tops = [max(line.get_ydata()) for line in ax.get_lines() if len(line.get_ydata()) > 2]
        assert any(t == pytest.approx(peak, rel=1e-3) for t in tops), (short, tops)
        verticals = [line.get_xdata()[0] for line in ax.get_lines()
                     if len(set(line.get_xdata())) == 1]
        assert any(v == pytest.approx(ridge, rel=0.01) for v in verticals), (short, verticals)


def test_optimizer_share_is_one_line_per_sequence_length(figures) -> None:
    sec, fig = figures["optimizer"]
    df = sec.tables["optimizer_share"]
    seqs = sorted(df["seq"].unique())
    batches = set(df["batch"])
    panels = [ax for ax in fig.axes if ax.get_lines()]
    assert len(panels) == df["micro_batches"].nunique()
    for ax in panels:
        lines = ax.get_lines()
        assert len(lines) == df["optimizer"].nunique() * len(seqs)
        for line in lines:
            x = list(line.get_xdata())
            assert x == sorted(x) and len(set(x)) == len(x), line.get_label()
            seq = int(line.get_label().rsplit("seq ", 1)[1])
            # tokens = batch x micro-batches x seq: every point of a line has the same seq
            assert all(t % seq == 0 for t in x)
            micro = int(ax.get_title().split()[0])
            assert {t // (seq * micro) for t in x} <= batches


def test_measured_panel_names_each_source_once(figures) -> None:
    assert measured_title("trace x.json", "trace", "trace") == "measured: trace x.json"
    assert measured_title("this machine (cpu)", "bert-mini", "fp32") == \
        "measured: this machine (cpu), bert-mini, fp32"
    _, fig = figures["time"]
    titles = [ax.get_title() for ax in fig.axes]
    assert "measured: trace x.json" in titles
    assert not any("trace, trace" in t for t in titles)
