"""Cross-checks against independent implementations: Hugging Face transformers' models
(parameter counts) and torch's FlopCounterMode (GEMM FLOPs of forward and backward, and of
each op the GEMM registry sizes from the shapes torch.profiler records)."""

from __future__ import annotations

import pytest

from bertscope.analytic import build, parameter_count
from bertscope.config import PRESETS, Family, ModelConfig, RunConfig
from bertscope.taxonomy import gemm_mask
from bertscope.trace.gemm_ops import GEMM_OPS, gemm_shape
from tests.conftest import MODELLED, tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def hf_config(m: ModelConfig) -> object:
    """The Hugging Face config of the same sizes."""
    common = dict(vocab_size=m.vocab_size, hidden_size=m.hidden,
                  num_hidden_layers=m.num_layers, num_attention_heads=m.heads,
                  intermediate_size=m.intermediate, max_position_embeddings=m.max_positions,
                  type_vocab_size=m.type_vocab_size, hidden_act=m.activation.value,
                  attn_implementation="eager")
    if m.family is Family.GPT2:
        return transformers.GPT2Config(
            vocab_size=m.vocab_size, n_positions=m.max_positions, n_embd=m.hidden,
            n_layer=m.num_layers, n_head=m.heads, n_inner=m.intermediate,
            activation_function=m.activation.value, attn_implementation="eager")
    if m.family is Family.LLAMA:
        return transformers.LlamaConfig(
            vocab_size=m.vocab_size, hidden_size=m.hidden, intermediate_size=m.intermediate,
            num_hidden_layers=m.num_layers, num_attention_heads=m.heads,
            num_key_value_heads=m.kv_head_count, max_position_embeddings=m.max_positions,
            hidden_act=m.activation.value, tie_word_embeddings=m.tie_word_embeddings,
            attn_implementation="eager")
    if m.family is Family.BERT:
        return transformers.BertConfig(**common)
    if m.family is Family.ROBERTA:
        return transformers.RobertaConfig(**common, pad_token_id=m.position_offset - 1)
    return transformers.AlbertConfig(**common, embedding_size=m.emb)


def hf_model(m: ModelConfig, *, pretraining: bool) -> torch.nn.Module:
    """BertForPreTraining / RobertaForMaskedLM / AlbertForPreTraining, or the bare encoder."""
    cfg = hf_config(m)
    kinds = {
        Family.BERT: (transformers.BertModel, transformers.BertForPreTraining),
        Family.ROBERTA: (transformers.RobertaModel, transformers.RobertaForMaskedLM),
        Family.ALBERT: (transformers.AlbertModel, transformers.AlbertForPreTraining),
        Family.GPT2: (transformers.GPT2Model, transformers.GPT2LMHeadModel),
        Family.LLAMA: (transformers.LlamaModel, transformers.LlamaForCausalLM),
    }
    return kinds[m.family][pretraining](cfg)


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    ("preset", "pretraining", "published"),
    [
        # the counts Hugging Face reports for the published checkpoints
        ("bert-base", False, 109_482_240),
        ("bert-base", True, 110_106_428),
        ("bert-large", False, 335_141_888),
        ("roberta-base", False, 124_645_632),
        ("albert-base-v2", False, 11_683_584),
        # GPT-2 small: 124,439,808 (Hugging Face's count for openai-community/gpt2): wte
        # 50257*768 + wpe 1024*768 + 12 layers of 7,087,872 + ln_f 1,536, the head tied
        ("gpt2", True, 124_439_808),
        # Llama-2 7B: 6,738,415,616 (Meta's "7B"): embed + untied head 2*32000*4096, 32 layers
        # of 4*4096^2 + 3*4096*11008 + 2*4096, final norm 4096
        ("llama2-7b", True, 6_738_415_616),
    ],
)
def test_parameter_counts_equal_hugging_face(preset: str, pretraining: bool,
                                             published: int) -> None:
    m = PRESETS[preset]
    assert parameter_count(m, pretraining=pretraining) == published
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = hf_model(m, pretraining=pretraining)
    assert n_params(model) == published


@pytest.mark.parametrize("preset", ["roberta-large", "albert-xxlarge-v2", "bert-mini",
                                    "gpt2-xl", "gpt3-175b", "llama2-70b", "llama3-8b",
                                    "llama3-70b"])
def test_pretraining_parameter_counts_equal_hugging_face(preset: str) -> None:
    m = PRESETS[preset]
    with torch.device("meta"):
        model = hf_model(m, pretraining=True)
    assert parameter_count(m) == n_params(model)


def _labels(m: ModelConfig, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    kw = {"input_ids": ids, "labels": ids.clone()}
    b = ids.shape[0]
    if m.family is Family.BERT:
        kw["next_sentence_label"] = torch.zeros(b, dtype=torch.long)
    elif m.family is Family.ALBERT:
        kw["sentence_order_label"] = torch.zeros(b, dtype=torch.long)
    return kw


@pytest.mark.parametrize("family", MODELLED, ids=lambda f: f.value)
@pytest.mark.parametrize(("batch", "seq"), [(2, 16), (3, 24)])
def test_gemm_flops_match_flop_counter_mode(family: Family, batch: int, seq: int) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    m = tiny(family)
    model = hf_model(m, pretraining=True)
    ids = torch.randint(5, m.vocab_size, (batch, seq))
    fwd_counter = FlopCounterMode(display=False)
    with fwd_counter:
        loss = model(**_labels(m, ids)).loss
    bwd_counter = FlopCounterMode(display=False)
    with bwd_counter:
        loss.backward()

    d = build(m, RunConfig(batch=batch, seq=seq)).df
    gemm = d[gemm_mask(d["category"])]
    fwd = gemm.loc[gemm["phase"] == "forward", "flops"].sum()
    bwd = gemm.loc[gemm["phase"].isin(["backward_data", "backward_weight"]), "flops"].sum()
    assert fwd == pytest.approx(fwd_counter.get_total_flops(), rel=0.01)
    assert bwd == pytest.approx(bwd_counter.get_total_flops(), rel=0.01)


def _gemm_calls() -> dict[str, tuple[object, object]]:
    """Per registered op: a call that runs it, and the call torch's flop counter counts for
    it (the same one, except `_addmm_activation`, which it does not count: plain addmm)."""
    F = torch.nn.functional
    a, b, bias = torch.randn(6, 5), torch.randn(5, 4), torch.randn(4)
    ba, bb = torch.randn(3, 6, 5), torch.randn(3, 5, 4)
    x, w = torch.randn(2, 3, 5), torch.randn(4, 5)

    def addmm() -> torch.Tensor:
        return torch.addmm(bias, a, b)

    calls = {
        "aten::mm": lambda: torch.mm(a, b),
        "aten::addmm": addmm,
        "aten::_addmm_activation": lambda: torch.ops.aten._addmm_activation(bias, a, b),
        "aten::linear": lambda: F.linear(x, w, bias),
        "aten::bmm": lambda: torch.bmm(ba, bb),
        "aten::baddbmm": lambda: torch.baddbmm(torch.randn(3, 6, 4), ba, bb),
        "aten::matmul": lambda: torch.matmul(torch.randn(2, 3, 6, 5), torch.randn(2, 3, 5, 4)),
    }
    return {op: (f, addmm if op == "aten::_addmm_activation" else f) for op, f in calls.items()}


@pytest.mark.parametrize("op", sorted(GEMM_OPS))
def test_gemm_registry_sizes_what_the_profiler_records(op: str) -> None:
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    run, counted = _gemm_calls()[op]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    shapes = next(e.input_shapes for e in prof.events() if e.name == op)
    m, n, k, batch = gemm_shape(op, shapes)
    counter = FlopCounterMode(display=False)
    with counter:
        counted()
    assert 2 * m * n * k * batch == counter.get_total_flops() > 0
