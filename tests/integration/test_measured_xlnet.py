"""XLNet measured: the reference model against Hugging Face's XLNetLMHeadModel (same loss,
gradients and carried memory with its weights copied in), and the profiled GEMM FLOPs of
both models against the analytic table."""

from __future__ import annotations

import pytest

from bertscope.analytic import build
from bertscope.config import Family, RunConfig
from bertscope.taxonomy import Sublayer, gemm_mask
from tests.conftest import tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from bertscope.measure.data import permutation_lm_inputs  # noqa: E402
from bertscope.measure.hf import build_hf_model  # noqa: E402
from bertscope.measure.models import build_model  # noqa: E402
from bertscope.measure.models.xlnet import load_hf_xlnet  # noqa: E402
from bertscope.measure.profile import profile  # noqa: E402

# 3 layers, h 64, 4 heads, f 256, V 500, 5 cached positions; 18 tokens, 3 predicted
RUN = RunConfig(batch=2, seq=18, dropout=False)


def test_reference_xlnet_has_hugging_faces_loss_gradients_and_memory() -> None:
    m = tiny(Family.XLNET, num_layers=3)
    torch.manual_seed(0)
    hf = build_hf_model(m, RUN)
    ours = build_model(m, RUN)
    load_hf_xlnet(ours, hf)
    batch = permutation_lm_inputs(m, RUN, 1, torch.device("cpu"), True)
    ours.mems = [t.clone() for t in batch["mems"]]  # the memory HF is given
    out = hf(**batch)
    mine = ours(**{k: v for k, v in batch.items() if k not in ("mems", "use_mems")})
    out.loss.backward()
    mine.loss.backward()
    assert mine.loss.item() == pytest.approx(out.loss.item(), rel=1e-5)
    layer, theirs = ours.layers[1], hf.transformer.layer[1]
    h = m.hidden
    pairs = [(ours.embeddings.word.weight.grad, hf.transformer.word_embedding.weight.grad),
             (ours.embeddings.mask_emb.grad, hf.transformer.mask_emb.grad),
             (layer.attn.q.weight.grad, theirs.rel_attn.q.grad.reshape(h, h).t()),
             (layer.attn.r.weight.grad, theirs.rel_attn.r.grad.reshape(h, h).t()),
             (layer.attn.o.weight.grad, theirs.rel_attn.o.grad.reshape(h, h)),
             (layer.attn.seg_embed.grad, theirs.rel_attn.seg_embed.grad),
             (layer.attn.r_r_bias.grad, theirs.rel_attn.r_r_bias.grad),
             (layer.attn_norm.norm.weight.grad, theirs.rel_attn.layer_norm.weight.grad),
             (layer.ffn.fc1.weight.grad, theirs.ff.layer_1.weight.grad),
             (ours.layers[2].attn.k.weight.grad,
              hf.transformer.layer[2].rel_attn.k.grad.reshape(h, h).t()),
             (ours.head.dense.bias.grad, hf.lm_loss.bias.grad)]
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # the memory carried to the next segment: each layer's last mem_len input positions
    for a, b in zip(ours.mems, out.mems, strict=True):
        torch.testing.assert_close(a, b)


def _gemm_flops(df):
    """GEMM FLOPs by (sublayer, phase), entries of zero left out (the mask's permuting
    einsum is a GEMM op of no FLOPs)."""
    g = df[gemm_mask(df["category"])]
    by = g.groupby([g["sublayer"].astype(str), g["phase"].astype(str)])["flops"].sum()
    return {k: v for k, v in by.to_dict().items() if v}


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", ["none", "full"])
def test_reference_xlnet_gemm_flops_per_phase_equal_the_analytic_tables(checkpoint) -> None:
    # per sublayer and phase (forward, data and weight gradients, recomputation): the
    # memory's K and V rows, W_r's weight gradient alone, the query stream's one-sided
    # products, the last layer's content stream with no backward
    m = tiny(Family.XLNET)
    run = RunConfig(batch=2, seq=18, checkpoint=checkpoint)
    measured = profile(m, run, iters=2, warmup=1).table.df
    got, want = _gemm_flops(measured), _gemm_flops(build(m, run).df)
    assert got == pytest.approx(want)
    assert ("rel_pos", "backward_weight") in want and (checkpoint == "full") == any(
        phase == "recompute" for _, phase in want)
    assert (measured["sublayer"] == Sublayer.MEMORY).any()


@pytest.mark.slow
def test_hugging_face_xlnet_is_profiled_and_attributed() -> None:
    m = tiny(Family.XLNET)
    run = RunConfig(batch=2, seq=18)
    d = profile(m, run, iters=1, warmup=0, hf=True).table.df
    want = build(m, run).df
    # torch's profiler gives the encodings' outer product before the layers,
    # einsum("i,d->id") (a broadcast multiply, no GEMM to FlopCounterMode), FLOPs of its own
    outer = (d["name"] == "aten::einsum") & (d["layer"] < 0)
    gemm = d[gemm_mask(d["category"]) & ~outer]
    wg = want[gemm_mask(want["category"])]
    assert gemm.loc[gemm["phase"] == "forward", "flops"].sum() == pytest.approx(
        wg.loc[wg["phase"] == "forward", "flops"].sum())
    assert set(d.loc[d["sublayer"] == Sublayer.FFN1, "layer"]) == {0, 1}
    assert (d["sublayer"] == Sublayer.LM_HEAD).any()
