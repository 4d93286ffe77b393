"""`distributed --timeline`: a layout's per-device schedule as a Chrome/Perfetto trace.

Expected makespans are the pipeline formulas worked by hand (Huang et al. 2019 for GPipe,
Narayanan et al. 2021 for 1F1B and the interleaved schedule), not the simulator's output."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest

from bertscope.cli import main
from bertscope.config import RunConfig
from bertscope.parallel import Cluster, Layout, Schedule, Workload, evaluate
from bertscope.parallel.schedule_trace import layout_timeline, simulate
from bertscope.presets import get_model
from bertscope.trace import read_trace


@pytest.mark.parametrize(("schedule", "p", "m", "v", "steps"), [
    ("gpipe", 4, 8, 1, 11.0),        # m + p - 1 = 8 + 3
    ("1f1b", 4, 8, 1, 11.0),         # the same bubble as GPipe
    ("1f1b", 1, 4, 1, 4.0),          # no pipeline: m steps
    ("interleaved", 4, 8, 2, 9.5),   # m + (p - 1)/v = 8 + 3/2
    ("interleaved", 2, 4, 3, 13 / 3),  # 4 + 1/3
])
def test_the_schedule_ends_where_the_bubble_formula_says(schedule, p, m, v, steps) -> None:
    fwd, bwd = 1.0, 2.0  # a step = 3 s
    got = simulate(Schedule(schedule), p, m, v, fwd, bwd)
    assert max(s.end for s in got) == pytest.approx(steps * 3.0)
    assert len(got) == 2 * p * m * v  # every micro-batch, every chunk, each way, per stage
    end = {(s.backward, s.micro_batch, s.chunk * p + s.stage): s for s in got}
    for s in got:  # data dependencies hold: the previous virtual stage's forward, the next's
        vs = s.chunk * p + s.stage  # backward (the last one's own forward)
        if not s.backward and vs > 0:
            assert s.start >= end[(False, s.micro_batch, vs - 1)].end - 1e-12
        if s.backward:
            dep = (False, s.micro_batch, vs) if vs == p * v - 1 else (True, s.micro_batch, vs + 1)
            assert s.start >= end[dep].end - 1e-12
    for stage in range(p):  # one op at a time per stage
        mine = sorted((s for s in got if s.stage == stage), key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-12 for a, b in itertools.pairwise(mine))


def test_1f1b_keeps_at_most_p_minus_stage_micro_batches_in_flight() -> None:
    p, m = 4, 8
    got = simulate(Schedule.ONE_F_ONE_B, p, m, 1, 1.0, 2.0)
    for stage in range(p):
        live = peak = 0
        for s in sorted((s for s in got if s.stage == stage), key=lambda s: s.start):
            live += -1 if s.backward else 1
            peak = max(peak, live)
        assert peak == p - stage  # stage 0 holds 4, the last stage 1 (PipeDream-Flush)
    gpipe = simulate(Schedule.GPIPE, p, m, 1, 1.0, 2.0)
    assert sum(1 for s in gpipe if s.stage == 0 and s.end <= 8.0 and not s.backward) == m


def _layout_doc(**kw):
    w = Workload(model=get_model("bert-large"), run=RunConfig(batch=1, seq=128, precision="bf16"),
                 global_batch=256)
    c = Cluster.build("a100", 32)
    job = w.job(Layout(dp=4, tp=2, pp=4, **kw), 8)  # 256 / (4 x 8) = 8 sequences each
    return layout_timeline(job, c), evaluate(job, c)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_the_trace_adds_up_to_the_layout_model(schedule) -> None:
    doc, res = _layout_doc(schedule=Schedule(schedule))
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    stages = {e["pid"] for e in ev}
    assert stages == {1, 2, 3, 4}  # one process per pipeline stage
    for pid in stages:
        mine = [e for e in ev if e["pid"] == pid]
        end = max(e["ts"] + e["dur"] for e in mine) / 1e6
        assert end == pytest.approx(res.iteration_s, rel=1e-9)  # every stage ends together
        # idle time inside the pipeline is the model's bubble: (p - 1)/v steps
        bubble = sum(e["dur"] for e in mine if e["cat"] == "bubble") / 1e6
        assert bubble == pytest.approx(res.time["bubble_s"], rel=1e-9)
        comm = sum(e["dur"] for e in mine if e["tid"] == 2) / 1e6
        assert comm == pytest.approx(res.time["tp_comm_s"] + res.time["pp_comm_s"]
                                     + res.time["dp_comm_s"], rel=1e-9)
        fwd = [e for e in mine if e["cat"] == "cpu_op" and e["name"].startswith("forward")]
        assert len(fwd) == 8 and {e["args"]["micro_batch"] for e in fwd} == set(range(8))
        assert fwd[0]["args"]["layers"] == f"{(pid - 1) * 6}-{(pid - 1) * 6 + 5}"  # 24 / 4


def test_interleaved_chunks_and_bubble() -> None:
    doc, res = _layout_doc(schedule=Schedule.INTERLEAVED, virtual_stages=2)
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
    chunks = {e["args"]["chunk"] for e in ev if e["cat"] == "cpu_op" and "args" in e}
    assert chunks == {0, 1}
    bubble = sum(e["dur"] for e in ev if e["cat"] == "bubble") / 1e6
    assert bubble == pytest.approx(res.time["bubble_s"], rel=1e-9)  # (4 - 1)/2 steps


def test_cli_writes_a_trace_that_bertscope_trace_reads(tmp_path, capsys) -> None:
    out = tmp_path / "tl.json"
    assert main(["distributed", "bert-tiny", "--seq", "16", "--devices", "4",
                 "--global-batch", "8", "--pp", "2", "--micro-batches", "4", "--device", "a100",
                 "--timeline", str(out)]) == 0
    assert "per-device timeline" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["bertscope"]["pp"] == 2
    table = read_trace(out)  # the reader takes it: one iteration per stage, busy time
    assert len(table) > 0
    assert main(["distributed", "bert-tiny", "--seq", "16", "--devices", "4",
                 "--global-batch", "8", "--device", "a100", "--search",
                 "--timeline", str(tmp_path / "best.json")]) == 0
    assert json.loads((tmp_path / "best.json").read_text())["traceEvents"]


def test_every_searched_layout_adds_up() -> None:
    """Over every layout a search costs (DP/TP/PP, ZeRO 0-3, recompute, SP, the three
    schedules): each stage ends at the model's iteration, idles for its bubble and shows its
    exposed communication."""
    from bertscope.parallel import search
    from bertscope.parallel.search import row_job

    w = Workload(model=get_model("bert-base"), run=RunConfig(batch=1, seq=128), global_batch=64)
    c = Cluster.build("a100", 16)
    frame = search(w, c).frame
    picked = frame.iloc[:: max(1, len(frame) // 40)]  # ~40 layouts spread over the ranking
    # plus the best-ranked layout of every value of each swept column, so the sample spans
    # them whatever the ranking (it moves with the device's efficiency models)
    cols = ("schedule", "zero", "checkpoint", "pp", "tp")
    firsts = [frame.groupby(col, sort=False).head(1) for col in cols]
    picked = pd.concat([picked, *firsts]).drop_duplicates()
    assert len(picked) >= 20
    for col in cols:  # the sample spans them all
        assert picked[col].nunique() == frame[col].nunique(), col
    for row in picked.to_dict("records"):
        lay = row_job(w, row)
        res = evaluate(lay, c)
        ev = [e for e in layout_timeline(lay, c)["traceEvents"] if e["ph"] == "X"]
        for pid in {e["pid"] for e in ev}:
            mine = [e for e in ev if e["pid"] == pid]
            end = max(e["ts"] + e["dur"] for e in mine) / 1e6
            assert end == pytest.approx(res.iteration_s, rel=1e-9), lay
            idle = sum(e["dur"] for e in mine if e["cat"] == "bubble") / 1e6
            assert idle == pytest.approx(res.time["bubble_s"], rel=1e-9, abs=1e-15), lay
            comm = sum(e["dur"] for e in mine if e["tid"] == 2) / 1e6
            assert comm == pytest.approx(res.time["tp_comm_s"] + res.time["pp_comm_s"]
                                         + res.time["dp_comm_s"], rel=1e-9, abs=1e-15), lay
