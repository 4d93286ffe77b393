"""The analytic op model: hand-derived FLOPs, bytes and rows; memory model formulas."""

from __future__ import annotations

import pytest

from bertscope.analytic import build, ops, parameter_count
from bertscope.analytic.encoder import encoder_ops
from bertscope.config import Family, Optimizer, Precision, RunConfig
from bertscope.presets import PRESETS
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit
from tests.conftest import MODELLED, tiny


def _gemm(df, phase: str | None = None) -> float:
    g = df[df["category"].isin([Category.GEMM, Category.BATCHED_GEMM])]
    if phase is not None:
        g = g[g["phase"] == phase]
    return float(g["flops"].sum())


def test_bert_tiny_forward_gemm_flops_by_hand() -> None:
    # bert-tiny: L=2, h=128, a=2, f=512, V=30522; batch 1 x seq 8 -> T = 8 tokens.
    # per layer: Q,K,V,out: 4 x 2*T*h*h = 4 * 2*8*128*128 = 1,048,576
    #            FFN1+FFN2: 2 x 2*T*h*f = 2 * 2*8*128*512 = 2,097,152
    #            QK^T and PV: 2 x 2*b*s*s*h = 2 * 2*1*8*8*128 = 32,768
    #            = 3,178,496; two layers = 6,356,992
    # heads: MLM transform 2*8*128*128 = 262,144; decoder 2*8*128*30522 = 62,509,056;
    #        pooler 2*1*128*128 = 32,768; NSP classifier 2*1*128*2 = 512
    # total = 6,356,992 + 262,144 + 62,509,056 + 32,768 + 512 = 69,161,472
    d = ops("bert-tiny", batch=1, seq=8).df
    assert _gemm(d, Phase.FORWARD) == 69_161_472


def test_layer_rows_and_shapes() -> None:
    d = ops("bert-base", batch=2, seq=128).df
    layer3 = d[(d["layer"] == 3) & (d["phase"] == Phase.FORWARD)]
    ffn1 = layer3[layer3["name"] == "ffn1"].iloc[0]
    assert (ffn1["m"], ffn1["n"], ffn1["k"], ffn1["batch"]) == (256, 3072, 768, 1)
    score = layer3[layer3["name"] == "score"].iloc[0]
    # QK^T per (sequence, head): (s x d) @ (d x s), batch = b * a = 24
    assert (score["m"], score["n"], score["k"], score["batch"]) == (128, 128, 64, 24)
    wgrad = d[(d["layer"] == 3) & (d["name"] == "ffn1.wgrad")].iloc[0]
    assert (wgrad["m"], wgrad["n"], wgrad["k"]) == (3072, 768, 256)
    assert wgrad["phase"] == Phase.BACKWARD_WEIGHT
    # every encoder layer has the same rows
    assert (d["layer"] == 0).sum() == (d["layer"] == 11).sum()
    assert d["layer"].max() == 11


def test_bytes_of_a_gemm_and_a_dropout_by_hand() -> None:
    d = ops("bert-tiny", batch=1, seq=8, precision="bf16").df
    q = d[(d["name"] == "q") & (d["layer"] == 0)].iloc[0]
    # X (8 x 128) + W (128 x 128) + bias 128, 2 bytes each: 2*(1024 + 16384 + 128) = 35,072
    assert q["bytes_read"] == 35_072
    assert q["bytes_written"] == 2 * 8 * 128  # Y = 2,048
    drop = d[(d["name"] == "ffn_dropout") & (d["layer"] == 0)].iloc[0]
    # reads 1024 bf16 elements, writes 1024 bf16 + 1024 one-byte mask
    assert (drop["bytes_read"], drop["bytes_written"]) == (2048, 3072)


def test_dropout_off_removes_dropout_rows() -> None:
    d = ops("bert-mini", batch=2, seq=32, dropout=False).df
    assert not (d["category"] == Category.DROPOUT).any()
    d_on = ops("bert-mini", batch=2, seq=32).df
    # embeddings 1 + per layer 3 (attention probs, attention output, FFN output), x 4 layers
    assert (d_on[d_on["phase"] == Phase.FORWARD]["category"] == Category.DROPOUT).sum() == 13


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_saved_activations_per_layer_match_korthikanti(precision: str) -> None:
    # Korthikanti et al. 2022, Table 2 / eq. (1): s*b*h*(34 + 5*a*s/h) bytes per layer with
    # 16-bit activations and 1-byte masks. bert-large, s=128, b=4: sbh = 524,288;
    # 34*sbh = 17,825,792; 5*a*s/h = 5*16*128/1024 = 10 -> 5,242,880; total 23,068,672.
    t = ops("bert-large", batch=4, seq=128, precision=precision)
    per_layer = t.export_meta()["memory"]["activations_per_layer"]
    if precision == "bf16":
        assert per_layer == 23_068_672
    else:
        # fp32 doubles every activation but not the masks: masks are sbh (2 of them) + as^2b
        # -> 16-bit total 23,068,672 - masks (2*524,288 + 16*128*128*4 = 2,097,152) = 20,971,520
        #    fp32: 2 x 20,971,520 + 2,097,152 = 44,040,192
        assert per_layer == 44_040_192


def test_static_memory_is_16_bytes_per_param_for_mixed_adam() -> None:
    # ZeRO (Rajbhandari et al. 2020) section 3.1: 2 (fp16 w) + 2 (fp16 g) + 12 (fp32 w, m, v)
    m = PRESETS["bert-large"]
    n = parameter_count(m)
    mem = ops(m, batch=1, seq=128, precision="fp16", optimizer="adam").export_meta()["memory"]
    assert mem["static"] == 16 * n
    mem = ops(m, batch=1, seq=128, precision="fp32", optimizer="sgd").export_meta()["memory"]
    assert mem["static"] == (4 + 4 + 4) * n  # w, g, momentum


def test_checkpointing_keeps_layer_inputs_and_adds_recompute_rows() -> None:
    m = PRESETS["bert-base"]
    base = ops(m, batch=2, seq=128, precision="bf16")
    ckpt = ops(m, batch=2, seq=128, precision="bf16", checkpoint="full")
    d = ckpt.df
    rec = d[d["phase"] == Phase.RECOMPUTE]
    fwd_layers = base.df[(base.df["phase"] == Phase.FORWARD) & (base.df["layer"] >= 0)]
    assert len(rec) == len(fwd_layers)
    assert rec["flops"].sum() == fwd_layers["flops"].sum()
    mb, mc = base.export_meta()["memory"], ckpt.export_meta()["memory"]
    outside = mb["activations"] - 12 * mb["activations_per_layer"]
    # 12 layer inputs of s*b*h*2 bytes = 12 * 128*2*768*2 = 4,718,592, plus one layer live
    assert mc["activations"] == outside + 4_718_592 + mb["activations_per_layer"]


def test_gradient_accumulation_multiplies_compute_not_optimizer() -> None:
    one = ops("bert-mini", batch=2, seq=64).df
    four = ops("bert-mini", batch=2, seq=64, micro_batches=4).df
    for df in (one, four):
        assert (df["flops"] >= 0).all()
    f1 = one[one["phase"] != Phase.OPTIMIZER]["flops"].sum()
    acc = four["name"].str.endswith("grad_accumulate")
    f4 = four[(four["phase"] != Phase.OPTIMIZER) & ~acc]["flops"].sum()
    assert f4 == 4 * f1
    assert one[one["phase"] == Phase.OPTIMIZER]["flops"].sum() == \
        four[four["phase"] == Phase.OPTIMIZER]["flops"].sum()
    # 3 extra micro-batches each add every gradient once: 3 * params elementwise adds
    assert four[acc]["flops"].sum() == 3 * parameter_count(PRESETS["bert-mini"])


def test_albert_shares_weights_but_runs_every_layer() -> None:
    m = tiny(Family.ALBERT)  # 3 layers, one shared set of weights
    d = build(m, RunConfig(batch=2, seq=16)).df
    assert sorted(d[d["phase"] == Phase.FORWARD]["layer"].unique()) == [-1, 0, 1, 2]
    opt = d[d["phase"] == Phase.OPTIMIZER]
    assert sorted(opt["layer"].unique()) == [-1, 0]  # one update for the shared layer
    assert (d["name"] == "shared_layer.grad_sum").sum() == 2  # layers 1 and 2 add in


def test_roberta_has_no_nsp_head() -> None:
    d = ops("roberta-base", batch=1, seq=64).df
    assert not (d["sublayer"] == Sublayer.NSP_HEAD).any()
    assert (d["name"] == "mlm_loss").sum() == 1


def test_masked_lm_only_shrinks_the_decoder() -> None:
    # 15% of 128 = 19.2 -> 20 positions per sequence, 4 sequences -> M = 80
    d = ops("bert-base", batch=4, seq=128, masked_lm_only=True).df
    dec = d[(d["name"] == "mlm_decoder") & (d["phase"] == Phase.FORWARD)].iloc[0]
    assert (dec["m"], dec["n"], dec["k"]) == (80, 30522, 768)


def test_optimizer_rows_by_hand() -> None:
    m = PRESETS["bert-tiny"]
    n = parameter_count(m)
    d = ops(m, batch=1, seq=8, optimizer=Optimizer.ADAM).df
    opt = d[d["phase"] == Phase.OPTIMIZER]
    # fp32 Adam reads w, m, v, g (16 B) and writes w, m, v (12 B) per parameter
    assert opt["bytes_read"].sum() == 16 * n
    assert opt["bytes_written"].sum() == 12 * n
    mixed = ops(m, batch=1, seq=8, precision=Precision.BF16).df
    mo = mixed[mixed["phase"] == Phase.OPTIMIZER]
    # bf16 under autocast: the parameters and their gradients stay fp32, so the step is
    # fp32's (16 B read, 12 B written); the 16-bit weights are casts in each forward
    assert mo["bytes_read"].sum() == 16 * n
    assert mo["bytes_written"].sum() == 12 * n
    fp8 = build(m, RunConfig(batch=1, seq=8, precision=Precision.FP8)).df
    fo = fp8[fp8["phase"] == Phase.OPTIMIZER]
    # fp8 (Transformer Engine): reads fp32 w, m, v + bf16 g (14 B), then the fp32 -> bf16
    # copy reads w (4 B); writes w, m, v (12 B) + the bf16 copy (2 B)
    assert fo["bytes_read"].sum() == 18 * n
    assert fo["bytes_written"].sum() == 14 * n


def test_summaries_add_up_to_totals() -> None:
    t = ops("bert-base", batch=2, seq=128, optimizer="lamb")
    tot = t.totals()
    for s in (t.by_category(), t.by_sublayer(), t.by_phase(), t.summary("group")):
        assert s["flops"].sum() == pytest.approx(tot["flops"])
        assert s["bytes"].sum() == pytest.approx(tot["bytes_read"] + tot["bytes_written"])
        assert s["flops_share"].sum() == pytest.approx(1.0)
    assert t.top(3)["flops"].is_monotonic_decreasing


# Megatron-LM's split by op name (Shoeybi et al. 2019, section 3), as the distributed model read
# it before the op table carried roles: an oracle for the labels the producer now declares.
_COLUMN_OPS = {"q", "k", "v", "ffn1", "mlm_decoder"}
_ROW_OPS = {"attn_out", "ffn2"}
_SPLIT_OPS = {"score", "score_scale", "score_mask", "softmax", "attn_dropout", "context", "act",
              "mlm_loss", "tied_embedding",
              # the head split/merge copies: each rank copies its own heads
              "context_merge", "q_heads", "k_heads", "v_heads"}


def _expected_roles(op) -> tuple[TensorSplit, PipelineStage]:
    base, _, suffix = op.name.partition(".")
    if suffix in ("input_cast", "input_grad_cast"):
        split = TensorSplit.REPLICATED  # autocast's cast of a column-parallel layer's input
    elif base in _COLUMN_OPS:
        split = TensorSplit.COLUMN  # its bias gradient is divided too
    elif base in _ROW_OPS:  # the bias of a row-parallel layer is whole on every rank
        split = (TensorSplit.REPLICATED if suffix.startswith(("bias_grad", "bias_cast"))
                 else TensorSplit.ROW)
    elif base in _SPLIT_OPS:
        split = TensorSplit.SPLIT
    else:
        split = TensorSplit.REPLICATED
    if op.layer >= 0:
        stage = PipelineStage.STACK
    elif ((op.sublayer is Sublayer.EMBEDDING and base != "tied_embedding")
          or base == "shared_layer"):  # ALBERT's shared weights, cast before the layers
        stage = PipelineStage.FIRST
    else:
        stage = PipelineStage.LAST
    return split, stage


@pytest.mark.parametrize("family", MODELLED, ids=lambda f: f.value)
@pytest.mark.parametrize(("dropout", "checkpoint", "micro_batches", "masked_lm_only"), [
    (True, "none", 1, False), (False, "full", 3, False), (True, "full", 2, True),
    (False, "none", 1, True), (True, "selective", 1, False)])
def test_every_row_carries_its_megatron_roles(family, dropout, checkpoint, micro_batches,
                                              masked_lm_only) -> None:
    m = tiny(family)
    run = RunConfig(batch=2, seq=16, precision="fp16", dropout=dropout,
                    checkpoint=checkpoint, micro_batches=micro_batches,
                    masked_lm_only=masked_lm_only)
    rows = encoder_ops(m, run)
    checked = 0
    for op in rows:
        if op.phase is Phase.OPTIMIZER or op.name.endswith(".grad_accumulate"):
            continue  # per parameter group; see the next test
        assert (op.tp_split, op.pp_stage) == _expected_roles(op), op.name
        checked += 1
    assert checked > 50
    # every role occurs, recompute rows keep their forward's
    assert {op.tp_split for op in rows} == set(TensorSplit)
    assert {op.pp_stage for op in rows} == set(PipelineStage)
    if checkpoint != "none":
        recompute = {(op.name, op.layer): op.tp_split for op in rows
                     if op.phase is Phase.RECOMPUTE}
        forward = {(op.name, op.layer): op.tp_split for op in rows if op.phase is Phase.FORWARD}
        assert recompute and all(forward[key] == split for key, split in recompute.items())


def test_optimizer_and_accumulation_rows_sit_on_their_groups_stage() -> None:
    m = tiny(Family.BERT)
    rows = encoder_ops(m, RunConfig(batch=2, seq=16, precision="fp16", micro_batches=2))
    groups = [op for op in rows if op.phase is Phase.OPTIMIZER
              or op.name.endswith(".grad_accumulate")]
    assert groups
    for op in groups:
        group = op.name.partition(".")[0]
        expected = (PipelineStage.STACK if op.layer >= 0 else PipelineStage.FIRST
                    if group == "embedding" else PipelineStage.LAST)
        assert op.pp_stage is expected, op.name
        assert op.tp_split is TensorSplit.REPLICATED, op.name
