"""The XLNet producer: shapes, the memory's saved bytes and the last layer's backward worked
out by hand; its config.json reader and the run checks."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bertscope.analytic import build, memory_estimate
from bertscope.config import Family, RunConfig
from bertscope.errors import BertscopeError
from bertscope.presets import PRESETS, get_model
from bertscope.taxonomy import Sublayer
from tests.conftest import tiny

# tiny XLNet: 2 layers, h 64, 4 heads of 16, f 256, V 500, mem_len 5; b 2, s 18: K = 23 keys,
# R = 41 distances, P = 18 // 6 = 3 predicted tokens per sequence
RUN = RunConfig(batch=2, seq=18, dropout=False)


def _rows(df, name, layer=0):
    return df[(df["name"] == name) & (df["layer"] == layer)]


def test_gemm_shapes_cover_memory_distances_and_predicted_tokens() -> None:
    d = build(tiny(Family.XLNET), RUN).df
    shape = ["m", "n", "k", "batch"]
    # K and V over [mem; h]: b (m + s) = 46 rows; W_r over b R = 82; Q over b s = 36
    assert _rows(d, "k")[shape].values.tolist() == [[46, 64, 64, 1]]
    assert _rows(d, "r")[shape].values.tolist() == [[82, 64, 64, 1]]
    assert _rows(d, "q")[shape].values.tolist() == [[36, 64, 64, 1]]
    # the query stream's Q, output and FFN on b P = 6 rows
    assert _rows(d, "query.q")[shape].values.tolist() == [[6, 64, 64, 1]]
    assert _rows(d, "query.ffn1")[shape].values.tolist() == [[6, 256, 64, 1]]
    # scores: b n = 8 products of s x K over d; positions s x R; the segment contraction
    # (s b = 36 products of K x n over the 2 segment classes)
    assert _rows(d, "content.score")[shape].values.tolist() == [[18, 23, 16, 8]]
    assert _rows(d, "query.pos_score")[shape].values.tolist() == [[18, 41, 16, 8]]
    assert _rows(d, "content.seg_matrix")[shape].values.tolist() == [[23, 4, 2, 36]]
    # target mapping: per sequence, (s x P) @ (P x h) in, (P x s) @ (s x h) out
    assert _rows(d, "query.map_in")[shape].values.tolist() == [[18, 64, 3, 2]]
    assert _rows(d, "query.map_out")[shape].values.tolist() == [[3, 64, 18, 2]]
    # the LM head on b P = 6 predicted tokens only
    assert _rows(d, "lm_loss", -1)[shape].values.tolist() == [[6, 500, 64, 1]]


def test_constant_operands_and_the_last_layers_content_stream_get_no_gradient() -> None:
    d = build(tiny(Family.XLNET), RUN).df
    names = set(d.loc[d["layer"] == 0, "name"])
    assert "r.wgrad" in names and "r.dgrad" not in names  # the encodings need none
    assert {"query.map_in.dgrad_b", "content.seg_matrix.dgrad_b"} <= names
    assert not {"query.map_in.dgrad_a", "content.seg_matrix.dgrad_a"} & names
    last = set(d.loc[d["layer"] == 1, "name"])
    # layer 1 (the last) runs its content stream forward, but only K, V and W_r backward
    assert {"q", "content.score", "content.ffn1"} <= last
    assert not {"q.wgrad", "content.score.dgrad_a", "content.ffn1.wgrad"} & last
    assert {"k.wgrad", "v.dgrad", "r.wgrad", "query.q.wgrad", "query.ffn1.wgrad"} <= last
    assert {"q.wgrad", "content.ffn1.wgrad"} <= names


def test_memory_saved_bytes_by_hand() -> None:
    m, run = tiny(Family.XLNET), RunConfig(batch=2, seq=18, precision="fp32")
    d = build(m, run).df
    fwd = d[d["phase"] == "forward"]
    # K keeps [mem; h]: 4 bytes x b (m + s) h = 4 x 2 x 23 x 64 = 11,776 bytes; without the
    # memory 4 x 2 x 18 x 64 = 9,216
    assert _rows(fwd, "k")["saved_bytes"].tolist() == [11_776]
    no_mem = build(replace(m, mem_len=0), run).df
    assert _rows(no_mem[no_mem["phase"] == "forward"], "k")["saved_bytes"].tolist() == [9_216]
    # the new memory kept for the next segment is state, not saved for backward: the
    # segment memory counts it, 4 x b m h = 4 x 2 x 5 x 64 = 2,560 a layer, 2 layers 5,120
    assert _rows(fwd, "memory_cache")["saved_bytes"].tolist() == [0]
    assert memory_estimate(m, run).segment_memory == 5_120
    assert set(d.loc[d["sublayer"] == Sublayer.MEMORY, "phase"]) == {"forward"}
    # the memory adds to every layer's saved activations (K and V keep [mem; h])
    assert memory_estimate(m, run).activations > memory_estimate(
        replace(m, mem_len=0), run).activations


def test_full_checkpointing_keeps_both_streams_inputs() -> None:
    m = tiny(Family.XLNET)
    full = memory_estimate(m, RunConfig(batch=2, seq=18, checkpoint="full", precision="fp32"))
    none = memory_estimate(m, RunConfig(batch=2, seq=18, precision="fp32"))
    # inputs kept: 2 layers x 4 bytes x b (s + P) h = 2 x 4 x 2 x 21 x 64 = 21,504, plus one
    # layer's activations live again while it reruns
    assert full.activations - full.activations_per_layer < none.activations
    outside = none.activations - 2 * none.activations_per_layer
    assert full.activations == outside + 21_504 + full.activations_per_layer


# -- config.json: xlnet/xlnet-large-cased on the Hugging Face Hub (its architecture keys)
XLNET_LARGE = {"architectures": ["XLNetLMHeadModel"], "attn_type": "bi", "bi_data": False,
               "clamp_len": -1, "d_head": 64, "d_inner": 4096, "d_model": 1024,
               "dropout": 0.1, "ff_activation": "gelu", "layer_norm_eps": 1e-12,
               "mem_len": None, "model_type": "xlnet", "n_head": 16, "n_layer": 24,
               "reuse_len": None, "same_length": False, "untie_r": True, "vocab_size": 32000}


def _load(tmp_path, doc: dict):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    return get_model(p)


def test_published_config_json_reads_as_the_preset(tmp_path) -> None:
    assert replace(_load(tmp_path, XLNET_LARGE), name="xlnet-large") == PRESETS["xlnet-large"]
    assert _load(tmp_path, {**XLNET_LARGE, "mem_len": 16}).mem_len == 16


@pytest.mark.parametrize(("changes", "needle"), [
    ({"attn_type": "uni"}, "attn_type = 'uni' is not modelled"),
    ({"bi_data": True}, "bi_data"),
    ({"untie_r": False}, "untie_r"),
    ({"same_length": True}, "same_length"),
    ({"reuse_len": 256}, "reuse_len"),
    ({"d_head": 32}, "d_head 32 x n_head 16 must equal d_model 1024"),
    ({"d_model": None}, "d_model"),
])
def test_config_json_refusals(tmp_path, changes, needle) -> None:
    with pytest.raises(BertscopeError, match=needle):
        _load(tmp_path, {**XLNET_LARGE, **changes})


def test_run_and_model_checks() -> None:
    with pytest.raises(BertscopeError, match="no token to predict"):
        build(tiny(Family.XLNET), RunConfig(batch=1, seq=5))
    with pytest.raises(BertscopeError, match="seq_lengths"):
        build(tiny(Family.XLNET), RunConfig(batch=1, seq=16, seq_lengths="8+16"))
    with pytest.raises(BertscopeError, match="mem_len"):
        tiny(Family.BERT, mem_len=4)
    with pytest.raises(BertscopeError, match="mem_len"):
        tiny(Family.XLNET, mem_len=-1)
