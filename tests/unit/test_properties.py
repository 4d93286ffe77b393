"""Property tests (hypothesis) of the analytic op model's invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bertscope.analytic import build
from bertscope.config import Family, Optimizer, Precision, RunConfig
from bertscope.taxonomy import Category, Phase
from tests.conftest import tiny

FAST = settings(max_examples=40, deadline=None)

families = st.sampled_from(list(Family))
heads = st.sampled_from([1, 2, 4])
head_dims = st.sampled_from([8, 16, 32])
sizes = st.integers(1, 6)
seqs = st.integers(1, 48)
precisions = st.sampled_from(list(Precision))
optimizers = st.sampled_from(list(Optimizer))


def _model(family: Family, a: int, d: int, layers: int = 2):
    return tiny(family, hidden=a * d, heads=a, intermediate=4 * a * d, num_layers=layers)


def _totals(m, **run):
    d = build(m, RunConfig(**run)).df
    return d["flops"].sum(), (d["bytes_read"] + d["bytes_written"]).sum(), d


@FAST
@given(families, heads, head_dims, sizes, seqs, precisions, optimizers, st.booleans(),
       st.booleans(), st.integers(1, 3))
def test_flops_and_bytes_are_non_negative(family, a, d, b, s, prec, opt, drop, ckpt, micro):
    _, _, df = _totals(_model(family, a, d), batch=b, seq=s, precision=prec, optimizer=opt,
                       dropout=drop, checkpointing=ckpt, micro_batches=micro)
    for col in ("flops", "bytes_read", "bytes_written", "saved_bytes", "intensity"):
        assert (df[col] >= 0).all(), col
    assert (df["bytes_read"] + df["bytes_written"] > 0).all()


@FAST
@given(families, heads, head_dims, sizes, seqs, precisions)
def test_totals_grow_with_batch_seq_and_hidden(family, a, d, b, s, prec):
    m = _model(family, a, d)
    f, by, _ = _totals(m, batch=b, seq=s, precision=prec)
    f_b, by_b, _ = _totals(m, batch=b + 1, seq=s, precision=prec)
    f_s, by_s, _ = _totals(m, batch=b, seq=s + 1, precision=prec)
    f_h, by_h, _ = _totals(_model(family, a, 2 * d), batch=b, seq=s, precision=prec)
    for bigger_f, bigger_b in ((f_b, by_b), (f_s, by_s), (f_h, by_h)):
        assert bigger_f > f
        assert bigger_b > by


@FAST
@given(families, heads, head_dims, sizes, seqs, st.booleans(), st.integers(1, 3))
def test_backward_gemm_flops_are_twice_forward(family, a, d, b, s, ckpt, micro):
    _, _, df = _totals(_model(family, a, d), batch=b, seq=s, checkpointing=ckpt,
                       micro_batches=micro)
    g = df[df["category"].isin([Category.GEMM, Category.BATCHED_GEMM])]
    fwd = g[g["phase"] == Phase.FORWARD]["flops"].sum()
    wgrad = g[g["phase"] == Phase.BACKWARD_WEIGHT]["flops"].sum()
    dgrad = g[g["phase"] == Phase.BACKWARD_DATA]["flops"].sum()
    assert wgrad + dgrad == 2 * fwd


@FAST
@given(families, heads, head_dims, sizes, seqs, precisions)
def test_lamb_moves_at_least_what_adam_does(family, a, d, b, s, prec):
    m = _model(family, a, d)

    def opt_bytes(opt):
        df = build(m, RunConfig(batch=b, seq=s, precision=prec, optimizer=opt)).df
        o = df[df["phase"] == Phase.OPTIMIZER]
        return o["bytes_read"].sum(), o["bytes_written"].sum()

    lamb_r, lamb_w = opt_bytes(Optimizer.LAMB)
    for other in (Optimizer.ADAM, Optimizer.ADAMW):
        r, w = opt_bytes(other)
        assert lamb_r >= r
        assert lamb_w >= w
