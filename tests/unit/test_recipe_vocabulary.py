"""The recipe's vocabulary padding (`RunConfig.vocab_multiple`): the embedding and head are
built on the padded vocabulary. Expected sizes by hand from the cited rules (NVIDIA's BERT
run_pretraining.py pads to a multiple of 8, Megatron-LM's --make-vocab-size-divisible-by
128)."""

from __future__ import annotations

import pytest

from bertscope import ops
from bertscope.cli import main
from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category


def _head_n(recipe: str, model: str = "bert-large", **run: object) -> set[int]:
    d = ops(model, batch=2, seq=16, precision="bf16", recipe=recipe, **run).df
    return set(d.loc[(d["category"] == Category.GEMM) & (d["n"] > 20_000), "n"].tolist())


def test_each_recipe_pads_the_vocabulary_as_its_source_does() -> None:
    assert _head_n("eager") == {30522}  # Hugging Face: as the config gives it
    assert _head_n("fused") == {30528}  # 30522 + 8 - 30522 % 8 (= 2) = 30528
    assert _head_n("megatron") == {30592}  # ceil(30522 / 128) = 239; 239 x 128 = 30592
    # GPT-2's 50257: ceil(50257 / 128) = 393; 393 x 128 = 50304
    assert _head_n("megatron", "gpt2") == {50304}


def test_an_explicit_multiple_overrides_the_recipe_and_flops_follow() -> None:
    assert _head_n("megatron", vocab_multiple=1) == {30522}
    # the MLM decoder GEMM forward: 2 x tokens x hidden x vocab = 2 x 32 x 1024 x V
    d = ops("bert-large", batch=2, seq=16, precision="bf16", vocab_multiple=8).df
    fwd = d[(d["category"] == Category.GEMM) & (d["n"] == 30528) & (d["name"] == "mlm_decoder")]
    assert float(fwd["flops"].sum()) == 2 * 32 * 1024 * 30528


@pytest.mark.parametrize("bad", [0, -8, 2**17, True, "8"])
def test_a_bad_multiple_is_refused(bad: object) -> None:
    with pytest.raises(BertscopeError, match="vocab_multiple"):
        RunConfig(vocab_multiple=bad)  # type: ignore[arg-type]


def test_profile_refuses_a_padded_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert main(["profile", "bert-tiny", "--vocab-multiple", "8", "--no-store"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--vocab-multiple 8 is not measured" in err[0]


def test_padded_rows_take_parameter_memory() -> None:
    """The padded rows are allocated, updated and stored like the others: bert-base under the
    fused recipe (pad to 8: 30522 -> 30528) holds 6 more embedding rows of 768 (tied with the
    MLM decoder) and 6 more decoder biases, 6 x 768 + 6 = 4,614 parameters, each 2 (bf16
    weights) + 4 (fp32 master) + 2 (bf16 gradients) + 8 (Adam's two fp32 states) = 16 bytes:
    73,824 bytes of static memory more than the same run unpadded (what the loss saves grows
    too); the parameter count is the model's."""
    def meta(**run: object) -> dict:
        return ops("bert-base", batch=4, seq=128, precision="bf16", recipe="fused",
                   **run).export_meta()["memory"]

    padded, plain = meta(), meta(vocab_multiple=1)
    assert padded["weights"] - plain["weights"] == 4_614 * 2
    assert padded["static"] - plain["static"] == 4_614 * 16
    # the loss saves its log-softmax of the logits in fp32 (autocast runs cross-entropy in
    # fp32): 512 tokens x 6 more columns x 4 bytes
    assert padded["activations"] - plain["activations"] == 512 * 6 * 4
    assert padded["params"] == plain["params"] == 110_106_428  # HF BertForPreTraining


def test_the_sweep_pads_as_its_recipe_and_as_asked() -> None:
    """A sweep's groups take their recipe's padding where the axis is not swept (the fused
    recipe's 8, Megatron's 128), and each swept multiple where it is: every row equals the
    per-configuration path (`ops` + `predict`), which pads as the recipe files say."""
    from bertscope.perf import predict
    from bertscope.sweep import sweep

    def one(run: dict) -> tuple[float, float]:
        t = ops("bert-tiny", batch=2, seq=32, precision="fp16", **run)
        if t.run.fusion:
            from bertscope.perf.kernel_fusion import fuse
            t = fuse(t)
        return float(predict(t, "a100").df["time_s"].sum()), float(
            t.export_meta()["memory"]["peak"])

    res = sweep(["bert-tiny"], ["a100"], batch=[2], seq=[32], precision=["fp16"],
                recipe=["eager", "fused", "megatron"])
    for row in res.frame.to_dict(orient="records"):
        want = one({"recipe": row["recipe"]})
        assert row["iteration_s"] == pytest.approx(want[0], rel=1e-9), row["recipe"]
        assert row["memory_bytes"] == pytest.approx(want[1], rel=1e-12), row["recipe"]
    swept = sweep(["bert-tiny"], ["a100"], batch=[2], seq=[32], precision=["fp16"],
                  vocab_multiple=[1, 8, 64])
    assert sorted(swept.frame["vocab_multiple"]) == [1, 8, 64]
    for row in swept.frame.to_dict(orient="records"):
        want = one({"vocab_multiple": row["vocab_multiple"]})
        assert row["iteration_s"] == pytest.approx(want[0], rel=1e-9)
        assert row["memory_bytes"] == pytest.approx(want[1], rel=1e-12)
