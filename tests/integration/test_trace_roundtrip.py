"""A trace written by `bertscope profile --trace-out` reads back to the breakdown the profile
printed: same rows, same time shares per category, sublayer and phase."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bertscope.config import RunConfig
from bertscope.trace import analyze_trace
from tests.conftest import tiny

torch = pytest.importorskip("torch")
from bertscope.measure.profile import profile  # noqa: E402

KEYS = ["name", "layer", "sublayer", "category", "phase", "m", "n", "k", "batch", "elements"]


def _shares(df: pd.DataFrame, by: str) -> pd.Series:
    s = df.groupby(by, observed=True)["time_s"].sum()
    return (s / s.sum()).sort_index()


@pytest.mark.parametrize(("run", "hf", "iters"), [
    (RunConfig(batch=1, seq=8), False, 1),
    (RunConfig(batch=1, seq=8, checkpoint="full", optimizer="lamb"), False, 2),
    (RunConfig(batch=1, seq=8), True, 1),
], ids=["bert", "checkpointing-lamb-2-iters", "hf"])
def test_profile_trace_reads_back_to_the_same_breakdown(tmp_path: Path, run: RunConfig,
                                                        hf: bool, iters: int) -> None:
    if hf:
        pytest.importorskip("transformers")
    path = tmp_path / "trace.json"
    result = profile(tiny(), run, iters=iters, warmup=0, trace_out=path, hf=hf)
    got = analyze_trace(path)
    want, have = result.table.df, got.table.df
    assert got.ranks[0].iterations == iters and got.ranks[0].time_source == "cpu"
    # rows that differ, named in the failure (a share mismatch alone does not say which op)
    j = want.groupby(KEYS, observed=True)["time_s"].sum().to_frame("profile").join(
        have.groupby(KEYS, observed=True)["time_s"].sum().to_frame("trace"), how="outer")
    off = j[~((j["profile"] - j["trace"]).abs() < 1e-8)]
    assert off.empty, off.to_string()
    for by in ("category", "sublayer", "phase"):
        a, b = _shares(want, by), _shares(have, by)
        assert list(a.index) == list(b.index), by
        assert (a - b).abs().max() < 1e-6, by
    # row by row: the same op sites, counts and times (us rounding in the JSON)
    a = want.set_index(KEYS).sort_index()
    b = have.set_index(KEYS).sort_index()
    assert a.index.equals(b.index)
    assert (a["count"] == b["count"]).all()
    assert ((a["time_s"] - b["time_s"]).abs() < 1e-8).all()
    assert have["time_s"].sum() == pytest.approx(result.facts.op_time_s, rel=1e-6)
    # the unknown names are the profile's own unclassified rows (backward nodes without ops)
    unknown = got.unknown()
    other = want[want["category"] == "other"]
    assert set(unknown["name"]) <= set(other["name"])
