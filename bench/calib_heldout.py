"""CPU held-out check of `calibrate --from` (issue 31): calibrate from small fp32 profiles
on this machine, predict held-out configs in fp32 (the measured format) and bf16 (not
measured: the profile must say so), then again with bf16 tables among the inputs (bf16 then
priced at its own measured rate). Each round is fitted and predicted on its own (the rounds
measure every config in turn, so a slow spell falls on all of them: A/B alternated), and all
rounds together (each config's least, as `validate --rounds` takes them).

    python bench/calib_heldout.py DIR [--rounds 3] [--iters 4] [--bf16]
    # DIR keeps the measurements (a `bertscope validate --results-dir`); a second run with
    # the same DIR only fits and predicts. Summary: bench/results/calib_heldout.txt

Without --bf16 no bf16 run is measured (a CPU without native bf16, such as an AVX2-only
EPYC, runs them ~30x slower than fp32): the bf16 held-out configs are only asked of the
fp32-fitted profile, which must refuse them in one line. With --bf16, bf16 calibration and
held-out runs are measured too and the profile fitted with them predicts the bf16 ones.

Nothing here is fitted to the held-out configs: they are measured, never given to the fit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CALIBRATE_FP32 = "bert-mini:16:128,bert-mini:8:64,bert-small:4:128,bert-small:8:64"
CALIBRATE_BF16 = "bert-mini:16:128:bf16,bert-small:8:64:bf16"
HELD_FP32 = "bert-small:8:128,bert-mini:16:64"
HELD_BF16 = "bert-small:4:128:bf16,bert-mini:16:64:bf16"


def _runs(specs: list, folder: Path, rounds: int, i: int | None) -> list:
    """The measurement of each spec: round `i`, or all rounds combined (None)."""
    from bertscope.studies.measured import combine_rounds, load_result

    out = []
    for spec in specs:
        stem = str(spec).replace(":", "-").replace("/", "_")
        files = ([folder / f"{stem}.json"] if rounds == 1 else
                 [folder / f"{stem}.round{r}.json" for r in range(rounds)])
        picked = files if i is None else [files[i]]
        out.append(combine_rounds([load_result(f) for f in picked]))
    return out


def _fit_and_predict(cal: list, held: list, folder: Path, label: str) -> list[str]:
    """Lines: the consistency check, then per held-out config predicted vs measured."""
    from bertscope.errors import BertscopeError
    from bertscope.studies.local_calibration import calibrate_local
    from bertscope.studies.measured import config_name
    from bertscope.studies.validate import compare

    lines = []
    profile, report = calibrate_local("cpu", cal, microbench=folder / "microbench.json",
                                      allow_inconsistent=True)
    check = report.get("consistency", {})
    lines.append(f"  {label}: {check.get('line', 'no check (one input)')}")
    for run in held:
        if isinstance(run, str):  # not measured: only asked of the profile
            lines.append(f"    {run:26s} {'':8s}   not measured   {_asked(run, profile)}")
            continue
        name = config_name(run)
        try:
            c = compare(run, profile)
        except BertscopeError as e:
            lines.append(f"    {name:26s} {run.facts.iteration_s:8.3f} s measured   "
                         f"refused: {e}")
            continue
        lines.append(f"    {name:26s} {c['measured_iteration_s']:8.3f} s measured "
                     f"{c['predicted_s']:8.3f} s predicted  {100 * c['error']:+6.1f}%")
    return lines


def _asked(spec: str, profile: object) -> str:
    """What predicting an unmeasured config on `profile` gives: its time, or the refusal."""
    from bertscope import build
    from bertscope.errors import BertscopeError
    from bertscope.perf.predict import predict
    from bertscope.studies.measured import parse_specs

    m, run = parse_specs(spec)[0].configs()
    try:
        t = float(predict(build(m, run), profile).df["time_s"].sum())
    except BertscopeError as e:
        line = f"refused: {e}"
        if line in _SAID:
            return "refused (the line above)"
        _SAID.add(line)
        return line
    return f"{t:8.3f} s predicted"


_SAID: set[str] = set()
"""Refusals printed already (each is printed once in full)."""


def main() -> None:
    """Measure what DIR lacks, then fit and predict per round and over all rounds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--bf16", action="store_true", help="measure bf16 runs too")
    args = ap.parse_args()
    from bertscope.studies.measured import parse_specs
    from bertscope.studies.validate import validate

    cal32, cal16 = parse_specs(CALIBRATE_FP32), parse_specs(CALIBRATE_BF16)
    held32, held16 = parse_specs(HELD_FP32), parse_specs(HELD_BF16)
    args.dir.mkdir(parents=True, exist_ok=True)
    # measures (and keeps) what the folder lacks; its own prediction is not used here
    validate([*cal32, *(cal16 if args.bf16 else [])], [*held32, *(held16 if args.bf16 else [])],
             iters=args.iters, warmup=1, rounds=args.rounds, results_dir=args.dir,
             log=lambda s: print(f"# {s}", file=sys.stderr, flush=True))
    print(f"# calibrate: {CALIBRATE_FP32} (fp32); with bf16 tables also {CALIBRATE_BF16}")
    print(f"# held out: {HELD_FP32} (fp32), {HELD_BF16} (bf16)")
    for i in [*range(args.rounds), None]:
        which = "all rounds (each config's least)" if i is None else f"round {i}"
        print(f"{which}:")
        c32 = _runs(cal32, args.dir, args.rounds, i)
        held = [*_runs(held32, args.dir, args.rounds, i),
                *(_runs(held16, args.dir, args.rounds, i) if args.bf16 else map(str, held16))]
        for line in _fit_and_predict(c32, held, args.dir, "fp32 tables"):
            print(line, flush=True)
        if args.bf16:
            c16 = _runs(cal16, args.dir, args.rounds, i)
            for line in _fit_and_predict([*c32, *c16], held, args.dir, "fp32 + bf16 tables"):
                print(line, flush=True)


if __name__ == "__main__":
    main()
