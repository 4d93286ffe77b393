"""Throughput counted in real tokens and sequences under real sequence lengths: `predict`,
the distributed model, the sweep and the command line (padding is never a token)."""

from __future__ import annotations

import pytest

from bertscope.analytic import build
from bertscope.cli import main
from bertscope.config import Family, ModelConfig, RunConfig
from bertscope.job import Job, Layout
from bertscope.parallel import Cluster, evaluate
from bertscope.perf import Prediction, predict

M = ModelConfig(name="tiny512", family=Family.BERT, num_layers=2, hidden=128, heads=2,
                intermediate=512, vocab_size=100, max_positions=512)


def _pred(**run) -> Prediction:
    return Prediction.of(predict(build(M, RunConfig(**run)), "a100"))


def test_unpadded_tokens_per_s_counts_real_tokens() -> None:
    p = _pred(batch=3, seq=512, micro_batches=2, precision="bf16", attention="sdpa",
              packing="unpadded", seq_lengths="64+128+320")
    # 3 sequences, one of each length, per micro-batch: (64 + 128 + 320) x 2 = 1,024 real
    # tokens (padded slots would be 3 x 512 x 2 = 3,072); 6 sequences
    assert p.tokens == 1_024
    assert p.sequences == 6
    assert p.tokens_per_s == pytest.approx(1_024 / p.time_s, rel=1e-12)
    assert p.sequences_per_s == pytest.approx(6 / p.time_s, rel=1e-12)


def test_packed_rows_count_each_sequence() -> None:
    p = _pred(batch=2, seq=256, attention="sdpa", packing="packed", seq_lengths="64+128")
    # 2 rows x (64 + 128) = 384 real tokens of 512 slots; 2 rows x 2 = 4 sequences
    assert (p.tokens, p.sequences) == (384, 4)


def test_padded_with_real_lengths_costs_the_same_but_counts_fewer_tokens() -> None:
    full = _pred(batch=4, seq=512)
    short = _pred(batch=4, seq=512, seq_lengths="128")
    assert short.time_s == full.time_s  # the padding is computed
    # 4 x 512 = 2,048 slots, 4 x 128 = 512 real tokens
    assert (full.tokens, short.tokens) == (2_048, 512)
    assert short.tokens_per_s == pytest.approx(full.tokens_per_s / 4, rel=1e-12)


def test_unpadded_is_faster_than_padded_per_real_token_on_long_rows() -> None:
    padded = _pred(batch=8, seq=512, precision="bf16", attention="sdpa", seq_lengths="128")
    unpadded = _pred(batch=8, seq=512, precision="bf16", attention="sdpa",
                     packing="unpadded", seq_lengths="128")
    assert padded.tokens == unpadded.tokens == 8 * 128
    assert unpadded.time_s < padded.time_s


def test_distributed_tokens_per_s_counts_real_tokens() -> None:
    run = RunConfig(batch=4, seq=512, micro_batches=2, precision="bf16", attention="sdpa",
                    packing="packed", seq_lengths="200+300")
    r = evaluate(Job(model=M, run=run, layout=Layout(dp=2)), Cluster.build("a100", 2))
    # global batch 4 rows x 2 micro-batches x 2 replicas = 16 rows of 200 + 300 = 500 real
    # tokens: 8,000 per step (16 x 512 = 8,192 slots)
    assert r.tokens_per_s * r.iteration_s == pytest.approx(8_000, rel=1e-12)


def test_sweep_counts_real_tokens_and_matches_predict() -> None:
    from bertscope.sweep import sweep

    # batch x seq share products (5 distinct of 8): rows read through b s are evaluated on
    # the distinct products (sweep.tokens), the real-token rows among them
    res = sweep([M], ["a100"], batch=(1, 2, 4, 8), seq=(256, 512), attention="sdpa",
                packing=("none", "unpadded"), seq_lengths="64x3+320")
    frame = res.frame
    assert set(frame["packing"]) == {"none", "unpadded"}
    # 320 does not fit seq 256: those configurations are skipped, not refused
    assert set(frame["seq"]) == {512}
    for row in frame.itertuples():
        p = _pred(batch=int(row.batch), seq=int(row.seq), attention="sdpa",
                  packing=row.packing, seq_lengths="64x3+320")
        # mean length (3 x 64 + 320) / 4 = 128: batch x 128 real tokens either way
        assert row.tokens == row.batch * 128
        assert row.iteration_s == pytest.approx(p.time_s, rel=1e-9)
        assert row.tokens_per_s == pytest.approx(p.tokens_per_s, rel=1e-9)


def test_predict_says_it_counts_real_tokens(capsys) -> None:
    rc = main(["predict", "bert-tiny", "--device", "a100", "--seq", "128", "--batch", "2",
               "--packing", "packed", "--seq-lengths", "64x2", "--top", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "real tokens/s" in out and "sequences/s" in out
    assert "packed: 2 sequences per row of 128" in out


@pytest.mark.parametrize(("argv", "needle"), [
    (["--seq-lengths", "64+x"], "is not a length"),
    (["--seq-lengths", "256"], "does not fit seq 128"),
    (["--packing", "packed", "--seq-lengths", "100+100"], "sums to 200 tokens"),
])
def test_bad_specs_exit_2_in_one_line(capsys, argv, needle) -> None:
    rc = main(["ops", "bert-tiny", "--seq", "128", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_sweep_command_takes_several_specs_as_one_axis(capsys, tmp_path) -> None:
    import pandas as pd

    out = tmp_path / "s.csv"
    rc = main(["sweep", "bert-tiny", "--device", "a100", "--seq", "128", "--batch", "4",
               "--packing", "unpadded", "--seq-lengths", "64,32+96", "--no-store",
               "--output", str(out)])
    assert rc == 0, capsys.readouterr().err
    frame = pd.read_csv(out)
    # two specs (commas separate axis values, + joins one spec's lengths), both of mean 64:
    # 4 x 64 = 256 real tokens each
    assert sorted(frame["seq_lengths"].astype(str)) == ["32+96", "64"]
    assert list(frame["tokens"]) == [256, 256]


def test_sweep_refuses_real_lengths_for_vit_and_t5() -> None:
    from bertscope.errors import BertscopeError
    from bertscope.sweep import sweep

    with pytest.raises(BertscopeError, match="seq_lengths applies to encoder and decoder-only"):
        sweep(["t5-small"], ["a100"], seq=64, seq_lengths="32")


def test_an_uneven_draw_counts_whole_tokens() -> None:
    t = build(M, RunConfig(batch=2, seq=512, packing="unpadded", seq_lengths="64+128+320"))
    # 2 sequences drawn from lengths of mean 512 / 3: 2 x 512 / 3 = 341.3, rounded to 341
    ffn1 = t.df[(t.df["name"] == "ffn1") & (t.df["layer"] == 0)].iloc[0]
    assert ffn1["m"] == 341
    assert RunConfig(batch=2, seq=512, packing="unpadded", seq_lengths="64+128+320").tokens == 341
