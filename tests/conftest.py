"""Shared fixtures: tiny configs that keep CI fast on 2 cores."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import settings

from bertscope.config import Activation, Family, ModelConfig
from bertscope.taxonomy import Category

# Property tests draw the same examples on every run (derived from each test, not from a
# random seed): a run passes or fails by the code alone, never by the draw's luck. Their
# @settings (example counts, deadlines) keep this.
settings.register_profile("bertscope", derandomize=True)
settings.load_profile("bertscope")


def tiny(family: Family = Family.BERT, **kw: object) -> ModelConfig:
    """A tiny model of the given family (2 layers, hidden 64, 4 heads, vocab 500)."""
    base: dict[str, object] = dict(name=f"tiny-{family}", family=family, num_layers=2, hidden=64,
                                   heads=4, intermediate=256, vocab_size=500, max_positions=64)
    if family is Family.ROBERTA:
        base.update(max_positions=66, type_vocab_size=1, position_offset=2)
    if family is Family.ALBERT:
        base.update(num_layers=3, embedding_size=32, share_layers=True,
                    activation=Activation.GELU_NEW)
    if family is Family.GPT2:
        base.update(type_vocab_size=1, activation=Activation.GELU_NEW)
    if family is Family.LLAMA:  # grouped-query attention: 2 key/value heads for 4 queries
        base.update(type_vocab_size=1, kv_heads=2, intermediate=96, gated_ffn=True,
                    tie_word_embeddings=False, activation=Activation.SILU)
    if family is Family.T5:  # 3 decoder layers for 2 encoder layers, head size 8 (not 64/4)
        base.update(type_vocab_size=1, decoder_layers=3, head_size=8,
                    activation=Activation.RELU)
    if family is Family.VIT:  # 32px images of 8px patches: 16 patches + the class token
        base.update(type_vocab_size=1, vocab_size=10, image_size=32, patch_size=8,
                    max_positions=17, tie_word_embeddings=False)
    if family is Family.XLNET:  # 5 cached positions of the previous segment
        base.update(mem_len=5)
    if family is Family.TRANSFORMER_XL:  # 8 cached positions; a head and two tail clusters
        # (div_val 2: widths 64, 32, 16) taking 5/8, 1/4 and 1/8 of the tokens: whole
        # token counts for any batch x seq divisible by 8
        base.update(type_vocab_size=1, mem_len=8, cutoffs=(200, 350), div_val=2,
                    cluster_shares=(0.25, 0.125), activation=Activation.RELU)
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


def sized(m: ModelConfig, seq: int) -> tuple[ModelConfig, int]:
    """A model and a sequence length that fit each other, for tests drawing lengths: a ViT's
    sequence is its patches + 1, so `seq` picks a seq x seq grid of patches (seq^2 + 1 tokens,
    growing with seq); XLNet predicts seq // K tokens, so K is at most seq; other families
    keep the model and the length."""
    if m.family is Family.XLNET:
        return replace(m, partial_prediction=min(m.partial_prediction, seq)), seq
    if m.family is not Family.VIT:
        return m, seq
    fitted = replace(m, image_size=m.patch_size * seq, max_positions=seq * seq + 1)
    return fitted, fitted.max_positions


MODELLED = list(Family)
"""The families with an analytic producer: every one (each spec names its producer)."""


def cast_rows(df: Any, measured: bool) -> Any:
    """An op table's dtype-cast rows: the profiler's `aten::to` / `aten::_to_copy` rows
    (`measured`) or the analytic table's `*_cast` and `.upcast` rows, data movement both."""
    sel = df[df["category"].astype(str) == str(Category.DATA_MOVEMENT)]
    names = sel["name"]
    return sel[names.isin(("aten::to", "aten::_to_copy")) if measured
               else names.str.contains(r"_cast$|\.upcast$")]


@pytest.fixture(params=MODELLED, ids=lambda f: f.value)
def tiny_model(request: pytest.FixtureRequest) -> ModelConfig:
    """One tiny model per family."""
    return tiny(request.param)


@pytest.fixture(autouse=True)
def _runs_store(tmp_path_factory, monkeypatch):
    """Every test records into a store of its own, never the user's data folder."""
    monkeypatch.setenv("BERTSCOPE_STORE", str(tmp_path_factory.mktemp("store") / "runs.sqlite"))
