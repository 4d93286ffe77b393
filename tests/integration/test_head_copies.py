"""The attention heads' split/merge copies, measured on every family's reference model and
compared with the analytic op table's `data_movement` rows of the head layout.

Measured: an op the profiler attributes as data movement that runs an `aten::copy_` inside
it (a `.contiguous()` or a `reshape` that could not be a view; pure views run none), keyed
by layer, sublayer, phase and elements as the profile attributes it. These are the expected
values; the analytic rows are the ones under test."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bertscope.analytic import build
from bertscope.config import Attention, Family, ModelConfig, RunConfig
from bertscope.taxonomy import Category, Phase, Sublayer
from tests.conftest import MODELLED, tiny
from tests.integration.test_profile import _run

torch = pytest.importorskip("torch")
from bertscope.measure.profile import profile  # noqa: E402
from bertscope.trace.attribute import Attributor  # noqa: E402

HEAD_SUBS = {Sublayer.QKV, Sublayer.ATTN_CONTEXT, Sublayer.ATTN_FUSED, Sublayer.CROSS_QKV,
             Sublayer.CROSS_CORE}
"""Where the head split (Q, K, V) and merge (the context) copies are attributed; the other
copies (Llama's repeat_kv in attn_score, T5's bias cast) are modelled and checked elsewhere."""

Key = tuple[int, str, str, int]  # layer, sublayer, phase, elements


def _copies_inside(evt: Any) -> bool:
    return any(c.name == "aten::copy_" or _copies_inside(c) for c in evt.cpu_children)


def _measured(m: ModelConfig, run: RunConfig, monkeypatch: pytest.MonkeyPatch) -> Counter[Key]:
    """Copying data-movement rows of the head layout in one profiled iteration."""
    seen: Counter[Key] = Counter()
    real = Attributor._add

    def add(self: Attributor, evt: Any, phase: Phase, where: Any) -> Any:
        key, t = real(self, evt, phase, where)
        _, layer, sub, cat, ph = key[:5]
        if cat is Category.DATA_MOVEMENT and sub in HEAD_SUBS and _copies_inside(evt):
            seen[(layer, str(sub), str(ph), key[9])] += 1
        return key, t

    monkeypatch.setattr(Attributor, "_add", add)
    # every attributed event is counted, the thrown-away settling iterations' too (a fresh
    # process's first profile settles its allocator once): profile the one iteration only
    monkeypatch.setattr("bertscope.measure.profile.MAX_SETTLING", 0)
    profile(m, run, iters=1, warmup=0)
    return seen


def _analytic(m: ModelConfig, run: RunConfig) -> Counter[Key]:
    df = build(m, run).df
    dm = df[(df["category"] == Category.DATA_MOVEMENT) & df["sublayer"].isin(HEAD_SUBS)]
    out: Counter[Key] = Counter()
    for r in dm.itertuples():
        out[(r.layer, str(r.sublayer), str(r.phase), int(r.elements))] += int(r.count)
    return out


CASES = [(f, a) for f in MODELLED for a in (Attention.EAGER, Attention.SDPA)
         if not (f in (Family.T5, Family.XLNET) and a is Attention.SDPA)]  # eager only


@pytest.mark.parametrize(("family", "attention"), CASES,
                         ids=lambda c: getattr(c, "value", str(c)))
def test_head_copies_match_the_measurement(family: Family, attention: Attention,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    m = tiny(family)
    base = _run(m)
    # sdpa without dropout: torch's CPU flash kernel (with attention dropout a CPU falls back
    # to the math kernel, see the test below)
    run = RunConfig(batch=base.batch, seq=base.seq, decoder_seq=base.decoder_seq,
                    attention=attention, dropout=attention is Attention.EAGER)
    want = _measured(m, run, monkeypatch)
    got = _analytic(m, run)
    assert got == want
    if attention is Attention.EAGER:  # every layer copies: none of it is vacuous
        layers = m.num_layers + m.decoder_layer_count
        assert {k[0] for k in want} == set(range(layers))


def test_eager_copy_pattern_by_hand() -> None:
    """tiny BERT, batch 2, seq 16, hidden 64 (4 heads of 16): B S h = 2048 elements per copy;
    per layer one forward merge, its backward, and dQ, dK, dV: 5 rows of 2048 x 4 bytes read
    and written, no FLOPs, nothing saved. tiny GPT-2 (fused QKV): dK is read in place by the
    split's concatenation, 4 rows. tiny Llama (2 key/value heads of 4): dK and dV at 1024."""
    for family, sizes in ((Family.BERT, [2048] * 5), (Family.GPT2, [2048] * 4),
                          (Family.LLAMA, [2048, 2048, 2048, 1024, 1024])):
        df = build(tiny(family), RunConfig(batch=2, seq=16)).df
        rows = df[(df["category"] == Category.DATA_MOVEMENT) & df["sublayer"].isin(HEAD_SUBS)
                  & (df["layer"] == 0)]
        assert sorted(rows["elements"], reverse=True) == sizes, family
        assert (rows["bytes_read"] == 4 * rows["elements"]).all()
        assert (rows["bytes_written"] == 4 * rows["elements"]).all()
        assert (rows["flops"] == 0).all() and (rows["saved_bytes"] == 0).all()
        assert (rows["phase"] == Phase.FORWARD).sum() == 1


def test_cpu_sdpa_with_dropout_falls_back_to_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not modelled (the analytic sdpa rows are FlashAttention's): with attention dropout a
    CPU runs torch's math kernel, which copies the heads as eager does (5 copies per layer of
    2048 elements). If torch's CPU kernel learns dropout, this fails and the docs' caveat in
    analytic/attention.py can go."""
    m = tiny(Family.BERT)
    run = RunConfig(batch=2, seq=16, attention=Attention.SDPA, dropout=True)
    got = _measured(m, run, monkeypatch)
    assert sum(got.values()) == 5 * m.num_layers
    assert not _analytic(m, run)
