"""T5 and ViT measured: the reference models against Hugging Face's (same loss and
gradients), both families' Hugging Face models profiled and attributed."""

from __future__ import annotations

import pytest

from bertscope.analytic import build
from bertscope.config import Family, RunConfig
from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Phase, Sublayer
from tests.conftest import tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from bertscope.families import resolve  # noqa: E402
from bertscope.measure.hf import build_hf_model  # noqa: E402
from bertscope.measure.models import build_model  # noqa: E402
from bertscope.measure.models.t5 import load_hf_t5  # noqa: E402
from bertscope.measure.models.vit import load_hf_vit  # noqa: E402
from bertscope.measure.profile import profile  # noqa: E402


def _both(m, run, load) -> tuple[object, object]:
    """Hugging Face's model and the reference one with its weights (`load`), one training
    step's forward and backward on the same batch; the losses agree."""
    torch.manual_seed(0)
    hf = build_hf_model(m, run)  # dropout off in every run here
    ours = build_model(m, run)
    load(ours, hf)
    # the spec's batch maker: the reference and the Hugging Face model take the same keywords
    batch = resolve(m.family.spec.batch)(m, run, 1, torch.device("cpu"), True)
    theirs = hf(**batch).loss
    mine = ours(**batch).loss
    theirs.backward()
    mine.backward()
    assert mine.item() == pytest.approx(theirs.item(), rel=1e-5)
    return ours, hf


@pytest.mark.parametrize("sdpa", [False, True])
def test_reference_vit_has_hugging_faces_loss_and_gradients(sdpa: bool) -> None:
    m = tiny(Family.VIT)
    run = RunConfig(batch=3, seq=17, dropout=False, attention="sdpa" if sdpa else "eager")
    ours, hf = _both(m, run, load_hf_vit)
    pairs = [(ours.patch.proj.weight.grad,
              hf.vit.embeddings.patch_embeddings.projection.weight.grad.reshape(64, -1)),
             (ours.patch.cls.grad, hf.vit.embeddings.cls_token.grad),
             (ours.embeddings.position.grad, hf.vit.embeddings.position_embeddings.grad),
             (ours.layers[0].attn.q.weight.grad, hf.vit.layers[0].attention.q_proj.weight.grad),
             (ours.layers[1].ffn.fc2.bias.grad, hf.vit.layers[1].mlp.fc2.bias.grad),
             (ours.classifier.dense.weight.grad, hf.classifier.weight.grad)]
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("v1_1", [False, True], ids=["t5", "t5-v1_1"])
def test_reference_t5_has_hugging_faces_loss_and_gradients(v1_1: bool) -> None:
    m = (tiny(Family.T5, gated_ffn=True, tie_word_embeddings=False, activation="gelu_new")
         if v1_1 else tiny(Family.T5))
    ours, hf = _both(m, RunConfig(batch=3, seq=16, decoder_seq=8, dropout=False), load_hf_t5)
    enc, dec = hf.encoder.block, hf.decoder.block
    pairs = [(ours.layers[0].attn.q.weight.grad, enc[0].layer[0].SelfAttention.q.weight.grad),
             (ours.layers[0].bias.table.weight.grad,
              enc[0].layer[0].SelfAttention.relative_attention_bias.weight.grad),
             (ours.layers[2].bias.table.weight.grad,
              dec[0].layer[0].SelfAttention.relative_attention_bias.weight.grad),
             (ours.layers[3].cross.k.weight.grad, dec[1].layer[1].EncDecAttention.k.weight.grad),
             (ours.layers[4].ffn.fc2.weight.grad, dec[2].layer[2].DenseReluDense.wo.weight.grad),
             (ours.enc_final.norm.weight.grad, hf.encoder.final_layer_norm.weight.grad)]
    if not v1_1:  # transformers 5.x ties v1.1's head to the table too: only v1.0's compare
        pairs.append((ours.embeddings.shared.weight.grad, hf.shared.weight.grad))
    for a, b in pairs:
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_reference_t5_refuses_sdpa() -> None:
    with pytest.raises(BertscopeError, match="drop --attention sdpa"):
        build_model(tiny(Family.T5), RunConfig(batch=2, seq=16, attention="sdpa"))


def test_hugging_face_t5_is_attributed_to_both_stacks() -> None:
    m = tiny(Family.T5, gated_ffn=True, tie_word_embeddings=False, activation="gelu_new")
    run = RunConfig(batch=2, seq=16, decoder_seq=8)
    d = profile(m, run, iters=1, warmup=0, hf=True).table.df
    want = build(m, run).df
    gemm = d[d["category"].isin([Category.GEMM, Category.BATCHED_GEMM])
             & (d["phase"] == Phase.FORWARD)]
    # per sublayer, the measured forward GEMM FLOPs are the analytic ones
    wg = want[want["category"].isin(["gemm", "batched_gemm"]) & (want["phase"] == "forward")]
    assert gemm.groupby("sublayer")["flops"].sum().to_dict() == pytest.approx(
        wg.groupby("sublayer")["flops"].sum().to_dict())
    # the decoder layers (2, 3, 4) hold the cross-attention, each stack's first its bias
    cross = d[d["sublayer"] == Sublayer.CROSS_CORE]
    assert set(cross["layer"]) == {2, 3, 4}
    assert set(d.loc[d["sublayer"] == Sublayer.REL_POS_BIAS, "layer"]) >= {0, 2}


def test_hugging_face_vit_is_attributed() -> None:
    m = tiny(Family.VIT)
    r = profile(m, RunConfig(batch=2, seq=17), iters=1, warmup=0, hf=True)
    d = r.table.df
    for sub in (Sublayer.PATCH_EMBED, Sublayer.ATTN_SCORE, Sublayer.ATTN_CONTEXT,
                Sublayer.FINAL_NORM, Sublayer.CLS_HEAD):
        assert (d["sublayer"] == sub).any(), sub
    # the patch convolution runs as one (Conv2d) and as one in backward; the profiler counts
    # the forward's FLOPs as the analytic GEMM's: M b n = 32, K c p^2 = 192, N h = 64
    conv = d[(d["sublayer"] == Sublayer.PATCH_EMBED) & (d["category"] == Category.CONVOLUTION)]
    # (convolution_backward computes whichever gradients are needed in one op: phase backward)
    assert set(conv["phase"]) == {Phase.FORWARD, Phase.BACKWARD}
    assert conv.loc[conv["phase"] == Phase.FORWARD, "flops"].sum() == 2 * 32 * 192 * 64


def test_reference_t5_checkpointing_recomputes_both_stacks() -> None:
    m = tiny(Family.T5)
    run = RunConfig(batch=2, seq=16, decoder_seq=8, checkpoint="full")
    d = profile(m, run, iters=1, warmup=0).table.df
    gemm = d[d["category"].isin([Category.GEMM, Category.BATCHED_GEMM])]
    rec = gemm[gemm["phase"] == Phase.RECOMPUTE]
    fwd = gemm[(gemm["phase"] == Phase.FORWARD) & (gemm["layer"] >= 0)]
    assert set(rec["layer"]) == {0, 1, 2, 3, 4}
    assert rec["flops"].sum() == pytest.approx(fwd["flops"].sum())


# -- the commands on tiny T5 and ViT config.json files (no presets: CI stays fast)
T5_TINY = {"model_type": "t5", "d_model": 64, "d_kv": 8, "d_ff": 256, "num_layers": 2,
           "num_decoder_layers": 3, "num_heads": 4, "vocab_size": 500,
           "is_encoder_decoder": True}
VIT_TINY = {"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 256, "image_size": 32,
            "patch_size": 8, "num_labels": 10}


@pytest.mark.parametrize(("doc", "shape", "bad"), [
    (T5_TINY, ["--seq", "16", "--decoder-seq", "8"], ["--seq", "16", "--decoder-seq", "0"]),
    (VIT_TINY, ["--seq", "17"], ["--seq", "16"])], ids=["t5", "vit"])
def test_commands_run_on_both_families(tmp_path, capsys, doc, shape, bad) -> None:
    import json

    from bertscope.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(doc))
    commands = [["ops", str(cfg), "--batch", "2"],
                ["predict", str(cfg), "--batch", "2", "--device", "a100"],
                ["profile", str(cfg), "--batch", "2", "--iters", "1", "--warmup", "0"],
                ["distributed", str(cfg), "--devices", "2", "--device", "a100",
                 "--global-batch", "4", "--tp", "2"]]
    for argv in commands:
        rc = main([*argv, *shape])
        out = capsys.readouterr()
        assert rc == 0, (argv, out.err)
    assert main(["ops", str(cfg), "--batch", "2", *bad]) == 2  # one line, exit 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
