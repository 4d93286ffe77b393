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
