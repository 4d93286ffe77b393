"""Benchmark: build a full bert-large op table (target: under 50 ms).

Prints the median build time, its ratio to the 50 ms target, and a baseline measured in the
same run: the bare cost of a pandas DataFrame of as many rows (the floor any op table pays).

    .venv/bin/python bench/bench_optable.py
"""

from __future__ import annotations

import statistics
import time

import pandas as pd

from bertscope.analytic import ops
from bertscope.optable import Op

TARGET_S = 0.050


def _median(fn, repeat: int = 21) -> float:
    fn()  # warm up imports and caches
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    """Time the op-table build for a few configs against the DataFrame floor."""
    for label, kw in [
        ("bert-large b32 s128 fp32 adam", dict(batch=32, seq=128)),
        ("bert-large b64 s512 bf16 lamb ckpt x4", dict(batch=64, seq=512, precision="bf16",
                                                       optimizer="lamb", checkpointing=True,
                                                       micro_batches=4)),
    ]:
        table = ops("bert-large", **kw)
        rows = [Op(*r) for r in table.df[list(Op._fields)].itertuples(index=False)]
        build = _median(lambda kw=kw: ops("bert-large", **kw))
        floor = _median(lambda rows=rows: pd.DataFrame.from_records(rows, columns=Op._fields))
        print(f"{label}: {len(table)} rows, build {build * 1e3:.1f} ms "
              f"(target {TARGET_S * 1e3:.0f} ms, ratio {build / TARGET_S:.2f}); "
              f"DataFrame floor {floor * 1e3:.1f} ms (build/floor {build / floor:.1f}x)")


if __name__ == "__main__":
    main()
