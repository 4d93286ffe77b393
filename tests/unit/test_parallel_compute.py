"""The compute table reads op roles, never op names: Megatron's split from `tp_split`,
`pp_stage` and the phase, and results that do not change when every op is renamed."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd
import pytest

from bertscope.analytic.encoder import encoder_ops
from bertscope.config import RunConfig
from bertscope.optable import Op
from bertscope.parallel import (
    Checkpoint,
    Cluster,
    Layout,
    Workload,
    ZeroStage,
    compute,
    evaluate,
    search,
)
from bertscope.parallel.layouts import clear_compute_tables
from bertscope.presets import get_model
from bertscope.taxonomy import Phase, Sublayer
from tests.conftest import MODELLED, tiny

_D, _V, _S = compute._Dim, compute._Divide, compute._Section

# The split as the distributed model once read it from op names (Shoeybi et al. 2019): the
# oracle the role-based tags must reproduce row for row.
_COLUMN = {"q", "k", "v", "ffn1", "mlm_decoder"}
_ROW = {"attn_out", "ffn2"}
_SPLIT = {"score", "score_scale", "score_mask", "softmax", "attn_dropout", "context", "act",
          "mlm_loss", "tied_embedding", "context_merge", "q_heads", "k_heads", "v_heads"}


def _by_name(op: Op) -> tuple[int, int, int]:
    base, _, suffix = op.name.partition(".")
    col, row, split = base in _COLUMN, base in _ROW, base in _SPLIT
    if suffix in ("input_cast", "input_grad_cast"):  # autocast's cast of the whole input
        col = False
    fwd, dgrad, wgrad = suffix == "", suffix == "dgrad", suffix == "wgrad"
    dim = _D.NONE
    if col:
        dim = _D.N if fwd else _D.K if dgrad else _D.M if wgrad else _D.NONE
    elif row:
        dim = _D.K if fwd else _D.N if dgrad or wgrad else _D.NONE
    if split and op.batch > 0:
        dim = _D.BATCH
    if col or split or (row and not suffix.startswith(("bias_grad", "bias_cast"))):
        divide = _V.ALWAYS
    else:
        divide = _V.SP_ONLY if op.layer >= 0 else _V.FIXED
    if op.layer >= 0:
        section = _S.LAYER
    elif ((op.sublayer is Sublayer.EMBEDDING and base != "tied_embedding")
          or base == "shared_layer"):  # ALBERT's shared weights, cast before the layers
        section = _S.EMBEDDING
    else:
        section = _S.HEAD
    return int(section), int(dim), int(divide)


@pytest.mark.parametrize("family", MODELLED, ids=lambda f: f.value)
@pytest.mark.parametrize(("dropout", "checkpoint", "micro_batches", "masked_lm_only"), [
    (True, "none", 1, False), (False, "full", 2, False), (True, "full", 3, True),
    (True, "selective", 2, False)])
def test_tags_from_roles_match_the_split_by_name(family, dropout, checkpoint, micro_batches,
                                                 masked_lm_only) -> None:
    run = RunConfig(batch=2, seq=16, precision="bf16", dropout=dropout,
                    checkpoint=checkpoint, micro_batches=micro_batches,
                    masked_lm_only=masked_lm_only)
    rows = [op for op in encoder_ops(tiny(family), run) if op.phase is not Phase.OPTIMIZER
            and not op.name.endswith(".grad_accumulate")]  # per parameter group, not split
    tags = compute._tags(compute._columns(rows))
    got = list(zip(tags["section"].tolist(), tags["dim"].tolist(), tags["divide"].tolist(),
                   strict=True))
    for op, tag in zip(rows, got, strict=True):
        assert tag == _by_name(op), op.name
    # every kind occurs
    assert {d for _, d, _ in got} == {int(d) for d in _D}
    assert {v for _, _, v in got} == {int(v) for v in _V}


def _renamed(fn: Callable[..., list[Op]]) -> Callable[..., list[Op]]:
    def wrapper(*args: object, **kw: object) -> list[Op]:
        return [op._replace(name=f"x_{op.name}") for op in fn(*args, **kw)]

    return wrapper


@pytest.fixture
def fresh_tables() -> Iterator[None]:
    clear_compute_tables()
    yield
    clear_compute_tables()


@pytest.mark.parametrize("model", ["bert-base", "albert-base-v2"])
def test_renaming_every_op_changes_no_result(monkeypatch, fresh_tables, model) -> None:
    job = Workload(model=get_model(model), run=RunConfig(batch=1, seq=128, precision="bf16"),
                   global_batch=64)
    cluster = Cluster.build("a100", 8)
    jobs = [
        job.job(Layout(dp=2, tp=4)),
        job.job(Layout(dp=2, tp=4, sequence_parallel=True), 1, Checkpoint.SELECTIVE),
        job.job(Layout(dp=2, tp=2, pp=2, zero=ZeroStage.OPTIMIZER), 4, Checkpoint.FULL),
        job.job(Layout(dp=4, tp=2, zero=ZeroStage.GRADIENTS), 2),
        job.job(Layout(dp=8), 2),
    ]

    def results() -> tuple[list, pd.DataFrame]:
        clear_compute_tables()
        return [evaluate(j, cluster) for j in jobs], search(job, cluster).frame

    before, frame_before = results()
    monkeypatch.setattr(compute, "expand", _renamed(compute.expand))  # the rows it reads
    monkeypatch.setattr(compute, "optimizer_ops", _renamed(compute.optimizer_ops))
    names = compute._base_rows(job, 2)["name"]
    assert all(str(n).startswith("x_") for n in names)  # the rename took effect
    after, frame_after = results()
    assert after == before
    pd.testing.assert_frame_equal(frame_after, frame_before)
    # the roles were read, not ignored: four ranks split the heads' GEMMs and vocabulary loss
    table = compute.compute_table(job, cluster.profile, [8], [1, 4])
    assert table.head_fwd[0, 1, 0] < table.head_fwd[0, 0, 0] / 2
