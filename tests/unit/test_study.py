"""The study: findings computed from the data, numbers equal to ops/predict/sweep, escaping
of input strings, and an atomic folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertscope.analytic import build
from bertscope.config import Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.perf import load_profile, predict
from bertscope.presets import get_model
from bertscope.studies import sections as s1
from bertscope.studies.study import PHASES, StudyConfig, study
from bertscope.sweep import sweep

ROOT = Path(__file__).resolve().parents[2]
A100 = ROOT / "src" / "bertscope" / "data" / "devices" / "a100-sxm4-80gb.toml"


def _device_file(tmp_path: Path, name: str, bandwidth_factor: float = 1.0) -> Path:
    """The A100 catalog file renamed, its memory bandwidth multiplied."""
    import tomllib

    doc = tomllib.loads(A100.read_text())
    lines = []
    in_sources = False
    for ln in A100.read_text().splitlines():
        key = ln.split("=")[0].strip()
        in_sources = in_sources or ln.strip().startswith("[")
        if in_sources:
            pass
        elif key == "name":
            ln = f"name = {json.dumps(name)}"
        elif key == "aliases":
            ln = "aliases = []"
        elif key == "memory_bandwidth_GBps" and bandwidth_factor != 1:
            ln = f"memory_bandwidth_GBps = {doc['memory_bandwidth_GBps'] * bandwidth_factor}"
        lines.append(ln)
    p = tmp_path / "dev.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _ctx(devices, models=("bert-base",), precisions=(Precision.FP32, Precision.BF16)):
    return s1.Ctx(models=[get_model(m) for m in models], devices=devices,
                  precisions=list(precisions), phases=list(PHASES))


def test_a_hundredfold_bandwidth_flips_the_memory_bound_finding(tmp_path) -> None:
    """On the A100, bert-base phase 2 bf16 spends over 20% of the time in bandwidth-bound
    ops; the same chip with 100x the bandwidth does not, and the sentences say so."""
    fast = load_profile(_device_file(tmp_path, "a100-fast-memory", 100.0))
    sec = s1.bound_share(_ctx([load_profile("a100"), fast]))
    heavy = next(f for f in sec.findings if f.startswith("bert-base"))
    light = next(f for f in sec.findings if f.startswith("Under"))
    assert "a100-sxm4-80gb" in heavy and "a100-fast-memory" not in heavy
    assert "a100-fast-memory" in light
    table = sec.tables["bound_share"]
    row = table[(table["device"] == "a100-fast-memory") & (table["precision"] == "bf16")
                & (table["format"] == "bf16")
                & (table["phase"] == "phase 2")]
    assert float(row["memory_bound"].iloc[0]) < s1.MEMORY_BOUND_AT


def test_section_numbers_equal_predict_and_sweep() -> None:
    dev = load_profile("a100")
    ctx = _ctx([dev], precisions=(Precision.BF16,))
    sec = s1.where_time_goes(ctx)
    df = sec.tables["shares"]
    sel = df[(df["by"] == "category") & (df["phase"] == "phase 1")].set_index("key")["share"]
    t = predict(build(get_model("bert-base"), RunConfig(batch=32, seq=128, precision="bf16",
                                                       optimizer="lamb")), dev).df
    want = t.groupby(t["category"].astype(str))["time_s"].sum() / t["time_s"].sum()
    for cat, share in want.items():
        assert sel[cat] == pytest.approx(share, rel=1e-12)
    opt = s1.optimizer_share(ctx, sweep).tables["optimizer_share"]
    row = opt[(opt["optimizer"] == "lamb") & (opt["batch"] == 8) & (opt["seq"] == 128)
              & (opt["micro_batches"] == 1)].iloc[0]
    t8 = predict(build(get_model("bert-base"), RunConfig(batch=8, seq=128, precision="bf16",
                                                        optimizer="lamb")), dev).df
    assert row["optimizer_share"] == pytest.approx(
        t8.loc[t8["phase"] == "optimizer", "time_s"].sum() / t8["time_s"].sum(), rel=1e-9)


def test_findings_follow_the_inputs() -> None:
    """The optimizer finding's numbers come from the data: LAMB's share at the smallest and
    largest token counts, in the direction the data has."""
    ctx = _ctx([load_profile("a100")], precisions=(Precision.BF16,))
    sec = s1.optimizer_share(ctx, sweep)
    df = sec.tables["optimizer_share"]
    lamb = df[(df["optimizer"] == "lamb") & (df["micro_batches"] == 1)].sort_values("tokens")
    first, last = lamb.iloc[0], lamb.iloc[-1]
    text = next(f for f in sec.findings if f.startswith("LAMB"))
    assert s1.pct(first["optimizer_share"]) in text and s1.pct(last["optimizer_share"]) in text
    assert ("falls" in text) == (last["optimizer_share"] < first["optimizer_share"])
    # a different device gives different sentences
    other = s1.optimizer_share(_ctx([load_profile("tpu-v4")], precisions=(Precision.BF16,)),
                               sweep)
    assert other.findings != sec.findings


def _quick(tmp_path: Path, **kw) -> StudyConfig:
    base = {"output": tmp_path / "study", "models": ("bert-base",), "devices": ("a100",),
            "precisions": ("bf16",), "measure": False}
    return StudyConfig(**{**base, **kw})


def test_input_strings_are_text_in_the_report(tmp_path) -> None:
    name = "<script>alert(1)</script> & co"
    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(json.dumps({
        "model_type": "bert", "_name_or_path": name, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 512}))
    dev = _device_file(tmp_path, name)
    res = study(_quick(tmp_path, models=(str(cfg_file),), devices=(str(dev),)))
    page = (res.folder / "report.html").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page


def test_a_failed_study_leaves_no_folder(tmp_path, monkeypatch) -> None:
    import bertscope.report.study_html as html

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(html, "write_report", boom)
    with pytest.raises(KeyboardInterrupt):
        study(_quick(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_output_must_be_new_or_empty(tmp_path) -> None:
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "keep.txt").write_text("x")
    with pytest.raises(BertscopeError, match="not an empty folder"):
        study(_quick(tmp_path))
    assert (tmp_path / "study" / "keep.txt").read_text() == "x"


def test_study_folder_has_every_part(tmp_path) -> None:
    res = study(_quick(tmp_path))
    folder = res.folder
    assert (folder / "report.html").is_file() and (folder / "study.json").is_file()
    doc = json.loads((folder / "study.json").read_text())
    assert len(doc["sections"]) == 11 and doc["settings"]["bertscope"]
    for sec in res.sections:
        if sec.figure != "none":
            assert (folder / "figures" / f"{sec.key}.png").is_file()
            assert (folder / "figures" / f"{sec.key}.svg").is_file()
        for name in sec.tables:
            assert (folder / "tables" / f"{sec.key}_{name}.csv").is_file()
    page = (folder / "report.html").read_text()
    import re

    # nothing is fetched: no external script, style, image or link targets (namespace URIs
    # in the inline SVG are names, not requests)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page


def test_cli_study_quick_with_the_measured_part(tmp_path, capsys, monkeypatch) -> None:
    """`bertscope study --quick`: a small measured model (bert-mini, one iteration) beside the
    predictions; the findings print and the measured bar is in section 1's table."""
    from bertscope.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "s"
    rc = main(["study", "--output", str(out), "--quick", "--models", "bert-base",
               "--device", "a100", "--precision", "bf16"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "1. Where an iteration's time goes" in text and "wrote " in text
    doc = json.loads((out / "study.json").read_text())
    shares = doc["sections"][0]["tables"]["shares"]
    measured = [r for r in shares if r["source"] == "measured"]
    assert measured and {r["model"] for r in measured} == {"bert-mini"}
    assert any("--quick" in n for n in doc["settings"]["measured"])
    # profiled in a child process (studies.fresh), whose heap and torch go with it
    assert any("in a fresh process" in n for n in doc["settings"]["measured"])


def test_distributed_section_equals_the_distributed_model() -> None:
    from bertscope.parallel import Cluster, Layout, Workload, evaluate

    dev = load_profile("a100")
    ctx = _ctx([dev], precisions=(Precision.BF16,))
    df = s1.distributed(ctx).tables["distributed"]
    row = df[df["layout"] == "DP16"].iloc[0]
    job = Workload(model=get_model("bert-base"), run=RunConfig(batch=1, seq=128,
                   precision="bf16", optimizer="lamb"), global_batch=4096)
    # 4096 / (16 devices x batch 32) = 8 micro-batches per step
    r = evaluate(job.job(Layout(dp=16), 8), Cluster.build(dev, 16))
    assert row["tokens_per_s"] == pytest.approx(r.tokens_per_s, rel=1e-12)
    assert row["dp_comm_share"] == pytest.approx(r.time["dp_comm_s"] / r.iteration_s)
