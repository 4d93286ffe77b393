"""The same GEMMs in two configs of one saved validation, round by round: per launch, the
median over shared layer GEMM rows of B's time / A's time (rows' least over iterations, and
their median), to tell a config that runs its GEMMs slower from a machine that was slower
while it ran.

    python bench/per_launch_ratio.py DIR A B
    # e.g. validate_cpu_r16 (bench/results at d715217) bert-mini-16-128 bert-mini-16-128-ckpt-mb2
"""

from __future__ import annotations

import json
import sys

import numpy as np

PHASES = ("forward", "backward_data", "backward_weight")


def gemm_rows(path: str) -> dict[tuple, tuple[int, np.ndarray]]:
    """Layer GEMM rows of a saved measurement: key -> (launches, time per iteration)."""
    with open(path) as fh:
        doc = json.load(fh)
    out = {}
    for r, t in zip(doc["rows"], doc["meta"]["row_times_s"], strict=True):
        if r["category"] == "gemm" and r["phase"] in PHASES and r["layer"] >= 0:
            key = (r["name"], r["layer"], r["sublayer"], r["phase"], r["m"], r["n"], r["k"])
            out[key] = (r["count"], np.asarray(t, dtype=float))
    return out


def main(folder: str, a: str, b: str) -> None:
    """Print one line per round."""
    i = 0
    while True:
        try:
            ra, rb = (gemm_rows(f"{folder}/{s}.round{i}.json") for s in (a, b))
        except FileNotFoundError:
            break
        common = [k for k in ra if k in rb]
        ratio = {stat: float(np.median([stat(rb[k][1]) / rb[k][0] / (stat(ra[k][1]) / ra[k][0])
                                        for k in common])) for stat in (np.min, np.median)}
        print(f"round {i}: {len(common)} rows, per-launch time {b} / {a}: least "
              f"{ratio[np.min]:.3f}, median {ratio[np.median]:.3f}")
        i += 1


if __name__ == "__main__":
    main(*sys.argv[1:4])
