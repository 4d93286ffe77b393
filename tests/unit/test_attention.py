"""Attention implementations (eager, fused-softmax, sdpa): rows by hand arithmetic.

Config: a 1-layer BERT with hidden 128, 2 heads (head size d = 64), fp32 (a = 4 bytes),
batch 2, seq 16, dropout on. Then g = batch x heads = 4, t h = g s d = 4,096 elements in each
of Q, K, V, and e = g s^2 = 1,024 score elements."""

from __future__ import annotations

import pytest

from bertscope.analytic import MemoryEstimate, build
from bertscope.config import Attention, Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.taxonomy import Phase, Sublayer

M = ModelConfig(name="tiny", family=Family.BERT, num_layers=1, hidden=128, heads=2,
                intermediate=512, vocab_size=100, max_positions=64)


def _core(attention: str):
    t = build(M, RunConfig(batch=2, seq=16, attention=attention))
    df = t.df
    core = df[(df["layer"] == 0) & df["sublayer"].astype(str).isin(
        [Sublayer.ATTN_SCORE, Sublayer.ATTN_SOFTMAX, Sublayer.ATTN_CONTEXT, Sublayer.ATTN_FUSED])]
    return t, core.set_index(["name", "phase"])


def test_sdpa_is_one_kernel_each_way_by_hand() -> None:
    _, core = _core("sdpa")
    assert len(core) == 2
    fwd = core.loc[("attention", Phase.FORWARD)]
    # 2 products x 2 g s^2 d = 4 x 1,024 x 64 = 262,144, plus (scale 1 + mask 1 + softmax 5
    # + dropout 2) x e = 9,216 on chip
    assert fwd["flops"] == 262_144 + 9_216
    # reads Q, K, V (3 x 4,096 x 4 B) and the mask (2 x 16 x 4 B): 49,152 + 128
    assert fwd["bytes_read"] == 49_280
    # writes O (16,384 B) and the fp32 log-sum-exp per row (4 x g s = 256 B)
    assert fwd["bytes_written"] == 16_640
    # saves Q, K, V, O (4 x 16,384) and the log-sum-exp: no s x s tensor
    assert fwd["saved_bytes"] == 65_792
    assert (fwd["m"], fwd["n"], fwd["k"], fwd["batch"]) == (16, 16, 64, 4)
    bwd = core.loc[("attention.grad", Phase.BACKWARD_DATA)]
    # five products (scores recomputed): 10 x 1,024 x 64 = 655,360; elementwise: recompute
    # scale, mask, softmax, dropout (9) + dropout grad 2 + softmax grad 4 + scale grad 1
    assert bwd["flops"] == 655_360 + 16 * 1_024
    # reads Q, K, V, O, dO (5 x 16,384) + mask 128 + log-sum-exp 256; writes dQ, dK, dV
    assert bwd["bytes_read"] == 81_920 + 128 + 256
    assert bwd["bytes_written"] == 49_152


def test_fused_softmax_is_one_kernel_between_the_gemms() -> None:
    _, core = _core("fused-softmax")
    names = {n for n, _ in core.index}
    assert names == {"score", "softmax", "context", "score.dgrad_a", "score.dgrad_b",
                     "context.dgrad_a", "context.dgrad_b", "softmax.grad",
                     # the heads merged back (and its backward), as eager does
                     "context_merge", "context_merge.grad"}
    sm = core.loc[("softmax", Phase.FORWARD)]
    assert sm["flops"] == (1 + 1 + 5 + 2) * 1_024
    # reads the scores (4,096 B) and the mask (128 B); writes the probabilities after dropout,
    # the softmax output backward needs (4,096 B each) and the 1-byte mask (1,024 B)
    assert sm["bytes_read"] == 4_224 and sm["bytes_written"] == 9_216
    # and keeps all three: the probabilities the context product reads (counted here, so
    # the s x s tensors selective recomputation drops are the softmax's), its output, mask
    assert sm["saved_bytes"] == 4_096 + 4_096 + 1_024
    g = core.loc[("softmax.grad", Phase.BACKWARD_DATA)]
    assert g["flops"] == (2 + 4 + 1) * 1_024
    assert g["bytes_read"] == 2 * 4_096 + 1_024 and g["bytes_written"] == 4_096


def test_gemm_flops_agree_and_memory_traffic_falls() -> None:
    """Every implementation does the same 4 g s^2 d forward GEMM FLOPs (eager and fused in
    two batched GEMMs); eager moves the most bytes in the attention core, sdpa the fewest."""
    moved = {}
    for attn in Attention:
        _, core = _core(attn.value)
        gemm_fwd = core[(core["category"].astype(str) == "batched_gemm")
                        & (core.index.get_level_values("phase") == Phase.FORWARD)]["flops"].sum()
        extra = 9 * 1_024 if attn is Attention.SDPA else 0
        assert gemm_fwd - extra == 262_144
        moved[attn] = (core["bytes_read"] + core["bytes_written"]).sum()
    assert moved[Attention.EAGER] > moved[Attention.FUSED_SOFTMAX] > moved[Attention.SDPA]


def test_sdpa_saves_no_score_matrix_at_long_sequences() -> None:
    """At seq 512 eager keeps the softmax output, mask and dropout output per head (5 a s /
    h per element of the layer input in Korthikanti et al.'s terms); sdpa keeps none."""
    run = {"batch": 2, "seq": 512}
    m = ModelConfig(name="m", family=Family.BERT, num_layers=2, hidden=128, heads=2,
                    intermediate=512, vocab_size=100, max_positions=512)
    eager = MemoryEstimate.of(build(m, RunConfig(**run))).activations_per_layer
    sdpa = MemoryEstimate.of(build(m, RunConfig(**run, attention="sdpa"))).activations_per_layer
    e = 2 * 2 * 512 * 512  # g s^2
    # eager's s^2 terms: softmax output 4e + mask e + dropout output 4e = 9e bytes; sdpa
    # instead keeps O (t h x 4 B) and the log-sum-exp (4 g s B)
    assert eager - sdpa == 9 * e - (2 * 512 * 128 * 4 + 4 * 4 * 512)


def test_profile_refuses_what_it_does_not_measure() -> None:
    from bertscope.measure.profile import profile

    with pytest.raises(BertscopeError, match="attention fused-softmax is not measured"):
        profile(M, RunConfig(batch=1, seq=8, attention="fused-softmax"), iters=1, warmup=0)


def test_the_sdpa_reference_model_equals_the_eager_one() -> None:
    """Same weights, dropout off: torch's scaled_dot_product_attention and the explicit ops
    give the same loss and gradients (an independent implementation of the core)."""
    import torch

    from bertscope.measure.data import synthetic_batch
    from bertscope.measure.models import EncoderForPretraining

    torch.manual_seed(0)
    eager = EncoderForPretraining(M, dropout=0.0)
    fused = EncoderForPretraining(M, dropout=0.0, sdpa=True)
    fused.load_state_dict(eager.state_dict())
    b = synthetic_batch(M, batch=2, seq=16, seed=0, device=torch.device("cpu"))
    losses = []
    for net in (eager, fused):
        out = net(**b.model_inputs())
        loss = out.loss if hasattr(out, "loss") else out[0]
        loss.backward()
        losses.append((loss.item(), net.layers[0].attn.q.weight.grad.clone()))
    assert losses[0][0] == pytest.approx(losses[1][0], rel=1e-5)
    assert torch.allclose(losses[0][1], losses[1][1], rtol=1e-4, atol=1e-6)


def test_sdpa_is_measured_and_attributed_to_its_sublayer() -> None:
    from bertscope.measure.profile import profile

    r = profile(M, RunConfig(batch=2, seq=16, attention="sdpa", dropout=False), iters=1,
                warmup=1)
    df = r.table.df
    fused = df[df["sublayer"].astype(str) == Sublayer.ATTN_FUSED]
    assert "aten::scaled_dot_product_attention" in set(fused["name"])
    assert fused["time_s"].sum() > 0
    assert not (df["sublayer"].astype(str).isin(["attn_score", "attn_softmax",
                                                  "attn_context"])).any()
