"""Under autocast the loss runs in fp32 and its backward casts the logits' gradient back to
the activation format in a kernel of its own: the `aten::to` rows the profiler attributes to
the loss sublayer (measured: the expected values) against the analytic table's cast rows."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bertscope.analytic import build
from bertscope.config import Family, RunConfig
from bertscope.taxonomy import Sublayer
from tests.conftest import cast_rows, sized, tiny

torch = pytest.importorskip("torch")
from bertscope.measure.profile import profile  # noqa: E402


def _casts(df: Any, measured: bool) -> Counter[tuple[str, int]]:
    """Data-movement casts in the loss sublayer: (phase, elements) -> launches."""
    sel = cast_rows(df, measured)
    sel = sel[sel["sublayer"].astype(str) == str(Sublayer.LOSS)]
    out: Counter[tuple[str, int]] = Counter()
    for r in sel.itertuples():
        out[(str(r.phase), int(r.elements))] += int(r.count)
    return out


@pytest.mark.parametrize(("family", "precision"), [
    (Family.BERT, "bf16"), (Family.GPT2, "bf16"), (Family.BERT, "fp32"), (Family.LLAMA, "bf16"),
    (Family.T5, "bf16"), (Family.VIT, "bf16"), (Family.ALBERT, "fp16")])
def test_loss_gradient_casts_match_the_measurement(family: Family, precision: str) -> None:
    m, seq = sized(tiny(family), 16)
    run = RunConfig(batch=2, seq=seq, precision=precision)
    got = _casts(build(m, run).df, measured=False)
    want = _casts(profile(m, run, iters=1, warmup=0).table.df, measured=True)
    if precision == "fp32":
        assert got == want == Counter()  # no cast without autocast
        return
    assert got == want
    if family not in (Family.BERT, Family.GPT2):
        return
    # the MLM (or LM) logits: 2 x 16 tokens x 500 classes = 16,000 elements, cast down once;
    # GPT-2 casts them up first (logits.float(), a forward row)
    assert got[("backward_data", 2 * 16 * 500)] == 1
    assert got[("forward", 2 * 16 * 500)] == (1 if family is Family.GPT2 else 0)
    assert got == want
