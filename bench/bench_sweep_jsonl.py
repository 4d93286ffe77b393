"""A sweep's rows streamed to JSON Lines against the same rows streamed to Parquet, in one run,
alternating: `bertscope sweep ... --output s.jsonl` and `--output s.parquet` as a user runs
them (fresh processes) on bench_sweep_parquet.py's 262,144-configuration grid (229,376 rows
evaluated), and `--format json` (the best rows' document on stdout, no file) beside them.

    python bench/bench_sweep_jsonl.py [--rounds 3]
    # results: bench/results/bench_sweep_jsonl.txt (this script writes it)

No target: Parquet is binary (a float is 8 bytes written as they are), JSON Lines text (each
float written as its shortest repr by the standard library's encoder), so the ratio says what
a user pays for rows that `jq` and line tools read. Wall and CPU time (the command's and its
workers', `RUSAGE_CHILDREN`); the VM's two cores are shared with other sessions, so CPU time
is the steadier measure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sweep_parquet import GRID_262K, ROOT, _env

RESULTS = ROOT / "bench" / "results" / "bench_sweep_jsonl.txt"


def run(extra: list[str], out: Path | None) -> dict[str, float]:
    """Wall and CPU seconds of one `bertscope sweep` process and the bytes it wrote."""
    cmd = [sys.executable, "-m", "bertscope.cli", "sweep", *GRID_262K, "--no-store",
           "--top", "3", *extra, *(["--output", str(out)] if out else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    got = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    size = out.stat().st_size if out is not None else len(got.stdout.encode())
    if out is not None:
        out.unlink()
    return {"wall": wall, "cpu": cpu, "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"parquet": [], "jsonl": [], "json": []}
    with tempfile.TemporaryDirectory() as tmp:
        run([], Path(tmp) / "s.parquet")  # untimed: .pyc files, page cache
        for _ in range(a.rounds):  # alternate; medians of the rounds
            runs["parquet"].append(run([], Path(tmp) / "s.parquet"))
            runs["jsonl"].append(run([], Path(tmp) / "s.jsonl"))
            runs["json"].append(run(["--format", "json"], None))
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=ROOT, check=True).stdout.strip()
    p, j, d = med["parquet"], med["jsonl"], med["json"]
    lines = [f"# {RESULTS.stem}: made at {rev}",
             f"$ {' '.join(['python', *sys.argv])}",
             f"# {time.strftime('%Y-%m-%d')}, "
             f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
             f"medians of {a.rounds} alternated rounds; 229,376 rows x 54 columns"]
    for clock in ("wall", "cpu"):
        lines += [f"[{clock} time]",
                  f"--output s.parquet: {p[clock]:6.2f} s, {p['bytes'] / 1e6:6.1f} MB",
                  f"--output s.jsonl:   {j[clock]:6.2f} s, {j['bytes'] / 1e6:6.1f} MB "
                  f"({j[clock] / p[clock]:.1f}x Parquet's time, "
                  f"{j['bytes'] / p['bytes']:.1f}x its size)",
                  f"--format json:      {d[clock]:6.2f} s, {d['bytes'] / 1e3:6.1f} kB on "
                  f"stdout (the best 3 rows; no file)"]
    for k, v in runs.items():
        lines.append(f"# per round {k} (wall s, CPU s): " +
                     str([(round(r["wall"], 2), round(r["cpu"], 2)) for r in v]))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
