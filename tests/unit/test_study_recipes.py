"""The study's recipes section (the paper's eager stack beside the fused and megatron
recipes): its numbers equal predictions made here without the section's code (build, fuse
where the recipe fuses, predict), its findings say what those numbers say, the V100 runs its
16-bit column in fp16, and the section is in the report, before "How this was obtained"."""

from __future__ import annotations

import json

import pytest

from bertscope.analytic import build
from bertscope.config import Precision, RunConfig
from bertscope.perf import fuse, load_profile, predict
from bertscope.presets import get_model
from bertscope.recipes import Recipe
from bertscope.studies import sections as s
from bertscope.studies.study import PHASES, StudyConfig, study

DEVICES = ("v100", "a100", "tpu-v4")
FORMATS = {"v100-sxm2-32gb": "fp16", "a100-sxm4-80gb": "bf16", "tpu-v4": "bf16"}
"""The 16-bit format each device runs (V100: no bf16; NVIDIA V100 datasheet lists fp16
tensor cores only)."""
MODEL = "bert-base"


@pytest.fixture(scope="module")
def section() -> s.Section:
    ctx = s.Ctx(models=[get_model(MODEL)], devices=[load_profile(d) for d in DEVICES],
                precisions=[Precision.FP32, Precision.BF16], phases=list(PHASES))
    return s.recipe_stacks(ctx)


@pytest.fixture(scope="module")
def by_hand() -> dict[tuple[str, str], dict[str, object]]:
    """Per device and recipe, in the last phase: the predicted iteration, its memory-bound
    time (rows the roofline calls memory-bound) and its time per category, computed from op
    tables built and predicted here."""
    ph = PHASES[-1]
    out = {}
    for d in DEVICES:
        dev = load_profile(d)
        fmt = FORMATS[dev.device.name]
        for r in Recipe:
            run = RunConfig(batch=ph.batch, seq=ph.seq, precision=fmt, optimizer="lamb",
                            recipe=r)
            table = build(get_model(MODEL), run)
            df = predict(fuse(table) if run.fusion else table, dev).df
            mem = df.loc[df["bound"].astype(str) == "memory"]
            out[(dev.device.name, r.value)] = {
                "total": df["time_s"].sum(), "memory": mem["time_s"].sum(),
                "categories": df.groupby(df["category"].astype(str))["time_s"].sum(),
                "memory_categories": mem.groupby(mem["category"].astype(str))["time_s"].sum()}
    return out


def test_the_table_equals_predictions_made_here(section, by_hand) -> None:
    it = section.tables["recipes"]
    last = it[it["phase"] == PHASES[-1].name]
    assert len(last) == len(DEVICES) * len(Recipe)
    for row in last.to_dict(orient="records"):
        want = by_hand[(row["device"], row["recipe"])]
        eager = by_hand[(row["device"], "eager")]["total"]
        assert row["format"] == FORMATS[row["device"]]
        assert row["iteration_s"] == pytest.approx(want["total"], rel=1e-12)
        assert row["speedup"] == pytest.approx(eager / want["total"], rel=1e-12)
        assert row["memory_bound"] == pytest.approx(want["memory"] / want["total"], rel=1e-9)
    # the category table adds up to the same iterations, category by category
    cat = section.tables["recipe_time"]
    cat = cat[cat["phase"] == PHASES[-1].name]
    for (dev, rec), g in cat.groupby(["device", "recipe"]):
        want = by_hand[(dev, rec)]
        got = g.groupby("category")["time_s"].sum()
        assert set(got.index) == set(want["categories"].index)
        for c, v in want["categories"].items():
            assert got[c] == pytest.approx(v, rel=1e-9)
        assert g["memory_bound_s"].sum() == pytest.approx(want["memory"], rel=1e-9)


def test_the_fused_stack_is_faster_and_the_findings_say_by_how_much(section, by_hand) -> None:
    text = " ".join(section.findings)
    for d in FORMATS:
        e, f = by_hand[(d, "eager")]["total"], by_hand[(d, "fused")]["total"]
        assert f < e  # fusion never slows an iteration (perf.kernel_fusion)
        assert f"{d} {e / f:.2f}x" in text


def test_the_memory_bound_share_finding_is_the_mean_of_the_shares(section, by_hand) -> None:
    share = {k: v["memory"] / v["total"] for k, v in by_hand.items()}
    eager = sum(share[(d, "eager")] for d in FORMATS) / len(FORMATS)
    fused = sum(share[(d, "fused")] for d in FORMATS) / len(FORMATS)
    falls = [d for d in FORMATS if share[(d, "fused")] < share[(d, "eager")]]
    text = next(f for f in section.findings if f.startswith("Memory-bound share"))
    assert f"{s.pct(eager)} under eager, {s.pct(fused)} under fused" in text
    assert f"falls on {len(falls)} of {len(FORMATS)} devices" in text
    meg = [share[(d, "megatron")] for d in FORMATS]
    assert f"under megatron the share is {s.pct(min(meg))}" in text


def test_the_category_that_shrinks_most_is_named_per_device(section, by_hand) -> None:
    text = next(f for f in section.findings if f.startswith("The category that shrinks"))
    for d in FORMATS:
        e, f = by_hand[(d, "eager")], by_hand[(d, "fused")]
        drop = (e["categories"] - f["categories"].reindex(e["categories"].index,
                                                         fill_value=0.0)) / e["total"]
        top = drop.idxmax()
        # the clause naming the device starts with its category
        clause = next(c for c in text.split(": ", 1)[1].split("; ") if d in c)
        assert clause.startswith(f"{top} ("), (d, top, clause)


def test_what_stays_memory_bound_after_fusion(section, by_hand) -> None:
    text = next(f for f in section.findings if f.startswith("After fusion"))
    share = {d: by_hand[(d, "fused")]["memory"] / by_hand[(d, "fused")]["total"]
             for d in FORMATS}
    lo, hi = min(share, key=share.get), max(share, key=share.get)
    assert text.startswith(f"After fusion, {s.pct(share[lo])} ({lo}) to {s.pct(share[hi])} "
                           f"({hi})")
    # the category with the most memory-bound time (mean over devices, of each iteration)
    mean = sum(by_hand[(d, "fused")]["memory_categories"] / by_hand[(d, "fused")]["total"]
               for d in FORMATS) / len(FORMATS)
    first = mean.dropna().idxmax()
    assert f"mostly {first} ({s.pct(mean[first])})" in text


def test_the_v100_runs_fp16_and_no_finding_says_bf16_about_it(section) -> None:
    for name in ("recipes", "recipe_time"):
        df = section.tables[name]
        assert set(df[df["device"] == "v100-sxm2-32gb"]["format"]) == {"fp16"}
        assert set(df[df["device"] != "v100-sxm2-32gb"]["format"]) == {"bf16"}
        assert set(df["precision"]) == {"16-bit"}
    assert not any("bf16" in f for f in section.findings)
    assert any(n.startswith("v100-sxm2-32gb: its 16-bit column runs fp16")
               for n in section.notes)


def test_megatron_on_one_device_says_which_settings_apply(section) -> None:
    note = next(n for n in section.notes if n.startswith("megatron on one device"))
    for key in ("sequence_parallel", "zero", "schedule"):  # megatron.toml's [layout]
        assert key in note
    run = next(n for n in section.notes if n.startswith("megatron differs"))
    assert "attention eager -> sdpa" in run and "fused_accumulation off -> on" in run


def test_the_section_is_in_the_report_before_the_method(tmp_path) -> None:
    res = study(StudyConfig(output=tmp_path / "study", models=("bert-base",),
                            devices=("v100", "a100"), precisions=("bf16",), measure=False))
    keys = [sec.key for sec in res.sections]
    assert keys[-2:] == ["recipes", "how"]
    page = (res.folder / "report.html").read_text()
    n = keys.index("recipes") + 1
    assert f'<a href="#recipes">{n}. Training recipes' in page  # the table of contents
    assert '<section id="recipes">' in page and 'id="fig-recipes"' in page
    assert page.index('id="recipes"') < page.index('id="how"')
    assert (res.folder / "figures" / "recipes.svg").is_file()
    for name in ("recipes", "recipe_time"):
        assert (res.folder / "tables" / f"recipes_{name}.csv").is_file()
    doc = json.loads((res.folder / "study.json").read_text())
    sec = next(x for x in doc["sections"] if x["key"] == "recipes")
    v100 = [r for r in sec["tables"]["recipes"] if r["device"] == "v100-sxm2-32gb"]
    assert v100 and {r["format"] for r in v100} == {"fp16"}
