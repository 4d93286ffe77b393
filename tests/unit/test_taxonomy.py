"""The ordered name -> category pattern table, on real ATen op names."""

from __future__ import annotations

import re

import pytest

from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Classifier, Sublayer, SublayerGroup, load_patterns

C = Category


@pytest.mark.parametrize(
    ("name", "category"),
    [
        # names as torch.profiler records them in a BERT training step
        ("aten::addmm", C.GEMM), ("aten::mm", C.GEMM), ("aten::linear", C.GEMM),
        ("aten::bmm", C.BATCHED_GEMM), ("aten::matmul", C.BATCHED_GEMM),
        ("aten::_softmax", C.SOFTMAX), ("aten::_softmax_backward_data", C.SOFTMAX),
        # look-alikes: log_softmax is the loss, not attention softmax
        ("aten::_log_softmax", C.LOSS), ("aten::_log_softmax_backward_data", C.LOSS),
        ("aten::nll_loss_forward", C.LOSS), ("aten::cross_entropy_loss", C.LOSS),
        ("aten::native_layer_norm", C.LAYERNORM),
        ("aten::native_layer_norm_backward", C.LAYERNORM),
        ("aten::native_dropout", C.DROPOUT), ("aten::bernoulli_", C.DROPOUT),
        ("aten::gelu", C.ACTIVATION), ("aten::gelu_backward", C.ACTIVATION),
        ("aten::tanh", C.ACTIVATION),
        ("aten::embedding_dense_backward", C.EMBEDDING),
        ("aten::_foreach_norm", C.REDUCTION), ("aten::sum", C.REDUCTION),
        ("aten::_foreach_addcdiv_", C.OPTIMIZER), ("aten::_fused_adamw_", C.OPTIMIZER),
        ("aten::add", C.ELEMENTWISE), ("aten::mul_", C.ELEMENTWISE),
        ("aten::copy_", C.DATA_MOVEMENT), ("aten::view", C.DATA_MOVEMENT),
        ("torch::autograd::AccumulateGrad", C.ELEMENTWISE),
        ("aten::mm_but_not_really", C.OTHER),  # anchored: no partial matches
    ],
)
def test_builtin_patterns_classify_real_names(name: str, category: Category) -> None:
    assert Classifier()(name) is category


def test_user_patterns_come_first(tmp_path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text('[[pattern]]\nregex = "^aten::add$"\ncategory = "optimizer"\n')
    assert Classifier(load_patterns(f))("aten::add") is C.OPTIMIZER
    assert Classifier()("aten::add") is C.ELEMENTWISE


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("not toml [[", "not valid TOML"),
        ('[[pattern]]\nregex = "("\ncategory = "gemm"\n', "bad regex"),
        ('[[pattern]]\nregex = "x"\ncategory = "matmul"\n', "unknown category 'matmul'"),
        ('[[pattern]]\ncategory = "gemm"\n', "pattern 1: missing regex"),
        ("title = 1\n", "expected [[pattern]]"),
    ],
)
def test_bad_pattern_files_raise(tmp_path, text: str, needle: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(BertscopeError, match=re.escape(needle)):
        load_patterns(f)


def test_every_sublayer_has_a_group() -> None:
    assert {s.group for s in Sublayer} <= set(SublayerGroup)
    assert Sublayer.FFN_ACT.group is SublayerGroup.FEED_FORWARD
