"""Host time between ops is charged to launches framework code issues, not to the casts mixed
precision inserts inside other ops (`Issuer`): the analytic producer labels them, the host
model and its fit read the label."""

from __future__ import annotations

import pandas as pd
import pytest

from bertscope.analytic import build
from bertscope.config import Family, RunConfig
from bertscope.optable import Op, OpTable, ProfileFacts
from bertscope.perf.bandwidth import Overhead, framework_launches
from bertscope.perf.fit import fit_host_gap
from bertscope.taxonomy import Category, Issuer, Phase, Sublayer
from tests.conftest import tiny

C, P, S = Category, Phase, Sublayer


def test_host_seconds_skip_autocast_rows() -> None:
    rows = pd.DataFrame({"count": [2, 3, 4],
                         "issuer": [Issuer.FRAMEWORK, Issuer.AUTOCAST, Issuer.FRAMEWORK]})
    ov = Overhead(seconds_per_launch=1e-6, host_seconds_per_launch=1e-5)
    # 2 x 10 us, the cast's 3 launches nothing, 4 x 10 us
    assert list(ov.host_seconds(rows)) == pytest.approx([2e-5, 0.0, 4e-5])
    # a table without the column (an older saved one): every launch counts
    assert list(ov.host_seconds({"count": [2, 3]})) == pytest.approx([2e-5, 3e-5])
    assert list(ov.seconds(rows)) == pytest.approx([2e-6, 3e-6, 4e-6])  # launches all pay


def test_host_gap_fit_counts_framework_launches_only() -> None:
    measured = OpTable.from_ops([Op("aten::linear", 0, S.FFN1, C.GEMM, P.FORWARD, time_s=0.9)],
                                (ProfileFacts(iteration_s=1.0),))
    analytic = OpTable.from_ops([
        Op("ffn1", 0, S.FFN1, C.GEMM, P.FORWARD, count=40),
        Op("ffn1.weight_cast", 0, S.FFN1, C.DATA_MOVEMENT, P.FORWARD, count=60,
           issuer=Issuer.AUTOCAST)])
    # (1.0 - 0.9) s over 40 framework launches = 2.5 ms (over all 100 it would be 1 ms)
    assert fit_host_gap([(measured, analytic)]) == pytest.approx(2.5e-3)


@pytest.mark.parametrize(("family", "explicit"), [
    (Family.BERT, 0), (Family.ROBERTA, 0), (Family.ALBERT, 0), (Family.T5, 0),
    # Hugging Face's causal LMs call logits.float() in their own code: one framework launch
    (Family.GPT2, 1), (Family.LLAMA, 1)])
def test_autocast_adds_no_framework_launches(family: Family, explicit: int) -> None:
    """Measured on bert-mini:16:128 (bench/results/validate_cpu_r16 at d715217): 290 launches
    in fp32,
    448 in bf16 of which 158 casts, so 448 - 158 = 290: what bf16 adds is casts. Here: the
    bf16 table's framework launches are the fp32 table's plus the model code's own upcast,
    its autocast rows are 16-bit <-> fp32 copies (2 bytes one way, 4 the other)."""
    m, run = tiny(family), RunConfig(batch=2, seq=16)
    fp32 = build(m, run).columns
    bf16 = build(m, RunConfig(batch=2, seq=16, precision="bf16"))
    assert framework_launches(fp32).sum() == fp32["count"].sum()
    assert framework_launches(bf16.columns).sum() == fp32["count"].sum() + explicit
    casts = bf16.df[bf16.df["issuer"] == Issuer.AUTOCAST]
    assert len(casts) > 0 and (casts["category"] == C.DATA_MOVEMENT).all()
    per_elem = sorted(zip(casts["bytes_read"] / casts["elements"],
                          casts["bytes_written"] / casts["elements"], strict=True))
    assert set(per_elem) <= {(2.0, 4.0), (4.0, 2.0)}
