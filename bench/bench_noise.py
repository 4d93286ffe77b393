"""Run-to-run noise of measured iterations on this machine: the same configs profiled
repeatedly, side by side, printing the spread (max/min) of the iteration and optimizer times.

    .venv/bin/python bench/bench_noise.py --repeat 3
"""

from __future__ import annotations

import argparse

from bertscope.measure.profile import profile
from bertscope.studies.validate import parse_specs


def main() -> None:
    """Profile each config `--repeat` times and print the spread."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="bert-small:4:128,bert-base:2:128")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    seen: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for spec in parse_specs(args.configs):
            r = profile(*spec.configs(), iters=3, warmup=1)
            d = r.table.df
            opt = float(d.loc[d["phase"] == "optimizer", "time_s"].sum())
            seen.setdefault(str(spec), []).append((r.meta["iteration_s"], opt))
            print(f"{spec}: iteration {r.meta['iteration_s']:.3f} s, optimizer {opt:.3f} s",
                  flush=True)
    for spec, runs in seen.items():
        it = [a for a, _ in runs]
        op = [b for _, b in runs]
        print(f"[spread] {spec}: iteration max/min {max(it) / min(it):.2f}, optimizer "
              f"max/min {max(op) / min(op):.2f} over {len(runs)} runs")


if __name__ == "__main__":
    main()
