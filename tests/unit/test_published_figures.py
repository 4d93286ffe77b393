"""The published-figures benchmark (#31 item 7): bench/published_figures.toml parses, every
entry has its citation, settings and recipe, there are enough of them from enough independent
sources, and the benchmark's conversions are the sources' own arithmetic (checked by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.job import Job
from bertscope.presets import get_model

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_published",
                                                  ROOT / "bench" / "bench_published.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_published", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
SOURCES, FIGURES = BENCH.load()
BY_ID = {f["id"]: f for f in FIGURES}


def test_enough_figures_from_enough_independent_sources() -> None:
    assert len(FIGURES) >= 25
    assert len({f["source"] for f in FIGURES}) >= 5
    devices = {f["device"] for f in FIGURES}
    assert {"a100", "h100"} <= devices
    assert devices & {"tpu-v4", "mi250x", "mi300x"}  # at least one TPU or AMD figure
    assert {"fp8", "bf16"} <= {f["precision"] for f in FIGURES if f["devices"] > 1}


def test_every_figure_has_its_citation_settings_and_recipe() -> None:
    for f in FIGURES:
        for key in BENCH.REQUIRED:
            assert key in f, (f["id"], key)
        src = SOURCES[f["source"]]
        assert src["citation"].strip() and src["url"].startswith("https://"), f["source"]
        assert f["recipe"] in ("eager", "fused", "megatron")
        assert f["dp"] * f["tp"] * f["pp"] == f["devices"]
        assert f["global_batch"] % (f["micro_batch"] * f["dp"]) == 0, f["id"]
        assert f["published"] > 0
    for key, src in SOURCES.items():
        assert src.get("unit_note", "").strip(), key


def test_narayanan_equation_3_matches_the_analytic_gemm_flops() -> None:
    # Narayanan et al. 2021, 1.7B row of Table 1: l = 24, h = 2304, s = 2048, V = 51200, per
    # sequence (B = 1) with activation recomputation (eq. 3 counts the extra forward):
    # F = 96 B s l h^2 (1 + s/6h + V/16lh)
    #   = 96 x 2048 x 24 x 2304^2 x (1 + 2048/13824 + 51200/884736)
    #   = 25,048,249,270,272 x 1.2060185... = 30,208,652,476,416
    f = BY_ID["narayanan2021-gpt-1.7b"]
    model = get_model(str(ROOT / f["model"]))
    assert (model.num_layers, model.hidden, model.vocab_size) == (24, 2304, 51200)
    table = build(Job(model=model, run=RunConfig(batch=1, seq=2048, precision="fp16",
                                                 checkpoint="full")))
    c = table.columns
    gemm = np.isin(np.asarray(c["category"], dtype=object), ["gemm", "batched_gemm"])
    flops = float(np.asarray(c["flops"], dtype=float)[gemm].sum())
    assert flops == pytest.approx(30_208_652_476_416, rel=1e-9)
    assert BENCH.narayanan_flops_per_token(BENCH.dims(f["model"]), 2048) * 2048 == \
        pytest.approx(30_208_652_476_416, rel=1e-12)


def test_published_figures_convert_by_the_sources_own_arithmetic() -> None:
    # Narayanan 1.7B: 137 TFLOP/s per GPU / (30,208,652,476,416 / 2048 FLOPs per token)
    #   = 137e12 / 14,750,318,592 = 9288 tokens/s per GPU
    assert BENCH.published_tokens_per_device(BY_ID["narayanan2021-gpt-1.7b"]) == \
        pytest.approx(9288.0, abs=1.0)
    # Korthikanti 22B: 4 sequences x 2048 tokens in 1.10 s on 8 GPUs = 930.9 tokens/s per GPU
    assert BENCH.published_tokens_per_device(BY_ID["korthikanti2022-gpt-22b"]) == \
        pytest.approx(4 * 2048 / 1.10 / 8)
    # NVIDIA BERT 21.11, A100 fp16: 580 sequences/s x 128 tokens = 74,240 tokens/s
    assert BENCH.published_tokens_per_device(BY_ID["dle-bert-21.11-a100-fp16-s128"]) == 74240
    # MaxText 22B, 1x v4-128: N = 48 (4 x 6144^2 + 2 x 6144 x 24576) + 2 x 32000 x 6144
    #   = 48 x 452,984,832 + 393,216,000 = 22,136,487,936; per token 6 N + 6 x 48 x 6144 x 2048
    #   = 132,818,927,616 + 3,623,878,656 = 136,442,806,272; 0.567 x 275e12 / that = 1142.8
    assert BENCH.published_tokens_per_device(BY_ID["maxtext-22b-1x-v4-128"]) == \
        pytest.approx(0.567 * 275e12 / 136_442_806_272, rel=1e-9)


def test_each_figure_becomes_a_cli_command_with_its_settings() -> None:
    args = BENCH.cli_args(BY_ID["korthikanti2022-gpt-175b"], recipe=False)
    assert args[0] == "distributed"
    joined = " ".join(args)
    for part in ("--devices 64", "--tp 8", "--pp 8", "--dp 1", "--batch 1",
                 "--micro-batches 64", "--seq 2048", "--precision fp16", "--sp",
                 "--checkpoint selective", "--schedule interleaved", "--virtual-stages 3",
                 "--attention fused-softmax"):
        assert part in joined
    assert joined.count("--attention") == 1  # the source's kernel replaces the recipe's
    # the megatron recipe overlaps communication; the paper overlapped only part of TP's
    assert "--no-overlap-tp-comm" in args and "--overlap-grad-reduce" in args
    bridge = BENCH.cli_args(BY_ID["megatron-bridge-llama3-70b-h100-fp8"], recipe=False)
    assert {"--overlap-tp-comm", "--overlap-param-gather", "--sp"} <= set(bridge)
    with_recipe = BENCH.cli_args(BY_ID["dle-bert-21.11-v100-fp16-s128"], recipe=True)
    assert with_recipe[:2] == ["predict", "bert-large"]
    assert "--recipe fused" in " ".join(with_recipe) and "--fusion" not in with_recipe
    # 21.11 scripts the whole model (nvFuser): its chains fuse; 20.06 ran apex's eager model
    assert "--chain-fusion" in with_recipe
    apex_era = BENCH.cli_args(BY_ID["dle-bert-20.06-v100-fp16-s512"], recipe=True)
    assert not any("chain-fusion" in a for a in apex_era)


def test_the_iteration_time_is_read_from_either_command() -> None:
    assert BENCH.iteration_seconds("predicted iteration 64.9 ms   tokens/s") == \
        pytest.approx(0.0649)
    assert BENCH.iteration_seconds("Layout: dp8 ..., micro-batch 4: iteration 13.7 s, 4 k") == \
        pytest.approx(13.7)
    with pytest.raises(ValueError):
        BENCH.iteration_seconds("no time here")
