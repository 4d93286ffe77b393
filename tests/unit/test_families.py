"""The family specs (`bertscope.families`): one per `Family`, their properties as the papers
and Hugging Face configs describe the architectures, every path resolving to real code, and
the registry driving the consumers (a spec swapped in a test is what the analytic model,
the parameter count and the config.json reader then use)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from bertscope.analytic.families import model_blocks
from bertscope.analytic.params import GroupLayout, ParamGroup, StackGroup, parameter_count
from bertscope.config import Architecture, Family, ModelConfig, Positions, RunConfig
from bertscope.errors import BertscopeError
from bertscope.families import SPECS, FamilySpec, by_model_type, model_types, resolve, spec
from bertscope.families.spec import OPTIONAL_PATHS, PATH_FIELDS
from bertscope.hf_config import from_hf_config
from tests.conftest import tiny

E, D, ED = Architecture.ENCODER, Architecture.DECODER, Architecture.ENCODER_DECODER
L, ROT, REL = Positions.LEARNED, Positions.ROTARY, Positions.RELATIVE

# (architecture, pre_norm, rms_norm, positions, bias, fused_qkv, mlm_head, pooler_head,
#  dropout, factorized_embedding), from the papers and the Hugging Face implementations:
# - BERT (Devlin et al. 2019): post-LN encoder (BertLayer: LayerNorm(x + sublayer)), learned
#   positions, biased Q/K/V Linear layers, MLM + NSP on the pooled [CLS].
# - RoBERTa (Liu et al. 2019): BERT's layers, MLM only (no NSP).
# - ALBERT (Lan et al. 2020): BERT's layers, E -> h embedding projection, MLM + SOP.
# - GPT-2 (Radford et al. 2019): pre-LN (ln_1 / ln_2 before each sublayer, ln_f after),
#   learned wpe, one Conv1D c_attn for Q, K and V, biases everywhere, dropout 0.1.
# - Llama (Touvron et al. 2023): pre-norm RMSNorm, rotary embeddings, no biases
#   (attention_bias = mlp_bias = false), separate q/k/v_proj, attention_dropout 0 and no
#   hidden dropout.
# - T5 (Raffel et al. 2020): pre-norm T5LayerNorm (an RMSNorm), relative position buckets,
#   Linear(bias=False) everywhere, separate q, k, v; dropout_rate 0.1.
# - ViT (Dosovitskiy et al. 2021): pre-LN (layernorm_before/after), learned positions,
#   qkv_bias true, classifier head only.
# - XLNet (Yang et al. 2019): post-LN bidirectional layers (XLNetRelativeAttention's and
#   XLNetFeedForward's layer_norm(x + sublayer)), Transformer-XL relative positions, q/k/v/o/r
#   einsum weights without biases, a permutation-LM head; dropout 0.1.
# - Transformer-XL (Dai et al. 2019; kimiyoung/transformer-xl pytorch/mem_transformer.py):
#   post-LN (pre_lnorm=False: layer_norm(inp + attn_out)), relative positions, one qkv_net
#   for Q, K and V (bias=False) but biased FFN layers, dropout, causal LM (no MLM/pooler).
EXPECTED = {
    Family.BERT: (E, False, False, L, True, False, True, True, True, False),
    Family.ROBERTA: (E, False, False, L, True, False, True, False, True, False),
    Family.ALBERT: (E, False, False, L, True, False, True, True, True, True),
    Family.GPT2: (D, True, False, L, True, True, False, False, True, False),
    Family.LLAMA: (D, True, True, ROT, False, False, False, False, False, False),
    Family.T5: (ED, True, True, REL, False, False, False, False, True, False),
    Family.VIT: (E, True, False, L, True, False, False, False, True, False),
    Family.XLNET: (E, False, False, REL, False, False, False, False, True, False),
    Family.TRANSFORMER_XL: (D, False, False, REL, True, True, False, False, True, False),
}
PROPS = ("architecture", "pre_norm", "rms_norm", "positions", "bias", "fused_qkv", "mlm_head",
         "pooler_head", "dropout", "factorized_embedding")


def test_every_family_has_a_spec_and_every_spec_a_family() -> None:
    assert {f.value for f in Family} == set(SPECS)
    assert all(spec(f).name == f.value and f.spec is spec(f) for f in Family)
    assert set(EXPECTED) == set(Family)  # this test's table covers every family


@pytest.mark.parametrize("family", list(Family), ids=str)
def test_spec_properties_are_the_published_architectures(family: Family) -> None:
    want = dict(zip(PROPS, EXPECTED[family], strict=True))
    assert {p: getattr(family.spec, p) for p in PROPS} == want
    assert {p: getattr(family, p) for p in PROPS} == want  # Family reads its spec


def test_llama_is_pre_norm_rmsnorm_rotary_without_biases() -> None:
    s = spec("llama")
    assert (s.pre_norm, s.rms_norm, s.positions, s.bias) == (True, True, Positions.ROTARY, False)


def test_by_model_type_maps_hugging_face_model_types() -> None:
    for model_type, family in (("bert", "bert"), ("roberta", "roberta"), ("albert", "albert"),
                               ("gpt2", "gpt2"), ("llama", "llama"), ("t5", "t5"),
                               ("vit", "vit"), ("xlnet", "xlnet")):
        assert by_model_type(model_type).name == family
    assert sorted(model_types()) == ["albert", "bert", "gpt2", "llama", "roberta", "t5", "vit",
                                     "xlnet"]
    with pytest.raises(BertscopeError, match="model_type 'mistral' is not supported; "
                                             "supported: bert, roberta"):
        by_model_type("mistral")
    with pytest.raises(BertscopeError, match="unknown model family 'gpt5'"):
        spec("gpt5")


def test_analytic_paths_resolve_without_torch_in_the_way() -> None:
    for s in SPECS.values():
        for field in ("producer", "layout", "config_reader"):
            if getattr(s, field) is None:  # no config.json (Transformer-XL)
                assert field in OPTIONAL_PATHS and not s.model_types, (s.name, field)
                continue
            assert callable(resolve(getattr(s, field))), (s.name, field)


def test_measure_paths_resolve() -> None:
    pytest.importorskip("torch")
    from torch import nn

    for s in SPECS.values():
        for field in PATH_FIELDS:
            if getattr(s, field) is None:  # a family transformers does not have
                assert field in OPTIONAL_PATHS and s.hf_class is None, (s.name, field)
                continue
            assert resolve(getattr(s, field)) is not None, (s.name, field)
        assert issubclass(resolve(s.reference_layer), nn.Module)
        # every sublayer map knows the loss and calls the model itself "other"
        assert resolve(s.reference_sublayer)("loss") == "loss"
        assert resolve(s.reference_sublayer)("") == "other"


# Hugging Face module paths (transformers 5 names): (family, layer path, a path inside it)
HF_LAYERS = [
    ("bert", "bert.encoder.layer.11", "bert.encoder.layer.11.attention"),
    ("roberta", "roberta.encoder.layer.0", "roberta.encoder.layer.0.output.dense"),
    ("albert", "albert.encoder.albert_layer_groups.0.albert_layers.0",
     "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn"),
    ("gpt2", "transformer.h.3", "transformer.h.3.attn"),
    ("llama", "model.layers.31", "model.layers.31.mlp"),
    ("t5", "decoder.block.2", "decoder.block.2.layer.0"),
    ("vit", "vit.layers.7", "vit.layers.7.attention"),
    ("xlnet", "transformer.layer.23", "transformer.layer.23.rel_attn"),
]


@pytest.mark.parametrize(("family", "layer", "inside"), HF_LAYERS, ids=[r[0] for r in HF_LAYERS])
def test_hf_layer_regex_matches_layers_not_their_children(family: str, layer: str,
                                                          inside: str) -> None:
    pattern = re.compile(spec(family).hf_layers)
    assert pattern.search(layer) and not pattern.search(inside)


def test_transformer_xl_has_no_hugging_face_model() -> None:
    s = spec("transformer-xl")
    assert Family.TRANSFORMER_XL.value == "transformer-xl"
    assert (s.model_types, s.hf_class, s.config_reader) == ((), None, None)
    with pytest.raises(BertscopeError, match="hf_config 'nope' is not"):
        replace(s, hf_config="nope")


def test_a_spec_path_must_name_module_and_attribute() -> None:
    with pytest.raises(BertscopeError, match="producer 'no_colon' is not 'module:attribute'"):
        replace(spec("bert"), producer="no_colon")


# --- the registry drives the consumers -----------------------------------------------------

def fake_blocks(m: ModelConfig, run: RunConfig) -> list[object]:
    """A producer whose "blocks" say whose they are (resolved by path, this module may be
    imported a second time, so it returns what it saw rather than recording it)."""
    return [f"fake rows of {m.name} at seq {run.seq}"]


def fake_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """One 10-parameter group per layer and a 7-parameter embedding."""
    return GroupLayout([ParamGroup("embedding", -1, 7, 1)],
                       [StackGroup(ParamGroup("layer", 0, 10, 1))], [])


def fake_reader(raw: dict[str, object], origin: str, name: str) -> ModelConfig:
    """A config.json reader giving a tiny BERT with the file's layer count."""
    return tiny(Family.BERT, name=name, num_layers=int(raw["layers"]))  # type: ignore[arg-type]


def test_a_spec_swapped_in_is_what_the_consumers_use(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    here = "tests.unit.test_families"
    fake = replace(spec("bert"), producer=f"{here}:fake_blocks", layout=f"{here}:fake_layout",
                   model_types=("fake-bert",), config_reader=f"{here}:fake_reader")
    monkeypatch.setitem(SPECS, "bert", fake)
    assert isinstance(Family.BERT.spec, FamilySpec) and Family.BERT.spec is fake
    m = tiny(Family.BERT)
    assert model_blocks(m, RunConfig(batch=1, seq=8)) == ["fake rows of tiny-bert at seq 8"]
    assert parameter_count(m) == 7 + 2 * 10  # embedding + tiny's 2 layers of 10
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "fake-bert", "layers": 3,
                                "_name_or_path": "fake"}))
    got = from_hf_config(path)
    assert (got.name, got.num_layers, got.family) == ("fake", 3, Family.BERT)
