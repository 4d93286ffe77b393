"""Configs: presets, validation, the Hugging Face config.json loader."""

from __future__ import annotations

import json

import pytest

from bertscope.config import Activation, Family, ModelConfig, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.presets import PRESETS, get_model, with_changes


def test_compact_and_standard_presets_have_published_sizes() -> None:
    # google-research/bert README: L-2_H-128 (tiny), L-4_H-256 (mini), L-4_H-512 (small),
    # L-8_H-512 (medium); heads = H / 64; FFN = 4H.
    for name, (layers, hidden, heads) in {
        "bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4), "bert-small": (4, 512, 8),
        "bert-medium": (8, 512, 8), "bert-base": (12, 768, 12), "bert-large": (24, 1024, 16),
        "albert-xxlarge-v2": (12, 4096, 64),
    }.items():
        m = PRESETS[name]
        assert (m.num_layers, m.hidden, m.heads) == (layers, hidden, heads)
        assert m.intermediate == 4 * hidden
    assert PRESETS["roberta-base"].max_seq == 512  # 514 rows - padding offset 2
    assert PRESETS["albert-base-v2"].emb == 128


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"hidden": 100, "heads": 3}, "not divisible"),
        ({"num_layers": 0}, "num_layers must be a positive integer"),
        ({"vocab_size": -5}, "vocab_size"),
        ({"intermediate": 2.5}, "intermediate"),
        ({"activation": "swish2"}, "unknown activation"),
        ({"embedding_size": 0}, "embedding_size"),
    ],
)
def test_invalid_model_sizes_raise_clear_errors(changes: dict, needle: str) -> None:
    with pytest.raises(BertscopeError, match=needle):
        with_changes(PRESETS["bert-base"], **changes)


def test_run_config_validation() -> None:
    with pytest.raises(BertscopeError, match="batch must be a positive integer"):
        RunConfig(batch=0, seq=128)
    with pytest.raises(BertscopeError, match="unknown precision 'fp64'"):
        RunConfig(batch=1, seq=128, precision="fp64")
    assert RunConfig(batch=2, seq=8, precision="bf16").precision is Precision.BF16
    with pytest.raises(BertscopeError, match="exceeds bert-base's 512 positions"):
        RunConfig(batch=1, seq=513).check(PRESETS["bert-base"])
    with pytest.raises(BertscopeError, match="512 positions"):  # roberta: 514 rows - 2 padding
        RunConfig(batch=1, seq=513).check(PRESETS["roberta-base"])


def test_unknown_preset_suggests_closest_names() -> None:
    with pytest.raises(BertscopeError, match="did you mean bert-base"):
        get_model("bert-bse")


def _write(tmp_path, obj) -> str:
    p = tmp_path / "config.json"
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(p)


def test_hf_config_json_matches_presets(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    cases = [
        (transformers.BertConfig(), "bert-base"),
        (transformers.RobertaConfig(vocab_size=50265, max_position_embeddings=514,
                                    type_vocab_size=1, pad_token_id=1), "roberta-base"),
        (transformers.AlbertConfig(hidden_size=768, num_attention_heads=12,
                                   intermediate_size=3072), "albert-base-v2"),
    ]
    for i, (cfg, preset) in enumerate(cases):
        folder = tmp_path / str(i)
        cfg.save_pretrained(folder)  # writes config.json, no network
        loaded = get_model(folder)
        want = PRESETS[preset]
        for f in ("family", "num_layers", "hidden", "heads", "intermediate", "vocab_size",
                  "max_positions", "type_vocab_size", "emb", "share_layers", "activation",
                  "max_seq"):
            assert getattr(loaded, f) == getattr(want, f), (preset, f)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ({"model_type": "mistral"}, "model_type 'mistral' is not supported"),
        ({"model_type": "bert", "hidden_size": 768}, "missing num_hidden_layers"),
        ({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 768,
          "num_attention_heads": 5, "intermediate_size": 3072, "vocab_size": 100,
          "max_position_embeddings": 512}, "not divisible by 5 heads"),
        ({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 768,
          "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 100,
          "max_position_embeddings": 512, "hidden_act": "mish"}, "hidden_act"),
    ],
)
def test_bad_config_json_raises(tmp_path, content, needle: str) -> None:
    with pytest.raises(BertscopeError, match=needle):
        get_model(_write(tmp_path, content))


def test_missing_config_json_raises(tmp_path) -> None:
    with pytest.raises(BertscopeError, match="no such file"):
        get_model(tmp_path / "nope" / "config.json")


def test_model_config_is_frozen_and_typed() -> None:
    m = ModelConfig(name="x", family="albert", num_layers=1, hidden=8, heads=2,
                    intermediate=16, vocab_size=10, max_positions=8, activation="relu")
    assert m.family is Family.ALBERT and m.activation is Activation.RELU
    with pytest.raises(AttributeError):
        m.hidden = 16  # type: ignore[misc]
