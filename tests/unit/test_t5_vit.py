"""The T5 and ViT producers: shapes, layer numbering and memory worked out by hand."""

from __future__ import annotations

import pytest

from bertscope.analytic import build, parameter_count
from bertscope.config import Family, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit
from tests.conftest import tiny

# tiny T5: 2 encoder + 3 decoder layers, h 64, 4 heads of d_kv 8 (i = 32), f 256, V 500
T5_RUN = RunConfig(batch=2, seq=16, decoder_seq=8)


def _rows(df, name: str):
    return df[df["name"] == name]


def test_t5_decoder_layers_follow_the_encoders() -> None:
    d = build(tiny(Family.T5), T5_RUN).df
    assert sorted(set(d.loc[d["layer"] >= 0, "layer"])) == [0, 1, 2, 3, 4]
    # self-attention Q in all 5 layers, cross-attention Q in the 3 decoder layers only
    assert sorted(_rows(d, "q")["layer"]) == [0, 1, 2, 3, 4]
    assert sorted(_rows(d, "cross_q")["layer"]) == [2, 3, 4]


def test_t5_gemm_shapes() -> None:
    d = build(tiny(Family.T5), T5_RUN).df
    fwd = d[d["phase"] == Phase.FORWARD]
    enc_q = fwd[(fwd["name"] == "q") & (fwd["layer"] == 0)].iloc[0]
    dec_q = fwd[(fwd["name"] == "q") & (fwd["layer"] == 2)].iloc[0]
    assert (enc_q.m, enc_q.n, enc_q.k) == (32, 32, 64)  # b s = 2 x 16 tokens, h 64 -> i 32
    assert (dec_q.m, dec_q.n, dec_q.k) == (16, 32, 64)  # b s_t = 2 x 8 targets
    kv = fwd[fwd["name"] == "cross_k"].iloc[0]
    assert (kv.m, kv.n, kv.k) == (32, 32, 64)  # over the encoder's 32 tokens
    score = fwd[(fwd["sublayer"] == Sublayer.CROSS_CORE)
                & (fwd["category"] == Category.BATCHED_GEMM)].iloc[0]
    assert (score.batch, score.m, score.n, score.k) == (8, 8, 16, 8)  # b a; s_t x s; d_kv
    head = fwd[fwd["name"] == "lm_head"].iloc[0]
    assert (head.m, head.n, head.k, head.tp_split) == (16, 500, 64, TensorSplit.COLUMN)
    # no biases anywhere
    assert not d["name"].str.endswith(".bias_grad").any()


def test_t5_forward_gemm_flops_by_hand() -> None:
    d = build(tiny(Family.T5), T5_RUN).df
    gemm = d[(d["phase"] == Phase.FORWARD) & d["category"].isin(["gemm", "batched_gemm"])]
    # encoder layer: Q K V O 4 x 2 x 32 x 64 x 32 = 524,288; scores + context
    # 2 x 2 x 8 x 16 x 16 x 8 = 65,536; FFN 2 x 2 x 32 x 64 x 256 = 2,097,152 -> 2,686,976
    enc = 2_686_976
    # decoder layer: self Q K V O 4 x 2 x 16 x 64 x 32 = 262,144, core 4 x 8 x 8 x 8 x 8 =
    # 16,384; cross Q O 131,072, K V over 32 tokens 262,144, core 4 x 8 x 8 x 16 x 8 = 32,768;
    # FFN 2 x 2 x 16 x 64 x 256 = 1,048,576 -> 1,753,088
    dec = 1_753_088
    head = 2 * 16 * 64 * 500  # 1,024,000
    assert gemm["flops"].sum() == 2 * enc + 3 * dec + head


def test_t5_position_bias_once_per_stack_added_in_every_layer() -> None:
    m = tiny(Family.T5)
    d = build(m, T5_RUN).df
    lookups = _rows(d, "relative_attention_bias")
    assert sorted(lookups["layer"]) == [0, 2]  # each stack's first layer
    assert list(lookups["elements"]) == [16 * 16 * 4, 8 * 8 * 4]  # s^2 heads, s_t^2 heads
    assert set(lookups["tp_split"]) == {TensorSplit.SPLIT}
    adds = _rows(d, "position_bias")
    assert len(adds) == 5
    assert list(adds["elements"]) == [2 * 4 * 16 * 16] * 2 + [2 * 4 * 8 * 8] * 3
    # T5 does not scale its scores
    assert _rows(d, "score_scale").empty


def test_t5_encoder_output_gradient_sums_once_per_consumer() -> None:
    d = build(tiny(Family.T5), T5_RUN).df
    # K and V of each of 3 decoder layers read the encoder output: 6 - 1 = 5 gradient adds
    sums = _rows(d, "encoder_output.grad_sum")
    assert len(sums) == 5
    assert set(sums["elements"]) == {32 * 64}


def test_t5_v1_1_gates_and_unties() -> None:
    m = tiny(Family.T5, gated_ffn=True, tie_word_embeddings=False, activation="gelu_new")
    d = build(m, T5_RUN).df
    assert len(_rows(d, "ffn_gate")) == 5 and len(_rows(d, "gate_mul")) == 5
    assert _rows(d, "lm_head_scale").empty and _rows(d, "tied_embedding.grad_sum").empty
    # v1.0's tied head scales its input by h^-0.5 and sums its gradient into the table
    d0 = build(tiny(Family.T5), T5_RUN).df
    assert len(_rows(d0, "lm_head_scale")) == 1
    assert len(_rows(d0, "tied_embedding.grad_sum")) == 1
    # the untied head adds V h = 32,000 parameters
    assert parameter_count(m) - parameter_count(tiny(Family.T5, gated_ffn=True,
                                                     activation="gelu_new")) == 500 * 64


def test_t5_checkpointing_keeps_both_stacks_inputs() -> None:
    m = tiny(Family.T5)
    plain_run = RunConfig(batch=2, seq=16, decoder_seq=8, dropout=False)
    plain = build(m, plain_run)
    ckpt = build(m, RunConfig(batch=2, seq=16, decoder_seq=8, dropout=False,
                              checkpoint="full")).export_meta()["memory"]
    d = plain.df
    # what the layers keep without checkpointing (each stack's bias lookup, run once, keeps
    # only its int64 buckets and is counted apart)
    layers = d[(d["phase"] == Phase.FORWARD) & (d["layer"] >= 0)
               & (d["name"] != "relative_attention_bias")]["saved_bytes"].sum()
    # full checkpointing keeps each layer's input, fp32: 2 encoder layers x 2 x 16 x 64 x 4
    # = 16,384 and 3 decoder layers x 2 x 8 x 64 x 4 = 12,288; and one layer's activations
    # are live again while it is recomputed
    inputs = 16_384 + 12_288
    per_layer = plain.export_meta()["memory"]["activations_per_layer"]
    assert ckpt["activations"] - plain.export_meta()["memory"]["activations"] == \
        inputs + per_layer - layers
    # the largest layer of either stack: here an encoder layer (16 tokens against 8 targets)
    saved = d[(d["phase"] == Phase.FORWARD)].groupby("layer")["saved_bytes"].sum()
    assert saved[1] > saved[3]
    assert per_layer == saved[1]


def test_t5_roles_and_stages() -> None:
    d = build(tiny(Family.T5), T5_RUN).df
    fwd = d[d["phase"] == Phase.FORWARD]
    split = dict(zip(fwd["name"], fwd["tp_split"], strict=False))
    assert split["cross_k"] == split["ffn1"] == TensorSplit.COLUMN
    assert split["cross_out"] == split["ffn2"] == split["attn_out"] == TensorSplit.ROW
    assert split["attn_norm"] == TensorSplit.REPLICATED
    stage = dict(zip(fwd["name"], fwd["pp_stage"], strict=False))
    assert stage["decoder.embed_tokens"] == PipelineStage.FIRST
    assert stage["lm_loss"] == PipelineStage.LAST
    assert stage["cross_q"] == PipelineStage.STACK


# tiny ViT: 32px images, 8px patches (16 + the class token = 17), c 3, h 64, 10 classes
VIT_RUN = RunConfig(batch=2, seq=17)


def test_vit_patch_embedding_is_a_gemm_without_data_gradient() -> None:
    d = build(tiny(Family.VIT), VIT_RUN).df
    patch = d[d["sublayer"] == Sublayer.PATCH_EMBED]
    fwd = patch[patch["phase"] == Phase.FORWARD]
    gemm = fwd[fwd["category"] == Category.GEMM].iloc[0]
    # M = b n = 2 x 16, K = c p^2 = 3 x 64 = 192, N = h = 64: 2 x 32 x 192 x 64 = 786,432
    assert (gemm.m, gemm.k, gemm.n, gemm.flops) == (32, 192, 64, 786_432)
    grads = patch[patch["phase"].isin([Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT])
                  & (patch["category"] == Category.GEMM)]
    assert list(grads["phase"]) == [Phase.BACKWARD_WEIGHT]  # the pixels need no gradient


def test_vit_classifier_on_the_class_token() -> None:
    d = build(tiny(Family.VIT), VIT_RUN).df
    cls = _rows(d, "classifier").iloc[0]
    assert (cls.m, cls.k, cls.n) == (2, 64, 10)  # one row per image
    assert _rows(d, "cls_loss").iloc[0]["elements"] == 2 * 10
    # the final layernorm runs on all 17 tokens; no attention mask anywhere
    assert _rows(d, "final_norm").iloc[0]["elements"] == 2 * 17 * 64
    assert _rows(d, "score_mask").empty
    assert len(_rows(d, "score_scale")) == 2


def test_vit_parameter_count_by_hand() -> None:
    # class token 64 + positions 17 x 64 + patch conv 192 x 64 + 64 = 13,504; a layer
    # 4 (64 x 64 + 64) + (64 x 256 + 256) + (256 x 64 + 64) + 4 x 64 = 49,984; final norm 128;
    # classifier 64 x 10 + 10 = 650
    assert parameter_count(tiny(Family.VIT)) == 13_504 + 2 * 49_984 + 128 + 650


def test_vit_sequence_must_be_patches_plus_one() -> None:
    with pytest.raises(BertscopeError, match="use --seq 17"):
        build(tiny(Family.VIT), RunConfig(batch=2, seq=16))


def test_vit_mixed_precision_halves_activation_bytes() -> None:
    m = tiny(Family.VIT)
    fp32 = build(m, RunConfig(batch=2, seq=17, dropout=False)).export_meta()["memory"]
    bf16 = build(m, RunConfig(batch=2, seq=17, dropout=False,
                              precision=Precision.BF16)).export_meta()["memory"]
    # no dropout masks or fp32 statistics among the saved tensors: every byte halves
    assert bf16["activations_per_layer"] * 2 == fp32["activations_per_layer"]


# -- config.json readers: the published files' architecture keys (google-t5/t5-small,
# google/t5-v1_1-small, google/vit-base-patch16-224 on the Hugging Face Hub)
T5_SMALL = {"architectures": ["T5ForConditionalGeneration"], "d_ff": 2048, "d_kv": 64,
            "d_model": 512, "decoder_start_token_id": 0, "dropout_rate": 0.1,
            "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "model_type": "t5",
            "n_positions": 512, "num_heads": 8, "num_layers": 6, "pad_token_id": 0,
            "relative_attention_num_buckets": 32, "vocab_size": 32128}
T5_V1_1_SMALL = {"architectures": ["T5ForConditionalGeneration"], "d_ff": 1024, "d_kv": 64,
                 "d_model": 512, "feed_forward_proj": "gated-gelu", "is_encoder_decoder": True,
                 "model_type": "t5", "num_decoder_layers": 8, "num_heads": 6, "num_layers": 8,
                 "relative_attention_num_buckets": 32, "tie_word_embeddings": False,
                 "vocab_size": 32128}
VIT_BASE = {"architectures": ["ViTForImageClassification"], "hidden_act": "gelu",
            "hidden_size": 768, "id2label": {str(i): f"class{i}" for i in range(1000)},
            "image_size": 224, "intermediate_size": 3072, "model_type": "vit",
            "num_attention_heads": 12, "num_channels": 3, "num_hidden_layers": 12,
            "patch_size": 16, "qkv_bias": True, "encoder_stride": 16}


def _load(tmp_path, doc: dict):
    import json

    from bertscope.presets import get_model

    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc))
    return get_model(p)


@pytest.mark.parametrize(("doc", "preset"), [(T5_SMALL, "t5-small"),
                                             (T5_V1_1_SMALL, "t5-v1_1-small"),
                                             (VIT_BASE, "vit-base")])
def test_published_config_json_reads_as_the_preset(tmp_path, doc, preset) -> None:
    from dataclasses import replace

    from bertscope.presets import PRESETS

    loaded = _load(tmp_path, doc)
    assert replace(loaded, name=preset) == PRESETS[preset]


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"is_encoder_decoder": False}, "is_encoder_decoder = False is not modelled"),
        ({"feed_forward_proj": "gated-mish"}, "feed_forward_proj"),
        ({"feed_forward_proj": "dense-relu"}, "'ACT' or 'gated-ACT'"),
        ({"d_model": None}, "d_model"),
    ],
)
def test_t5_config_json_refusals(tmp_path, changes, needle) -> None:
    with pytest.raises(BertscopeError, match=needle):
        _load(tmp_path, {**T5_SMALL, **changes})


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"qkv_bias": False}, "qkv_bias = False is not modelled"),
        ({"problem_type": "multi_label_classification"}, "problem_type"),
        ({"image_size": 225}, "not a multiple of patch_size 16"),
    ],
)
def test_vit_config_json_refusals(tmp_path, changes, needle) -> None:
    with pytest.raises(BertscopeError, match=needle):
        _load(tmp_path, {**VIT_BASE, **changes})


def test_t5_config_json_sizes_honoured(tmp_path) -> None:
    m = _load(tmp_path, {**T5_SMALL, "num_decoder_layers": 2, "d_kv": 32,
                         "feed_forward_proj": "gated-silu"})
    assert (m.num_layers, m.decoder_layer_count, m.head_dim) == (6, 2, 32)
    assert m.gated_ffn and m.activation == "silu" and m.tie_word_embeddings
    vit = _load(tmp_path, {k: v for k, v in VIT_BASE.items() if k != "id2label"})
    assert vit.vocab_size == 2  # Hugging Face's default labels without id2label


# -- the distributed model on both families
def _one_device(m, run):
    from bertscope.parallel import Cluster, Layout, Workload, evaluate
    from bertscope.perf import load_profile, predict

    w = Workload(model=m, run=RunConfig(batch=1, seq=run.seq, decoder_seq=run.decoder_seq,
                                        precision="bf16"), global_batch=run.batch)
    r = evaluate(w.job(Layout()), Cluster.build("a100", 1))
    table = build(m, run)
    return r, table, predict(table, load_profile("a100")).export_meta()["prediction"]["time_s"]


def test_vit_one_device_matches_the_performance_and_memory_models() -> None:
    r, table, predicted = _one_device(tiny(Family.VIT), RunConfig(batch=4, seq=17,
                                                                  precision="bf16"))
    assert r.iteration_s == pytest.approx(predicted, rel=1e-9)
    assert r.memory_bytes == pytest.approx(table.export_meta()["memory"]["peak"], rel=1e-12)


def test_t5_one_device_time_matches_the_performance_model() -> None:
    # per-layer figures are the mean of one encoder and one decoder layer weighted 2 : 3, so
    # 5 layers give both stacks; only the 3 - 1 extra gradient sums of the encoder output
    # (rows of decoder layers after the first) are not in the mean: within 1%
    r, _, predicted = _one_device(tiny(Family.T5), RunConfig(batch=4, seq=16, decoder_seq=8,
                                                             precision="bf16"))
    assert r.iteration_s == pytest.approx(predicted, rel=0.01)
    assert r.iteration_s <= predicted


def test_t5_pipeline_stages_divide_both_stacks() -> None:
    from bertscope.parallel import Cluster, Layout, Workload, check_layout

    w = Workload(model=tiny(Family.T5), run=RunConfig(batch=1, seq=16, decoder_seq=8),
                 global_batch=8)
    check_layout(w.job(Layout(pp=5)), Cluster.build("a100", 5))  # 2 + 3 layers, one a stage
    with pytest.raises(BertscopeError, match="5 layers do not split"):
        w.job(Layout(pp=2))  # the job checks itself against the model


def test_t5_timeline_labels_each_stage_with_its_layers_of_both_stacks() -> None:
    from bertscope.parallel import Cluster, Layout, Workload
    from bertscope.parallel.schedule_trace import layout_timeline

    # 2 encoder + 3 decoder layers over pp = 5 stages: one layer each, stage s holds layer s
    w = Workload(model=tiny(Family.T5), run=RunConfig(batch=1, seq=16, decoder_seq=8),
                 global_batch=8)
    doc = layout_timeline(w.job(Layout(pp=5), 4), Cluster.build("a100", 5))
    layers = {(e["pid"], e["args"]["layers"]) for e in doc["traceEvents"]
              if e["ph"] == "X" and e["cat"] == "cpu_op" and "args" in e}
    assert layers == {(s + 1, f"{s}-{s}") for s in range(5)}
