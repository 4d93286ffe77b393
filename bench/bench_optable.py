"""Benchmark: build a full bert-large op table (target: under 50 ms).

Prints the median build time, its ratio to the 50 ms target, and a baseline measured in the
same run: the bare cost of a pandas DataFrame of as many rows (the floor any op table pays).

    .venv/bin/python bench/bench_optable.py
"""

from __future__ import annotations

import pandas as pd

from _timing import median_time
from bertscope.analytic import ops
from bertscope.optable import Op

TARGET_S = 0.050
REPEAT = 21




def main() -> None:
    """Time the op-table build for a few configs against the DataFrame floor."""
    for label, kw in [
        ("bert-large b32 s128 fp32 adam", dict(batch=32, seq=128)),
        ("bert-large b64 s512 bf16 lamb ckpt x4", dict(batch=64, seq=512, precision="bf16",
                                                       optimizer="lamb", checkpoint="full",
                                                       micro_batches=4)),
    ]:
        table = ops("bert-large", **kw)
        rows = [Op(*r) for r in table.df[list(Op._fields)].itertuples(index=False)]
        build = median_time(lambda kw=kw: ops("bert-large", **kw), REPEAT)
        floor = median_time(
            lambda rows=rows: pd.DataFrame.from_records(rows, columns=Op._fields), REPEAT)
        print(f"{label}: {len(table)} rows, build {build * 1e3:.1f} ms "
              f"(target {TARGET_S * 1e3:.0f} ms, ratio {build / TARGET_S:.2f}); "
              f"DataFrame floor {floor * 1e3:.1f} ms (build/floor {build / floor:.1f}x)")


if __name__ == "__main__":
    main()
