"""Memory per device: Korthikanti et al. 2022 Table 2, ZeRO (Rajbhandari et al. 2020), params."""

from __future__ import annotations

import pytest

from bertscope.analytic import build, parameter_count
from bertscope.analytic.params import layer_params
from bertscope.config import Checkpoint, Family, Optimizer, Precision, RunConfig
from bertscope.parallel import layer_activation_bytes, zero_static_bytes
from bertscope.parallel.memory import (
    layer_params_per_device,
    recompute_working_bytes,
    stage_params,
)
from bertscope.presets import PRESETS, with_changes
from tests.conftest import MODELLED, sized, tiny

# Korthikanti et al. 2022, Table 2 assumptions: 16-bit activations, 1-byte dropout masks,
# FFN = 4h, per layer, t-way tensor parallelism. bert-large-like sizes:
S, B, H, A, T = 128, 8, 1024, 16, 4
SBH = S * B * H  # 128 x 8 x 1024 = 1,048,576
# 5as/h = 5 x 16 x 128 / 1024 = 10


def _acts(t: int = T, sp: bool = False, ck: Checkpoint = Checkpoint.NONE) -> float:
    return float(layer_activation_bytes(seq=S, micro_batch=B, hidden=H, heads=A,
                                        intermediate=4 * H, tp=t, sp=sp, checkpoint=ck))


def test_table2_no_parallelism() -> None:
    # sbh (34 + 5as/h) = 1,048,576 x (34 + 10) = 46,137,344
    assert _acts(t=1) == 46_137_344


def test_table2_tensor_parallel() -> None:
    # sbh (10 + 24/t + 5as/(ht)) = 1,048,576 x (10 + 6 + 2.5) = 19,398,656
    assert _acts() == 19_398_656


def test_table2_tensor_and_sequence_parallel() -> None:
    # sbh/t (34 + 5as/h) = 262,144 x 44 = 11,534,336
    assert _acts(sp=True) == 11_534_336


def test_table2_selective_recompute() -> None:
    # tensor parallel + selective: sbh (10 + 24/t) = 1,048,576 x 16 = 16,777,216
    assert _acts(ck=Checkpoint.SELECTIVE) == 16_777_216
    # tensor + sequence parallel + selective: sbh (34/t) = 1,048,576 x 8.5 = 8,912,896
    assert _acts(sp=True, ck=Checkpoint.SELECTIVE) == 8_912_896


def test_table2_full_recompute() -> None:
    # full recomputation keeps the layer input: 2sbh = 2,097,152
    assert _acts(ck=Checkpoint.FULL) == 2_097_152
    # with sequence parallelism that input is sharded: 2sbh/t = 524,288
    assert _acts(sp=True, ck=Checkpoint.FULL) == 524_288


def test_table2_gpt3_sizes() -> None:
    # the paper's GPT-3 setting: s = 2048, b = 1, h = 12288, a = 96, t = 8
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    got = layer_activation_bytes(seq=s, micro_batch=b, hidden=h, heads=a, intermediate=4 * h,
                                 tp=t)
    assert float(got) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    got = layer_activation_bytes(seq=s, micro_batch=b, hidden=h, heads=a, intermediate=4 * h,
                                 tp=t, sp=True, checkpoint=Checkpoint.SELECTIVE)
    assert float(got) == pytest.approx(sbh * 34 / t)


KORTHIKANTI = [f for f in MODELLED if f in (Family.BERT, Family.ROBERTA, Family.ALBERT,
                                             Family.GPT2, Family.VIT)]
"""Families whose layer is the paper's: one head per K/V, a 4h non-gated FFN, learned
positions (Llama's grouped K/V, rotary and SwiGLU keep other tensors; ViT's pre-LN layer keeps
the same four s x b x h inputs as BERT's post-LN one and has no mask; T5's FFN has a dropout
of its own)."""


@pytest.mark.parametrize("family", KORTHIKANTI)
@pytest.mark.parametrize(("precision", "dropout"), [(Precision.BF16, True),
                                                   (Precision.FP32, True),
                                                   (Precision.FP16, False)])
def test_general_form_matches_the_analytic_op_table(family, precision, dropout) -> None:
    # the op table's per-layer saved bytes (t = 1) are the same terms, for any precision
    m, s = sized(tiny(family), 16)
    mem = build(m, RunConfig(batch=3, seq=s, precision=precision, dropout=dropout)).export_meta()[
        "memory"]
    got = layer_activation_bytes(seq=s, micro_batch=3, hidden=m.hidden, heads=m.heads,
                                 intermediate=m.intermediate, act_bytes=precision.act_bytes,
                                 dropout=dropout)
    assert float(got) == mem["activations_per_layer"]


def test_recompute_working_set() -> None:
    kw = dict(seq=S, micro_batch=B, hidden=H, heads=A, intermediate=4 * H, tp=T)
    assert float(recompute_working_bytes(**kw)) == 0.0
    # full: one whole layer is live again; selective: its attention core (5as^2b/t)
    assert float(recompute_working_bytes(**kw, checkpoint=Checkpoint.FULL)) == 19_398_656
    assert float(recompute_working_bytes(**kw, checkpoint=Checkpoint.SELECTIVE)) == \
        5 * A * S * S * B / T  # 2,621,440


def test_zero_paper_figure1() -> None:
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, N_d = 64, K = 12 (mixed-precision Adam)
    psi, nd = 7.5e9, 64

    def total(stage: int) -> float:
        parts = zero_static_bytes(psi, nd, stage, precision=Precision.BF16,
                                  optimizer=Optimizer.ADAM)
        return float(sum(parts.values()))

    assert total(0) == pytest.approx(120e9)  # (2 + 2 + 12) x 7.5e9
    assert total(1) == pytest.approx(31.40625e9)  # 2Psi + 2Psi + 12Psi/64 = 30e9 + 1.40625e9
    assert total(2) == pytest.approx(16.640625e9)  # 2Psi + 14Psi/64 = 15e9 + 1.640625e9
    assert total(3) == pytest.approx(1.875e9)  # 16Psi/64


def test_zero_fp32_and_sgd() -> None:
    # fp32 SGD: 4 (weights) + 4 (grads) + 4 (momentum), no master copy
    parts = zero_static_bytes(100, 1, 0, precision=Precision.FP32, optimizer=Optimizer.SGD)
    assert {k: float(v) for k, v in parts.items()} == {
        "weights": 400.0, "gradients": 400.0, "optimizer_states": 400.0}


WHOLE_PER_LAYER = {Family.BERT: 6, Family.ROBERTA: 6, Family.ALBERT: 6, Family.GPT2: 6,
                   Family.LLAMA: 2, Family.VIT: 6}
"""Per layer, h times this many parameters every tensor-parallel rank keeps whole: the
encoders' and GPT-2's two layernorms (weight and bias: 4h) and the output-projection and FFN2
biases (2h); Llama's two RMSNorm weights (2h, no biases)."""


@pytest.mark.parametrize("name", [n for n, m in PRESETS.items() if m.family in WHOLE_PER_LAYER])
def test_stage_params_add_up(name: str) -> None:
    m = PRESETS[name]
    first, last = stage_params(m, 1, 1)
    assert float(first) == float(last) == parameter_count(m)
    # tensor parallelism: each of 4 ranks keeps the whole part and a quarter of the rest
    whole = WHOLE_PER_LAYER[m.family] * m.hidden
    per = float(layer_params_per_device(m, 4))
    layer = parameter_count(with_changes(m, num_layers=2)) - parameter_count(
        with_changes(m, num_layers=1)) if not m.share_layers else layer_params(m)
    assert per * 4 == pytest.approx(layer + 3 * whole)


def test_pipeline_stages_hold_their_layers() -> None:
    m = PRESETS["bert-large"]
    first, last = stage_params(m, 1, 4)
    layer = float(layer_params_per_device(m, 1))
    # 24 / 4 = 6 layers each; the last stage also keeps a copy of the tied word embedding
    non_layer = parameter_count(m) - 24 * layer
    assert float(first) + float(last) == pytest.approx(
        12 * layer + non_layer + m.vocab_size * m.hidden)


@pytest.mark.parametrize("family", KORTHIKANTI)
@pytest.mark.parametrize("dropout", [True, False])
def test_role_divided_saved_bytes_are_korthikanti_table2(family, dropout) -> None:
    # The distributed model reads per-layer activations off the op table, each row's saved
    # bytes divided by its tensor-parallel role; for the paper's layer they must be the
    # paper's terms (Korthikanti et al. 2022, section 4) for every t, with and without
    # sequence parallelism, and selective recomputation must drop exactly the 5as^2b term.
    from bertscope.parallel.compute import compute_table
    from bertscope.parallel.job import Workload
    from bertscope.perf.efficiency import load_profile

    m, s = sized(tiny(family), 16)
    w = Workload(model=m, run=RunConfig(batch=1, seq=s, precision=Precision.BF16,
                                        dropout=dropout), global_batch=8)
    table = compute_table(w, load_profile("a100"), [2], [1, 2, 4])
    for ti, t in enumerate((1, 2, 4)):
        for sp in (False, True) if t > 1 else (False,):
            kw = dict(seq=s, micro_batch=2, hidden=m.hidden, heads=m.heads,
                      intermediate=m.intermediate, tp=t, sp=sp, dropout=dropout)
            none = float(layer_activation_bytes(**kw))
            sel = float(layer_activation_bytes(**kw, checkpoint=Checkpoint.SELECTIVE))
            kept = table.layer_saved[0, ti, int(sp)]
            assert kept == pytest.approx(none)
            assert kept - table.core_saved[0, ti, int(sp)] == pytest.approx(sel)


def test_t5_layer_params_per_device_are_the_mean_of_both_stacks() -> None:
    m = PRESETS["t5-small"]  # 6 + 6 layers, h 512, i 512, f 2048
    # encoder layer: Q K V O 4 x 512 x 512 + wi, wo 2 x 512 x 2048 = 3,145,728 split, two
    # RMSNorm weights 1,024 whole; on 4 ranks 786,432 + 1,024 = 787,456. Decoder layer: 8 x
    # 262,144 + 2,097,152 = 4,194,304 split, three norms 1,536 whole: 1,048,576 + 1,536 =
    # 1,050,112. Mean over 6 + 6 layers: 918,784
    assert float(layer_params_per_device(m, 4)) == 918_784
    first, last = stage_params(m, 1, 1)
    assert float(first) == float(last) == parameter_count(m)
