"""The reference GPT-2 and Llama models against Hugging Face's (an independent
implementation): parameter counts, and with HF's weights copied in the same loss and the
same gradients."""

from __future__ import annotations

import pytest

from bertscope.analytic import parameter_count
from bertscope.config import Family, RunConfig
from bertscope.errors import BertscopeError
from bertscope.presets import PRESETS
from tests.conftest import tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from bertscope.measure.hf import build_hf_model, hf_layers  # noqa: E402
from bertscope.measure.hf_weights import hf_config, load_hf_decoder_state  # noqa: E402
from bertscope.measure.models.decoder import DecoderForCausalLM, build_decoder  # noqa: E402

DECODERS = [Family.GPT2, Family.LLAMA]


@pytest.mark.parametrize("name", [n for n, m in PRESETS.items() if m.family in DECODERS])
def test_parameter_counts_equal_hugging_face(name: str) -> None:
    m = PRESETS[name]
    with torch.device("meta"):
        ours = DecoderForCausalLM(m)
        ref = build_hf_model(m, RunConfig(batch=1, seq=8, dropout=False))
    n = sum(p.numel() for p in ours.parameters())
    assert n == sum(p.numel() for p in ref.parameters()) == parameter_count(m)


@pytest.mark.parametrize("family", DECODERS, ids=str)
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_same_loss_and_gradients_as_hugging_face(family: Family, attention: str) -> None:
    torch.manual_seed(0)
    m = tiny(family)
    ref = transformers.GPT2LMHeadModel if family is Family.GPT2 else \
        transformers.LlamaForCausalLM
    hf = ref(hf_config(m, dropout=0.0)).eval()
    ours = build_decoder(m, RunConfig(batch=2, seq=12, dropout=False, attention=attention))
    load_hf_decoder_state(ours, hf)
    ours.eval()
    ids = torch.randint(0, m.vocab_size, (2, 12))
    want = hf(input_ids=ids, labels=ids).loss
    got = ours(input_ids=ids, labels=ids).loss
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    want.backward()
    got.backward()
    hf_grads = dict(hf.named_parameters())
    ours_q = ours.layers[0].attn.qkv if family is Family.GPT2 else ours.layers[0].attn.q
    hf_q = hf_grads["transformer.h.0.attn.c_attn.weight" if family is Family.GPT2
                    else "model.layers.0.self_attn.q_proj.weight"]
    g = hf_q.grad.t() if family is Family.GPT2 else hf_q.grad
    torch.testing.assert_close(ours_q.weight.grad, g, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ours.embeddings.word.weight.grad,
                               hf.get_input_embeddings().weight.grad, rtol=1e-4, atol=1e-6)


def test_hf_layers_are_found_for_decoders() -> None:
    for family in DECODERS:
        m = tiny(family)
        model = build_hf_model(m, RunConfig(batch=1, seq=8))
        assert len(hf_layers(m, model)) == m.num_layers


def test_fused_softmax_is_refused_for_measurement() -> None:
    with pytest.raises(BertscopeError, match="fused-softmax"):
        build_decoder(tiny(Family.GPT2), RunConfig(batch=1, seq=8, attention="fused-softmax"))
