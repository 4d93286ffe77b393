"""Packed and unpadded sequences: the attention core priced on the real lengths, by hand.

Config: a 1-layer BERT with hidden 128, 2 heads (head size d = 64), FFN 512, fp32 (4 bytes a
value), dropout on, 512 positions. The packed row holds sequences of 64, 128 and 320 tokens
(64 + 128 + 320 = 512 = one full row), so

    sum L^2 = 64^2 + 128^2 + 320^2 = 4,096 + 16,384 + 102,400 = 122,880 per head
    e = heads x sum L^2 = 2 x 122,880 = 245,760 score elements

against 3 x 320^2 = 307,200 per head for the three padded to the longest and 512^2 = 262,144
per head for the dense row. Sources for the semantics: `bertscope.packing`'s docstring
(Krell, Kosec et al. 2021 arXiv:2107.02027; flash_attn_varlen_func / torch varlen_attn).
"""

from __future__ import annotations

import pytest

from bertscope.analytic import build
from bertscope.config import Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.taxonomy import Phase, Sublayer

M = ModelConfig(name="tiny512", family=Family.BERT, num_layers=1, hidden=128, heads=2,
                intermediate=512, vocab_size=100, max_positions=512)
CORE = (Sublayer.ATTN_SCORE, Sublayer.ATTN_SOFTMAX, Sublayer.ATTN_CONTEXT, Sublayer.ATTN_FUSED)


def _rows(layer: int = 0, **run):
    df = build(M, RunConfig(**run)).df
    return df[df["layer"] == layer].set_index(["name", "phase"])


def _core(**run):
    rows = _rows(**run)
    return rows[rows["sublayer"].astype(str).isin(CORE)]


def test_packed_row_costs_the_sum_of_its_sequences_not_n_times_the_longest() -> None:
    core = _core(batch=1, seq=512, attention="sdpa", packing="packed",
                 seq_lengths="64+128+320")
    assert len(core) == 2  # one variable-length kernel each way
    fwd = core.loc[("attention", Phase.FORWARD)]
    # the score product alone: 2 e d = 2 x 245,760 x 64 = 31,457,280 (not 2 x 2 x 3 x 320^2
    # x 64 = 78,643,200 for n x max^2, nor 2 x 2 x 512^2 x 64 = 67,108,864 dense); with the
    # context product 4 e d = 62,914,560, plus (scale 1 + mask 1 + softmax 5 + dropout 2) x e
    # = 9 x 245,760 = 2,211,840 on chip
    assert fwd["flops"] == 62_914_560 + 2_211_840
    # five products backward 10 e d = 157,286,400; elementwise 16 e = 3,932,160
    bwd = core.loc[("attention.grad", Phase.BACKWARD_DATA)]
    assert bwd["flops"] == 157_286_400 + 3_932_160
    # Q, K, V of the 512 real tokens: 3 x (2 heads x 512 x 64) x 4 B = 786,432; no mask tensor
    assert fwd["bytes_read"] == 786_432
    # O (262,144 B) and one fp32 log-sum-exp per head and token (4 x 2 x 512 = 4,096 B)
    assert fwd["bytes_written"] == 266_240
    # the kernel's grid: the longest sequence (max_seqlen), 3 sequences x 2 heads
    assert (fwd["m"], fwd["n"], fwd["k"], fwd["batch"]) == (320, 320, 64, 6)


def test_unpadded_batch_prices_the_core_like_the_same_sequences_packed() -> None:
    packed = _core(batch=1, seq=512, attention="sdpa", packing="packed",
                   seq_lengths="64+128+320")
    # three sequences drawn from the three lengths, one each: the same varlen kernel
    unpadded = _core(batch=3, seq=512, attention="sdpa", packing="unpadded",
                     seq_lengths="64+128+320")
    cols = ["flops", "bytes_read", "bytes_written", "saved_bytes", "m", "batch"]
    assert (packed[cols].to_numpy() == unpadded[cols].to_numpy()).all()


def test_eager_packed_row_computes_the_full_scores_under_a_block_diagonal_mask() -> None:
    core = _core(batch=1, seq=512, attention="eager", packing="packed",
                 seq_lengths="64+128+320")
    score = core.loc[("score", Phase.FORWARD)]
    # no varlen form: 2 g s^2 d = 2 x 2 x 512^2 x 64 = 67,108,864
    assert score["flops"] == 67_108_864
    mask = core.loc[("score_mask", Phase.FORWARD)]
    # reads the scores (2 x 512^2 x 4 B = 2,097,152) and a (1, 1, 512, 512) mask (1,048,576)
    assert mask["bytes_read"] == 2_097_152 + 1_048_576


def test_eager_unpadded_pads_the_core_back_to_the_longest() -> None:
    rows = _rows(batch=3, seq=512, attention="eager", packing="unpadded",
                 seq_lengths="64+128+320")
    score = rows.loc[("score", Phase.FORWARD)]
    # (b x heads) = 6 products of 320 x 320 over d = 64: 2 x 6 x 320^2 x 64 = 78,643,200
    assert (score["m"], score["n"], score["batch"]) == (320, 320, 6)
    assert score["flops"] == 78_643_200
    # the linear layers see the 512 real tokens, not 3 x 512 padded slots:
    # FFN1 2 x 512 x 128 x 512 = 67,108,864
    ffn1 = rows.loc[("ffn1", Phase.FORWARD)]
    assert ffn1["m"] == 512
    assert ffn1["flops"] == 67_108_864


def test_packed_rows_compute_every_slot_of_the_row() -> None:
    # two sequences (64 + 128 = 192 tokens) in a 512-slot row: the dense row's linears
    # compute all 512 slots; the varlen core only the 192 real tokens
    rows = _rows(batch=1, seq=512, attention="sdpa", packing="packed", seq_lengths="64+128")
    assert rows.loc[("ffn1", Phase.FORWARD)]["m"] == 512
    # 4 e d with e = 2 x (64^2 + 128^2) = 40,960: 4 x 40,960 x 64 = 10,485,760 (+ 9 e)
    assert rows.loc[("attention", Phase.FORWARD)]["flops"] == 10_485_760 + 9 * 40_960


def test_full_length_sequences_cost_what_the_padded_run_costs() -> None:
    """Every sequence as long as seq: unpadded and packed change no FLOP."""
    padded = build(M, RunConfig(batch=2, seq=256, attention="sdpa")).df["flops"].sum()
    for packing, lengths in (("unpadded", "256"), ("packed", "256")):
        run = RunConfig(batch=2, seq=256, attention="sdpa", packing=packing,
                        seq_lengths=lengths)
        assert build(M, run).df["flops"].sum() == padded


def test_padded_default_is_unchanged_by_stating_lengths_or_packing_without_them() -> None:
    """`none` with real lengths prices the padded work (only the token count changes), and
    a packing without lengths is every sequence at full length."""
    base = build(M, RunConfig(batch=2, seq=64)).df
    for run in (RunConfig(batch=2, seq=64, seq_lengths="16+48"),
                RunConfig(batch=2, seq=64, packing="unpadded"),
                RunConfig(batch=2, seq=64, packing="packed")):
        df = build(M, run).df
        for col in ("flops", "bytes_read", "bytes_written", "saved_bytes", "m", "elements"):
            assert (df[col].to_numpy() == base[col].to_numpy()).all(), (run, col)


def test_masked_lm_only_gathers_15_percent_of_each_real_sequence() -> None:
    rows = _rows(-1, batch=1, seq=512, packing="packed", seq_lengths="64+128+320",
                 masked_lm_only=True)  # the heads (layer -1)
    # ceil(0.15 x 64) + ceil(0.15 x 128) + ceil(0.15 x 320) = 10 + 20 + 48 = 78 positions
    # (padded: ceil(0.15 x 512) = 77 per row)
    assert rows.loc[("mlm_transform", Phase.FORWARD)]["m"] == 78
    # NSP once per sequence: 3 pooled rows
    assert rows.loc[("pooler", Phase.FORWARD)]["m"] == 3


def test_decoder_packs_too() -> None:
    gpt = ModelConfig(name="gpt-tiny", family=Family.GPT2, num_layers=1, hidden=64, heads=2,
                      intermediate=256, vocab_size=100, max_positions=256)
    df = build(gpt, RunConfig(batch=1, seq=256, attention="sdpa", packing="packed",
                              seq_lengths="128x2")).df
    fwd = df[(df["name"] == "attention") & (df["layer"] == 0)].iloc[0]
    # e = 2 heads x 2 x 128^2 = 65,536; 4 e d = 4 x 65,536 x 32 = 8,388,608 (+ 9 e: scale,
    # mask, softmax 5, dropout 2)
    assert fwd["flops"] == 8_388_608 + 9 * 65_536


@pytest.mark.parametrize(("run", "needle"), [
    (dict(seq=128, seq_lengths="64+abc"), "is not a length"),
    (dict(seq=128, seq_lengths="0+64"), "must be positive"),
    (dict(seq=128, seq_lengths="64x0"), "must be positive"),
    (dict(seq=128, seq_lengths="256"), "does not fit seq 128"),
    (dict(seq=128, seq_lengths="64+96", packing="packed"), "sums to 160 tokens"),
    (dict(seq=128, packing="padded"), "packing"),
    (dict(seq=128, seq_lengths=128), "must be a string"),
])
def test_bad_specs_are_refused_in_one_line(run, needle) -> None:
    with pytest.raises(BertscopeError, match=needle) as e:
        RunConfig(**run)
    assert "\n" not in str(e.value)


def test_vit_and_t5_refuse_real_lengths() -> None:
    from bertscope.job import Job
    from bertscope.presets import get_model

    for name in ("vit-base", "t5-small"):
        model = get_model(name)
        seq = model.max_seq if model.family is Family.VIT else 64
        with pytest.raises(BertscopeError, match="seq_lengths applies to encoder"):
            Job(model=model, run=RunConfig(seq=seq, seq_lengths="32"))
