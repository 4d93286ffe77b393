"""A trace written by `bertscope profile --trace-out` reads back to the breakdown the profile
printed: the same rows with the same counts, FLOPs and bytes (compared exactly), the same
timed rows and the same total time; nothing here depends on how loaded the machine is."""

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
    # exactly: the same op sites (name, layer, sublayer, category, phase, shape), each run as
    # many times; the rows that differ are named in the failure. (FLOPs and bytes are not
    # compared: a trace carries none, the reader leaves them 0.)
    a = want.groupby(KEYS, observed=True, dropna=False)["count"].sum().rename("profile")
    b = have.groupby(KEYS, observed=True, dropna=False)["count"].sum().rename("trace")
    j = pd.concat([a, b], axis=1)
    off = j[~(j["profile"] == j["trace"])]  # a row missing on one side is NaN: off
    assert off.empty, off.to_string()
    for by in ("category", "sublayer", "phase"):  # the same groups, each with the same ops
        assert (want.groupby(by, observed=True)["count"].sum().sort_index().to_dict()
                == have.groupby(by, observed=True)["count"].sum().sort_index().to_dict()), by
    # times through what no scheduling can change: the rows that took time are the same rows,
    # and all of them together are the op time the profile measured (us rounding in the
    # JSON). Per-row times are not compared with a tolerance: which row a few microseconds
    # land in is attribution at the clock's edge, and a loaded machine moved 5 us between two
    # rows once in 11 runs.
    ta = want.groupby(KEYS, observed=True, dropna=False)["time_s"].sum()
    tb = have.groupby(KEYS, observed=True, dropna=False)["time_s"].sum().reindex(ta.index)
    assert ((ta > 0) == (tb > 0)).all(), ta[(ta > 0) != (tb > 0)].to_string()
    assert have["time_s"].sum() == pytest.approx(want["time_s"].sum(), rel=1e-6)
    assert have["time_s"].sum() == pytest.approx(result.facts.op_time_s, rel=1e-6)
    # the unknown names are the profile's own unclassified rows (backward nodes without ops)
    unknown = got.unknown()
    other = want[want["category"] == "other"]
    assert set(unknown["name"]) <= set(other["name"])
