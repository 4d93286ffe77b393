"""Benchmark: `bertscope distributed --search` over >= 10,000 layouts; target under 1 s.

bert-large, global batch 6144 x seq 128, bf16 Adam, on 96 A100s (12 DGX A100 nodes): every
valid DP x TP x PP x micro-batches x ZeRO x recomputation x schedule layout. Prints, measured
in the same run:

- the search, cold (its per-(micro-batch, tp) compute table built from scratch) and warm;
- baseline 1: one analytic op-table build of the whole model (`bertscope.analytic.ops`);
- baseline 2: the naive search, a loop that builds and predicts the op table of each layout's
  micro-batch (what the search would cost without the cached, vectorized tables), timed on a
  sample and extrapolated to all layouts;
- baseline 3: `evaluate()` called once per layout (the same model, no vectorization), sampled
  and extrapolated.

    .venv/bin/python bench/bench_distributed.py
"""

from __future__ import annotations

import random

from _timing import median_time
from bertscope.analytic import ops
from bertscope.config import RunConfig
from bertscope.parallel import Cluster, Workload, evaluate, search
from bertscope.parallel.layouts import clear_compute_tables
from bertscope.parallel.search import enumerate_layouts, row_job
from bertscope.perf import predict
from bertscope.presets import get_model

TARGET_S = 1.0
MODEL, DEVICE, DEVICES, GLOBAL_BATCH, SEQ = "bert-large", "a100", 96, 6144, 128
SAMPLE = 24




def main() -> None:
    """Time the search and its baselines; print the ratios."""
    workload = Workload(model=get_model(MODEL), run=RunConfig(batch=1, seq=SEQ,
                                                              precision="bf16"),
                        global_batch=GLOBAL_BATCH)
    cluster = Cluster.build(DEVICE, DEVICES)
    layouts = enumerate_layouts(workload, cluster)
    n = len(layouts["dp"])
    cold = median_time(lambda: search(workload, cluster), setup=clear_compute_tables)
    warm = median_time(lambda: search(workload, cluster))
    result = search(workload, cluster)
    best = result.frame.iloc[0]
    print(f"{MODEL} global batch {GLOBAL_BATCH} x seq {SEQ} bf16 on {DEVICES} x {DEVICE} "
          f"({cluster.topology.name}): {n:,} layouts, {result.fitting:,} fit; best "
          f"{row_job(workload, best.to_dict()).label()} at "
          f"{best['tokens_per_s'] / 1e6:.2f} M tokens/s")
    print(f"search cold {cold * 1e3:.0f} ms (target {TARGET_S:.0f} s, ratio "
          f"{cold / TARGET_S:.2f}); warm (compute table cached) {warm * 1e3:.0f} ms; "
          f"{cold / n * 1e6:.1f} µs per layout")

    b = int(best["micro_batch"])
    build = median_time(lambda: ops(MODEL, batch=b, seq=SEQ, precision="bf16"))
    print(f"baseline 1: one op-table build {build * 1e3:.1f} ms; search / build "
          f"{cold / build:.1f}")

    rng = random.Random(0)
    rows = rng.sample(result.frame.to_dict("records"), SAMPLE)
    profile = cluster.profile

    def naive() -> None:
        for r in rows:
            predict(ops(MODEL, batch=int(r["micro_batch"]), seq=SEQ, precision="bf16",
                        micro_batches=int(r["micro_batches"])), profile)

    naive_each = median_time(naive, repeat=3) / SAMPLE
    print(f"baseline 2: naive build + predict per layout {naive_each * 1e3:.1f} ms, x {n:,} "
          f"layouts = {naive_each * n:.0f} s; naive / search {naive_each * n / cold:.0f}x")

    sample = [row_job(workload, r) for r in rows]

    def one_by_one() -> None:
        for job in sample:
            evaluate(job, cluster)

    each = median_time(one_by_one, repeat=3) / SAMPLE
    print(f"baseline 3: evaluate() per layout {each * 1e3:.2f} ms (tables cached), x {n:,} = "
          f"{each * n:.1f} s; per-layout / vectorized {each * n / cold:.0f}x")


if __name__ == "__main__":
    main()
