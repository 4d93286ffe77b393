"""Traces of workloads beyond bertscope's reference model: kinds from the launching op,
phases from autograd links, module-level attribution of Hugging Face models, Inductor
kernels by what they fuse.

Fixtures: tests/data/traces/wild/ (synthetic CUDA steps with real kernel names, written by
make_wild.py) and tests/data/traces/hf/ (CPU training steps of HF BERT, GPT-2, T5 and ViT
recorded by torch.profiler with modules, record_hf.py). Expected kernel times below are sums
of the durations make_wild.py writes, done by hand.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bertscope.taxonomy import Category, Phase, Sublayer, fused_ops
from bertscope.trace import analyze_trace
from tests.data.traces import make_wild as w

C, P, S = Category, Phase, Sublayer
TRACES = Path(__file__).parents[1] / "data" / "traces"
WILD = TRACES / "wild"
HF = TRACES / "hf"
EVERY = [*sorted(WILD.glob("*.json.gz")), *sorted(HF.glob("*.json.gz")),
         *sorted(TRACES.glob("*.json.gz")), TRACES / "multirank"]


def _time(d: object, **where: object) -> float:
    sel = d
    for col, value in where.items():
        sel = sel[sel[col] == value]  # type: ignore[index]
    return float(sel["time_s"].sum())  # type: ignore[index]


@pytest.mark.parametrize("path", EVERY, ids=lambda p: p.name)
def test_unknown_time_is_under_one_percent_on_every_fixture(path: Path) -> None:
    r = analyze_trace(path)
    assert r.table.export_meta()["trace"]["unknown_share"] < 0.01, r.unknown().head()


def test_cnn_kinds_come_from_the_launching_op() -> None:
    d = analyze_trace(WILD / "cnn_train.json.gz").table.df
    # a cuDNN kernel with "relu" in its name, launched by a convolution, is convolution work
    for name in (w.CONV_RELU, w.CONV_WINOGRAD_RELU, w.CUDNN_NCHW):
        assert set(d[d["name"] == name]["category"]) == {C.CONVOLUTION}, name
    # convolution: forward 2 + 40 + 30 + 25 + 15 + 10 = 122 us; backward
    # 20 + 22 + 1 (CUTLASS) + 35 + 5 + 38 + 6 + 4 (cuDNN) = 131 us
    assert _time(d, category=C.CONVOLUTION) == pytest.approx(253e-6)
    # batch norm: forward 12 + 4 + 3, backward 4 + 4 + 14 = 41 us; none of it layernorm
    assert _time(d, category=C.BATCHNORM) == pytest.approx(41e-6)
    assert _time(d, category=C.LAYERNORM) == 0
    # ReLU forward (clamp_min 5) and backward (threshold_backward 5); max pool 6 + 6
    assert _time(d, category=C.ACTIVATION) == pytest.approx(10e-6)
    assert _time(d, category=C.REDUCTION) == pytest.approx(12e-6)


def test_cnn_phases_from_autograd_links_and_kernel_names() -> None:
    d = analyze_trace(WILD / "cnn_train.json.gz").table.df
    # weight gradients: CUTLASS wgrad 22, cuDNN wgrad 38 + 6 + winograd wgrad 4 = 70 us
    assert _time(d, phase=P.BACKWARD_WEIGHT) == pytest.approx(70e-6)
    # data gradients: dgrad 20 + 35 + 5, FC dX 8, max pool 6, ReLU 5 = 79 us
    assert _time(d, phase=P.BACKWARD_DATA) == pytest.approx(79e-6)
    # one kernel computes both (batch norm backward 4 + 4 + 14, cuDNN's scaling 1)
    assert _time(d, phase=P.BACKWARD) == pytest.approx(23e-6)
    assert set(d[d["name"] == w.CONV_WGRAD]["phase"]) == {P.BACKWARD_WEIGHT}
    assert set(d[d["name"] == w.CUTLASS_DGRAD]["phase"]) == {P.BACKWARD_DATA}


def test_fwdbwd_flows_link_backward_to_forward_without_sequence_numbers(
        tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress((HF / "bert_cpu_train.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"].pop("Sequence number", None)
    bare = tmp_path / "bert_no_seq.json"
    bare.write_text(json.dumps(doc))
    full = analyze_trace(HF / "bert_cpu_train.json.gz").table.df
    linked = analyze_trace(bare).table.df
    for d in (full, linked):  # backward rows find the layer of their forward op
        bwd = d[d["phase"].isin([P.BACKWARD_DATA, P.BACKWARD_WEIGHT])]
        assert _time(bwd, layer=0) > 0 and _time(bwd, layer=1) > 0
    for col in ("layer", "sublayer"):
        a = full.groupby(col, observed=True)["time_s"].sum()
        b = linked.groupby(col, observed=True)["time_s"].sum()
        assert a.to_dict() == pytest.approx(b.to_dict())


def test_dlrm_fbgemm_and_cublaslt() -> None:
    d = analyze_trace(WILD / "dlrm_train.json.gz").table.df
    # embedding: bounds check 2 + forward 30 + permute 3 + 3, backward linearize 2, sort 3,
    # 20 + 25 = 88 us (FBGEMM); embedding_bag 5 forward, 2 + 4 + 1 backward = 12 us; the
    # radix sorts inside both backwards are embedding work
    assert _time(d, category=C.EMBEDDING) == pytest.approx(100e-6)
    assert set(d[d["name"] == w.RADIX_SORT]["category"]) == {C.EMBEDDING}
    # the bag's backward is the table's gradient: grad 4 + scatter 1 = 5 us
    bag_bwd = d[d["name"].isin([w.BAG_GRAD, w.BAG_SCATTER])]
    assert set(bag_bwd["phase"]) == {P.BACKWARD_WEIGHT}
    assert _time(bag_bwd) == pytest.approx(5e-6)
    # the TBE backward computes the tables' gradient (and applies it): weight gradient
    assert set(d[d["name"] == w.TBE_BWD_WARP]["phase"]) == {P.BACKWARD_WEIGHT}
    # cuBLASLt epilogues and split-K reductions are GEMM work under their addmm
    assert set(d[d["name"] == w.LT_EPILOGUE]["category"]) == {C.GEMM}
    assert set(d[d["name"] == w.LT_SPLITK]["category"]) == {C.GEMM}
    # bmm's kernels (the interaction): 4 + 1 forward, 4 backward = 9 us batched GEMM
    assert _time(d, category=C.BATCHED_GEMM) == pytest.approx(9e-6)


def test_magma_kernels_are_known() -> None:
    r = analyze_trace(WILD / "magma_solve.json.gz")
    d = r.table.df
    assert r.unknown().empty
    # MAGMA GEMMs 5 + 7 = 12 us; factorizations and solves 12 + 2 + 6 + 9 = 29 us
    assert _time(d, category=C.GEMM) == pytest.approx(12e-6)
    assert _time(d, category=C.OTHER) == pytest.approx(29e-6)


def test_inductor_kernels_list_what_they_fuse() -> None:
    assert fused_ops("triton_per_fused_add_native_layer_norm_native_layer_norm_backward_6") == (
        "add", "native_layer_norm", "native_layer_norm_backward")
    assert fused_ops("triton_red_fused__log_softmax_nll_loss_forward_8") == (
        "_log_softmax", "nll_loss_forward")
    assert fused_ops("triton_poi_fused__to_copy_add_embedding_native_dropout_3") == (
        "_to_copy", "add", "embedding", "native_dropout")
    assert fused_ops("ampere_sgemm_128x64_tn") == ()
    r = analyze_trace(TRACES / "triton_compiled.json.gz")
    f = r.fused().set_index("name")
    assert f.loc["triton_tem_fused_addmm_gelu_14", "fuses"] == "addmm, gelu"
    assert f.loc["triton_tem_fused_addmm_gelu_14", "category"] == C.GEMM  # a GEMM template
    assert f.loc["triton_per_fused_add_native_layer_norm_5", "category"] == C.LAYERNORM
    assert r.table.export_meta()["trace"]["fused"]


# --- module-level attribution of Hugging Face models (CPU traces recorded with modules) ---

STACKS = {  # model -> (module path of the layer stack, its layer class, layers)
    "bert": ("BertForMaskedLM_0/BertModel_0/BertEncoder_0", "BertLayer", 2),
    "gpt2": ("GPT2LMHeadModel_0/GPT2Model_0", "GPT2Block", 2),
    "llama": ("LlamaForCausalLM_0/LlamaModel_0", "LlamaDecoderLayer", 2),
    "vit": ("ViTForImageClassification_0/ViTModel_0", "ViTLayer", 2),
    "t5": ("T5ForConditionalGeneration_0/T5Stack_0", "T5Block", 2),
    "xlnet": ("XLNetLMHeadModel_0/XLNetModel_0", "XLNetLayer", 2),
}


@pytest.mark.parametrize("model", sorted(STACKS))
def test_per_layer_times_sum_to_the_stack(model: str) -> None:
    stack, layer_class, layers = STACKS[model]
    r = analyze_trace(HF / f"{model}_cpu_train.json.gz")
    d = r.table.df
    tree = r.modules().set_index("module")
    in_layers = d[d["module"].str.startswith(f"{stack}/{layer_class}_")]
    # every op inside a layer module has that layer's index, forward and backward
    assert sorted(set(in_layers["layer"])) == list(range(layers))
    per_layer = [_time(in_layers, layer=i) for i in range(layers)]
    # the tree's layer entries are the same sums, and together all of the stack's layers
    layer_rows = tree[tree.index.str.startswith(f"{stack}/{layer_class}_")
                      & (tree["depth"] == stack.count("/") + 1)]
    assert sorted(layer_rows["time_s"]) == pytest.approx(sorted(per_layer))
    assert sum(per_layer) == pytest.approx(
        float(layer_rows["time_s"].sum()))
    if model in ("bert", "t5"):  # the stack holds only its layers (and T5's final norm)
        own = _time(d[d["module"] == stack])
        rest = float(tree.loc[stack, "time_s"]) - sum(per_layer) - own
        assert rest >= -1e-12
    assert all(t > 0 for t in per_layer)


@pytest.mark.parametrize(("model", "expected"), [
    ("bert", {S.EMBEDDING, S.QKV, S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT, S.ATTN_OUTPUT,
              S.ATTN_ADD_NORM, S.FFN1, S.FFN_ACT, S.FFN2, S.FFN_ADD_NORM, S.MLM_HEAD, S.LOSS,
              S.OPTIMIZER}),
    ("gpt2", {S.EMBEDDING, S.QKV, S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT, S.ATTN_OUTPUT,
              S.ATTN_ADD_NORM, S.FFN1, S.FFN_ACT, S.FFN2, S.FFN_ADD_NORM, S.FINAL_NORM,
              S.LM_HEAD, S.LOSS, S.OPTIMIZER}),
    ("llama", {S.EMBEDDING, S.ROTARY, S.QKV, S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT,
               S.ATTN_OUTPUT, S.ATTN_ADD_NORM, S.FFN_GATE, S.FFN1, S.FFN_ACT, S.FFN2,
               S.FFN_ADD_NORM, S.FINAL_NORM, S.LM_HEAD, S.LOSS, S.OPTIMIZER}),
    ("t5", {S.EMBEDDING, S.QKV, S.REL_POS_BIAS, S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT,
            S.ATTN_OUTPUT, S.ATTN_ADD_NORM, S.CROSS_QKV, S.CROSS_CORE, S.CROSS_OUTPUT,
            S.CROSS_ADD_NORM, S.FFN1, S.FFN_ACT, S.FFN2, S.FFN_ADD_NORM, S.FINAL_NORM,
            S.LM_HEAD, S.LOSS, S.OPTIMIZER}),
    # XLNet's projections are einsums inside XLNetRelativeAttention: attention-core scope
    ("xlnet", {S.EMBEDDING, S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT, S.ATTN_ADD_NORM,
               S.FFN1, S.FFN_ACT, S.FFN2, S.FFN_ADD_NORM, S.LM_HEAD, S.LOSS, S.OPTIMIZER}),
    ("vit", {S.PATCH_EMBED, S.EMBEDDING, S.QKV, S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT,
             S.ATTN_OUTPUT, S.ATTN_ADD_NORM, S.FFN1, S.FFN_ACT, S.FFN2, S.FFN_ADD_NORM,
             S.FINAL_NORM, S.CLS_HEAD, S.LOSS, S.OPTIMIZER}),
])
def test_sublayers_are_mapped_from_module_names(model: str, expected: set[Sublayer]) -> None:
    d = analyze_trace(HF / f"{model}_cpu_train.json.gz").table.df
    subs = set(d.loc[d["time_s"] > 0, "sublayer"])
    assert expected <= subs, expected - subs
    # what has no sublayer is a sliver (mask building, ones_like of the loss gradient)
    assert _time(d, sublayer=S.OTHER) < 0.01 * float(d["time_s"].sum())


def test_module_rows_keep_the_gemm_kinds() -> None:
    d = analyze_trace(HF / "bert_cpu_train.json.gz").table.df
    qkv = d[(d["sublayer"] == S.QKV) & (d["phase"] == P.FORWARD)]
    # 3 projections x 2 layers, each an aten::linear in its own Linear module
    assert set(qkv["category"]) == {C.GEMM}
    assert len(qkv[qkv["name"] == "aten::linear"]) == 6
    assert all("/BertSelfAttention_" in m and "/Linear_" in m for m in qkv["module"])
    # the score GEMMs are batched (heads), in the attention module itself
    score = d[(d["sublayer"] == S.ATTN_SCORE) & d["category"].isin([C.BATCHED_GEMM])]
    assert len(score) and all(m.endswith(("BertSelfAttention_0", "BertSelfAttention_1"))
                              for m in score["module"])


def test_llama_mlp_projections_by_call_order() -> None:
    # LlamaMLP.forward is down_proj(act_fn(gate_proj(x)) * up_proj(x)): its Linears run as
    # gate (Linear_4 in layer 0), up (Linear_5), down (Linear_6)
    d = analyze_trace(HF / "llama_cpu_train.json.gz").table.df
    mlp = "LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaMLP_0/"
    for linear, sub in (("Linear_4", S.FFN_GATE), ("Linear_5", S.FFN1), ("Linear_6", S.FFN2)):
        rows = d[d["module"] == mlp + linear]
        assert set(rows["sublayer"]) == {sub}, linear
        assert P.BACKWARD_WEIGHT in set(rows["phase"])  # backward found its module too


def test_every_module_row_decides_a_real_place(monkeypatch: pytest.MonkeyPatch) -> None:
    # the module table's rows are data about real module names: each must decide a place in
    # the recorded HF traces, except the NSP head's (no model recorded here has a pooler)
    from bertscope.trace import modules

    seen: set[str] = set()
    place = modules.ModuleMap.place

    def spy(self: modules.ModuleMap, where: str) -> modules.ModulePlace | None:
        seen.add(where)
        return place(self, where)

    monkeypatch.setattr(modules.ModuleMap, "place", spy)
    for path in sorted(HF.glob("*.json.gz")):
        analyze_trace(path)
    table = modules.builtin_modules()
    decided = {next(i for i, r in enumerate(table.rows) if r.regex.search(p))
               for p in seen if any(r.regex.search(p) for r in table.rows)}
    unused = {table.rows[i].sublayer for i in range(len(table.rows)) if i not in decided}
    assert unused == {S.NSP_HEAD}


def test_pattern_rows_phase_must_be_a_backward_phase(tmp_path: Path) -> None:
    from bertscope.errors import BertscopeError
    from bertscope.taxonomy import load_patterns

    f = tmp_path / "p.toml"
    f.write_text("[[pattern]]\nregex = 'my_wgrad'\ncategory = 'convolution'\n"
                 "phase = 'backward_weight'\n")
    assert load_patterns(f)[0].phase is P.BACKWARD_WEIGHT
    for bad in ("forward", "sideways"):
        f.write_text(f"[[pattern]]\nregex = 'x'\ncategory = 'gemm'\nphase = '{bad}'\n")
        with pytest.raises(BertscopeError, match="phase"):
            load_patterns(f)


def test_record_function_scopes_give_module_path_and_layer(tmp_path: Path) -> None:
    from tests.data.traces.make_traces import SGEMM, Trace

    tr = Trace()
    with tr.ann("ProfilerStep#1"), tr.ann("bert.encoder.layer.3.attention"), \
            tr.ann("scores"), tr.op("aten::mm", dims=[[8, 16], [16, 8]]):
        tr.kernel(SGEMM, 7.0)
    with tr.ann("ProfilerStep#2"), tr.ann("head"), tr.op("aten::mm", dims=[[8, 16], [16, 8]]):
        tr.kernel(SGEMM, 5.0)
    path = tmp_path / "scoped.json.gz"
    tr.write(path)
    r = analyze_trace(path)
    d = r.table.df
    row = d[d["module"] == "bert.encoder.layer.3.attention/scores"].iloc[0]
    # the layer index from the dotted path; two ProfilerSteps: 7 us / 2 iterations
    assert (row["layer"], row["category"], row["time_s"]) == (3, C.GEMM, pytest.approx(3.5e-6))
    assert d[d["module"] == "head"].iloc[0]["layer"] == -1
    tree = r.modules().set_index("module")["time_s"]
    assert tree["bert.encoder.layer.3.attention"] == pytest.approx(3.5e-6)


@pytest.mark.parametrize(("model", "norm"), [("llama", "LlamaRMSNorm_"), ("t5", "T5LayerNorm_")])
def test_a_norm_written_in_python_is_rmsnorm_work(model: str, norm: str) -> None:
    # LlamaRMSNorm / T5LayerNorm run to, pow, mean, add, rsqrt, mul themselves: the module's
    # [[kind]] row makes them rmsnorm work (no layernorm kernel exists in these models)
    d = analyze_trace(HF / f"{model}_cpu_train.json.gz").table.df
    norm_rows = d[d["category"] == C.RMSNORM]
    assert {"aten::pow", "aten::mean", "aten::rsqrt"} <= set(norm_rows["name"])
    fwd = norm_rows[norm_rows["phase"] == P.FORWARD]
    assert all(norm in m.rpartition("/")[2] for m in fwd["module"])
    inside = d[(d["phase"] == P.FORWARD) & d["module"].str.rpartition("/")[2].str.startswith(
        norm) & d["category"].isin([C.ELEMENTWISE, C.REDUCTION, C.DATA_MOVEMENT])]
    assert inside.empty  # every such op inside the norm became rmsnorm work


def test_t5_decoder_layers_are_numbered_after_the_encoders() -> None:
    # the fixture's T5 has 2 encoder and 2 decoder blocks; the analytic op table numbers the
    # decoder's after the encoder's, and the trace must use the same keys (a join, not a
    # collision of encoder layer 0 with decoder layer 0)
    from bertscope.analytic import build
    from bertscope.config import Family, RunConfig
    from tests.conftest import tiny

    analytic = build(tiny(Family.T5, decoder_layers=2), RunConfig(batch=2, seq=8,
                                                                    decoder_seq=4)).df
    cross = set(analytic.loc[analytic["sublayer"] == S.CROSS_QKV, "layer"])
    enc = set(analytic.loc[analytic["sublayer"] == S.QKV, "layer"]) - cross
    d = analyze_trace(HF / "t5_cpu_train.json.gz").table.df
    in_stack = {i: set(d.loc[d["module"].str.contains(f"/T5Stack_{i}/T5Block_"), "layer"])
                for i in (0, 1)}
    assert in_stack == {0: enc, 1: cross} and enc == {0, 1} and cross == {2, 3}
    assert set(d.loc[d["sublayer"] == S.CROSS_QKV, "layer"]) == cross
    # each stack computes its relative bias in its first layer (the decoder's: layer 2)
    bias = set(d.loc[d["sublayer"] == S.REL_POS_BIAS, "layer"])
    assert bias == {min(enc), min(cross)}
    assert bias <= set(analytic.loc[analytic["sublayer"] == S.REL_POS_BIAS, "layer"])


@pytest.mark.parametrize("gpu", [False, True])
def test_annotations_inside_backward_nodes_are_scopes_not_ops(tmp_path: Path, gpu: bool
                                                              ) -> None:
    # a record_function inside a backward node (a custom Function's backward, a hook) wraps
    # the node's ops: they are the rows (their kernels on a GPU), with the node's place and
    # the gradient phases the node's GEMMs compute; the annotation is not an op
    from tests.data.traces.make_traces import SGEMM, Trace

    tr = Trace()
    with tr.ann("ProfilerStep#1"):
        with tr.op("aten::mm", dims=[[8, 16], [16, 4]], seq=7):
            if gpu:
                tr.kernel(SGEMM, 6.0)
        with tr.op("autograd::engine::evaluate_function: MmBackward0", seq=7, fwd=False), \
                tr.op("MmBackward0"), tr.ann("my_backward_hook"):
            for dims in ([[8, 4], [4, 16]], [[16, 8], [8, 4]]):
                with tr.op("aten::mm", dims=dims):
                    if gpu:
                        tr.kernel(SGEMM, 4.0)
    path = tmp_path / "bwd_annotation.json.gz"
    tr.write(path)
    d = analyze_trace(path).table.df
    assert "my_backward_hook" not in set(d["name"])
    bwd = d[d["phase"] != P.FORWARD]
    assert set(bwd["name"]) == {SGEMM if gpu else "aten::mm"}
    assert set(bwd["category"]) == {C.GEMM}
    assert set(bwd["phase"]) == {P.BACKWARD_DATA, P.BACKWARD_WEIGHT}
    # GPU: two 4 us kernels; CPU: the node's whole 10 us (1 us either side of the node, its
    # op, the annotation, and two 2 us GEMMs), its dispatch gaps given to its largest op
    assert float(bwd["time_s"].sum()) == pytest.approx(8e-6 if gpu else 10e-6)
