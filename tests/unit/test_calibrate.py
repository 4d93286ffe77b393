"""Calibration fits on synthetic measurements made by known models (the fit must recover
them), the measured/analytic join, and the fitted model's contract."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertscope.errors import BertscopeError
from bertscope.optable import Op, OpTable, ProfileFacts
from bertscope.perf import DeviceProfile, load_profile
from bertscope.perf.fit import (
    CategoryBandwidthEfficiency,
    fit_gemm,
    fit_memory,
    joined,
)
from bertscope.studies.measured import parse_specs
from bertscope.studies.validate import validate
from bertscope.taxonomy import Category, Phase, Sublayer


def test_fit_gemm_recovers_a_known_model() -> None:
    # Made by GemmEfficiency(max 0.5, W0 = 1e6 FLOP, D0 = 0) on a 100 GFLOP/s peak:
    # t = (W + 1e6) / (1e11 * 0.5); e.g. W = 2*64^3 = 524,288 -> t = 30.49 us
    shapes = [(64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (64, 512, 256)]
    rows = []
    for m, n, k in shapes:
        w = 2.0 * m * n * k
        rows.append({"m": m, "n": n, "k": k, "flops": w, "count": 1,
                     "time_s": (w + 1e6) / 5e10})
    fit = fit_gemm(pd.DataFrame(rows), 1e11, "test", robust=False)
    assert fit.model.max_fraction == pytest.approx(0.5, rel=1e-6)
    assert fit.model.half_saturation_flops == pytest.approx(1e6, rel=1e-6)
    assert fit.model.half_saturation_dim == 0.0
    assert fit.mape < 1e-9
    assert fit.model.source == "test"


def test_fit_memory_recovers_per_category_models() -> None:
    # dropout: t = B / (10 GB/s) + 2 us  -> max = 1e10 / 1e11 = 0.1, B0 = 2e-6 * 1e10 = 2e4
    # softmax: t = B / (50 GB/s)         -> max = 0.5, B0 = 0   (bandwidth 100 GB/s)
    rows = []
    for b in (1e5, 1e6, 1e7):
        rows.append({"category": "dropout", "bytes": b, "count": 1, "time_s": b / 1e10 + 2e-6})
        rows.append({"category": "softmax", "bytes": b, "count": 1, "time_s": b / 5e10})
    model = fit_memory(pd.DataFrame(rows), 1e11, "test", robust=False)
    mx, b0 = model.per_category["dropout"]
    assert mx == pytest.approx(0.1, rel=1e-6) and b0 == pytest.approx(2e4, rel=1e-6)
    mx, b0 = model.per_category["softmax"]
    assert mx == pytest.approx(0.5, rel=1e-6) and b0 == pytest.approx(0.0, abs=1e-3)


def test_robust_fit_ignores_an_outlier_run() -> None:
    # layernorm at 20 GB/s: t = B / 2e10 for B = 1e6, 2e6, 4e6, 8e6, 1.6e7; one run of the
    # 4e6 point was 10x slower (a noisy neighbour). Median of t/B = 1/2e10 -> max = 2e10/1e11
    # = 0.2 exactly; least squares through the outlier would not give 0.2.
    rows = [{"category": "layernorm", "bytes": b, "count": 1, "time_s": b / 2e10}
            for b in (1e6, 2e6, 4e6, 8e6, 1.6e7)]
    rows.append({"category": "layernorm", "bytes": 4e6, "count": 1, "time_s": 10 * 4e6 / 2e10})
    robust = fit_memory(pd.DataFrame(rows), 1e11, "test").per_category["layernorm"]
    assert robust == pytest.approx([0.2, 0.0])
    plain = fit_memory(pd.DataFrame(rows), 1e11, "test", robust=False).per_category["layernorm"]
    assert abs(plain[0] - 0.2) > 0.01


def test_robust_fit_keys_a_phase_family_seen_once() -> None:
    """Bias-gradient sums in backward at 10 GB/s (1e6 B in 1e-4 s, 2e6 B in 2e-4 s) and one
    LAMB norm key at 1 GB/s (1e6 B in 1e-3 s), bandwidth 1e11: a median rate needs one point,
    so the optimizer's reduction gets its own key, max = 1e9 / 1e11 = 0.01, instead of the
    pooled median of (1e-10, 1e-10, 1e-9) s/B -> 0.1. Least squares needs two sizes."""
    rows = [{"category": "reduction", "phase": "backward", "bytes": b, "count": 1,
             "time_s": b / 1e10} for b in (1e6, 2e6)]
    rows.append({"category": "reduction", "phase": "optimizer", "bytes": 1e6, "count": 1,
                 "time_s": 1e-3})
    per = fit_memory(pd.DataFrame(rows), 1e11, "test").per_category
    assert per["reduction@optimizer"] == pytest.approx([0.01, 0.0])
    assert per["reduction@backward"] == pytest.approx([0.1, 0.0])
    assert per["reduction"] == pytest.approx([0.1, 0.0])
    plain = fit_memory(pd.DataFrame(rows), 1e11, "test", robust=False).per_category
    assert "reduction@optimizer" not in plain and "reduction@backward" in plain


def test_fits_need_enough_points() -> None:
    with pytest.raises(BertscopeError, match="at least 3"):
        fit_gemm(pd.DataFrame([{"m": 1, "n": 1, "k": 1, "flops": 2.0, "count": 1,
                                "time_s": 1.0}]), 1e9, "x")


def _table(rows: list[Op]) -> OpTable:
    return OpTable.from_ops(rows)


def test_join_spreads_measured_only_time_and_merges_optimizer_layers() -> None:
    S, C, P = Sublayer, Category, Phase
    analytic = _table([
        Op("attn_norm", 0, S.ATTN_ADD_NORM, C.LAYERNORM, P.FORWARD, elements=10,
           bytes_read=80, bytes_written=40),
        Op("attn_out_dropout", 0, S.ATTN_ADD_NORM, C.DROPOUT, P.FORWARD, elements=10,
           bytes_read=40, bytes_written=50),
        Op("layer.adam_update", 3, S.OPTIMIZER, C.OPTIMIZER, P.OPTIMIZER, elements=5,
           bytes_read=100, bytes_written=60),
    ])
    measured = _table([
        Op("aten::layer_norm", 0, S.ATTN_ADD_NORM, C.LAYERNORM, P.FORWARD, time_s=3.0),
        Op("aten::dropout", 0, S.ATTN_ADD_NORM, C.DROPOUT, P.FORWARD, time_s=1.0),
        Op("aten::view", 0, S.ATTN_ADD_NORM, C.DATA_MOVEMENT, P.FORWARD, time_s=0.4),
        Op("aten::add_", -1, S.OPTIMIZER, C.OPTIMIZER, P.OPTIMIZER, time_s=2.0),
    ])
    j = joined(measured, analytic).set_index("category")
    # the view's 0.4 s is spread 3:1 over layernorm and dropout: 3.3 and 1.1
    assert j.loc["layernorm", "measured_s"] == pytest.approx(3.3)
    assert j.loc["dropout", "measured_s"] == pytest.approx(1.1)
    # the optimizer of layer 3 meets the measured optimizer time (layer -1)
    assert j.loc["optimizer", "measured_s"] == pytest.approx(2.0)
    assert j.loc["optimizer", "bytes"] == 160


def test_category_model_contract_and_round_trip(tmp_path) -> None:
    model = CategoryBandwidthEfficiency(per_category={"dropout": [0.1, 2e4]},
                                        max_fraction=0.3, half_saturation_bytes=0.0,
                                        gemm_fraction=0.9, source="unit test")
    rows = pd.DataFrame({
        "category": ["dropout", "dropout", "softmax", "gemm"],
        "bytes_read": [1e3, 1e6, 1e6, 1e6], "bytes_written": [0.0, 0.0, 0.0, 0.0],
        "count": [1, 1, 1, 1]})
    f = model.fraction(rows)
    # dropout: 0.1 * B / (B + 2e4): 1e3 -> 0.1/21 = 0.004762; 1e6 -> 0.1 * 1e6/1.02e6
    assert f[0] == pytest.approx(0.1 / 21)
    assert f[1] == pytest.approx(0.1 * 1e6 / 1.02e6)
    assert f[2] == pytest.approx(0.3) and f[3] == pytest.approx(0.9)
    assert np.all((f > 0) & (f <= 1))
    base = load_profile("a100")
    prof = base.with_models(bandwidth=model)
    path = prof.save(tmp_path / "p.json")
    again = DeviceProfile.load(path)
    assert again.bandwidth == model
    with pytest.raises(BertscopeError, match="max_fraction in"):
        CategoryBandwidthEfficiency(per_category={"x": [1.5, 0.0]})
    # a phase-specific entry wins over the category's own for rows of that phase family
    phased = CategoryBandwidthEfficiency(per_category={"dropout": [0.1, 0.0],
                                                       "dropout@backward": [0.4, 0.0]})
    rows2 = rows.iloc[:2].assign(phase=["forward", "backward_data"])
    assert phased.fraction(rows2) == pytest.approx([0.1, 0.4])


def test_specs_and_held_out_configs() -> None:
    assert [str(s) for s in parse_specs("bert-mini:8:128, bert-base:2:64")] == [
        "bert-mini:8:128", "bert-base:2:64"]
    for bad in ("bert-mini:8", "bert-mini:x:128", ""):
        with pytest.raises(BertscopeError):
            parse_specs(bad)
    with pytest.raises(BertscopeError, match="cannot be validated: bert-mini:8:128"):
        validate(parse_specs("bert-mini:8:128"), parse_specs("bert-mini:8:128"))


def test_combine_takes_each_rows_median_over_rounds() -> None:
    from bertscope.studies.measured import MeasuredRun, combine_rounds

    def result(add_s: float, mul_s: float | None, iterations: list[float]) -> MeasuredRun:
        rows = [Op("aten::add", 0, Sublayer.FFN1, Category.ELEMENTWISE, Phase.FORWARD,
                   elements=8, count=2, bytes_read=64.0, time_s=add_s)]
        if mul_s is not None:
            rows.append(Op("aten::mul", 0, Sublayer.FFN1, Category.ELEMENTWISE, Phase.FORWARD,
                           elements=8, time_s=mul_s))
        facts = ProfileFacts(iteration_times_s=tuple(iterations),
                             iteration_s=float(np.median(iterations)))
        table = OpTable.from_ops(rows, (facts,))
        return MeasuredRun(table=table, analytic=table)

    c = combine_rounds([result(1.0, 0.5, [10.0, 11.0]), result(3.0, None, [30.0, 12.0]),
                 result(100.0, 0.7, [13.0, 14.0])])
    rows = {o.name: o for o in c.table.df.itertuples()}
    assert rows["aten::add"].time_s == 3.0  # median of 1, 3, 100
    assert rows["aten::mul"].time_s == 0.5  # median of 0.5, 0 (absent), 0.7
    assert (rows["aten::add"].count, rows["aten::add"].bytes_read) == (2, 64.0)
    assert c.facts.iteration_s == 12.5  # median of 10, 11, 30, 12, 13, 14
    assert c.facts.rounds == 3


def test_gemm_fit_recovers_a_rate_per_phase() -> None:
    from bertscope.perf.fit import fit_gemm

    peak = 1e12
    true = {"forward": 0.4, "backward_data": 0.5, "backward_weight": 0.6}
    rows = []
    for phase, frac in true.items():
        for n in (512, 1024, 2048, 4096):  # min(M, N, K) = 512 throughout
            flops = 2 * 512 * n * 512
            rows.append({"flops": flops, "count": 1, "m": 512, "n": n, "k": 512,
                         "phase": phase, "time_s": flops / (peak * frac)})
    points = pd.DataFrame(rows)
    fit = fit_gemm(points, peak, "test")
    want = points["phase"].map(true).to_numpy()
    np.testing.assert_allclose(fit.model.fraction(points), want, rtol=1e-9)
    # weight gradients 0.6 / 0.4 = 1.5x the forward rate, whatever the base fraction
    f = fit.model.per_phase
    assert f["backward_weight"] / f["forward"] == pytest.approx(1.5)
    assert fit.mape == pytest.approx(0.0, abs=1e-9)
    recompute = points.assign(phase="recompute").iloc[:1]
    assert fit.model.fraction(recompute)[0] == pytest.approx(0.4)  # runs as forward


def test_gemm_fit_raises_a_peak_the_measured_gemms_beat() -> None:
    # the microbenchmark ran in a slow spell: it saw 50 GFLOP/s, the profiled GEMMs ran at
    # 80 (all shapes alike). Clamping the fraction at 1 would predict them 80 / 50 = 1.6x
    # slow; the fit instead raises the peak to 80 GFLOP/s and keeps fractions at most 1.
    from dataclasses import replace

    from bertscope.perf.fit import fit_gemm, with_gemm_peak

    rows = []
    for n in (512, 1024, 2048):
        flops = 2 * 512 * n * 512
        rows.append({"flops": flops, "count": 1, "m": 512, "n": n, "k": 512,
                     "time_s": flops / 80e9})
    points = pd.DataFrame(rows)
    fit = fit_gemm(points, 50e9, "test")
    assert fit.peak_flops == pytest.approx(80e9)
    assert fit.model.max_fraction == pytest.approx(1.0)
    pred = points["flops"] / (fit.peak_flops * fit.model.fraction(points))
    np.testing.assert_allclose(pred, points["time_s"], rtol=1e-9)
    base = load_profile("a100")
    slow = replace(base, device=replace(base.device, peaks={**base.device.peaks, "fp32": 50e9}))
    raised = with_gemm_peak(slow, fit)
    assert raised.device.peak_flops("fp32") == pytest.approx(80e9)
    assert "microbenchmark measured 5e+10" in raised.device.sources["peaks.fp32"]
    assert with_gemm_peak(base, fit) is base  # 19.5 TFLOP/s is already above 80 GFLOP/s


def test_robust_line_keeps_a_fixed_cost_through_an_outlier() -> None:
    """Theil-Sen on t = 2 x + 3 at x = 1..5, the x = 4 point 100 slower: 6 of the 10
    pairwise slopes are exactly 2 and the other 4 cannot outvote them, so a = 2; the
    intercepts y - 2x are 3, 3, 3, 103, 3, so c = 3. A median rate would drop the fixed
    cost (c = 0)."""
    from bertscope.perf.fit import _robust_line

    x = np.arange(1.0, 6.0)
    y = 2 * x + 3
    y[3] += 100
    assert _robust_line(x, y) == pytest.approx((2.0, 3.0))
    # one size: no slope between points; the median rate (t / x = 5, 5.5) and no fixed cost
    assert _robust_line(np.array([2.0, 2.0]), np.array([10.0, 11.0])) == (5.25, 0.0)
    # a line below the origin (negative fixed cost) falls back to the median rate too
    a, c = _robust_line(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 5.0]))  # 2x - 1
    assert (a, c) == (pytest.approx(np.median([1.0, 1.5, 5 / 3])), 0.0)


def test_memory_fit_keeps_a_fixed_cost_per_launch() -> None:
    # dropout at 10 GB/s plus 5 us a launch, bandwidth 1e11: from measured tables (robust)
    # max = 1e10 / 1e11 = 0.1 and B0 = 5e-6 * 1e10 = 5e4 bytes, as least squares gives
    # (a key's bytes and time are totals over its 2 launches of b bytes each)
    rows = [{"category": "dropout", "bytes": 2 * b, "count": 2,
             "time_s": 2 * (b / 1e10 + 5e-6)} for b in (1e5, 1e6, 4e6, 1e7)]
    mx, b0 = fit_memory(pd.DataFrame(rows), 1e11, "test").per_category["dropout"]
    assert mx == pytest.approx(0.1) and b0 == pytest.approx(5e4)


def test_gemm_fit_prices_batched_gemms_apart() -> None:
    """Plain GEMMs at 40% of a 1e12 peak and batched ones (attention's) at 10% in the same
    phase: the phase factor comes from the plain GEMMs, the batched factor is 0.1 / 0.4 =
    0.25 after it, and the fitted model reproduces both rates."""
    peak = 1e12
    rows = []
    for n in (512, 1024, 2048, 4096):
        flops = 2 * 512 * n * 512
        rows.append({"flops": flops, "count": 1, "m": 512, "n": n, "k": 512, "batch": 1,
                     "phase": "forward", "time_s": flops / (peak * 0.4)})
    for g in (64, 128, 256):
        flops = 2 * g * 512 * 512 * 512  # min(M, N, K) = 512 as the plain ones
        rows.append({"flops": flops, "count": 1, "m": 512, "n": 512, "k": 512, "batch": g,
                     "phase": "forward", "time_s": flops / (peak * 0.1)})
    points = pd.DataFrame(rows)
    for preserve_total in (False, True):
        fit = fit_gemm(points, peak, "test", preserve_total=preserve_total)
        assert fit.model.batched == pytest.approx(0.25)
        want = np.where(points["batch"] > 1, 0.1, 0.4)
        np.testing.assert_allclose(fit.model.fraction(points), want, rtol=1e-9)
    plain = fit_gemm(points.assign(batch=1), peak, "test")
    assert plain.model.batched == 1.0  # no batched GEMMs: no factor


def test_join_gives_a_keys_narrowest_gemm_shape() -> None:
    """A batched product's two gradients in one key, (128 x 128) @ (128 x 64) and
    (64 x 128) @ (128 x 128), head size 64: the key's shape is the first's (each is 64
    narrow), not the maxima (128, 128, 128) apart."""
    S, C, P = Sublayer, Category, Phase
    grads = [Op("score.grad_a", 0, S.ATTN_SCORE, C.BATCHED_GEMM, P.BACKWARD_DATA, m=128, n=64,
                k=128, batch=8, flops=2 * 8 * 128 * 64 * 128),
             Op("score.grad_b", 0, S.ATTN_SCORE, C.BATCHED_GEMM, P.BACKWARD_DATA, m=64, n=128,
                k=128, batch=8, flops=2 * 8 * 64 * 128 * 128)]
    measured = _table([Op("aten::bmm", 0, S.ATTN_SCORE, C.BATCHED_GEMM, P.BACKWARD_DATA,
                          time_s=1.0)])
    (row,) = joined(measured, _table(grads)).to_dict(orient="records")
    assert (row["m"], row["n"], row["k"], row["batch"]) == (128, 64, 128, 8)
    assert row["flops"] == 2 * 2 * 8 * 128 * 64 * 128


def test_robust_line_samples_pairs_of_many_points(monkeypatch) -> None:
    """Past the pair budget the slopes come from sampled pairs: on an exact line t = 3 x + 2
    every pair's slope is 3, so the sample gives the line exactly (pairs of equal x, drawn
    with replacement, are skipped)."""
    import bertscope.perf.fit as cal

    monkeypatch.setattr(cal, "_PAIRS", 100)  # 50 points: 1,225 pairs > 100
    x = np.linspace(1.0, 50.0, 50)
    assert cal._robust_line(x, 3 * x + 2) == pytest.approx((3.0, 2.0))
