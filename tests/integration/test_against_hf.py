"""Cross-checks against independent implementations: Hugging Face transformers' models
(parameter counts) and torch's FlopCounterMode (GEMM FLOPs of forward and backward, and of
each op the GEMM registry sizes from the shapes torch.profiler records)."""

from __future__ import annotations

import functools

import pytest

from bertscope.analytic import build, parameter_count
from bertscope.config import Activation, Family, ModelConfig, RunConfig
from bertscope.presets import PRESETS
from bertscope.taxonomy import gemm_mask
from bertscope.trace.gemm_ops import GEMM_OPS, gemm_shape
from tests.conftest import MODELLED, tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def hf_config(m: ModelConfig) -> object:
    """The Hugging Face config of the same sizes."""
    if m.family is Family.T5:
        ffn = ("gated-gelu" if m.activation is Activation.GELU_NEW else
               f"gated-{m.activation.value}") if m.gated_ffn else m.activation.value
        return transformers.T5Config(
            vocab_size=m.vocab_size, d_model=m.hidden, d_kv=m.head_dim, d_ff=m.intermediate,
            num_layers=m.num_layers, num_decoder_layers=m.decoder_layer_count,
            num_heads=m.heads, relative_attention_num_buckets=m.relative_buckets,
            feed_forward_proj=ffn, tie_word_embeddings=m.tie_word_embeddings,
            decoder_start_token_id=0, pad_token_id=0, attn_implementation="eager")
    if m.family is Family.XLNET:
        return transformers.XLNetConfig(
            vocab_size=m.vocab_size, d_model=m.hidden, n_layer=m.num_layers, n_head=m.heads,
            d_inner=m.intermediate, ff_activation=m.activation.value, mem_len=m.mem_len)
    if m.family is Family.VIT:
        return transformers.ViTConfig(
            hidden_size=m.hidden, num_hidden_layers=m.num_layers, num_attention_heads=m.heads,
            intermediate_size=m.intermediate, hidden_act=m.activation.value,
            image_size=m.image_size, patch_size=m.patch_size, num_channels=m.channels,
            num_labels=m.vocab_size, qkv_bias=True, attn_implementation="eager")
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
        Family.T5: (transformers.T5Model, transformers.T5ForConditionalGeneration),
        Family.VIT: (functools.partial(transformers.ViTModel, add_pooling_layer=False),
                     transformers.ViTForImageClassification),
        Family.XLNET: (transformers.XLNetModel, transformers.XLNetLMHeadModel),
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


def hf_trainable(m: ModelConfig, model: torch.nn.Module) -> int:
    """Unique parameters of the published architecture from HF's model: transformers 5.x ties
    T5's LM head to the shared table even when the config says `tie_word_embeddings: false`
    (T5Config forces it True and reads False as "do not scale the decoder output", PR #42815;
    a regression for checkpoints with a head of their own, huggingface/transformers#48154).
    T5 v1.1 has "no parameter sharing between embedding and classifier layer" (the T5 v1.1
    release notes, google-research/text-to-text-transfer-transformer), so its head, HF's
    lm_head shape, counts separately."""
    n = n_params(model)
    if m.family is Family.T5 and not m.tie_word_embeddings and hasattr(model, "lm_head"):
        n += model.lm_head.weight.numel()
    return n


OTHER_FAMILIES = [n for n, p in PRESETS.items()
                  if p.family in (Family.T5, Family.VIT, Family.XLNET)]


@pytest.mark.parametrize(
    ("preset", "published"),
    [
        # the counts Hugging Face reports for the published checkpoints (google-t5/t5-small,
        # t5-base; google/vit-base-patch16-224)
        ("t5-small", 60_506_624),
        ("t5-base", 222_903_552),
        ("vit-base", 86_567_656),
        # XLNet-large by hand: 24 layers of 5 h^2 (q k v o r) + 5 h (r_r r_s r_w, seg_embed
        # 2h) + 4 h (two LayerNorms) + 2 h f + f + h = 13,645,824 at h 1024, f 4096:
        # 327,499,776; the word table 32000 h = 32,768,000 and mask_emb h: XLNetModel
        # 360,268,800; the LM head's bias (its weight is the table): + 32,000
        ("xlnet-large", 360_300_800),
    ],
)
def test_t5_and_vit_published_parameter_counts(preset: str, published: int) -> None:
    assert parameter_count(PRESETS[preset]) == published


@pytest.mark.parametrize("preset", OTHER_FAMILIES)
@pytest.mark.parametrize("pretraining", [True, False])
def test_t5_and_vit_parameter_counts_equal_hugging_face(preset: str, pretraining: bool) -> None:
    m = PRESETS[preset]
    with torch.device("meta"):
        model = hf_model(m, pretraining=pretraining)
    assert parameter_count(m, pretraining=pretraining) == hf_trainable(m, model)


@pytest.mark.parametrize("model", [tiny(Family.T5), tiny(Family.T5, gated_ffn=True,
                                   tie_word_embeddings=False, activation="gelu_new"),
                                   tiny(Family.VIT)], ids=["t5", "t5-v1_1", "vit"])
def test_tiny_parameter_counts_equal_hugging_face(model: ModelConfig) -> None:
    with torch.device("meta"):
        hf = hf_model(model, pretraining=True)
    assert parameter_count(model) == hf_trainable(model, hf)


def _shape(family: Family, batch: int, seq: int) -> tuple[ModelConfig, RunConfig]:
    """The tiny model and run of one FLOP-check shape: T5 decodes seq // 2 + 1 targets (a
    length of its own); a ViT's sequence is its patches + 1, so its second shape takes
    40px images (25 patches + the class token) instead of 32px (16 + 1)."""
    if family is Family.VIT:
        image = 32 if seq == 16 else 40
        m = tiny(family, image_size=image, max_positions=(image // 8) ** 2 + 1)
        return m, RunConfig(batch=batch, seq=m.max_positions)
    m = tiny(family)
    if family is Family.T5:
        return m, RunConfig(batch=batch, seq=seq, decoder_seq=seq // 2 + 1)
    return m, RunConfig(batch=batch, seq=seq)


def _inputs(m: ModelConfig, run: RunConfig) -> dict[str, torch.Tensor]:
    b = run.batch
    if m.family is Family.VIT:
        return {"pixel_values": torch.randn(b, m.channels, m.image_size, m.image_size),
                "labels": torch.randint(0, m.vocab_size, (b,))}
    if m.family is Family.XLNET:  # the batch maker's permutation-LM batch, with memory
        from bertscope.measure.data import permutation_lm_inputs
        return permutation_lm_inputs(m, run, 0, torch.device("cpu"), True)
    ids = torch.randint(5, m.vocab_size, (b, run.seq))
    if m.family is Family.T5:
        return {"input_ids": ids,
                "labels": torch.randint(5, m.vocab_size, (b, run.target_seq))}
    kw = {"input_ids": ids, "labels": ids.clone()}
    if m.family is Family.BERT:
        kw["next_sentence_label"] = torch.zeros(b, dtype=torch.long)
    elif m.family is Family.ALBERT:
        kw["sentence_order_label"] = torch.zeros(b, dtype=torch.long)
    return kw


@pytest.mark.parametrize("family", [f for f in MODELLED if f.spec.hf_class is not None],
                         ids=lambda f: f.value)  # Transformer-XL: tests/unit/test_transformer_xl
@pytest.mark.parametrize(("batch", "seq"), [(2, 16), (3, 24)])
def test_gemm_flops_match_flop_counter_mode(family: Family, batch: int, seq: int) -> None:
    _check_gemm_flops(*_shape(family, batch, seq))


def test_t5_v1_1_gemm_flops_match_flop_counter_mode() -> None:
    # gated GELU (wi_0, wi_1), untied head; 3 encoder layers, 1 decoder layer
    m = tiny(Family.T5, gated_ffn=True, tie_word_embeddings=False, activation="gelu_new",
             num_layers=3, decoder_layers=1)
    _check_gemm_flops(m, RunConfig(batch=2, seq=12, decoder_seq=20))


def _check_gemm_flops(m: ModelConfig, run: RunConfig) -> None:
    """Forward and backward GEMM FLOPs of the analytic table equal FlopCounterMode's counts
    on Hugging Face's model (one training step's forward with the loss, and its backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = hf_model(m, pretraining=True)
    fwd_counter = FlopCounterMode(display=False)
    with fwd_counter:
        loss = model(**_inputs(m, run)).loss
    bwd_counter = FlopCounterMode(display=False)
    with bwd_counter:
        loss.backward()

    d = build(m, run).df
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
