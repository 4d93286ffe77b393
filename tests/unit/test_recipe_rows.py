"""What the recipes do, as rows: the weight-cast policy and fused gradient accumulation on
bert-tiny, every expected figure derived by hand below.

bert-tiny (Turc et al. 2019; google/bert_uncased_L-2_H-128_A-2): L = 2, h = 128, f = 512,
V = 30522, 512 positions, 2 token types.

    one layer's linear weights  Q, K, V, O 4 x 128 x 128 = 65,536; FFN1 + FFN2 2 x 128 x 512
                                = 131,072; in all 196,608
    one layer's linear biases   4 x 128 + 512 + 128 = 1,152
    one layer's parameters      196,608 + 1,152 + two layernorms 2 x 2 x 128 = 198,272
    embedding group             (30522 + 512 + 2) x 128 + layernorm 256 = 3,972,864
    pooler                      128 x 128 + 128 = 16,512
    heads                       MLM transform 16,512 + layernorm 256 + decoder bias 30,522 +
                                NSP 128 x 2 + 2 = 258: 47,548
    model                       3,972,864 + 2 x 198,272 + 16,512 + 47,548 = 4,433,468
"""

from __future__ import annotations

import pytest

from bertscope.analytic.families import model_ops
from bertscope.analytic.memory import memory_estimate
from bertscope.analytic.params import parameter_count
from bertscope.config import RunConfig
from bertscope.parallel.memory import zero_static_bytes
from bertscope.presets import get_model
from bertscope.taxonomy import Phase

TINY = get_model("bert-tiny")
M = 4  # micro-batches
LAYER_WEIGHTS = 196_608
LAYER_LINEAR = 196_608 + 1_152  # weights and biases of the six linears
LAYER_PARAMS = 198_272
EMBEDDING = 3_972_864
PARAMS = 4_433_468


def _ops(**kw: object) -> list:
    run = RunConfig(batch=2, seq=16, precision="bf16", micro_batches=M, **kw)  # type: ignore
    return model_ops(TINY, run)


def _layer0(ops: list, *suffixes: str) -> list:
    return [o for o in ops if o.layer == 0 and o.name.endswith(suffixes)]


def _bytes(ops: list) -> float:
    return float(sum(o.bytes_read + o.bytes_written for o in ops))


WEIGHT_CASTS = (".weight_cast", ".bias_cast", ".weight_grad_cast", ".bias_grad_cast")


def test_the_parameter_counts_are_the_hand_counts() -> None:
    assert parameter_count(TINY) == PARAMS


def test_autocast_casts_every_weight_in_every_micro_batch() -> None:
    # forward fp32 -> bf16: read 4 + write 2 bytes per element; backward bf16 -> fp32: 2 + 4.
    # Layer 0 per iteration: 4 micro-batches x 197,760 elements x (6 + 6) = 9,492,480 bytes
    ops = _layer0(_ops(weight_cast="per_micro_batch"), *WEIGHT_CASTS)
    assert _bytes(ops) == 4 * LAYER_LINEAR * 12 == 9_492_480
    assert not _layer0(_ops(weight_cast="per_micro_batch"), ".copy_to_half")


def test_per_step_makes_the_16_bit_weights_once_per_step() -> None:
    ops = _ops(weight_cast="per_step")
    assert not _layer0(ops, *WEIGHT_CASTS, ".input_cast", ".input_grad_cast")
    copy = _layer0(ops, ".copy_to_half")
    # once per step over the layer's 198,272 parameters: read fp32 4, write bf16 2 bytes
    assert len(copy) == 1 and copy[0].count == 1
    assert _bytes(copy) == LAYER_PARAMS * 6 == 1_189_632


def test_kept_weights_are_written_by_the_update_itself() -> None:
    kept, step = _ops(weight_cast="kept"), _ops(weight_cast="per_step")
    assert not _layer0(kept, *WEIGHT_CASTS, ".copy_to_half")
    (upd_kept,), (upd_step,) = _layer0(kept, ".adam_update"), _layer0(step, ".adam_update")
    n = LAYER_PARAMS
    # Adam per element: reads w 4 + m 4 + v 4 + the gradient, writes w, m, v (12 bytes);
    # per_step reads the bf16 gradient (2), kept the fp32 main gradient (4) and writes the
    # bf16 weight beside the fp32 one (2 more)
    assert upd_step.bytes_read == 14 * n and upd_step.bytes_written == 12 * n
    assert upd_kept.bytes_read == 16 * n and upd_kept.bytes_written == 14 * n


def test_fp8_weight_casts_run_once_per_step_unless_per_micro_batch() -> None:
    def weight_fp8_casts(policy: str) -> float:
        ops = model_ops(TINY, RunConfig(batch=2, seq=16, precision="fp8", micro_batches=M,
                                        weight_cast=policy))
        return _bytes([o for o in _layer0(ops, ".fp8_cast_b") if o.phase is Phase.FORWARD])

    # a weight's cast-transpose: read bf16 2, write FP8 and its transpose 1 + 1 bytes
    assert weight_fp8_casts("per_micro_batch") == M * LAYER_WEIGHTS * 4 == 3_145_728
    assert weight_fp8_casts("per_step") == LAYER_WEIGHTS * 4 == 786_432
    assert weight_fp8_casts("kept") == LAYER_WEIGHTS * 4


def test_unfused_accumulation_adds_each_micro_batch_after_the_first() -> None:
    (acc,) = _layer0(_ops(weight_cast="per_step"), ".grad_accumulate")
    # 3 adds of bf16 gradients: read 2 + 2, write 2 bytes per parameter
    assert acc.count == M - 1
    assert acc.bytes_read == 3 * 4 * LAYER_PARAMS and acc.bytes_written == 3 * 2 * LAYER_PARAMS


def test_fused_accumulation_moves_the_stack_s_adds_into_the_wgrad_gemms() -> None:
    fused = _ops(weight_cast="kept", fused_accumulation=True)
    plain = _ops(weight_cast="kept", fused_accumulation=False)
    assert not _layer0(fused, ".grad_accumulate")
    wgrad_f, wgrad_p = _layer0(fused, ".wgrad"), _layer0(plain, ".wgrad")
    # each wgrad GEMM reads and writes the fp32 main gradient (4 + 4 bytes per weight)
    # instead of writing a bf16 gradient (2): per iteration 4 x 196,608 x (8 - 2) more
    assert _bytes(wgrad_f) - _bytes(wgrad_p) == M * LAYER_WEIGHTS * 6 == 4_718_592
    # the embeddings are no GEMM's weight gradient: their adds stay, into fp32 main
    # gradients (read 4 + the bf16 gradient 2, write 4), 3 times
    (emb,) = [o for o in fused if o.name == "embedding.grad_accumulate"]
    assert emb.bytes_read == 3 * 6 * EMBEDDING and emb.bytes_written == 3 * 4 * EMBEDDING


def test_kept_weights_hold_18_bytes_per_parameter_with_adam() -> None:
    base = memory_estimate(TINY, RunConfig(precision="bf16"))
    kept = memory_estimate(TINY, RunConfig(precision="bf16", weight_cast="kept"))
    # autocast / apex O2: 2 + 4 (master) + 2 + 8 = 16 bytes; kept: fp32 main gradients, 18
    # (Megatron Core user guide, Distributed Optimizer: bf16 parameters, fp32 gradients: 18)
    assert base.static == 16 * PARAMS
    assert kept.static == 18 * PARAMS
    assert kept.peak - base.peak == 2 * PARAMS


@pytest.mark.parametrize("dp", [1, 8])
def test_the_distributed_optimizer_holds_6_plus_12_over_d_bytes(dp: int) -> None:
    # Megatron Core user guide, Distributed Optimizer: bf16 parameters with fp32 gradients
    # hold 6 + 12/d bytes per parameter with the distributed optimizer (ZeRO stage 1)
    from bertscope.analytic.memory import gradient_bytes
    from bertscope.config import Optimizer, Precision

    run = RunConfig(recipe="megatron", precision="bf16")
    parts = zero_static_bytes(1000.0, dp, 1, precision=Precision.BF16,
                              optimizer=Optimizer.ADAM, grad_bytes=gradient_bytes(run))
    assert sum(float(v) for v in parts.values()) == pytest.approx(1000 * (6 + 12 / dp))


@pytest.mark.parametrize("zero", [0, 1])
def test_the_distributed_memory_follows_the_cast_policy(zero: int) -> None:
    # on 8 data-parallel replicas every device holds the whole model's gradients (ZeRO 0
    # and 1 do not partition them): fp32 main gradients hold 2 bytes per parameter more
    # than bf16 ones, 2 x 4,433,468 = 8,866,936 bytes, whatever else the recipe changes
    from bertscope.job import Job, Layout
    from bertscope.parallel import Cluster, evaluate

    cluster = Cluster.build("a100-sxm4-80gb", 8)

    def gradients(policy: str) -> float:
        run = RunConfig(batch=2, seq=16, precision="bf16", weight_cast=policy)
        res = evaluate(Job(model=TINY, run=run, layout=Layout(dp=8, zero=zero)), cluster)
        return res.memory["gradients"]

    assert gradients("kept") - gradients("per_step") == pytest.approx(2 * PARAMS)
    assert gradients("per_step") == pytest.approx(2 * PARAMS)


def test_fp32_main_gradients_are_reduced_in_fp32() -> None:
    # Megatron-LM reduces bf16 runs' gradients in fp32 (arguments.py, validate_args): the
    # data-parallel all-reduce of kept weights' fp32 main gradients moves twice the bytes of
    # a 16-bit model's (apex O2) gradients, so it takes longer on the same links
    from bertscope.job import Job, Layout
    from bertscope.parallel import Cluster, evaluate

    cluster = Cluster.build("a100-sxm4-80gb", 16, devices_per_node=8)

    def dp_comm(policy: str) -> float:
        run = RunConfig(batch=2, seq=16, precision="bf16", weight_cast=policy)
        return evaluate(Job(model=TINY, run=run, layout=Layout(dp=16)), cluster).time["dp_comm_s"]

    assert dp_comm("kept") > dp_comm("per_step") > 0
