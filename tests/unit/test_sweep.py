"""The sweep engine equals the per-configuration path (op table + prediction) on every axis,
a two-point grid matches hand arithmetic, and bad axes are refused in one line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertscope.analytic import build
from bertscope.config import ModelConfig, RunConfig, setting
from bertscope.errors import BertscopeError
from bertscope.perf import (
    CategoryBandwidthEfficiency,
    GemmEfficiency,
    Knobs,
    Overhead,
    by_bound,
    fuse,
    load_profile,
    predict,
)
from bertscope.presets import get_model
from bertscope.sweep import make_grid, sweep
from bertscope.taxonomy import Category, Phase

MODELS = ("bert-tiny", "roberta-base", "albert-base-v2", "gpt2", "llama2-7b", "t5-small")
# a profile as calibration writes one: per-phase GEMM factors, per-category bandwidth
# (phase- and format-specific entries too), host time that adds to every launch
FITTED = load_profile("a100").with_models(
    gemm=GemmEfficiency(max_fraction=0.6, half_saturation_flops=1e7, half_saturation_dim=8,
                        per_phase={"forward": 1.2, "backward_weight": 0.7}, source="test"),
    bandwidth=CategoryBandwidthEfficiency(
        per_category={"softmax": [0.4, 1e5], "layernorm@backward": [0.3, 2e5],
                      "optimizer": [0.9, 0.0], "softmax#bf16": [0.2, 1e5],
                      "layernorm@backward#fp16": [0.25, 0.0], "dropout#fp32": [0.5, 0.0],
                      "optimizer#bf16": [0.1, 0.0]},
        max_fraction=0.6, half_saturation_bytes=5e4,
        gemm_fraction=0.8, source="test"),
    overhead=Overhead(seconds_per_launch=3e-6, host_seconds_per_launch=2e-6, source="test"))
DEVICES = {"a100": load_profile("a100"), "tpu-v4": load_profile("tpu-v4"), "fitted": FITTED}


def _reference(m: ModelConfig, run: RunConfig, device: str, knobs: Knobs,
               fused: bool = False) -> dict[str, float]:
    """The per-configuration path: build the op table (fused or not), predict it, read the
    figures."""
    table = build(m, run)
    t = predict(fuse(table) if fused else table, DEVICES[device], knobs=knobs)
    df = t.df
    total = float(df["time_s"].sum())
    out = {"iteration_s": total, "flops": float(df["flops"].sum()),
           "memory_bytes": float(t.export_meta()["memory"]["peak"]),
           "optimizer_share": float(df.loc[df["phase"] == Phase.OPTIMIZER, "time_s"].sum())
           / total,
           "peak_fraction": t.export_meta()["prediction"]["peak_fraction"]}
    for cat, time_s in df.groupby("category", observed=True)["time_s"].sum().items():
        out[f"share_{cat}"] = time_s / total
    for b, v in by_bound(t).items():
        out[f"bound_{b}"] = v["time_share"]
    return out


def _check(row: dict, ref: dict[str, float]) -> None:
    for key, want in ref.items():
        # a share the reference computes as exactly 0 may come out of the engine's summed
        # arrays as a rounding residue (1e-15 of the iteration): 1e-12 absolute on shares
        tol = 1e-12 if key.startswith(("share_", "bound_")) else 1e-15
        assert row[key] == pytest.approx(want, rel=1e-9, abs=tol), key
    shares = [k for k in row if k.startswith("share_")]
    for k in shares:  # a category the config has no row of has share 0
        if k not in ref:
            assert row[k] == 0.0, k


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MODELS), device=st.sampled_from(sorted(DEVICES)),
       batch=st.lists(st.integers(1, 64), min_size=1, max_size=3, unique=True),
       seq=st.lists(st.sampled_from([1, 7, 16, 128, 512]), min_size=1, max_size=2, unique=True),
       micro=st.lists(st.integers(1, 4), min_size=1, max_size=2, unique=True),
       precision=st.sampled_from(["fp32", "bf16", "fp16"]),
       optimizer=st.sampled_from(["sgd", "adam", "adamw", "lamb"]),
       checkpoint=st.sampled_from(["none", "selective", "full"]), dropout=st.booleans(),
       masked=st.booleans(), layers=st.none() | st.integers(1, 30),
       attention=st.sampled_from(["eager", "fused-softmax", "sdpa"]), fused=st.booleans(),
       gemm=st.sampled_from([0.5, 1.0, 2.0]), overhead=st.sampled_from([1.0, 0.1]))
def test_every_figure_equals_the_per_configuration_path(model, device, batch, seq, micro,
                                                        precision, optimizer, checkpoint,
                                                        dropout, masked, layers, attention,
                                                        fused, gemm, overhead) -> None:
    knobs = Knobs(gemm_peak=gemm, overhead=overhead)
    masked = masked and get_model(model).has_mlm_head  # decoders have no MLM head
    res = sweep([model], [DEVICES[device]], batch=batch, seq=seq, micro_batches=micro,
                precision=[precision], optimizer=[optimizer], checkpoint=[checkpoint],
                dropout=[dropout], masked_lm_only=[masked], attention=[attention],
                fusion=[fused],
                num_layers=None if layers is None else [layers], gemm_peak=[gemm],
                overhead=[overhead])
    base = get_model(model)
    m = base if layers is None else dataclasses.replace(base, num_layers=layers)
    fits = [s for s in seq if s <= base.max_seq]
    runs = DEVICES[device].device.has(precision)  # else every config is skipped (tpu-v4 fp32)
    assert res.evaluated == (len(batch) * len(fits) * len(micro) if runs else 0)
    assert res.skipped == res.grid_size - res.evaluated
    for row in res.frame.to_dict(orient="records"):
        run = RunConfig(batch=row["batch"], seq=row["seq"], micro_batches=row["micro_batches"],
                        precision=precision, optimizer=optimizer, dropout=dropout,
                        checkpoint=checkpoint, masked_lm_only=masked,
                        attention=attention)
        _check(row, _reference(m, run, device, knobs, fused))
        assert row["tokens"] == run.tokens


@settings(max_examples=10, deadline=None)
@given(hidden=st.lists(st.sampled_from([64, 96, 128]), min_size=1, max_size=2, unique=True),
       heads=st.lists(st.sampled_from([2, 3, 4]), min_size=1, max_size=2, unique=True),
       vocab=st.sampled_from([100, 30522]), ffn=st.none() | st.sampled_from([100, 256]),
       precision=st.sampled_from(["fp32", "bf16"]))
def test_model_dimensions_as_axes(hidden, heads, vocab, ffn, precision) -> None:
    """hidden, heads, intermediate and vocab_size swept on bert-tiny (intermediate left out
    keeps the 4x ratio); heads that do not divide hidden are skipped. In bf16 autocast casts
    each linear's weight and bias, whose sizes vary with the swept hidden size (an array)."""
    res = sweep(["bert-tiny"], ["a100"], hidden=hidden, heads=heads, vocab_size=[vocab],
                intermediate=None if ffn is None else [ffn], batch=[2], seq=[32],
                precision=[precision])
    pairs = [(h, a) for h in hidden for a in heads if h % a == 0]
    assert res.evaluated == len(pairs) and res.skipped == res.grid_size - len(pairs)
    base = get_model("bert-tiny")
    for row in res.frame.to_dict(orient="records"):
        m = dataclasses.replace(base, hidden=row["hidden"], heads=row["heads"],
                                vocab_size=vocab, intermediate=ffn or 4 * row["hidden"])
        assert row["intermediate"] == m.intermediate and row["vocab_size"] == vocab
        run = RunConfig(batch=2, seq=32, precision=precision)
        assert row["params"] == build(m, run).export_meta()["params"]
        _check(row, _reference(m, run, "a100", Knobs()))


@pytest.mark.parametrize(("model", "seqs"), [("t5-small", [8, 16]), ("vit-base", [197])])
def test_encoder_decoder_and_vision_models(model, seqs) -> None:
    # T5 (the decoder runs on `seq` target tokens, as RunConfig's default) and ViT (seq must
    # be the 196 patches + the class token) through the sweep equal the per-config path
    res = sweep([model], ["a100"], batch=[1, 2, 4], seq=seqs, precision=["bf16"])
    assert res.evaluated == 3 * len(seqs)
    for row in res.frame.to_dict(orient="records"):
        run = RunConfig(batch=row["batch"], seq=row["seq"], precision="bf16")
        _check(row, _reference(get_model(model), run, "a100", Knobs()))


def test_transformer_xl_through_the_sweep() -> None:
    # memory, relative positions and adaptive clusters (token counts rounded on the swept
    # token arrays) equal the per-config path, also with the hidden size swept
    res = sweep(["txl-wt103-large"], ["a100"], batch=[1, 3], seq=[7, 16], hidden=[512, 1024],
                precision=["bf16"], checkpoint=["full"])
    assert res.evaluated == 8
    base = get_model("txl-wt103-large")
    for row in res.frame.to_dict(orient="records"):
        m = dataclasses.replace(base, hidden=row["hidden"], intermediate=row["intermediate"])
        run = RunConfig(batch=row["batch"], seq=row["seq"], precision="bf16",
                        checkpoint="full")
        _check(row, _reference(m, run, "a100", Knobs()))


def test_t5_layers_swept() -> None:
    # T5's decoder layers follow num_layers (decoder_layers None): its layer index is an
    # array over the axis, and each row still equals the per-configuration path
    res = sweep(["t5-small"], ["a100"], num_layers=[1, 2], batch=[2], seq=[16],
                fusion=[False, True])
    assert res.evaluated == 4
    for row in res.frame.to_dict(orient="records"):
        m = dataclasses.replace(get_model("t5-small"), num_layers=row["num_layers"])
        _check(row, _reference(m, RunConfig(batch=2, seq=16), "a100", Knobs(),
                               fused=row["fusion"]))


def test_decoder_seq_is_an_axis() -> None:
    # T5's decoder length is RunConfig.decoder_seq, swept under that name: each row equals
    # the per-configuration path; left out, the column is absent (no model sets it)
    res = sweep(["t5-small"], ["a100"], batch=[1, 2], seq=[16], decoder_seq=[4, 16])
    assert res.evaluated == 4 and sorted(set(res.frame["decoder_seq"])) == [4, 16]
    for row in res.frame.to_dict(orient="records"):
        run = RunConfig(batch=row["batch"], seq=16, decoder_seq=row["decoder_seq"])
        _check(row, _reference(get_model("t5-small"), run, "a100", Knobs()))
    assert "decoder_seq" not in sweep(["bert-tiny"], ["a100"], batch=[1]).frame


@dataclasses.dataclass(kw_only=True, slots=True, frozen=True)
class _RunWithLossScale(RunConfig):
    """A run config with one more field, as a later change would add it."""

    loss_scale: int = setting(1, "Static loss scale (a test-only field).")


def test_a_field_added_to_the_run_config_is_an_axis_and_an_option(monkeypatch) -> None:
    """A RunConfig subclass with an extra integer field, put in bertscope.config's place: the
    grid takes it as a numeric axis (its own array dimension; the group's run is the
    subclass), the result has its column, and `bertscope sweep --help` lists `--loss-scale`
    with the field's help, with no change to the sweep or the CLI."""
    import bertscope.config as config

    monkeypatch.setattr(config, "RunConfig", _RunWithLossScale)
    grid = make_grid(["bert-tiny"], ["a100"], loss_scale=[1, 2, 4], batch=[2, 3])
    assert grid["loss_scale"] == (1, 2, 4) and grid.size == 3 * 2
    group = next(grid.groups())
    assert type(group.run) is _RunWithLossScale
    assert group.shape[group.axes.index("loss_scale")] == 3
    res = sweep(["bert-tiny"], ["a100"], loss_scale=[1, 2], batch=[2])
    assert sorted(res.frame["loss_scale"]) == [1, 2]
    # no producer reads it: both rows time the same iteration
    assert res.frame["iteration_s"].nunique() == 1
    with pytest.raises(BertscopeError, match="axis loss_scale: values must be positive"):
        make_grid(["bert-tiny"], ["a100"], loss_scale=[0])

    from typer.testing import CliRunner

    from bertscope.cli import build_app

    monkeypatch.setenv("COLUMNS", "200")
    out = CliRunner().invoke(build_app(("sweep",)), ["sweep", "--help"]).output
    assert "--loss-scale" in out and "Static loss scale (a test-only field)." in out
    assert "--micro-batches" in out and "--fusion" in out


def test_cli_axes_are_named_as_the_fields(tmp_path, capsys) -> None:
    import pandas as pd

    from bertscope.cli import main

    out = tmp_path / "grid.csv"
    # 2 layer counts x 2 recomputation modes, fused, vocabulary 1000
    assert main(["sweep", "bert-tiny", "--num-layers", "1,2", "--checkpoint",
                 "none,selective", "--fusion", "on", "--vocab-size", "1000", "--batch", "2",
                 "--output", str(out)]) == 0
    df = pd.read_csv(out)
    assert len(df) == 4 and set(df["num_layers"]) == {1, 2}
    assert set(df["checkpoint"]) == {"none", "selective"} and set(df["fusion"]) == {True}
    assert set(df["vocab_size"]) == {1000}
    capsys.readouterr()
    for old in (["--layers", "2"], ["--fused", "on"], ["--ffn", "64"], ["--vocab", "99"]):
        assert main(["sweep", "bert-tiny", *old]) == 2  # the old spellings are gone
    assert main(["sweep", "bert-tiny", "--precision", "fp64"]) == 2
    assert "--precision: 'fp64' is not one of fp32" in capsys.readouterr().err


def test_two_point_grid_by_hand() -> None:
    """bert-tiny (2 layers, hidden 128, 2 heads, FFN 512, vocab 30522) at batch 1 and 2,
    seq 8, fp32 SGD without dropout. Hand arithmetic, t = batch x 8 tokens:
    per layer, forward GEMM FLOPs = 2t x (4 x 128 x 128 + 2 x 128 x 512) = 2t x 196,608 and
    attention 2 x (2 x batch) x 8 x 8 x 64 x 2 = 32,768 x batch; backward twice forward.
    MLM head: transform 2t x 128 x 128 and decoder 2t x 128 x 30522; the pooler and NSP
    classifier run on the batch rows only: 2 x batch x 128 x (128 + 2).
    So GEMM FLOPs per iteration = 3 x [2 x (2t x 196,608 + 32,768 b) + 2t x 128 x (128 +
    30522) + 2b x 128 x 130]; batch 1 (t = 8): 3 x [6,356,992 + 62,771,200 + 33,280]
    = 207,484,416; batch 2 is exactly twice that."""
    res = sweep(["bert-tiny"], ["a100"], batch=[1, 2], seq=[8], optimizer=["sgd"],
                dropout=[False])
    rows = res.frame.sort_values("batch").to_dict(orient="records")
    assert res.evaluated == 2 and res.grid_size == 2
    for r, b in zip(rows, (1, 2), strict=True):
        table = build(get_model("bert-tiny"), RunConfig(batch=b, seq=8, optimizer="sgd",
                                                        dropout=False))
        gemm = table.df[table.df["category"].map(lambda c: Category(c).is_gemm)]["flops"]
        assert gemm.sum() == 207_484_416 * b
        assert r["flops"] == table.df["flops"].sum()  # GEMMs plus the memory-bound ops
        assert r["tokens"] == 8 * b
        # parameters: embeddings (30522 + 512 + 2) x 128 + 256 = 3,972,864; a layer
        # 4 x 16,512 + 66,048 + 65,664 + 512 = 198,272 (x 2); pooler 16,512; heads 16,512 +
        # 256 + 30,522 + 258 = 47,548: 4,433,468 in all
        assert r["params"] == 4_433_468
    # tokens/s is tokens over the iteration time; the share columns add up to 1
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["iteration_s"])
        shares = sum(v for k, v in r.items() if k.startswith("share_"))
        assert shares == pytest.approx(1.0)
        assert r["bound_compute"] + r["bound_memory"] + r["bound_overhead"] == \
            pytest.approx(1.0)
        # every memory-bound category plus the GEMM ones is the whole
        assert r["memory_bound_share"] == pytest.approx(
            1 - r["share_gemm"] - r["share_batched_gemm"])


def test_memory_knob_decides_what_fits() -> None:
    """bert-large at batch 64, seq 512 needs tens of GiB; on a 16 GiB V100 it does not fit,
    with 8x the memory it does."""
    res = sweep(["bert-large"], ["v100"], batch=[64], seq=[512], memory=[1.0, 8.0])
    rows = res.frame.sort_values("memory").to_dict(orient="records")
    assert rows[0]["memory_bytes"] == rows[1]["memory_bytes"] > 16 * 2**30
    assert not rows[0]["fits"] and rows[1]["fits"]


def test_bandwidth_knob_speeds_memory_bound_work_only() -> None:
    res = sweep(["bert-base"], ["a100"], batch=[8], bandwidth=[1.0, 2.0])
    slow, fast = res.frame.sort_values("bandwidth").to_dict(orient="records")
    assert fast["iteration_s"] < slow["iteration_s"]
    assert fast["flops"] == slow["flops"]


def test_chunks_do_not_change_the_answer(monkeypatch) -> None:
    import bertscope.sweep.engine as engine

    kw = {"batch": list(range(1, 21)), "seq": [16, 32, 64]}
    whole = sweep(["bert-tiny"], ["a100", "h100"], **kw).frame
    monkeypatch.setattr(engine, "CHUNK", 7)
    cut = sweep(["bert-tiny"], ["a100", "h100"], **kw).frame
    key = ["device", "batch", "seq"]
    a = whole.sort_values(key).reset_index(drop=True)
    b = cut.sort_values(key).reset_index(drop=True)
    assert np.allclose(a["iteration_s"], b["iteration_s"], rtol=1e-12)
    assert len(a) == len(b) == 120


def test_pieces_hold_chunk_entries_over_the_targets() -> None:
    import bertscope.sweep.engine as engine

    # 2^17 entries: one target 131,072 configs; four 32,768; fifteen 8,738 -> the 2^15 floor
    assert engine.piece_configs(1) == 131_072
    assert engine.piece_configs(4) == 32_768
    assert engine.piece_configs(15) == 32_768
    grid = make_grid(["bert-tiny"], ["a100"], batch=range(1, 301), seq=range(1, 501))
    sizes = [p.size for p in engine.chunks(next(grid.groups()), engine.piece_configs(4))]
    assert sum(sizes) == 150_000 and max(sizes) <= 32_768


@pytest.mark.parametrize(("axes", "message"), [
    ({"batch": []}, "axis batch is empty"),
    ({"batch": [0]}, "positive integers"),
    ({"seq": [2**30]}, "exceeds the supported maximum"),
    ({"gemm_peak": [0.0]}, "knob gemm_peak must be a multiplier"),
    ({"bandwidth": [-1.0]}, "knob bandwidth must be a multiplier"),
    ({"precision": ["fp64"]}, "precision"),
    ({"checkpoint": ["some"]}, "axis checkpoint: .*none, selective, full"),
    ({"num_layers": [True]}, "positive integers"),
    ({"dropout": [1]}, "axis dropout: values must be true or false"),
    ({"decoder_seq": [8]}, "decoder_seq applies to encoder-decoder models"),
    ({"wings": [1]}, "unknown sweep axis wings"),
    ({"layers": [2]}, "unknown sweep axis layers"),  # the old spellings are gone
    ({"fused": [True]}, "unknown sweep axis fused"),
])
def test_bad_axes_are_refused(axes, message) -> None:
    with pytest.raises(BertscopeError, match=message):
        sweep(["bert-tiny"], ["a100"], **axes)


def test_unknown_device_and_too_large_a_grid() -> None:
    with pytest.raises(BertscopeError, match="nope"):
        sweep(["bert-tiny"], ["nope"])
    with pytest.raises(BertscopeError, match=r"has 4,000 configurations .* GiB .* --yes"):
        sweep(["bert-tiny"], ["a100"], batch=range(1, 1001), seq=[8, 16, 32, 64],
              max_configs=1000)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_cli_sweep_prints_the_count_and_writes_every_row(suffix, tmp_path, capsys,
                                                          monkeypatch) -> None:
    import pandas as pd

    from bertscope.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / f"grid{suffix}"
    rc = main(["sweep", "bert-tiny,bert-mini", "--device", "a100,h100", "--batch", "1..3",
               "--seq", "16,32", "--precision", "fp32,bf16", "--top", "4", "--output",
               str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    # 2 models x 2 devices x 3 batches x 2 seqs x 2 precisions
    assert "evaluated 48 configurations" in text and "Top 4 by tokens_per_s" in text
    df = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert len(df) == 48 and set(df["batch"]) == {1, 2, 3}
    best = df.sort_values("tokens_per_s", ascending=False).iloc[0]
    assert best["device"] in text


def test_ranked_sorts_times_smallest_first() -> None:
    res = sweep(["bert-tiny"], ["a100"], batch=[1, 8, 64])
    assert list(res.ranked("iteration_s")["batch"]) == [1, 8, 64]
    assert list(res.ranked("tokens_per_s", top=1)["batch"]) == [64]


def test_a_sweep_without_chain_fusion_matches_fuse_and_predict() -> None:
    """chain_fusion off (as the fused recipe's apex-era BERT runs): the sweep fuses only the
    optimizer step, as `fuse` does, configuration by configuration; and it is slower than
    with the chains fused (more bytes moved, more launches)."""
    res = sweep(["bert-tiny"], ["a100"], batch=[2, 8], seq=[32], precision=["fp16"],
                fusion=[True], chain_fusion=[False, True])
    assert res.evaluated == 4
    base = get_model("bert-tiny")
    times = {}
    for row in res.frame.to_dict(orient="records"):
        run = RunConfig(batch=row["batch"], seq=32, precision="fp16", fusion=True,
                        chain_fusion=row["chain_fusion"])
        _check(row, _reference(base, run, "a100", Knobs(), fused=True))
        times[(row["batch"], row["chain_fusion"])] = row["iteration_s"]
    assert all(times[(b, False)] > times[(b, True)] for b in (2, 8))


def test_fusion_decided_per_configuration() -> None:
    """bert-tiny (hidden 128) with vocab 128 or 256: the MLM decoder's bias gradient (tokens x
    vocab elements) and the MLM layernorm's gradient (tokens x hidden) are adjacent in the
    heads' backward and chain only where vocab == hidden: one piece, two fusion variants, each
    configuration equal to fuse() + predict."""
    from bertscope.analytic.encoder import encoder_blocks
    from bertscope.sweep.block_fusion import variants
    from bertscope.sweep.grid import Grid

    grid = Grid(models=(get_model("bert-tiny"),), devices=(load_profile("a100"),),
                batch=(4,), seq=(32,), vocab_size=(128, 256), fusion=(True,))
    group = next(grid.groups())
    m, run = group.views()
    assert len(variants(encoder_blocks(m, run), group.shape, 4, m.num_layers)) == 2
    res = sweep(["bert-tiny"], ["a100"], batch=[4], seq=[32], vocab_size=[128, 256],
                fusion=[True])
    assert res.evaluated == 2
    base = get_model("bert-tiny")
    for row in res.frame.to_dict(orient="records"):
        mv = dataclasses.replace(base, vocab_size=row["vocab_size"])
        _check(row, _reference(mv, RunConfig(batch=4, seq=32), "a100", Knobs(), fused=True))


def test_reused_row_times_equal_the_per_configuration_path() -> None:
    """Pieces that differ only in structural settings (optimizer, recomputation, dropout,
    micro-batches 1 or more) stack identical buckets, timed once per process and reused
    (`engine._Memo`): every row of such a grid still equals the per-configuration path, on
    two devices (the memo keys on the targets)."""
    import bertscope.sweep.engine as engine

    engine.clear_memo()
    hits = engine._MEMO.hits
    res = sweep(["bert-tiny"], [DEVICES["a100"], DEVICES["tpu-v4"]], batch=[2, 8],
                seq=[16, 64], micro_batches=[1, 2], precision=["bf16"],
                optimizer=["adam", "lamb"], checkpoint=["none", "full"], dropout=[True, False],
                workers=1)
    assert engine._MEMO.hits > hits  # the grid did reuse buckets
    names = {DEVICES[d].device.name: d for d in ("a100", "tpu-v4")}
    rows = res.frame.to_dict(orient="records")
    assert len(rows) == 2 * 2 * 2 * 2 * 2 * 2 * 2  # devices x batch, seq, micro-batches,
    # optimizer, recomputation, dropout: 2 values each
    for row in rows[::3]:  # a third of them (the reference path builds a table each)
        run = RunConfig(batch=row["batch"], seq=row["seq"], micro_batches=row["micro_batches"],
                        precision="bf16", optimizer=row["optimizer"],
                        checkpoint=row["checkpoint"], dropout=row["dropout"])
        _check(row, _reference(get_model("bert-tiny"), run, names[row["device"]], Knobs()))


def test_memo_reuses_only_equal_rows() -> None:
    """A bucket equal to one timed before, but for one value in its first row, is timed
    afresh (values compared, not a digest: the last values agree, the first differ); the
    memo stays within its byte budget."""
    import bertscope.sweep.engine as engine
    from bertscope.optable import Columns

    profile = DEVICES["a100"]
    peaks = engine._stacked_peaks([(profile, Knobs())], "fp32")
    key = engine.target_key([(profile, Knobs())], "fp32")

    def bucket(first_flops: float) -> Columns:
        flops = np.array([[first_flops, 2e9], [4e9, 8e9]])[..., None]
        cols = {c: np.ones((2, 2, 1)) * 1e6 for c in engine.NUMERIC}
        cols.update(flops=flops, count=np.ones((2, 1, 1)), m=np.full((2, 2, 1), 512.0),
                    n=np.full((2, 2, 1), 512.0), k=np.full((2, 2, 1), 512.0),
                    batch=np.ones((2, 1, 1)))
        label = np.empty(2, dtype=object)
        label[:] = [Category.GEMM, Category.GEMM]
        phase = np.empty(2, dtype=object)
        phase[:] = [Phase.FORWARD, Phase.FORWARD]
        issuer = np.empty(2, dtype=object)
        issuer[:] = ["model", "model"]
        cols.update(category=label.reshape(2, 1, 1), phase=phase.reshape(2, 1, 1),
                    issuer=issuer.reshape(2, 1, 1))
        return Columns(cols)

    memo = engine._Memo(budget=1 << 20)
    scale = np.ones(1)
    a = memo.times(key, bucket(1e9), profile, peaks, scale)
    again = memo.times(key, bucket(1e9), profile, peaks, scale)
    other = memo.times(key, bucket(3e9), profile, peaks, scale)
    assert again is a and (memo.hits, memo.misses) == (1, 2)
    # the first GEMM has 3x the FLOPs at the same shape: a different time, the rest equal
    assert other["time_s"][0, 0, 0] != a["time_s"][0, 0, 0]
    assert np.array_equal(other["time_s"][1:], a["time_s"][1:])
    small = engine._Memo(budget=0)  # nothing fits: every call times afresh, nothing kept
    small.times(key, bucket(1e9), profile, peaks, scale)
    small.times(key, bucket(1e9), profile, peaks, scale)
    assert (small.hits, small.misses, small.used) == (0, 2, 0) and not small.entries
