"""Transformer-XL (Dai et al. 2019): the presets' parameter counts against the paper's, the
analytic table's GEMM FLOPs against FlopCounterMode on the reference model, a layer's saved
bytes with and without memory by hand, and the memory carried between segments."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bertscope.analytic import parameter_count
from bertscope.analytic.families import model_ops
from bertscope.config import Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.presets import PRESETS, zipf_shares
from bertscope.taxonomy import Phase, Sublayer
from tests.conftest import tiny

# Published counts: Dai et al. 2019, Tables 1 (WikiText-103), 2 (enwik8) and 3 (One Billion
# Word), as printed there (151M, 41M for 12 layers, 277M for 24 layers, 0.8B), so within
# half the last printed digit. The presets are the authors' released scripts' sizes.
PUBLISHED = {
    "txl-wt103-base": (151e6, 0.5e6),
    "txl-enwik8-base": (41e6, 0.5e6),
    "txl-enwik8-large": (277e6, 0.5e6),
    "txl-lm1b-large": (0.8e9, 0.05e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_are_the_papers(name: str) -> None:
    want, tol = PUBLISHED[name]
    assert parameter_count(PRESETS[name]) == pytest.approx(want, abs=tol)


def test_parameter_counts_the_paper_prints_otherwise_by_hand() -> None:
    # The released scripts' sizes give other counts than two of the paper's figures:
    # wt103 large (Table 1: 257M) as pytorch/run_wt103_large.sh builds it, per layer
    # 5 x 1024^2 (q, k, v, r, o) + 2 x 1024 x 4096 + 4096 + 1024 (FFN) + 4 x 1024 (norms)
    # = 13,640,704, x 18 = 245,532,672; adaptive input tables 20000 x 1024 + 20000 x 256
    # + 160000 x 64 + 67735 x 16 = 36,923,760 and projections (1024 + 256 + 64 + 16) x 1024
    # = 1,392,640; r_w, r_r 2 x 16 x 64 = 2,048; softmax bias 267,735, cluster rows
    # 3 x 1024 + 3, its own head projection 1024^2 = 1,048,576: 285,170,506.
    assert parameter_count(PRESETS["txl-wt103-large"]) == 285_170_506
    # lm1b base (Table 3: 0.46B) as tf/scripts/lm1b_base_gpu.sh builds it: 18 x 13,640,704
    # = 245,532,672; tables 60000 x 1024 + 40000 x 256 + 540000 x 64 + 153470 x 16
    # = 108,695,520; projections 2 x 1,392,640 (untied); r 2 x 8 x 128 = 2,048; biases
    # 793,470 + 3 x 1024 + 3: 357,812,065 (0.46B is this with untied softmax tables, +108.7M)
    assert parameter_count(PRESETS["txl-lm1b-base"]) == 357_812_065


def test_zipf_shares_by_hand() -> None:
    # ln(2) / (ln 1000 + 0.5772) = 0.69315 / 7.48497 = 0.0926; ln(1000/500) again for the
    # second: (500, 1000) -> one cluster [500, 1000)
    assert zipf_shares(1000, (500,)) == (0.0926,)


def _txl(**kw: object) -> ModelConfig:
    return tiny(Family.TRANSFORMER_XL, **kw)


def _layer_saved(m: ModelConfig, run: RunConfig) -> int:
    return sum(op.saved_bytes for op in model_ops(m, run)
               if op.layer == 0 and op.phase is Phase.FORWARD)


def test_layer_saved_bytes_with_and_without_memory_by_hand() -> None:
    # h 32, 4 heads of 8 (i = 32), f 64, b 2, s 4, fp32 (4 bytes), dropout on; t = 8 tokens
    m = _txl(hidden=32, heads=4, intermediate=64, mem_len=4)
    run = RunConfig(batch=2, seq=4)
    # with 4 cached positions: k = 8, b k = 16 rows, e = 2 x 4 x 4 x 8 = 256 scores
    #   [mem; h] kept by Q/K/V      4 x 16 x 32 = 2048
    #   q + r_w and K               4 x (8 + 16) x 32 = 3072
    #   q + r_r and r               4 x (8 + 8) x 32 = 2048
    #   softmax out, dropout mask + out   4 x 256 + 5 x 256 = 2304
    #   V                           4 x 16 x 32 = 2048
    #   rest (no memory in it): attn_out in 1024, its dropout mask 256, attn norm in 1024,
    #   ffn1 in 1024, relu in 4 x 8 x 64 = 2048, its mask 512, ffn2 in 2048, mask 256,
    #   ffn norm in 1024 = 9216
    assert _layer_saved(m, run) == 2048 + 3072 + 2048 + 2304 + 2048 + 9216  # 20736
    # without memory: k = 4, b k = 8 rows, e = 128
    #   1024 + 4 x (8 + 8) x 32 = 2048 + 4 x (8 + 4) x 32 = 1536 + 9 x 128 = 1152 + 1024
    assert _layer_saved(replace(m, mem_len=0), run) == 1024 + 2048 + 1536 + 1152 + 1024 + 9216
    # the memory adds nothing saved of the previous segment: its rows are forward-only
    mem_rows = [op for op in model_ops(m, run) if op.sublayer is Sublayer.MEMORY]
    assert {op.phase for op in mem_rows} == {Phase.FORWARD}
    assert sum(op.saved_bytes for op in mem_rows) == 0


def test_memory_rows_run_once_under_full_checkpointing() -> None:
    m, run = _txl(), RunConfig(batch=2, seq=8, checkpoint="full")
    ops = model_ops(m, run)
    names = [op.name for op in ops if op.layer == 0 and op.sublayer is Sublayer.MEMORY]
    # the concatenation runs in forward and again in recompute; the update only once
    assert names.count("memory_concat") == 2 and names.count("memory_update") == 1


@pytest.mark.parametrize("kw", [{"cutoffs": (300, 200), "cluster_shares": (0.1, 0.1)},
                                {"cluster_shares": (0.9, 0.2)},
                                {"cluster_shares": (0.1,)},
                                {"div_val": 0}, {"mem_len": -1}])
def test_bad_adaptive_fields_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(BertscopeError):
        _txl(**kw)


def test_memory_and_cutoffs_are_refused_elsewhere() -> None:
    with pytest.raises(BertscopeError, match="Transformer-XL and XLNet only"):
        tiny(Family.GPT2, mem_len=8)
    with pytest.raises(BertscopeError, match="Transformer-XL only"):
        tiny(Family.XLNET, cutoffs=(100,), cluster_shares=(0.1,))


# --- the reference model (torch) ---------------------------------------------------------

def _torch():  # type: ignore[no-untyped-def]
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", [n for n, m in PRESETS.items()
                                  if m.family is Family.TRANSFORMER_XL])
def test_reference_model_parameter_count_equals_the_layout(name: str) -> None:
    torch = _torch()
    from bertscope.measure.models.transformer_xl import build_txl

    with torch.device("meta"):
        model = build_txl(PRESETS[name], RunConfig(dropout=False))
    assert sum(p.numel() for p in model.parameters()) == parameter_count(PRESETS[name])


def _gemm(m: ModelConfig, run: RunConfig, backward: bool) -> float:
    return sum(op.flops for op in model_ops(m, run) if op.category.is_gemm
               and (op.phase.is_backward if backward else op.phase is Phase.FORWARD))


@pytest.mark.parametrize(("kw", "batch", "seq"), [
    ({}, 2, 8),  # div_val 2, untied tail projections below
    ({"div_val": 1, "mem_len": 4, "tie_projs": True}, 1, 16),
    ({"div_val": 2, "tie_projs": False, "mem_len": 0}, 2, 8),
    ({"cutoffs": (), "cluster_shares": (), "div_val": 1}, 2, 8),  # one softmax (enwik8)
], ids=["div2", "div1-mem4", "nomem", "no-cutoffs"])
def test_gemm_flops_equal_flop_counter(kw: dict[str, object], batch: int, seq: int) -> None:
    torch = _torch()
    from torch.utils.flop_counter import FlopCounterMode

    from bertscope.measure.models.transformer_xl import build_txl, txl_inputs

    m, run = _txl(**kw), RunConfig(batch=batch, seq=seq, dropout=False)
    torch.manual_seed(0)
    model = build_txl(m, run)
    inputs = txl_inputs(m, run, 0, torch.device("cpu"), False)
    model(**inputs)  # the first segment fills the memory
    with FlopCounterMode(display=False) as fwd:
        loss = model(**inputs).loss
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    assert fwd.get_total_flops() == _gemm(m, run, backward=False)
    assert bwd.get_total_flops() == _gemm(m, run, backward=True)


def test_memory_is_carried_and_detached() -> None:
    torch = _torch()
    from bertscope.measure.models.transformer_xl import build_txl, txl_inputs

    m, run = _txl(), RunConfig(batch=2, seq=8, dropout=False)
    torch.manual_seed(0)
    model = build_txl(m, run)
    first = txl_inputs(m, run, 0, torch.device("cpu"), False)
    second = txl_inputs(m, run, 1, torch.device("cpu"), False)
    model(**first)
    mems = [x.clone() for x in model.mems]
    assert all(not x.requires_grad and x.shape == (2, 8, 64) for x in mems)
    loss = model(**second).loss
    # the same segment after another memory gives another loss
    model.mems = [torch.zeros_like(x) for x in mems]
    assert model(**second).loss.item() != pytest.approx(loss.item())
    # with mem_len = seq the new memory is the segment's layer inputs: layer 0's is the
    # scaled embedding of the second segment
    emb = model.embeddings(second["input_ids"])
    torch.testing.assert_close(model.mems[0], emb.detach())


def test_hugging_face_model_is_refused_in_one_line() -> None:
    _torch()
    from bertscope.measure.hf import build_hf_model

    with pytest.raises(BertscopeError, match="transformers has no transformer-xl model"):
        build_hf_model(_txl(), RunConfig(batch=1, seq=8))
