"""`RunConfig.chain_fusion`: under fusion, whether the activation chains fuse or only the
optimizer step does (NVIDIA's apex-era BERT, the `fused` recipe: an eager model whose fused
kernels are the named ones). Expected bytes are derived by hand in the comments."""

from __future__ import annotations

from bertscope.analytic import build, param_groups
from bertscope.config import RunConfig
from bertscope.perf import fuse
from bertscope.perf.kernel_fusion import FUSED_COLUMN
from bertscope.taxonomy import Phase
from tests.conftest import tiny

CHAIN = ["score_scale", "score_mask", "softmax", "attn_dropout"]
"""The attention scores' forward ops between the two batched GEMMs (modeling.py
BertSelfAttention.forward: / sqrt(d), + attention_mask, F.softmax, self.dropout)."""


def _run(**kw: object) -> RunConfig:
    return RunConfig(batch=2, seq=8, precision="fp16", optimizer="lamb", recipe="fused", **kw)


def _moved(df) -> float:
    return float((df["bytes_read"] + df["bytes_written"]).sum())


def test_the_fused_recipe_runs_the_attention_chain_as_four_kernels() -> None:
    # tiny: batch 2 x 4 heads x seq 8 x seq 8 = 512 score elements of 2 B (fp16), a mask
    # of batch x seq = 16 elements of 2 B (32 B) broadcast over heads and rows.
    # Per element: scale r2 w2, mask r2 w2, softmax r2 w2, dropout r2 w3 (2 B out + 1 B
    # mask) = 17 B: 17 x 512 + 32 = 8736 B, four launches.
    assert _run().chain_fusion is False  # the recipe's own choice (fused.toml)
    df = fuse(build(tiny(), _run())).df
    fwd = df[(df["layer"] == 0) & (df["phase"] == Phase.FORWARD) & df["name"].isin(CHAIN)]
    assert sorted(fwd["name"]) == sorted(CHAIN)
    assert (fwd[FUSED_COLUMN] == 1).all()
    assert _moved(fwd) == 17 * 512 + 32
    # --chain-fusion (DLE 21.11's scripted model): one kernel; the 3 later members read
    # their input on chip (3 x 2 B), scale's and mask's outputs are not written (2 x 2 B;
    # softmax keeps its output for backward): 17 - 10 = 7 B per element + the mask
    on = fuse(build(tiny(), _run(chain_fusion=True))).df
    row = on[(on["layer"] == 0) & (on["name"] == "+".join(CHAIN))]
    assert len(row) == 1 and int(row[FUSED_COLUMN].iloc[0]) == 4
    assert _moved(row) == 7 * 512 + 32


def test_without_chain_fusion_only_the_optimizer_step_fuses() -> None:
    m = tiny()
    table = build(m, _run())
    fused = fuse(table).df
    before = table.df
    # every micro-batch row stays as it was, one launch each
    mb_before = before[before["phase"] != Phase.OPTIMIZER]
    mb_after = fused[fused["phase"] != Phase.OPTIMIZER]
    assert list(mb_after["name"]) == list(mb_before["name"])
    assert _moved(mb_after) == _moved(mb_before)
    # FusedLAMB: unscale (+ the grad norm's 2 B read of the fp16 gradient on chip) | moments
    # (+ the norms of w and u, 2 x 4 B) | update (+ the fp16 copy of the masters: its 4 B
    # read) = 3 launches, 2 + 8 + 4 = 14 B per parameter elided. Parameters: tiny's 145398
    # with the vocabulary padded 500 -> 504 (vocab_multiple 8): 4 x 64 embedding rows + 4
    # MLM biases = 145658
    opt_before = before[before["phase"] == Phase.OPTIMIZER]
    opt_after = fused[fused["phase"] == Phase.OPTIMIZER]
    params = sum(g.params for g in param_groups(m)) + 4 * 64 + 4
    assert len(opt_after) == 3
    assert _moved(opt_before) - _moved(opt_after) == 14 * params
