"""`build` lays the blocks out as columns (`analytic.columns.expand_columns`): the same table,
row for row and dtype for dtype, as the row-object layout `blocks.expand` (an independent
implementation: one `Op` per layer row)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bertscope.analytic import build
from bertscope.analytic.blocks import expand
from bertscope.analytic.families import model_blocks
from bertscope.config import Family, RunConfig
from bertscope.optable import OpTable
from bertscope.presets import get_model

RUNS = [
    RunConfig(batch=2, seq=16),
    RunConfig(batch=3, seq=8, precision="bf16", optimizer="lamb", micro_batches=3),
    RunConfig(batch=1, seq=16, precision="fp16", checkpoint="full", dropout=False),
    RunConfig(batch=2, seq=16, masked_lm_only=True, optimizer="sgd", attention="sdpa"),
]


@pytest.mark.parametrize("run", RUNS, ids=range(len(RUNS)))
def test_columns_equal_the_row_layout(tiny_model, run) -> None:
    if run.masked_lm_only and not tiny_model.has_mlm_head:
        run = dataclasses.replace(run, masked_lm_only=False)  # decoders have no MLM head
    if tiny_model.max_seq != run.seq and tiny_model.family is Family.VIT:
        run = dataclasses.replace(run, seq=tiny_model.max_seq)  # its patches + 1
    if tiny_model.family is Family.T5:
        run = dataclasses.replace(run, decoder_seq=run.seq // 2 + 1)  # a length of its own
    table = build(tiny_model, run)
    rows = OpTable.from_ops(expand(model_blocks(tiny_model, run), tiny_model.num_layers,
                                   run.micro_batches))
    assert len(table) == len(rows)
    for name, want in rows.columns.items():
        got = table.columns[name]
        assert got.dtype == want.dtype, name
        if want.dtype.kind == "f":
            np.testing.assert_array_equal(got, want, err_msg=name)  # NaN == NaN here
        else:
            assert list(got) == list(want), name


@pytest.mark.parametrize("name", ["bert-large", "albert-base-v2", "roberta-base", "gpt2",
                                  "llama2-70b", "t5-large", "vit-base"])
def test_presets_equal_the_row_layout(name) -> None:
    m = get_model(name)
    run = RunConfig(batch=4, seq=m.max_seq if m.family is Family.VIT else 128, micro_batches=2,
                    decoder_seq=32 if m.family is Family.T5 else None)
    table = build(m, run)
    rows = OpTable.from_ops(expand(model_blocks(m, run), m.num_layers, 2))
    assert table.df.equals(rows.df)
    # 24 layers x the layer block's rows, so layer indices run 0..23 in forward order
    if name == "bert-large":
        fwd = table.columns["layer"][table.columns["phase"] == "forward"]
        layers = fwd[fwd >= 0]
        assert list(dict.fromkeys(layers.tolist())) == list(range(24))
