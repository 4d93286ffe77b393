"""Measured profiling on tiny models: attribution checked against the analytic op table,
whose GEMM FLOPs are checked against FlopCounterMode elsewhere; here torch.profiler's own
FLOP counts (with_flops) are the independent measurement."""

from __future__ import annotations

import json

import pytest

from bertscope.analytic import build
from bertscope.config import Family, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Phase, Sublayer
from tests.conftest import MODELLED, tiny

torch = pytest.importorskip("torch")
from bertscope.measure import profile as prof_mod  # noqa: E402
from bertscope.measure.profile import profile  # noqa: E402

GEMMS = [Category.GEMM, Category.BATCHED_GEMM]


def _only_glue_unattributed(df) -> None:
    """What stays unattributed is glue (views, casts, the mask and loss scalars), never real
    work. Asserted on the rows, not on their time share, which moves with a shared machine's
    load from run to run."""
    ua = df[(df["sublayer"] == Sublayer.OTHER) & (df["phase"] != Phase.OPTIMIZER)]
    assert set(ua["category"]) <= {Category.DATA_MOVEMENT, Category.ELEMENTWISE,
                                   Category.OTHER}, ua
    # the loss's scalar adds and the attention mask's B x T elementwise ops, at most
    assert ua["flops"].sum() <= 1e-4 * df["flops"].sum(), ua


def _gemm_flops(df, phases) -> float:
    g = df[df["category"].isin(GEMMS) & df["phase"].isin(phases)]
    return float(g["flops"].sum())


def _run(m) -> RunConfig:
    """A tiny run that fits `m`: a ViT's sequence is its patches + 1; T5 decodes 8 targets
    for 16 inputs."""
    if m.family is Family.VIT:
        return RunConfig(batch=2, seq=m.max_seq)
    return RunConfig(batch=2, seq=16, decoder_seq=8 if m.family is Family.T5 else None)


@pytest.mark.parametrize("family", [f for f in MODELLED],
                         ids=lambda f: f.value)
def test_measured_gemm_flops_and_phases_match_the_analytic_table(family: Family) -> None:
    m = tiny(family)
    run = _run(m)
    r = profile(m, run, iters=1, warmup=1)
    got, want = r.table.df, build(m, run).df
    for phases in ([Phase.FORWARD], [Phase.BACKWARD_DATA], [Phase.BACKWARD_WEIGHT]):
        assert _gemm_flops(got, phases) == pytest.approx(_gemm_flops(want, phases)), phases
    # every layer of every stack and every analytic sublayer shows up in the measurement
    layers = m.num_layers + m.decoder_layer_count
    assert set(got.loc[got["layer"] >= 0, "layer"]) == set(range(layers))
    assert set(want["sublayer"]) - {Sublayer.OTHER} <= set(got["sublayer"])
    _only_glue_unattributed(got)
    assert 0 <= r.unattributed_share < 1
    assert r.facts.iters == 1 and not r.facts.partial


def test_checkpointing_measures_recompute() -> None:
    m = tiny(Family.BERT)
    run = RunConfig(batch=2, seq=16, checkpoint="full")
    d = profile(m, run, iters=1, warmup=0).table.df
    layers = d[d["layer"] >= 0]
    fwd = _gemm_flops(layers, [Phase.FORWARD])
    assert fwd > 0
    assert _gemm_flops(layers, [Phase.RECOMPUTE]) == pytest.approx(fwd)
    assert _gemm_flops(d, [Phase.BACKWARD_WEIGHT]) == pytest.approx(
        _gemm_flops(build(m, run).df, [Phase.BACKWARD_WEIGHT]))


def test_micro_batches_and_bf16() -> None:
    m = tiny(Family.BERT)
    run = RunConfig(batch=1, seq=16, micro_batches=2, precision=Precision.BF16,
                    optimizer="lamb")
    r = profile(m, run, iters=1, warmup=0)
    d = r.table.df
    assert _gemm_flops(d, [Phase.FORWARD]) == pytest.approx(
        _gemm_flops(build(m, run).df, [Phase.FORWARD]))
    assert (d["phase"] == Phase.OPTIMIZER).any()
    assert r.facts.tokens_per_s > 0


def test_hugging_face_model_is_attributed_too() -> None:
    pytest.importorskip("transformers")
    m = tiny(Family.BERT)
    run = RunConfig(batch=2, seq=16)
    r = profile(m, run, iters=1, warmup=0, hf=True)
    d = r.table.df
    assert _gemm_flops(d, [Phase.FORWARD]) == pytest.approx(
        _gemm_flops(build(m, run).df, [Phase.FORWARD]))
    _only_glue_unattributed(d)
    # the attention core is split into score, softmax and context
    for sub in (Sublayer.ATTN_SCORE, Sublayer.ATTN_SOFTMAX, Sublayer.ATTN_CONTEXT):
        assert (d["sublayer"] == sub).any(), sub


def test_trace_out_and_json_result(tmp_path) -> None:
    m = tiny(Family.ROBERTA)
    trace = tmp_path / "trace.json"
    r = profile(m, RunConfig(batch=1, seq=8), iters=1, warmup=0, trace_out=trace)
    doc = json.loads(trace.read_text())
    names = {e.get("name", "") for e in doc["traceEvents"]}
    assert any(n.startswith("bertscope::") for n in names)
    out = r.write_json(tmp_path / "result.json")
    saved = json.loads(out.read_text())
    assert saved["meta"]["iters"] == 1
    assert sum(row["time_s"] for row in saved["rows"]) == pytest.approx(r.facts.op_time_s)


def test_ctrl_c_keeps_a_valid_partial_result(monkeypatch) -> None:
    calls = {"n": 0}
    real_step = prof_mod._Trainer.step

    def step(self) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # warm-up 1, measured 1, then Ctrl-C in the second
            raise KeyboardInterrupt
        real_step(self)

    monkeypatch.setattr(prof_mod._Trainer, "step", step)
    r = profile(tiny(Family.BERT), RunConfig(batch=1, seq=8), iters=3, warmup=1)
    assert r.facts.partial and r.facts.iters == 1
    assert r.table.df["time_s"].sum() > 0


def test_too_large_a_batch_is_refused_with_the_estimate(monkeypatch) -> None:
    monkeypatch.setattr(prof_mod, "available_memory", lambda device: 2**20)
    with pytest.raises(BertscopeError, match=r"needs ~.* GiB .* lower --batch"):
        profile(tiny(Family.BERT), RunConfig(batch=64, seq=64), iters=1, warmup=0)


def test_cli_profile(tmp_path, capsys) -> None:
    from bertscope.cli import main

    out = tmp_path / "p.json"
    rc = main(["profile", "bert-tiny", "--batch", "1", "--seq", "16", "--iters", "1",
               "--warmup", "0", "--output", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "unattributed" in text and "By sublayer group" in text
    assert json.loads(out.read_text())["meta"]["model"]["name"] == "bert-tiny"
    rc = main(["profile", "bert-tiny", "--iters", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_keeps_a_marked_partial_result(sig, tmp_path, monkeypatch, capsys) -> None:
    """SIGTERM is handled as Ctrl-C: the iterations finished are written, marked partial
    in the content and the file name, with one line on stderr and exit code 3
    (stop.PARTIAL_EXIT)."""
    import os
    import signal

    from bertscope.cli import main

    calls = {"n": 0}
    real_step = prof_mod._Trainer.step

    def step(self) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # warm-up 1, measured 1, then the signal in the second
            os.kill(os.getpid(), getattr(signal, sig))
        real_step(self)

    monkeypatch.setattr(prof_mod._Trainer, "step", step)
    monkeypatch.setattr(prof_mod, "MAX_SETTLING", 0)  # steps counted: no settling iterations
    out = tmp_path / "partial.json"
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where a shell started us with &
    rc = main(["profile", "bert-tiny", "--batch", "1", "--seq", "8", "--iters", "3",
               "--warmup", "1", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 3
    lines = [ln for ln in err.splitlines() if ln.startswith("bertscope:")]
    # the signal arrives as the second measured iteration starts; it finishes, then stops
    assert len(lines) == 1 and "partial result of 2 measured iteration" in lines[0]
    assert not out.exists()  # a partial result never takes a complete result's name
    saved = json.loads((tmp_path / "partial.partial.json").read_text())
    assert saved["meta"]["partial"] is True and saved["meta"]["iters"] == 2
    assert signal.getsignal(signal.SIGINT) is before  # the CLI put the handlers back


def test_profile_writes_nothing_unless_asked(tmp_path, monkeypatch, capsys) -> None:
    from bertscope.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["profile", "bert-tiny", "--batch", "1", "--seq", "8", "--iters", "1",
               "--warmup", "0"])
    assert rc == 0, capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_terminal_gets_no_kineto_lines(tmp_path) -> None:
    """Kineto prints `USDT: ... profiler_start/stop` on descriptor 2 at every capture; a
    successful `bertscope profile` leaves stderr empty (its result goes to stdout)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bertscope.cli", "profile", "bert-tiny", "--batch", "1", "--seq",
         "8", "--iters", "2", "--warmup", "0", "--trace-out", str(tmp_path / "t.json")],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "By sublayer group" in done.stdout


@pytest.mark.parametrize("statistic", ["mean", "median", "min"])
def test_saved_row_times_per_iteration_give_each_rows_statistic(tmp_path, statistic) -> None:
    """meta["row_times_s"]: per row (in the saved rows' order), per measured iteration, so any
    statistic can be taken again from a saved result. Recomputed here with Python's
    statistics module (min: the least over the iterations that ran the row)."""
    import statistics

    r = profile(tiny(Family.BERT), RunConfig(batch=1, seq=8), iters=3, warmup=1,
                statistic=statistic)
    saved = json.loads(r.write_json(tmp_path / "result.json").read_text())
    per_row = saved["meta"]["row_times_s"]
    assert len(per_row) == len(saved["rows"]) and {len(t) for t in per_row} == {3}
    for row, times in zip(saved["rows"], per_row, strict=True):
        want = {"mean": statistics.fmean(times), "median": statistics.median(times),
                "min": min((t for t in times if t > 0), default=0.0)}[statistic]
        assert row["time_s"] == pytest.approx(want, abs=6e-11)  # rows keep 10 decimals
    its = saved["meta"]["iteration_times_s"]
    gaps = [it - sum(t[i] for t in per_row) for i, it in enumerate(its)]
    assert min(gaps) >= 0  # ops run inside their iteration
    assert saved["meta"]["gap_times_s"] == pytest.approx(gaps)
    want = {"mean": statistics.fmean(its), "median": statistics.median(its),
            "min": r.facts.op_time_s + min(gaps)}[statistic]
    assert saved["meta"]["iteration_s"] == pytest.approx(want)


def test_unprofiled_iteration_time_is_the_warm_ups_after_the_first(tmp_path, monkeypatch,
                                                                   capsys) -> None:
    """The warm-up iterations run without the profiler; each after the first is timed (the
    first allocates and autotunes), and the result keeps them beside the profiled time: on
    a GPU the profiler's per-op host cost made a profiled eager BERT-large iteration 214 ms
    against 126 ms without it (bench/results/gpu_recipe_check.txt)."""
    from bertscope.cli import main
    from bertscope.optable import ProfileFacts

    r = profile(tiny(Family.BERT), RunConfig(batch=1, seq=8), iters=1, warmup=3)
    facts = ProfileFacts.of(r.table)
    assert facts.unprofiled_iteration_times_s is not None
    assert len(facts.unprofiled_iteration_times_s) == 2  # warm-ups 2 and 3
    assert all(t > 0 for t in facts.unprofiled_iteration_times_s)
    assert facts.unprofiled_iteration_s == pytest.approx(
        sum(facts.unprofiled_iteration_times_s) / 2)  # mean, the default statistic
    one = profile(tiny(Family.BERT), RunConfig(batch=1, seq=8), iters=1, warmup=1)
    assert ProfileFacts.of(one.table).unprofiled_iteration_s is None  # no second warm-up
    out = tmp_path / "p.json"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["profile", "bert-tiny", "--batch", "1", "--seq", "8", "--iters", "1",
                 "--warmup", "2", "--top", "0", "--no-store", "--output", str(out)]) == 0
    out_text = capsys.readouterr().out
    assert "without the profiler: iteration" in out_text
    assert "encoder layers:" in out_text  # BERT's stack (a GPT's reads "decoder layers")
    meta = json.loads(out.read_text())["meta"]
    assert len(meta["unprofiled_iteration_times_s"]) == 1
    assert meta["unprofiled_iteration_s"] == meta["unprofiled_iteration_times_s"][0]


def test_transformer_xl_checkpointing_reruns_the_layers_not_the_memory_update() -> None:
    # the memory carried between iterations: every measured iteration attends over the
    # previous one's; full checkpointing reruns each layer (W_r and the Q/K/V projection of
    # memory + segment included) but not the copy that caches the next memory
    m = tiny(Family.TRANSFORMER_XL)
    run = RunConfig(batch=2, seq=16, checkpoint="full")
    got, want = profile(m, run, iters=1, warmup=1).table.df, build(m, run).df
    for phases in ([Phase.FORWARD], [Phase.RECOMPUTE], [Phase.BACKWARD_DATA],
                   [Phase.BACKWARD_WEIGHT]):
        assert _gemm_flops(got, phases) == pytest.approx(_gemm_flops(want, phases)), phases
    assert _gemm_flops(got, [Phase.RECOMPUTE]) > 0
    memory = want[want["sublayer"] == Sublayer.MEMORY]
    assert set(memory.loc[memory["name"] == "memory_update", "phase"]) == {Phase.FORWARD}
