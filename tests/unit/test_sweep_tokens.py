"""Rows that read batch and seq only through their product are timed on the distinct
products (`sweep.tokens`): the arithmetic stays that of plain numpy, a value stays compact
only where it is a function of b x s, and the sweep gives the per-configuration path's
figures with the token space in use."""

from __future__ import annotations

import numpy as np
import pytest

import bertscope.sweep.engine as engine
from bertscope.analytic.families import model_blocks
from bertscope.config import RunConfig
from bertscope.presets import get_model
from bertscope.sweep import make_grid, sweep
from bertscope.sweep import tokens as tk
from bertscope.sweep.tokens import Axis, TokenArray, TokenSpace
from bertscope.taxonomy import Category

B, S = np.array([1, 2, 3, 4]), np.array([1, 2, 3, 4])


def _axes() -> tuple[Axis, Axis, np.ndarray, np.ndarray]:
    """batch and seq on the group's batch (5) and seq (6) dimensions, wrapped and plain."""
    b, s = B.reshape(1, 1, 1, 1, 1, -1, 1, 1), S.reshape(1, 1, 1, 1, 1, 1, -1, 1)
    space = TokenSpace.of(b, s)
    assert space is not None
    return Axis(b, "batch", space), Axis(s, "seq", space), b, s


def test_dimensions_are_the_groups() -> None:
    # the space sits on the group's own batch and seq dimensions, whatever its axes: bert-tiny
    # has 5 model dimensions, then batch (5), seq (6), micro-batches, decoder-seq and the
    # recipe's vocabulary multiple (the numeric run fields)
    grid = make_grid(["bert-tiny"], ["a100"], batch=range(1, 5), seq=range(1, 5))
    group = next(grid.groups())
    _, run = group.views(tokens=True)
    space = run.space
    assert (space.batch_dim, space.seq_dim, space.nd) == (
        group.axes.index("batch"), group.axes.index("seq"), len(group.axes)) == (5, 6, 10)
    assert group.axes[:5] == ("num_layers", "hidden", "heads", "intermediate", "vocab_size")


def test_space_of_distinct_products() -> None:
    # 1..4 x 1..4: products {1, 2, 3, 4, 6, 8, 9, 12, 16}, 9 of 16 (<= 0.8 x 16)
    space = TokenSpace.of(B, S)
    assert space is not None and space.size == 9
    assert list(space.values) == [1, 2, 3, 4, 6, 8, 9, 12, 16]
    # b = 3, s = 4 (index 2 x 4 + 3 = 11) has product 12, the 8th distinct value (index 7)
    assert space.inverse[2 * 4 + 3] == 7
    # {1, 2} x {3, 5}: products 3, 5, 6, 10 all distinct: 4 > 0.8 x 4, not worth it
    assert TokenSpace.of(np.array([1, 2]), np.array([3, 5])) is None
    assert TokenSpace.of(np.array([7]), S) is None  # one batch value: nothing to share


def test_product_and_functions_of_it_stay_compact() -> None:
    b, s, pb, ps = _axes()
    t = b * s
    assert isinstance(t, TokenArray) and t.data.shape == (1, 1, 1, 1, 1, 9, 1, 1)
    assert isinstance(s * b, TokenArray)
    h = np.array([8, 16, 32]).reshape(1, 3, 1, 1, 1, 1, 1, 1)  # a model axis: neutral
    y = -(-(t * h + 3) * 15 // 100)
    assert isinstance(y, TokenArray) and y.data.shape == (1, 3, 1, 1, 1, 9, 1, 1)
    np.testing.assert_array_equal(np.asarray(y), -(-(pb * ps * h + 3) * 15 // 100))
    assert y.shape == (1, 3, 1, 1, 1, 4, 4, 1)
    z = t
    z += 1  # augmented assignment rebinds, t unchanged
    np.testing.assert_array_equal(np.asarray(t), pb * ps)
    np.testing.assert_array_equal(np.asarray(z), pb * ps + 1)
    q, r = np.divmod(t, 3)
    assert isinstance(q, TokenArray) and isinstance(r, TokenArray)
    np.testing.assert_array_equal(np.asarray(q) * 3 + np.asarray(r), pb * ps)


def test_mixing_with_batch_or_seq_apart_gives_the_plain_array() -> None:
    b, s, pb, ps = _axes()
    t = b * s
    for got, want in [(t * s, pb * ps * ps), (t * b, pb * pb * ps), (t + pb, pb * ps + pb),
                      (b * (s * 15 // 100), pb * (ps * 15 // 100)), (b + s, pb + ps),
                      (np.where(t > 4, t, 0), np.where(pb * ps > 4, pb * ps, 0))]:
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, want)
    assert np.sum(t) == (pb * ps).sum() == 100  # (1+2+3+4)^2: a reduction sees every config
    assert t.max() == 16 and len(np.asarray(t).ravel()) == 16


def _frame(monkeypatch: pytest.MonkeyPatch, worth: float, **kw: object):
    monkeypatch.setattr(tk, "WORTH", worth)
    f = sweep(**kw).frame  # type: ignore[arg-type]
    return f.sort_values(["model", "device", "batch", "seq", "micro_batches"]).reset_index(
        drop=True)


@pytest.mark.parametrize("models", [["bert-tiny", "albert-base-v2"], ["gpt2", "llama2-7b"]])
def test_sweep_with_and_without_the_token_space(monkeypatch, models) -> None:
    # 1..6 x {1, 2, 4, 8, 16}: the 30 products take 18 values (1-6, 8, 10, 12, 16, 20, 24,
    # 32, 40, 48, 64, 80, 96), <= 0.8 x 30, so the space is used
    kw = {"models": models, "devices": ["a100", "tpu-v4"], "batch": range(1, 7),
          "seq": [1, 2, 4, 8, 16], "micro_batches": [1, 2], "checkpoint": ["none", "full"],
          "precision": ["bf16"], "attention": ["eager", "sdpa"], "fusion": [False, True]}
    grid = make_grid(models, ["a100"], batch=range(1, 7), seq=[1, 2, 4, 8, 16])
    piece = next(grid.groups())
    m, run = piece.views(tokens=True)
    assert run.space is not None and run.space.size == 18
    plain_rows, token_rows = engine._buckets(model_blocks(m, run), m, run, piece.shape)
    assert token_rows and plain_rows  # both kinds of rows occur
    on, off = _frame(monkeypatch, 0.8, **kw), _frame(monkeypatch, 0.0, **kw)
    assert len(on) == len(off) == 2 * 2 * 30 * 2 * 2 * 2 * 2
    for c in on.columns:
        if on[c].dtype.kind == "f":
            np.testing.assert_allclose(on[c], off[c], rtol=1e-12, atol=1e-15, err_msg=c)
        else:
            assert (on[c].astype(str) == off[c].astype(str)).all(), c


def test_token_rows_are_the_tokens_functions() -> None:
    # bert-tiny b in 1..4, s in 1..4: a row is compact iff its fields depend on b x s only;
    # the attention scores (b heads s^2) and the position embeddings (s rows) are not
    grid = make_grid(["bert-tiny"], ["a100"], batch=range(1, 5), seq=range(1, 5))
    piece = next(grid.groups())
    m, run = piece.views(tokens=True)
    _, token_rows = engine._buckets(model_blocks(m, run), m, run, piece.shape)
    names = {op.name for bk in token_rows for op, _ in bk.rows}  # (alike rows merged:
    assert {"ffn1", "ffn1.wgrad", "mlm_loss"} <= names  # the first's name is kept)
    assert Category.LAYERNORM in {op.category for bk in token_rows for op, _ in bk.rows}
    assert not names & {"score", "softmax", "context", "add_position"}
    cfg = get_model("bert-tiny")
    for i, t in enumerate(run.space.values):  # compact values: the per-config rows at each
        b = next(b for b in range(1, 5) if t % b == 0 and t // b <= 4)  # distinct product
        ref = {}
        for blk in model_blocks(cfg, RunConfig(batch=b, seq=int(t // b))):
            for r in [*blk.rows, *blk.later]:
                ref.setdefault((r.name, r.phase), r)
        for bk in token_rows:
            for op, _ in bk.rows:
                for c in ("flops", "bytes_read", "bytes_written", "m", "n", "k"):
                    got = np.ravel(np.broadcast_to(getattr(op, c), bk.shape))[i]
                    assert got == getattr(ref[op.name, op.phase], c), (op.name, c, t)
