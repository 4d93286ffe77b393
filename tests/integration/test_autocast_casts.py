"""Under torch.autocast every linear casts its fp32 weight and bias to 16 bits in forward,
and an input that arrives in fp32 (the residual stream's norm output) too; backward casts
each of their gradients back (ToCopyBackward), and a residual add that promotes a 16-bit
branch to fp32 casts the branch's gradient down. The profiler's copying `aten::to` rows
(measured: the expected values; a cast inside `aten::linear` is a row of its own) against
the analytic table's cast rows, by sublayer, forward or backward, and elements."""

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


def _casts(df: Any, measured: bool) -> Counter[tuple[str, str, int]]:
    """Data-movement casts: (sublayer, forward/backward, elements) -> launches. Left out: the
    'other' sublayer (the attention mask's cast to the activation dtype, not a row)."""
    sel = cast_rows(df, measured)
    sel = sel[sel["sublayer"].astype(str) != str(Sublayer.OTHER)]
    out: Counter[tuple[str, str, int]] = Counter()
    for r in sel.itertuples():
        if int(r.elements) == 0:
            continue
        side = "forward" if str(r.phase) in ("forward", "recompute") else "backward"
        out[(str(r.sublayer), side, int(r.elements))] += int(r.count)
    return out


@pytest.mark.parametrize(("family", "precision"), [
    (Family.BERT, "bf16"), (Family.GPT2, "bf16"), (Family.LLAMA, "bf16"),
    (Family.ALBERT, "fp16"), (Family.BERT, "fp32")])
def test_autocast_casts_match_the_measurement(family: Family, precision: str) -> None:
    m, seq = sized(tiny(family), 16)
    run = RunConfig(batch=2, seq=seq, precision=precision)
    got = _casts(build(m, run).df, measured=False)
    want = _casts(profile(m, run, iters=1, warmup=0).table.df, measured=True)
    if precision == "fp32":
        assert got == want == Counter()  # no cast without autocast
        return
    if family is Family.LLAMA:
        # not rows: the measured RMSNorm's and rotary's own Python casts (F.rms_norm of the
        # fp32 input under autocast, y.to(x.dtype); cos/sin .to(x.dtype)), forward only
        unmodelled = {"attn_add_norm", "ffn_add_norm", "final_norm", "rotary"}
        want = Counter({k: v for k, v in want.items()
                        if k[0] not in unmodelled or k[1] == "backward"})
    if family is Family.ALBERT:
        # the shared layer's weights are cast once per forward (autocast's cache): measured
        # where layer 0 first uses each, one analytic row pair for all of them
        layer = {"qkv", "attn_output", "ffn1", "ffn2"}
        shared = sum(e * n for (sub, _, e), n in want.items() if sub in layer) // 2
        h, f = m.hidden, m.intermediate
        assert shared == 4 * (h * h + h) + 2 * h * f + f + h  # Q, K, V, out; FFN1, FFN2
        want = Counter({k: v for k, v in want.items() if k[0] not in layer})
    assert got == want


def test_bert_layer_casts_by_hand() -> None:
    """One BERT layer's casts at bf16, counted by hand (h = hidden, f = intermediate, t =
    tokens): forward, the fp32 norm output into Q, K, V and FFN1 (4 x t h elements, 4 bytes
    read and 2 written each) and six weights and biases; backward, the same casts back
    (2 read, 4 written) plus the two residual adds' branch gradients (4 read, 2 written)."""
    m, seq = sized(tiny(Family.BERT), 16)
    run = RunConfig(batch=2, seq=seq, precision="bf16")
    df = build(m, run).df
    rows = df[(df["layer"] == 0) & df["name"].str.contains("_cast$")]
    h, f, t = m.hidden, m.intermediate, 2 * seq
    weights = 4 * (h * h + h) + (h * f + f) + (f * h + h)
    fwd = rows[rows["phase"].astype(str) == "forward"]
    bwd = rows[rows["phase"].astype(str) != "forward"]
    assert fwd["elements"].sum() == 4 * t * h + weights
    assert fwd["bytes_read"].sum() == 4 * (4 * t * h + weights)
    assert fwd["bytes_written"].sum() == 2 * (4 * t * h + weights)
    assert bwd["elements"].sum() == 4 * t * h + weights + 2 * t * h
    assert bwd["bytes_read"].sum() == 2 * (4 * t * h + weights) + 4 * 2 * t * h
    assert bwd["bytes_written"].sum() == 4 * (4 * t * h + weights) + 2 * 2 * t * h
    # the optimizer reads fp32 gradients and refreshes no 16-bit copy under autocast
    opt = df[df["sublayer"].astype(str) == "optimizer"]
    assert not opt["name"].str.endswith("copy_to_half").any()
