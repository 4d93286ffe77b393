"""What the recipes change in the distributed model: Megatron's vocabulary padding times the
tensor-parallel size, fp8 weight casts once per step, and a layout search that keeps the
recipe's layout defaults. Expected values by hand (arithmetic in the comments) or from the
cited sources: Megatron-LM megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding
("multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size"); Transformer
Engine's is_first_microbatch weight-cast caching (`analytic.fp8`)."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.analytic import build
from bertscope.analytic.families import padded_vocabulary, vocab_multiple
from bertscope.config import RunConfig
from bertscope.job import Job, Layout, Schedule, ZeroStage
from bertscope.parallel import Cluster, SearchSpace, Workload, evaluate
from bertscope.parallel.compute import _base_rows, clear_compute_tables, compute_table
from bertscope.parallel.memory import padded_stage_params, stage_params
from bertscope.parallel.search import enumerate_layouts
from bertscope.presets import get_model, with_changes
from bertscope.taxonomy import Category


# -- 1. vocabulary padding x tp ---------------------------------------------------------------
def test_megatron_pads_gpt2_to_1024_at_tp_8() -> None:
    run = RunConfig(recipe="megatron", batch=1, seq=32)
    gpt2 = get_model("gpt2")
    assert run.vocab_multiple_times_tp is True
    # 128 x 8 = 1024; ceil(50257 / 1024) = 50; 50 x 1024 = 51,200
    assert vocab_multiple(run, 8) == 1024
    assert padded_vocabulary(gpt2, run, 8).vocab_size == 51_200
    # tp 1: 128 only; ceil(50257 / 128) = 393; 393 x 128 = 50,304
    assert padded_vocabulary(gpt2, run, 1).vocab_size == 50_304
    # the fused recipe's padding (8, NVIDIA's BERT) does not grow with tp: 30522 -> 30528
    fused = RunConfig(recipe="fused", batch=1, seq=32)
    assert vocab_multiple(fused, 8) == 8
    assert padded_vocabulary(get_model("bert-large"), fused, 8).vocab_size == 30_528
    # an explicit option overrides the recipe's
    off = RunConfig(recipe="megatron", batch=1, seq=32, vocab_multiple_times_tp=False)
    assert padded_vocabulary(gpt2, off, 8).vocab_size == 50_304


def test_a_job_with_tp_builds_its_head_on_the_tp_padded_vocabulary() -> None:
    run = RunConfig(recipe="megatron", batch=1, seq=32, precision="bf16")
    d = build(Job(model=get_model("gpt2"), run=run, layout=Layout(tp=4))).df
    heads = set(d.loc[(d["category"] == Category.GEMM) & (d["n"] > 40_000), "n"].tolist())
    # 128 x 4 = 512; ceil(50257 / 512) = 99 (98 x 512 = 50176 is short); 99 x 512 = 50,688
    assert heads == {50_688}


def test_distributed_parameters_follow_the_padded_vocabulary() -> None:
    m = get_model("gpt2")  # word table tied to the LM head: vocab x 768 parameters, split t ways
    run = RunConfig(recipe="megatron", batch=1, seq=32)
    tp = np.array([1, 2, 8])
    first, _ = padded_stage_params(m, run, tp, np.ones(3, dtype=int))
    plain, _ = stage_params(m, tp, np.ones(3, dtype=int))
    # tp 1: 50304 - 50257 = 47 rows x 768 = 36,096
    # tp 2: multiple 256, ceil(50257/256) = 197 -> 50432; 175 rows x 768 / 2 = 67,200
    # tp 8: multiple 1024 -> 51200; 943 rows x 768 / 8 = 90,528
    np.testing.assert_allclose(first - plain, [36_096, 67_200, 90_528])


def test_the_compute_table_prices_the_head_on_each_tp_padded_vocabulary() -> None:
    clear_compute_tables()
    m = with_changes(get_model("gpt2"), num_layers=2, hidden=64, heads=4, intermediate=256,
                     vocab_size=1000, max_positions=64)
    on = Workload(model=m, run=RunConfig(recipe="megatron", seq=16, precision="bf16"),
                  global_batch=8)
    def head_n(tp: int) -> set[int]:
        rows = _base_rows(on, 2, tp)
        return set(rows["n"][(rows["category"] == Category.GEMM) & (rows["n"] >= 1000)])

    assert head_n(1) == {1024}  # 128: ceil(1000 / 128) = 8; 8 x 128 = 1024
    assert head_n(4) == {1024}  # 512: ceil(1000 / 512) = 2; 2 x 512 = 1024
    assert head_n(16) == {2048}  # 2048: ceil(1000 / 2048) = 1; 1 x 2048 = 2048


# -- 2. fp8 weight casts once per step ------------------------------------------------------
def _tiny() -> object:
    return with_changes(get_model("gpt2"), num_layers=2, hidden=64, heads=2, intermediate=256,
                        vocab_size=1000, max_positions=64)


def test_per_step_weight_cast_rows_are_the_weights_once() -> None:
    w = Workload(model=_tiny(), run=RunConfig(recipe="megatron", seq=16, precision="fp8",
                                              weight_cast="per_step", vocab_multiple=1),
                 global_batch=8)
    rows = _base_rows(w, 2)
    once = rows["per_step"]
    # one layer's linear weights: qkv 64 x 192 + out 64 x 64 + ffn1 64 x 256 + ffn2 256 x 64
    # = 12288 + 4096 + 16384 + 16384 = 49,152 elements; the LM head 1000 x 64 = 64,000;
    # each cast reads 2 bytes and writes 2 (fp8 and its transpose): 4 bytes per element
    total = (rows["bytes_read"] + rows["bytes_written"])[once].sum()
    assert total == 4 * (49_152 + 64_000)
    # the micro-batch's rows keep only the input/gradient casts
    names = [str(n) for n in rows["name"][~once]]
    assert not any(n.endswith("fp8_cast_b") for n in names)
    # under autocast's policy every cast is a micro-batch row
    w2 = Workload(model=_tiny(), run=RunConfig(recipe="megatron", seq=16, precision="fp8",
                                               weight_cast="per_micro_batch",
                                               vocab_multiple=1), global_batch=8)
    assert not _base_rows(w2, 2)["per_step"].any()


@pytest.mark.parametrize("cast", ["per_step", "per_micro_batch"])
def test_distributed_charges_per_step_casts_once_not_per_micro_batch(cast: str) -> None:
    clear_compute_tables()
    run = RunConfig(recipe="megatron", seq=16, precision="fp8", weight_cast=cast,
                    vocab_multiple=1)
    cluster = Cluster.build("h100", 2)
    lay = Layout(dp=1, tp=2)
    one = evaluate(Workload(model=_tiny(), run=run, global_batch=2).job(lay, 1), cluster)
    four = evaluate(Workload(model=_tiny(), run=run, global_batch=8).job(lay, 4), cluster)
    # same micro-batch (2 sequences); compute = m x (per micro-batch) + accumulation + casts
    # made once per step: (compute(4) - acc(4) - casts) = 4 x (compute(1) - casts)
    from bertscope.parallel.evaluation import evaluate_arrays, layout_arrays

    def parts(job: Job) -> dict[str, float]:
        r = evaluate_arrays(Workload.of(job), cluster, layout_arrays(job))
        return {k: float(v[0]) for k, v in r.items()}

    p1, p4 = parts(one.job), parts(four.job)
    casts = p1["weight_cast_s"]
    assert p4["weight_cast_s"] == pytest.approx(casts)  # x 1, not x micro-batches
    if cast == "per_step":
        assert casts > 0
    else:
        assert casts == 0
    assert p4["compute_s"] - p4["accumulate_s"] - casts == pytest.approx(
        4 * (p1["compute_s"] - casts), rel=1e-9)


def test_the_compute_table_keeps_per_step_rows_out_of_the_micro_batch() -> None:
    clear_compute_tables()
    profile = Cluster.build("h100", 1).profile
    kw = dict(seq=16, precision="fp8", vocab_multiple=1)
    per_step = compute_table(Workload(model=_tiny(), run=RunConfig(
        recipe="megatron", weight_cast="per_step", **kw), global_batch=2), profile, [2], [1])
    per_micro = compute_table(Workload(model=_tiny(), run=RunConfig(
        recipe="megatron", weight_cast="per_micro_batch", **kw), global_batch=2), profile,
        [2], [1])
    assert per_step.layer_once[0, 0, 0] > 0 and per_micro.layer_once[0, 0, 0] == 0
    assert per_step.layer_fwd[0, 0, 0] < per_micro.layer_fwd[0, 0, 0]


# -- 3. the search keeps the recipe's layout defaults ---------------------------------------
def _search_arrays(recipe: str, **space: object) -> dict[str, np.ndarray]:
    m = with_changes(get_model("gpt2"), num_layers=8, hidden=64, heads=4, intermediate=256,
                     vocab_size=1000, max_positions=64)
    w = Workload(model=m, run=RunConfig(recipe=recipe, seq=16, precision="bf16"),
                 global_batch=16)
    return enumerate_layouts(w, Cluster.build("a100", 8), SearchSpace(**space))


def test_search_with_megatron_keeps_only_the_recipes_flags() -> None:
    a = _search_arrays("megatron")
    tp, dp, pp = a["tp"], a["dp"], a["pp"]
    assert len(tp) > 0
    # sequence parallel wherever tp > 1 (never without tensor parallelism)
    assert np.array_equal(a["sp"], tp > 1)
    # the distributed optimizer (ZeRO 1) wherever dp > 1, none with one replica
    assert np.array_equal(a["zero"], np.where(dp > 1, int(ZeroStage.OPTIMIZER), 0))
    # overlap flags wherever they have an effect
    assert np.array_equal(a["overlap_tp_comm"], tp > 1)
    assert np.array_equal(a["overlap_grad_reduce"], dp > 1)
    assert np.array_equal(a["overlap_param_gather"], dp > 1)
    # interleaved wherever pp > 1, the micro-batches are a multiple of pp and a stage's
    # 8 / pp layers split into chunks (8 / pp >= 2); 1F1B elsewhere
    inter = (pp > 1) & (a["micro_batches"] % pp == 0) & (8 // pp >= 2)
    assert np.array_equal(a["schedule"] == Schedule.INTERLEAVED.code, inter)
    assert not np.any(a["schedule"] == Schedule.GPIPE.code)


def test_an_explicit_option_wins_over_the_recipe_in_the_search() -> None:
    a = _search_arrays("megatron", sequence_parallel=False, zero=0, overlap_tp_comm=False,
                       schedule="gpipe")
    assert not a["sp"].any() and not a["zero"].any() and not a["overlap_tp_comm"].any()
    assert np.all((a["pp"] == 1) | (a["schedule"] == Schedule.GPIPE.code))
    # the flags left unset still take the recipe's
    assert np.array_equal(a["overlap_grad_reduce"], a["dp"] > 1)


def test_eager_searches_every_layout_as_before() -> None:
    a = _search_arrays("eager")
    tp = a["tp"]
    # both sequence-parallel settings at tp > 1, every ZeRO stage, no overlap
    assert set(a["sp"][tp > 1].tolist()) == {False, True}
    assert len(set(a["zero"].tolist())) > 1
    assert not any(a[k].any() for k in ("overlap_tp_comm", "overlap_grad_reduce",
                                        "overlap_param_gather"))


def test_the_search_ranking_lists_only_layouts_with_the_recipes_flags() -> None:
    from bertscope.parallel import search

    m = with_changes(get_model("gpt2"), num_layers=4, hidden=64, heads=4, intermediate=256,
                     vocab_size=1000, max_positions=64)
    w = Workload(model=m, run=RunConfig(recipe="megatron", seq=16, precision="bf16"),
                 global_batch=8)
    frame = search(w, Cluster.build("a100", 4)).frame
    assert len(frame) > 0
    assert (frame["sp"] == (frame["tp"] > 1)).all()
    assert (frame["overlap_grad_reduce"] == (frame["dp"] > 1)).all()
    assert (frame["zero"] == np.where(frame["dp"] > 1, 1, 0)).all()
    best = search(w, Cluster.build("a100", 4)).best()
    assert best is not None and best.layout.sequence_parallel == (best.layout.tp > 1)
