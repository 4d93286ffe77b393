"""Hugging Face's gelu_new (NewGELUActivation) written out as eager PyTorch runs it: the
kernels the profiler attributes to the feed-forward activation of each family that uses it
(measured: the expected values) against the analytic table's rows there, by layer, phase,
category and element count."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bertscope.analytic import build
from bertscope.config import Activation, Family, ModelConfig, RunConfig
from bertscope.taxonomy import Category, Sublayer
from tests.conftest import tiny

torch = pytest.importorskip("torch")
from bertscope.measure.profile import profile  # noqa: E402

Key = tuple[int, str, str, int]  # layer, phase, category, elements
KINDS = {str(Category.ELEMENTWISE), str(Category.ACTIVATION)}


def _rows(df: Any) -> Counter[Key]:
    """Launches per (layer, phase, category, elements) in the FFN activation sublayer."""
    sel = df[(df["sublayer"].astype(str) == str(Sublayer.FFN_ACT))
             & df["category"].astype(str).isin(KINDS)]
    out: Counter[Key] = Counter()
    for r in sel.itertuples():
        out[(int(r.layer), str(r.phase), str(r.category), int(r.elements))] += int(r.count)
    return out


@pytest.mark.parametrize("family", [Family.GPT2, Family.ALBERT])
def test_gelu_new_kernels_match_the_measurement(family: Family) -> None:
    m: ModelConfig = tiny(family)
    assert m.activation is Activation.GELU_NEW
    run = RunConfig(batch=2, seq=16)
    want = _rows(profile(m, run, iters=1, warmup=0).table.df)
    got = _rows(build(m, run).df)
    # per layer, 2 x 16 tokens x 256 FFN = 8,192 elements: forward 7 elementwise kernels and
    # tanh, backward 10 elementwise kernels and tanh_backward (section.COMPOSITE)
    e = 2 * 16 * 256
    assert got[(0, "forward", "elementwise", e)] == 7
    assert got[(0, "backward_data", "activation", e)] == 1
    assert got == want
