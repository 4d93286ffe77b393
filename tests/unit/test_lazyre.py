"""The literal prefilter of lazily compiled regexes never changes a search's answer."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertscope.lazyre import Regex, prefilter
from bertscope.taxonomy import builtin_patterns
from bertscope.trace.modules import builtin_modules

BUILTIN = [p.regex.pattern for p in builtin_patterns()]


@pytest.mark.parametrize(("pattern", "expected"), [
    # ^ + literal prefix + a group of alternatives: each alternative's leading literal run
    (r"^aten::(addmm|mm|linear)$", ("aten::", ("addmm", "mm", "linear"))),
    # a quantified last character is not required: gelu_? needs only "gelu"; _?x needs nothing
    (r"^aten::(gelu_?|_?softmax|conv[123]d|nll_loss\w*)$",
     ("aten::", ("gelu", "", "conv", "nll_loss"))),
    (r"^fbgemm::", ("fbgemm::", ("",))),  # nothing after the prefix
    (r"^torch\.distributed::x$", ("torch", ("",))),  # an escape ends the literal prefix
    (r"^(void )?ncclKernel", ("", ("",))),  # an optional group requires nothing
    (r"^(?:ab|cd)e", ("", ("ab", "cd"))),  # a non-capturing group
    (r"^ab*c", ("a", ("",))),  # b* may be absent
    (r"^a|b", None),  # a top-level alternative is not anchored
    (r"^(a)|(b)", None),
    (r"^(?i)abc", None),  # inline flags
    (r"^(?P<x>ab)", None),  # named groups, lookarounds: not read
    (r"abc", None),  # not anchored
    (r"^a[(|]b(c|d)", ("a", ("",))),  # class content is not structure
    (r"^a[^](]b", ("a", ("",))),  # a `]` right after `[^` is a literal: the `(` is in it
])
def test_prefilter_by_hand(pattern: str, expected: object) -> None:
    assert prefilter(pattern) == expected


@pytest.mark.parametrize("pattern", BUILTIN + [r.regex.pattern for r in builtin_modules().rows])
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_match_of_a_builtin_pattern_passes_its_prefilter(pattern: str,
                                                               data: st.DataObject) -> None:
    """Strings drawn to match each built-in expression (hypothesis' from_regex, an
    independent reading of the expression) are found by the filtered search too."""
    text = data.draw(st.from_regex(pattern, fullmatch=False))
    if "\n" in text:  # search without MULTILINE: `^` then only at the start, as drawn
        text = text.replace("\n", " ")
    assert (Regex(pattern).search(text) is None) == (re.search(pattern, text) is None)


@pytest.mark.parametrize("name", [
    "aten::add", "aten::add_", "aten::addmm", "aten::mm", "aten::_softmax", "aten::conv2d",
    "aten::native_layer_norm_backward", "AddmmBackward0", "fbgemm::split_embedding_x",
    "torch::autograd::AccumulateGrad", "ampere_sgemm_128x64_tn", "nvjet_tst_128x256",
    "void at::native::vectorized_elementwise_kernel<4>", "Memcpy HtoD", "", "aten::",
    "triton_poi_fused_add_0", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
])
def test_filtered_search_agrees_on_names(name: str) -> None:
    for pattern in BUILTIN:
        got, want = Regex(pattern).search(name), re.search(pattern, name)
        assert (got is None) == (want is None), pattern
        if want is not None:
            assert got is not None and got.span() == want.span()


def test_a_ruled_out_name_compiles_nothing() -> None:
    r = Regex(r"^aten::(addmm|mm)$")
    assert r.search("aten::add") is None and r._compiled is None
    assert r.search("aten::mm") is not None and r._compiled is not None
