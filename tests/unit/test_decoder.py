"""The decoder families (GPT-2/GPT-3, Llama) against formulas published for them."""

from __future__ import annotations

import pytest

from bertscope.analytic import build, parameter_count
from bertscope.config import Family, RunConfig
from bertscope.errors import BertscopeError
from bertscope.presets import PRESETS, get_model
from bertscope.taxonomy import Phase, Sublayer, gemm_mask
from tests.conftest import tiny

GPT3 = [n for n in PRESETS if n.startswith("gpt3-")]


@pytest.mark.parametrize("name", GPT3)
def test_gpt3_gemm_flops_with_full_recompute_match_narayanan(name: str) -> None:
    # Narayanan et al. 2021 (Efficient Large-Scale Language Model Training on GPU Clusters),
    # section 5.1: an iteration with full activation recomputation costs
    # 96 B s l h^2 (1 + s / (6h) + V / (16 l h)) FLOPs, counting the GEMMs of forward,
    # recompute and backward (4x forward in the layers, 3x forward in the LM head).
    m = PRESETS[name]
    b, s = 4, 2048
    d = build(m, RunConfig(batch=b, seq=s, checkpoint="full")).df
    gemm = d.loc[gemm_mask(d["category"]) & (d["sublayer"] != Sublayer.ROTARY), "flops"].sum()
    h, n, v = m.hidden, m.num_layers, m.vocab_size
    want = 96 * b * s * n * h**2 * (1 + s / (6 * h) + v / (16 * n * h))
    assert gemm == pytest.approx(want, rel=0.01)


def test_gpt3_175b_parameters() -> None:
    # Brown et al. 2020, Table 2.1: 175.0B parameters; 12 l h^2 + V h + positions:
    # 12 * 96 * 12288^2 = 173,946,175,488 + 50257 * 12288 + 2048 * 12288 + biases/norms
    n = parameter_count(PRESETS["gpt3-175b"])
    assert n == pytest.approx(175.0e9, rel=0.005)


def test_grouped_query_attention_shrinks_k_and_v() -> None:
    # tiny Llama: 4 query heads of 16, 2 key/value heads: K and V project 64 -> 32
    m = tiny(Family.LLAMA)
    d = build(m, RunConfig(batch=2, seq=8)).df
    fwd = d[(d["phase"] == Phase.FORWARD) & (d["layer"] == 0)].set_index("name")
    t = 2 * 8
    assert fwd.loc["q", "flops"] == 2 * t * 64 * 64
    assert fwd.loc["k", "flops"] == fwd.loc["v", "flops"] == 2 * t * 64 * 32
    # eager kernels copy each key/value head to its 2 query heads: 2*2*8*16 elements out
    assert fwd.loc["repeat_k", "elements"] == 2 * 4 * 8 * 16
    # the scores stay over every query head: 2 * (b a) s s d
    assert fwd.loc["score", "flops"] == 2 * (2 * 4) * 8 * 8 * 16


def test_llama_has_no_dropout_and_gpt2_does() -> None:
    run = RunConfig(batch=1, seq=8, dropout=True)
    assert not (build(tiny(Family.LLAMA), run).df["category"] == "dropout").any()
    assert (build(tiny(Family.GPT2), run).df["category"] == "dropout").any()


def test_llama_rows_are_rmsnorm_and_gpt2_rows_layernorm() -> None:
    run = RunConfig(batch=1, seq=8)
    cats = set(build(tiny(Family.LLAMA), run).df["category"])
    assert "rmsnorm" in cats and "layernorm" not in cats
    cats = set(build(tiny(Family.GPT2), run).df["category"])
    assert "layernorm" in cats and "rmsnorm" not in cats


def test_positions_beyond_the_context_and_a_decoder_length_are_refused() -> None:
    with pytest.raises(BertscopeError, match="exceeds"):
        build(get_model("gpt2"), RunConfig(batch=1, seq=1025))
    with pytest.raises(BertscopeError, match="decoder_seq"):
        build(get_model("gpt2"), RunConfig(batch=1, seq=8, decoder_seq=4))


def _write(tmp_path, doc: dict) -> str:
    import json

    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    return str(p)


@pytest.mark.parametrize("preset", ["gpt2-medium", "llama2-70b", "llama3-8b"])
def test_hugging_face_config_json_reads_back_as_the_preset(tmp_path, preset: str) -> None:
    # the config.json transformers itself writes for the published sizes
    transformers = pytest.importorskip("transformers")
    from bertscope.measure.hf_weights import hf_config

    m = PRESETS[preset]
    doc = hf_config(m).to_dict()
    got = get_model(_write(tmp_path, doc))
    for field in ("family", "num_layers", "hidden", "heads", "kv_head_count", "head_dim",
                  "intermediate", "vocab_size", "max_positions", "gated_ffn",
                  "tie_word_embeddings", "activation"):
        assert getattr(got, field) == getattr(m, field), field
    assert parameter_count(got) == parameter_count(m)
    assert transformers  # imported for hf_config


@pytest.mark.parametrize(("doc", "match"), [
    ({"model_type": "llama", "attention_bias": True}, "attention_bias"),
    ({"model_type": "llama", "pretraining_tp": 2}, "pretraining_tp"),
    ({"model_type": "gpt2", "scale_attn_weights": False}, "scale_attn_weights"),
    ({"model_type": "gpt2", "n_layer": 2}, "missing"),
    ({"model_type": "mistral"}, "supported: .*gpt2.*llama"),
])
def test_architecture_keys_are_honoured_or_refused(tmp_path, doc: dict, match: str) -> None:
    with pytest.raises(BertscopeError, match=match):
        get_model(_write(tmp_path, doc))
