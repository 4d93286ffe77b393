"""What the flagship costs as a whole process (issue #32, item 7): `bertscope study` (default
settings, its measured part profiled in a fresh process) and `bertscope profile bert-mini`,
each run under `/usr/bin/time -v`: wall time, CPU time and peak resident memory (the largest
of the process tree's, as GNU time reports it for the waited-for children too).

    python bench/bench_study_cost.py [--runs 3] [--baseline REV] [--write]

Targets: the study <= 1.5 GiB peak and <= 25 s wall on a quiet 2-core machine; profiling
bert-mini <= 1 GiB. Run it on a quiet machine (the header records the load average before and
after); `--write` writes bench/results/bench_study_cost.txt with the command. `--baseline
REV` also runs both commands from REV's src/ (extracted to a temporary folder, ahead on
PYTHONPATH), alternated with this checkout's runs.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "bench_study_cost.txt"
BERTSCOPE = str(Path(sys.executable).with_name("bertscope"))
GIB = 2**30


def timed(args: list[str], src: str | None = None) -> tuple[float, float, float]:
    """Run `args` under GNU time -v: (wall s, user+system s, peak RSS bytes); `src`: a
    baseline's source folder ahead of this checkout's package."""
    env = dict(os.environ, **({"PYTHONPATH": src} if src else {}))
    out = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True,
                         env=env)
    if out.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    err = out.stderr

    def field(name: str) -> str:
        m = re.search(rf"{re.escape(name)}: (.+)", err)
        assert m, f"no {name!r} in time -v's output"
        return m.group(1).strip()

    parts = [float(p) for p in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
    wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    return wall, cpu, int(field("Maximum resident set size (kbytes)")) * 1024


def main() -> None:
    """Measure both commands `--runs` times, print (and with --write, save) the medians."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--baseline", default=None, metavar="REV")
    opts = ap.parse_args()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "study (default)": lambda i: [BERTSCOPE, "study", "--no-store", "--output",
                                          f"{tmp}/study{i}"],
            "profile bert-mini": lambda i: [BERTSCOPE, "profile", "bert-mini", "--no-store"],
        }
        srcs: dict[str, str | None] = {"": None}
        if opts.baseline:
            subprocess.run(f"git archive {opts.baseline} src | tar -x -C {tmp}", shell=True,
                           check=True, cwd=ROOT)
            srcs[f" @{opts.baseline}"] = f"{tmp}/src"
        results: dict[str, list[tuple[float, float, float]]] = {
            k + tag: [] for k in commands for tag in srcs}
        for i in range(opts.runs):  # alternated
            for name, cmd in commands.items():
                for tag, src in srcs.items():
                    results[name + tag].append(timed(cmd(f"{i}{tag.strip(' @')}"), src))
    for name, runs in results.items():
        wall, cpu, rss = (statistics.median(r[j] for r in runs) for j in range(3))
        rows.append(f"{name:<29} wall {wall:6.1f} s   cpu {cpu:6.1f} s   peak RSS "
                    f"{rss / GIB:5.2f} GiB   (runs: "
                    + ", ".join(f"{r[0]:.1f} s/{r[2] / GIB:.2f} GiB" for r in runs) + ")")
    lines = [f"# bench_study_cost: made at {rev}",
             f"$ python bench/bench_study_cost.py --runs {opts.runs}"
             + (f" --baseline {opts.baseline}" if opts.baseline else "")
             + (" --write" if opts.write else ""),
             f"# {os.cpu_count()} cores; load average {load0:.2f} before, "
             f"{os.getloadavg()[0]:.2f} after; medians of {opts.runs} alternated runs",
             "# targets (issue #32 item 7): study <= 1.5 GiB peak and <= 25 s wall; "
             "profile bert-mini <= 1 GiB", *rows]
    print("\n".join(lines))
    if opts.write:
        RESULT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
