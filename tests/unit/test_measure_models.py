"""Reference models against Hugging Face's (same weights -> same loss and gradients),
LAMB against Algorithm 2 written out in numpy, synthetic data, checkpointing, attribution."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bertscope.config import Activation, Family, ModelConfig, Optimizer, RunConfig  # noqa: E402
from bertscope.errors import BertscopeError  # noqa: E402
from bertscope.measure.data import synthetic_batch  # noqa: E402
from bertscope.measure.hf_weights import (  # noqa: E402
    hf_config,
    hf_param_name,
    load_hf_state_dict,
)
from bertscope.measure.lamb import Lamb, make_optimizer  # noqa: E402
from bertscope.measure.models import (  # noqa: E402
    EncoderForPretraining,
    build_model,
    layer_index,
    make_activation,
    module_sublayer,
)
from bertscope.presets import PRESETS  # noqa: E402
from bertscope.taxonomy import Sublayer  # noqa: E402

TINY = {
    Family.BERT: ModelConfig(name="tiny-bert", family=Family.BERT, num_layers=2, hidden=64,
                             heads=4, intermediate=128, vocab_size=300, max_positions=64),
    Family.ROBERTA: ModelConfig(name="tiny-roberta", family=Family.ROBERTA, num_layers=2,
                                hidden=64, heads=4, intermediate=128, vocab_size=300,
                                max_positions=66, type_vocab_size=1, position_offset=2),
    Family.ALBERT: ModelConfig(name="tiny-albert", family=Family.ALBERT, num_layers=3,
                               hidden=64, heads=4, intermediate=128, vocab_size=300,
                               max_positions=64, embedding_size=32, share_layers=True,
                               activation=Activation.GELU_NEW),
}
HF_CLASS = {
    Family.BERT: "BertForPreTraining",
    Family.ROBERTA: "RobertaForMaskedLM",
    Family.ALBERT: "AlbertForPreTraining",
}
B, T = 2, 24


def hf_model(cfg: ModelConfig, device: str = "cpu") -> torch.nn.Module:
    with torch.device(device):
        return getattr(transformers, HF_CLASS[cfg.family])(hf_config(cfg))


@dataclass
class Pair:
    cfg: ModelConfig
    ours: EncoderForPretraining
    hf: torch.nn.Module
    out: object
    hf_out: object


@pytest.fixture(scope="module", params=list(TINY), ids=str)
def pair(request: pytest.FixtureRequest) -> Pair:
    """Both models with HF's random weights, one forward + backward each, dropout off."""
    cfg = TINY[request.param]
    torch.manual_seed(0)
    hf = hf_model(cfg).eval()
    ours = EncoderForPretraining(cfg, dropout=0.0).eval()
    load_hf_state_dict(ours, hf)
    batch = synthetic_batch(cfg, batch=B, seq=T, seed=1)
    out = ours(**batch.model_inputs())
    hf_out = hf(**batch.hf_inputs(cfg.family))
    out.loss.backward()
    hf_out.loss.backward()
    return Pair(cfg, ours, hf, out, hf_out)


# --- same workload as Hugging Face -----------------------------------------------------

def test_loss_matches_hf(pair: Pair) -> None:
    # BERT: MLM + NSP; RoBERTa: MLM only; ALBERT: MLM + SOP (HF sums the two as we do)
    assert abs(pair.out.loss.item() - pair.hf_out.loss.item()) <= 1e-5
    assert pair.out.loss.item() > 0


def test_logits_match_hf(pair: Pair) -> None:
    hf_mlm = getattr(pair.hf_out, "prediction_logits", None)
    if hf_mlm is None:
        hf_mlm = pair.hf_out.logits
    torch.testing.assert_close(pair.out.mlm_logits, hf_mlm, rtol=0, atol=1e-5)
    assert pair.out.mlm_logits.shape == (B, T, pair.cfg.vocab_size)
    if pair.cfg.family is Family.ROBERTA:
        assert pair.out.nsp_logits is None and pair.out.nsp_loss is None
    else:
        hf_nsp = getattr(pair.hf_out, "seq_relationship_logits", None)
        if hf_nsp is None:
            hf_nsp = pair.hf_out.sop_logits
        torch.testing.assert_close(pair.out.nsp_logits, hf_nsp, rtol=0, atol=1e-5)


def test_grads_match_hf(pair: Pair) -> None:
    hf = dict(pair.hf.named_parameters(remove_duplicate=False))
    names = [n for n, _ in pair.ours.named_parameters()]
    assert len(names) == len(set(map(id, pair.ours.parameters())))
    for name, p in pair.ours.named_parameters():
        assert p.grad is not None, name
        ref = hf[hf_param_name(pair.cfg, name)].grad
        torch.testing.assert_close(p.grad, ref, rtol=1e-4, atol=1e-6, msg=name)
    # the tied decoder weight gets both gradients: embedding scatter + decoder wgrad
    assert pair.ours.mlm.decoder.weight is pair.ours.embeddings.word.weight


def test_param_count_matches_hf_tiny(pair: Pair) -> None:
    n = sum(p.numel() for p in pair.ours.parameters())
    assert n == sum(p.numel() for p in pair.hf.parameters())


@pytest.mark.parametrize("name", [n for n, m in PRESETS.items()
                                  if m.family in (Family.BERT, Family.ROBERTA, Family.ALBERT)])
def test_param_count_matches_hf_presets(name: str) -> None:
    cfg = PRESETS[name]
    with torch.device("meta"):  # shapes only: no memory, no init work
        ours = EncoderForPretraining(cfg)
    ref = hf_model(cfg, "meta")
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    if name == "bert-base":
        # BertModel 109,482,240 + transform 768*768+768 + LN 2*768 + bias 30,522
        # + NSP 768*2+2 = 110,106,428
        assert sum(p.numel() for p in ours.parameters()) == 110_106_428


def test_albert_shares_one_layer() -> None:
    cfg = TINY[Family.ALBERT]
    m = EncoderForPretraining(cfg)
    assert len(m.layers) == 1 and m.embeddings.project is not None
    assert all(m.layer(i) is m.layers[0] for i in range(cfg.num_layers))
    calls: list[int] = []
    m.layers[0].register_forward_pre_hook(lambda mod, args: calls.append(1))
    m(**synthetic_batch(cfg, batch=1, seq=8).model_inputs())
    assert len(calls) == cfg.num_layers


def test_roberta_positions_start_after_pad() -> None:
    cfg = TINY[Family.ROBERTA]
    m = EncoderForPretraining(cfg, dropout=0.0).eval()
    ids = torch.tensor([[5, 6, 7, 1]])  # last token is <pad> (id 1)
    seen: list[torch.Tensor] = []
    m.embeddings.position.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    m.embeddings(ids, torch.zeros_like(ids))
    assert seen[0].tolist() == [[2, 3, 4, 1]]  # pad + 1 onwards; pads keep the pad row


def test_load_hf_rejects_other_family() -> None:
    ours = EncoderForPretraining(TINY[Family.BERT])
    with pytest.raises(BertscopeError, match="no parameter"):
        load_hf_state_dict(ours, hf_model(TINY[Family.ALBERT]))


# --- options ---------------------------------------------------------------------------

@pytest.mark.parametrize("family", [Family.BERT, Family.ALBERT], ids=str)
def test_checkpointing_same_loss_and_grads(family: Family) -> None:
    # dropout on: the non-reentrant checkpoint restores the RNG, so recompute repeats masks
    cfg = TINY[family]
    batch = synthetic_batch(cfg, batch=B, seq=T, seed=2)
    runs = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        m = EncoderForPretraining(cfg, dropout=0.1, checkpointing=ckpt).train()
        torch.manual_seed(1)
        out = m(**batch.model_inputs())
        out.loss.backward()
        runs.append((out.loss.detach(), {n: p.grad for n, p in m.named_parameters()}))
    (loss0, g0), (loss1, g1) = runs
    assert loss0.item() == loss1.item()
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=0, atol=0, msg=n)


def test_masked_lm_only_same_loss() -> None:
    cfg = TINY[Family.BERT]
    batch = synthetic_batch(cfg, batch=B, seq=T, seed=3)
    torch.manual_seed(0)
    full = EncoderForPretraining(cfg, dropout=0.0)
    sparse = EncoderForPretraining(cfg, dropout=0.0, masked_lm_only=True)
    sparse.load_state_dict(full.state_dict())
    a, b = full(**batch.model_inputs()), sparse(**batch.model_inputs())
    k = math.ceil(T * 0.15)  # 24 * 0.15 = 3.6 -> 4 labelled positions per sequence
    assert b.mlm_logits.shape == (B * k, cfg.vocab_size)
    torch.testing.assert_close(b.loss, a.loss, rtol=0, atol=1e-6)


def test_dropout_off_launches_no_dropout_and_flag_follows_run() -> None:
    cfg = TINY[Family.BERT]
    off = build_model(cfg, RunConfig(batch=1, seq=8, dropout=False))
    on = build_model(cfg, RunConfig(batch=1, seq=8, checkpoint="full", masked_lm_only=True))
    assert not any(isinstance(m, torch.nn.Dropout) for m in off.modules())
    # embeddings + per layer (attention probs, attn_norm, ffn_norm)
    assert sum(isinstance(m, torch.nn.Dropout) for m in on.modules()) == 1 + 3 * 2
    assert on.checkpointing and on.masked_lm_only and not off.checkpointing


def test_train_mode_dropout_changes_loss_but_eval_does_not() -> None:
    cfg = TINY[Family.BERT]
    m = EncoderForPretraining(cfg, dropout=0.1)
    batch = synthetic_batch(cfg, batch=B, seq=T).model_inputs()
    with torch.no_grad():
        m.eval()
        e1, e2 = m(**batch).loss, m(**batch).loss
        m.train()
        t1 = m(**batch).loss
    assert e1.item() == e2.item() != t1.item()


def test_bf16_autocast_runs() -> None:
    cfg = TINY[Family.BERT]
    m = EncoderForPretraining(cfg)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(**synthetic_batch(cfg, batch=1, seq=8).model_inputs())
    assert torch.isfinite(out.loss)
    out.loss.backward()


# --- attribution -----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "sub"), [
    ("embeddings.word", Sublayer.EMBEDDING),
    ("embeddings.project", Sublayer.EMBEDDING),
    ("layers.3.attn.q", Sublayer.QKV),
    ("layers.3.attn.v", Sublayer.QKV),
    ("layers.3.attn.score", Sublayer.ATTN_SCORE),
    ("layers.3.attn.softmax", Sublayer.ATTN_SOFTMAX),
    ("layers.3.attn.drop", Sublayer.ATTN_SOFTMAX),
    ("layers.3.attn.context", Sublayer.ATTN_CONTEXT),
    ("layers.3.attn.out", Sublayer.ATTN_OUTPUT),
    ("layers.3.attn_norm.drop", Sublayer.ATTN_ADD_NORM),
    ("layers.3.attn_norm.norm", Sublayer.ATTN_ADD_NORM),
    ("layers.10.ffn.fc1", Sublayer.FFN1),
    ("layers.10.ffn.act", Sublayer.FFN_ACT),
    ("layers.10.ffn.fc2", Sublayer.FFN2),
    ("layers.10.ffn_norm", Sublayer.FFN_ADD_NORM),
    ("mlm.decoder", Sublayer.MLM_HEAD),
    ("nsp.pooler", Sublayer.NSP_HEAD),
    ("loss", Sublayer.LOSS),
    ("", Sublayer.OTHER),
    ("layers.3", Sublayer.OTHER),
    ("layers.3.attn", Sublayer.OTHER),
])
def test_module_sublayer(name: str, sub: Sublayer) -> None:
    assert module_sublayer(name) is sub


@pytest.mark.parametrize("family", list(TINY), ids=str)
def test_every_leaf_module_has_a_sublayer(family: Family) -> None:
    m = EncoderForPretraining(TINY[family])
    for name, mod in m.named_modules():
        if not list(mod.children()):
            assert module_sublayer(name) is not Sublayer.OTHER, name
    assert layer_index("layers.7.ffn.fc1") == 7 and layer_index("mlm.dense") is None


# --- LAMB ------------------------------------------------------------------------------

def lamb_reference(w, g, m, v, t, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    """Algorithm 2 of You et al. 2020, one tensor, in numpy float64."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    u = m_hat / (np.sqrt(v_hat) + eps) + wd * w
    wn, un = np.linalg.norm(w), np.linalg.norm(u)
    ratio = wn / un if wn > 0 and un > 0 else 1.0
    return w - lr * ratio * u, m, v


def test_lamb_two_steps_match_algorithm_2() -> None:
    w0 = np.array([1.0, -2.0, 2.0])  # ||w|| = 3
    grads = [np.array([0.5, 0.5, -1.0]), np.array([-0.25, 1.0, 0.5])]
    p = torch.tensor(w0, requires_grad=True)
    opt = Lamb([p], lr=0.1, weight_decay=0.01)
    w, m, v = w0, np.zeros(3), np.zeros(3)
    for t, g in enumerate(grads, start=1):
        p.grad = torch.tensor(g)
        opt.step()
        w, m, v = lamb_reference(w, g, m, v, t, lr=0.1)
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-12, atol=1e-12)
    # step 1 by hand: m_hat = g, v_hat = g^2, so u = g / (|g| + 1e-6) + 0.01 w
    #   = [0.999998, 0.999998, -0.999999] + [0.01, -0.02, 0.02]
    #   = [1.009998, 0.979998, -0.979999];
    #   ||u|| = sqrt(1.020096 + 0.960396 + 0.960398) = 1.714902, ratio = 3 / ||u|| = 1.749371
    #   w1 = w0 - 0.1 * 1.749371 * u = [0.823314, -2.171438, 2.171438]
    w1, _, _ = lamb_reference(w0, grads[0], np.zeros(3), np.zeros(3), 1, lr=0.1)
    np.testing.assert_allclose(w1, [0.823314, -2.171438, 2.171438], atol=1e-6)


def test_lamb_trust_ratio_is_one_for_zero_norms() -> None:
    # ||w|| = 0: w1 = 0 - lr * 1 * u with u = g / (|g| + eps) (weight decay of 0 is 0)
    p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    p.grad = torch.tensor([2.0, -2.0], dtype=torch.float64)
    Lamb([p], lr=0.5).step()
    np.testing.assert_allclose(p.detach().numpy(), [-0.5 * 2 / (2 + 1e-6), 0.5 * 2 / (2 + 1e-6)])
    # ||u|| = 0 (zero gradient, no weight decay): ratio 1, the weight stays
    q = torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True)
    q.grad = torch.zeros(2, dtype=torch.float64)
    Lamb([q], lr=0.5, weight_decay=0.0).step()
    assert q.tolist() == [3.0, 4.0]


def test_lamb_per_tensor_ratio_and_skips_params_without_grad() -> None:
    a = torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True)  # ||a|| = 5
    b = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    c = torch.tensor([7.0], dtype=torch.float64, requires_grad=True)  # no grad: untouched
    a.grad = torch.tensor([1.0, 1.0], dtype=torch.float64)
    b.grad = torch.tensor([-1.0], dtype=torch.float64)
    Lamb([a, b, c], lr=0.1, weight_decay=0.0).step()
    # u_a ~ [1, 1], ||u_a|| = sqrt 2, ratio 5 / sqrt 2: a moves 0.1 * 5 / sqrt 2 per entry
    np.testing.assert_allclose(a.detach().numpy(), [3 - 0.5 / math.sqrt(2), 4 - 0.5 / math.sqrt(2)],
                               atol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), [1.1], atol=1e-6)  # ratio 1 / 1
    assert c.item() == 7.0


@pytest.mark.parametrize(("kind", "cls"), [
    (Optimizer.SGD, torch.optim.SGD), (Optimizer.ADAM, torch.optim.Adam),
    (Optimizer.ADAMW, torch.optim.AdamW), (Optimizer.LAMB, Lamb)])
def test_make_optimizer(kind: Optimizer, cls: type) -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = make_optimizer(kind, [p], lr=0.01)
    assert type(opt) is cls
    if kind is Optimizer.SGD:
        assert opt.param_groups[0]["momentum"] == 0.9
    p.grad = torch.ones(3)
    opt.step()
    assert p.detach().lt(1).all()


def test_lamb_trains_the_model() -> None:
    cfg = TINY[Family.ALBERT]
    torch.manual_seed(0)
    m = EncoderForPretraining(cfg, dropout=0.0)
    opt = make_optimizer(Optimizer.LAMB, m.parameters(), lr=1e-2)
    batch = synthetic_batch(cfg, batch=B, seq=T).model_inputs()
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = m(**batch).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# --- data ------------------------------------------------------------------------------

@pytest.mark.parametrize("family", list(TINY), ids=str)
def test_data_layout(family: Family) -> None:
    cfg = TINY[family]
    b = synthetic_batch(cfg, batch=8, seq=40, seed=5)
    labelled = b.mlm_labels != -100
    # ceil(40 * 15 / 100) = 6 labelled positions in every sequence: 6 / 40 = 15%
    assert labelled.sum(1).tolist() == [6] * 8
    assert b.input_ids.shape == b.mlm_labels.shape == (8, 40) and b.nsp_labels.shape == (8,)
    assert b.attention_mask.eq(1).all() and set(b.nsp_labels.tolist()) <= {0, 1}
    # the tokenizers' special ids: BERT's [PAD]=0 [UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103
    # (vocab.txt), RoBERTa's <s> <pad> </s> <unk> 0-3 and <mask> 50264 (dict.txt), ALBERT's
    # <pad> <unk> [CLS] [SEP] [MASK] 0-4 (spiece.model)
    specials = torch.tensor({Family.BERT: (0, 100, 101, 102, 103),
                             Family.ROBERTA: (0, 1, 2, 3, 50264),
                             Family.ALBERT: (0, 1, 2, 3, 4)}[family])
    assert not torch.isin(b.input_ids[~labelled], specials).any()
    assert not torch.isin(b.mlm_labels[labelled], specials).any()
    assert b.input_ids.max() < cfg.vocab_size and b.input_ids.dtype == torch.int64
    if cfg.type_vocab_size > 1:
        assert b.token_type_ids[:, :20].eq(0).all() and b.token_type_ids[:, 20:].eq(1).all()
    else:
        assert b.token_type_ids.eq(0).all()


def test_data_masks_fifteen_percent_at_scale() -> None:
    b = synthetic_batch(PRESETS["bert-base"], batch=16, seq=128, seed=0)
    frac = (b.mlm_labels != -100).float().mean().item()
    assert frac == pytest.approx(0.15, abs=0.01)  # ceil(19.2) / 128 = 20 / 128 = 0.156
    assert b.input_ids[b.mlm_labels != -100].eq(103).all()  # [MASK]


def test_data_deterministic_with_seed() -> None:
    cfg = TINY[Family.BERT]
    a = synthetic_batch(cfg, batch=4, seq=32, seed=7)
    b = synthetic_batch(cfg, batch=4, seq=32, seed=7)
    c = synthetic_batch(cfg, batch=4, seq=32, seed=8)
    for name, x in a.model_inputs().items():
        assert torch.equal(x, b.model_inputs()[name]), name
    assert not torch.equal(a.input_ids, c.input_ids)
    assert not torch.equal(a.mlm_labels, c.mlm_labels)


def test_data_rejects_too_long_seq() -> None:
    with pytest.raises(BertscopeError, match="exceeds"):
        synthetic_batch(TINY[Family.ROBERTA], batch=1, seq=65)


def test_load_hf_rejects_untied_decoder() -> None:
    cfg = TINY[Family.BERT]
    hf_cfg = hf_config(cfg)
    hf_cfg.tie_word_embeddings = False
    with pytest.raises(BertscopeError, match="not tied"):
        load_hf_state_dict(EncoderForPretraining(cfg), transformers.BertForPreTraining(hf_cfg))


@pytest.mark.parametrize("act", list(Activation), ids=str)
def test_every_activation_has_a_module(act: Activation) -> None:
    x = torch.linspace(-3, 3, 13)
    y = make_activation(act)(x)
    assert make_activation(act.value)(x).equal(y)  # a member or its value
    assert y.shape == x.shape and torch.isfinite(y).all()


def test_unknown_activation_lists_the_choices() -> None:
    with pytest.raises(BertscopeError, match="unknown activation 'swish'; choose one of: gelu"):
        make_activation("swish")
