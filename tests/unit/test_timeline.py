"""A predicted iteration as a Chrome/Perfetto trace, read back by the trace reader."""

from __future__ import annotations

import itertools
import json

import pytest

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.perf import fuse, load_profile, predict
from bertscope.perf.iteration_trace import timeline, write_timeline
from bertscope.presets import get_model
from bertscope.trace import analyze_trace


@pytest.mark.parametrize("fused", [False, True])
def test_bertscope_trace_gives_back_the_predicted_breakdown(tmp_path, fused) -> None:
    table = build(get_model("bert-tiny"), RunConfig(batch=2, seq=16, checkpoint="full"))
    pred = predict(fuse(table) if fused else table, load_profile("a100"))
    path = write_timeline(pred, tmp_path / "tl.json")
    back = analyze_trace(path).table.df
    want = pred.df.groupby(pred.df["category"].astype(str), observed=True)["time_s"].sum()
    got = back.groupby(back["category"].astype(str), observed=True)["time_s"].sum()
    assert set(got.index) == set(want.index)
    for cat, t in want.items():
        assert got[cat] == pytest.approx(t, rel=1e-6)
    phases_want = pred.df.groupby(pred.df["phase"].astype(str))["time_s"].sum()
    phases_got = back.groupby(back["phase"].astype(str))["time_s"].sum()
    for ph, t in phases_want.items():
        assert phases_got[ph] == pytest.approx(t, rel=1e-6)


def test_slices_run_back_to_back_with_their_figures_as_args() -> None:
    pred = predict(build(get_model("bert-tiny"), RunConfig(batch=1, seq=8)), load_profile("h100"))
    doc = timeline(pred)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert len(ops) == len(pred)
    for a, b in itertools.pairwise(ops):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"])
    first = pred.df.iloc[0]
    assert ops[0]["args"]["bertscope.name"] == first["name"]
    assert ops[0]["args"]["flops"] == first["flops"]
    total = sum(e["dur"] for e in ops) / 1e6
    assert total == pytest.approx(pred.export_meta()["prediction"]["time_s"], rel=1e-9)
    json.dumps(doc)  # plain JSON


def test_cli_predict_timeline(tmp_path, capsys) -> None:
    from bertscope.cli import main

    out = tmp_path / "t.json"
    assert main(["predict", "bert-tiny", "--seq", "16", "--device", "a100", "--timeline",
                 str(out)]) == 0
    assert "predicted timeline" in capsys.readouterr().out
    assert json.loads(out.read_text())["bertscope"]["producer"] == "predicted"
    assert main(["predict", "bert-tiny", "--device", "a100", "--timeline",
                 str(tmp_path / "t.csv")]) == 2


def test_distributed_search_exports_parquet(tmp_path) -> None:
    import pandas as pd

    from bertscope.cli import main

    out = tmp_path / "layouts.parquet"
    assert main(["distributed", "bert-tiny", "--seq", "16", "--devices", "4",
                 "--global-batch", "16", "--device", "a100", "--search", "--output",
                 str(out)]) == 0
    df = pd.read_parquet(out)
    assert len(df) > 0 and {"dp", "tp", "pp", "tokens_per_s"} <= set(df.columns)
