"""Host time between ops, per launch: which launches carry it? On saved validation
measurements, the calibration's median gap per launch (`perf.fit.fit_host_gap`) predicts
each held-out config's gap (measured iteration - sum of measured ops) counting all analytic
launches (the model at ba42a11), or all but autocast's casts (rows named *_cast: the
experiment behind `Issuer.AUTOCAST`, which the model now reads), or forward launches only;
printed as each held-out config's gap error in % of its iteration, and the held-out MAPE
the model would have with the gap counted without casts (the validate JSON's errors
shifted by the gap change).

    python bench/host_gap_variants.py DIR:JSON [DIR:JSON ...]
    # DIR a `bertscope validate --results-dir` of the 7 + 5 configs of validate_cpu_r13..,
    # JSON its --output; results: bench/results/host_gap_variants.txt
"""

from __future__ import annotations

import json
import sys

import numpy as np

from bertscope.studies.measured import combine_rounds, load_result, retake

CAL = ["bert-mini-16-128", "bert-mini-16-128-bf16", "bert-small-8-128", "bert-small-8-128-bf16",
       "bert-medium-4-128", "bert-mini-8-128-lamb", "bert-medium-4-128-lamb"]
VAL = ["bert-small-8-128-bf16-lamb", "bert-mini-16-128-ckpt-mb2",
       "examples_configs_tiny-gpt2.json-8-128", "bert-small-4-128-nodropout",
       "bert-mini-16-64-bf16"]


def features(folder: str, stem: str) -> dict[str, float]:
    """Measured gap and iteration (rounds combined by their least) and launch counts."""
    r = combine_rounds([retake(load_result(f"{folder}/{stem}.round{i}.json"), "min")
                        for i in range(3)])
    a = r.analytic.df
    count = a["count"].astype(float)
    cast = a["name"].str.endswith("_cast")
    fwd = a["phase"].astype(str).isin(["forward", "recompute"])
    return {"gap": r.facts.iteration_s - float(r.table.df["time_s"].sum()),
            "iteration": r.facts.iteration_s, "all": count.sum(),
            "no casts": count[~cast].sum(), "forward": count[fwd & ~cast].sum()}


def main(pairs: list[str]) -> None:
    """Print the variants' gap errors and the MAPE effect per saved run."""
    for pair in pairs:
        folder, _, path = pair.partition(":")
        f = {s: features(folder, s) for s in (*CAL, *VAL)}
        print(folder)
        per = {}
        for variant in ("all", "no casts", "forward"):
            h = float(np.median([f[s]["gap"] / f[s][variant] for s in CAL]))
            per[variant] = h
            errs = [100 * (h * f[s][variant] - f[s]["gap"]) / f[s]["iteration"] for s in VAL]
            print(f"  {variant:9s} gap error, % of iteration: "
                  + " ".join(f"{e:+5.1f}" for e in errs)
                  + f"  | mean |error| {np.mean(np.abs(errs)):.2f}")
        with open(path) as fh:
            rows = json.load(fh)["results"]
        old = [abs(r["error"]) for r in rows]
        new = [abs(r["error"] + (per["no casts"] * f[s]["no casts"] - per["all"] * f[s]["all"])
                   / f[s]["iteration"]) for s, r in zip(VAL, rows, strict=True)]
        print(f"  held-out MAPE: model {100 * np.mean(old):.1f}%, gap without casts "
              f"{100 * np.mean(new):.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
