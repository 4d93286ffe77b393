"""FP8 (Transformer-Engine-style recipe, analytic/fp8.py): hand arithmetic of the added rows,
the peaks each GEMM is held to, refusal on devices without FP8, and sweep == per-config."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope import build, get_model
from bertscope.analytic.fp8 import AMAX_HISTORY
from bertscope.cli import main
from bertscope.config import Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.hardware import load_device
from bertscope.perf import Prediction, fuse, predict
from bertscope.perf.efficiency import load_profile
from bertscope.perf.roofline import row_peaks, select_peaks
from bertscope.sweep import sweep

RUN = RunConfig(batch=2, seq=128)  # bert-base: t = 2 x 128 = 256 tokens, hidden 768, FFN 3072


def _rows(precision: str) -> dict[tuple[str, int, str], dict]:
    c = build(get_model("bert-base"), RunConfig(batch=2, seq=128, precision=precision)).columns
    out = {}
    for i, name in enumerate(c["name"]):
        out[(str(name), int(c["layer"][i]), str(c["phase"][i]))] = {k: v[i] for k, v in c.items()}
    return out


def test_precision_fp8_is_bf16_mixed_outside_the_gemms() -> None:
    assert Precision.FP8.act_bytes == 2 and Precision.FP8.mixed


def test_cast_rows_and_fp8_gemms_by_hand() -> None:
    rows = _rows("fp8")
    # forward ffn1: X (256 x 768) and W (768 x 3072) cast-transposed: read 2 B, write 1 + 1 B,
    # 2 FLOPs per element
    xa = rows[("ffn1.fp8_cast_a", 0, "forward")]
    assert xa["elements"] == 256 * 768 == 196608
    assert (xa["flops"], xa["bytes_read"], xa["bytes_written"]) == (393216, 393216, 393216)
    assert xa["category"] == "data_movement" and xa["sublayer"] == "ffn1"
    wb = rows[("ffn1.fp8_cast_b", 0, "forward")]
    assert wb["elements"] == 768 * 3072 == 2359296
    gemm = rows[("ffn1", 0, "forward")]
    # bf16: 2 x (256*768 + 3072*768 + 3072 bias) = 5117952; fp8 operands: 196608 + 2359296
    # + 2 x 3072 = 2562048; output stays bf16: 2 x 256 x 3072 = 1572864
    assert gemm["bytes_read"] == 2562048 and gemm["bytes_written"] == 1572864
    assert gemm["saved_bytes"] == 256 * 768  # the input kept in FP8: 1 byte per element
    # data gradient: dY (256 x 3072) cast; reads 1 B per operand: 786432 + 2359296
    assert rows[("ffn1.dgrad.fp8_cast_a", 0, "backward_data")]["elements"] == 786432
    assert rows[("ffn1.dgrad", 0, "backward_data")]["bytes_read"] == 786432 + 2359296
    # weight gradient: no cast (X^T and dY^T from the casts above); 3072*256 + 256*768
    assert ("ffn1.wgrad.fp8_cast_a", 0, "backward_weight") not in rows
    assert rows[("ffn1.wgrad", 0, "backward_weight")]["bytes_read"] == 983040
    # the same GEMM FLOPs as bf16; attention's batched GEMMs untouched
    bf16 = _rows("bf16")
    assert gemm["flops"] == bf16[("ffn1", 0, "forward")]["flops"]
    for key in (("score", 0, "forward"), ("context.dgrad_a", 0, "backward_data")):
        assert {k: v for k, v in rows[key].items() if k != "time_s"} == {
            k: v for k, v in bf16[key].items() if k != "time_s"}  # time_s: NaN != NaN


def test_amax_updates_cover_every_cast_tensor() -> None:
    rows = _rows("fp8")
    # bert-base: 12 layers x 6 linears (q, k, v, out, ffn1, ffn2) + 4 head linears (MLM
    # transform, MLM decoder, pooler, NSP) = 76; forward casts X and W: 152 tensors,
    # backward casts dY: 76 tensors; 1024-entry fp32 history each
    fwd = rows[("fp8.amax_update", -1, "forward")]
    bwd = rows[("fp8.amax_update", -1, "backward")]
    assert fwd["elements"] == 152 * AMAX_HISTORY == 155648
    assert bwd["elements"] == 76 * AMAX_HISTORY
    # reads history + amax: 4 x (155648 + 152); writes history + scale + inverse scale
    assert fwd["bytes_read"] == 623200 and fwd["bytes_written"] == 4 * (155648 + 2 * 152)
    assert fwd["category"] == "reduction"


def test_casts_inherit_the_gemm_roles_and_count_micro_batches() -> None:
    c = build(get_model("bert-base"), RunConfig(batch=2, seq=128, precision="fp8",
                                                micro_batches=3)).columns
    names = [str(n) for n in c["name"]]
    for i, name in enumerate(names):
        if ".fp8_cast_" in name:
            j = next(j for j in range(i + 1, len(names)) if c["category"][j] == "gemm")
            assert (c["tp_split"][i], c["pp_stage"][i], c["count"][i], c["layer"][i]) == (
                c["tp_split"][j], c["pp_stage"][j], c["count"][j], c["layer"][j])
            assert c["count"][i] == 3
    assert all(c["count"][i] == 3 for i, n in enumerate(names) if n == "fp8.amax_update")


def test_peaks_of_an_fp8_run_on_h100() -> None:
    h100 = load_device("h100")
    table = build(get_model("bert-base"), RunConfig(batch=2, seq=128, precision="fp8"))
    flops_peak, _ = row_peaks(table.columns, select_peaks(h100, "fp8"))
    cat = np.asarray(table.columns["category"], dtype=object)
    assert set(flops_peak[cat == "gemm"]) == {1978.9e12}  # whitepaper Table 3, FP8 dense
    assert set(flops_peak[cat == "batched_gemm"]) == {989.4e12}  # bf16 attention
    assert set(flops_peak[cat == "data_movement"]) == {66.9e12}  # fp32 vector rate
    # bert-large at batch 32 x seq 128: the GEMM time saved outweighs the casts' launches
    # (at batch 2 x 128 the 3 casts per linear layer, launch-bound, cost more than fp8 saves)
    large = [Prediction.of(predict(build(get_model("bert-large"),
                                         RunConfig(batch=32, seq=128, precision=p)),
                                   load_profile("h100"))).time_s for p in ("fp8", "bf16")]
    assert large[0] < large[1]


def test_device_without_fp8_refuses_in_one_line(capsys) -> None:
    with pytest.raises(BertscopeError, match=r"has no fp8 \(it has .*\); pass --precision bf16"):
        select_peaks(load_device("a100"), "fp8")
    assert main(["predict", "bert-base", "--precision", "fp8", "--device", "a100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no fp8" in err and len(err.splitlines()) == 1


def test_sweep_skips_devices_without_fp8_and_equals_predict() -> None:
    res = sweep(["bert-tiny", "albert-base-v2"], ["h100", "a100"], batch=[1, 4], seq=[16, 128],
                precision=["fp8"], micro_batches=[1, 2], fusion=[False, True],
                checkpoint=["none", "full"])
    # 2 models x 2 batches x 2 seqs x 2 micro-batch counts x fused x checkpoint = 64 on
    # each device; a100 has no FP8
    assert res.evaluated == 64 and res.skipped == 64
    for row in res.frame.to_dict(orient="records"):
        run = RunConfig(batch=row["batch"], seq=row["seq"], precision="fp8",
                        micro_batches=row["micro_batches"],
                        checkpoint=row["checkpoint"])
        table = build(get_model(row["model"]), run)
        t = predict(fuse(table) if row["fusion"] else table, load_profile("h100"))
        assert row["iteration_s"] == pytest.approx(Prediction.of(t).time_s, rel=1e-9)
        assert row["flops"] == pytest.approx(Prediction.of(t).flops, rel=1e-12)


def test_every_family_gets_fp8_from_the_one_transformation() -> None:
    # GPT-2 (decoder producer): 12 layers x 4 linears (fused QKV, attention projection, FC,
    # MLP projection) + the LM head = 49 linears, 3 casts each (X, W forward; dY backward)
    c = build(get_model("gpt2"), RunConfig(batch=1, seq=16, precision="fp8")).columns
    names = [str(n) for n in c["name"]]
    assert sum(".fp8_cast_" in n for n in names) == 3 * 49
    assert names.count("fp8.amax_update") == 2
    res = sweep(["gpt2"], ["h100"], batch=[1, 2], seq=[16, 64], precision=["fp8"])
    for row in res.frame.to_dict(orient="records"):
        t = predict(build(get_model("gpt2"), RunConfig(batch=row["batch"], seq=row["seq"],
                                                       precision="fp8")), load_profile("h100"))
        assert row["iteration_s"] == pytest.approx(Prediction.of(t).time_s, rel=1e-9)
