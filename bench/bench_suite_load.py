"""The README's test command, run again and again on a fresh clone, with the other core kept
busy (issue #32, item 8: no test depends on load).

    python bench/bench_suite_load.py [--runs 10] [--quiet-first] [--write]

Clones this checkout's HEAD into a temporary folder, sets it up as the README's test command
does (venv, pinned install), then runs `.venv/bin/python -m pytest` `--runs` times in a row
while a busy loop (one process spinning on `while True: pass`) occupies the other core. With
`--quiet-first` one run without the busy loop comes first: the suite's time on a quiet
machine, which the README states. Each run's wall time and pass/fail line are printed as they
end; `--write` (re)writes bench/results/bench_suite_load.txt after every run, so a run cut off
keeps what finished.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "bench_suite_load.txt"
BUSY = "while True: pass"


def sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a shell command in `cwd`, capturing its output."""
    return subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True)


def main() -> None:
    """Clone, set up, run the suite `--runs` times under load; print and record each run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--quiet-first", action="store_true")
    ap.add_argument("--write", action="store_true")
    opts = ap.parse_args()
    rev = sh("git rev-parse --short HEAD", ROOT).stdout.strip()
    cmd = (f"$ python bench/bench_suite_load.py --runs {opts.runs}"
           + (" --quiet-first" if opts.quiet_first else "") + (" --write" if opts.write else ""))
    head = [f"# bench_suite_load: made at {rev}", cmd,
            f"# fresh clone of {rev}, README's test command (.venv/bin/python -m pytest); "
            f"{os.cpu_count()} cores; 'busy' = one spinning process on the other core"]
    rows: list[str] = []

    def record() -> None:
        print(rows[-1], flush=True)
        if opts.write:
            RESULT.write_text("\n".join(head + rows) + "\n")

    with tempfile.TemporaryDirectory(prefix="bertscope-suite-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        setup = sh('python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt '
                   '-e ".[dev]"', clone)
        if setup.returncode:
            sys.exit(f"setup failed: {setup.stderr.strip().splitlines()[-1:]}")
        plan = (["quiet"] if opts.quiet_first else []) + ["busy"] * opts.runs
        for i, mode in enumerate(plan, 1):
            spinner = (subprocess.Popen([sys.executable, "-c", BUSY]) if mode == "busy"
                       else None)
            try:
                t0 = time.perf_counter()
                run = sh(".venv/bin/python -m pytest", clone)
                wall = time.perf_counter() - t0
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            tail = [ln for ln in run.stdout.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
            failed = [ln for ln in run.stdout.splitlines() if ln.startswith("FAILED")]
            rows.append(f"run {i:2d} {mode:5s} exit {run.returncode}  {wall / 60:5.1f} min  "
                        f"{tail[-1].strip('= ') if tail else 'no summary'}"
                        + "".join(f"\n    {f}" for f in failed))
            record()


if __name__ == "__main__":
    main()
