"""Leave-one-out over saved validation measurements: each config predicted from a calibration
on all the others, this checkout against a baseline commit, on the same measurements.

    python bench/validate_loo.py CONFIGS DIR [DIR ...] [--baseline REV]
    # CONFIGS: the specs measured in each DIR (a `bertscope validate --results-dir`), e.g.
    # bench/results/validate_cpu_r9 at d715217; results: bench/results/validate_loo.txt

One held-out split of 5 configs says little on a machine whose runs of one config move up to
20% between runs of the same command; 11 folds per saved run, on several runs, say more
about a model change. Only the fit and the prediction run (seconds per fold): nothing is
measured. The baseline's `src/` is extracted with `git archive` and run in a child process
with it first on the path.
"""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def loo(configs: str, folder: Path) -> str:
    """One line: MAPE, median error and share errors over the folds of one saved run."""
    import numpy as np

    from bertscope.studies.local_calibration import calibrate_local
    from bertscope.studies.measured import combine_rounds, load_result, parse_specs
    from bertscope.studies.validate import compare

    runs = {}
    for spec in parse_specs(configs):
        stem = str(spec).replace(":", "-").replace("/", "_")
        files = sorted(folder.glob(f"{stem}.round*.json")) or [folder / f"{stem}.json"]
        runs[str(spec)] = combine_rounds([load_result(f) for f in files])
    # the error is measured whatever the inputs (a baseline before the consistency check
    # has no such option)
    anyway = ({"allow_inconsistent": True}
              if "allow_inconsistent" in inspect.signature(calibrate_local).parameters else {})
    errors, shares, gemm = [], [], []
    for held in runs:
        profile, _ = calibrate_local("cpu", [r for s, r in runs.items() if s != held],
                                     microbench=folder / "microbench.json", **anyway)
        c = compare(runs[held], profile)
        errors.append(abs(c["error"]))
        shares.append(c["max_share_error_pp"])
        gemm.append(c["per_op_mape"]["gemm"])
    return (f"{folder.name}: MAPE {100 * np.mean(errors):.1f}%  median "
            f"{100 * np.median(errors):.1f}%  largest share error {max(shares):.1f} pp  mean "
            f"{np.mean(shares):.1f} pp  GEMM per-op {100 * np.mean(gemm):.1f}%  (errors %: "
            f"{' '.join(f'{100 * e:.1f}' for e in errors)})")


def main() -> None:
    """Parse the arguments; run the baseline in a child, then this checkout."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs")
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--baseline", help="a git revision to compare with")
    ap.add_argument("--only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline and not args.only:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline, "src"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
            print(f"baseline {args.baseline}:", flush=True)
            subprocess.run([sys.executable, __file__, args.configs,
                            *map(str, args.dirs), "--only"], env=env, check=True)
        print("this checkout:", flush=True)
    for folder in args.dirs:
        print(loo(args.configs, folder), flush=True)
    if args.only:
        import bertscope

        print(f"(bertscope from {Path(bertscope.__file__).parents[1]})", flush=True)


if __name__ == "__main__":
    main()
