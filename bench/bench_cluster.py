"""A folder of 64 rank traces read three ways, side by side in one run: in this process (one
file after another), on local worker processes (the default: one per core), and on a
2-worker Dask cluster on 127.0.0.1 (`--scheduler`): wall time and peak memory of the
reading process (each a fresh subprocess, median of `--runs`), and of the largest worker.
The three results are checked equal (the op table's JSON export, byte for byte).

Rank files are bench_trace.py's Kineto-style generator (`generate`, `--mb` MB each), one
per rank with its distributedInfo rank set, in a temporary folder deleted afterwards.

    .venv/bin/python bench/bench_cluster.py               # 64 ranks x 2 MB, 3 runs
    .venv/bin/python bench/bench_cluster.py --ranks 16 --mb 1 --runs 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_trace import generate

SRC = Path(__file__).resolve().parents[1] / "src"
READ = """
import hashlib, json, resource, sys, time
import bertscope.cluster as cluster
if sys.argv[2] == "inprocess":
    cluster.MAX_LOCAL_WORKERS = 1
from bertscope.io import Format
from bertscope.trace import analyze_trace
t0 = time.perf_counter()
r = analyze_trace(sys.argv[1], scheduler=sys.argv[3] if len(sys.argv) > 3 else None)
wall = time.perf_counter() - t0
kib = lambda who: resource.getrusage(who).ru_maxrss
print(json.dumps({"wall": wall, "ranks": len(r.ranks), "rss": kib(resource.RUSAGE_SELF),
                  "child_rss": kib(resource.RUSAGE_CHILDREN),
                  "sha": hashlib.sha256(r.table.to_bytes(Format.JSON)).hexdigest()}))
"""


def make_folder(into: Path, ranks: int, mb: float) -> int:
    """`ranks` rank files of about `mb` MB each; returns the bytes written."""
    first = into / "rank0.json"
    generate(first, int(mb * 1e6))
    text = first.read_text()
    assert '"rank": 0,' in text
    for r in range(1, ranks):
        (into / f"rank{r}.json").write_text(text.replace('"rank": 0,', f'"rank": {r},', 1))
    return sum(f.stat().st_size for f in into.iterdir())


def read(folder: Path, mode: str, address: str | None = None) -> dict[str, float]:
    """One read of the folder in a fresh Python."""
    args = [sys.executable, "-c", READ, str(folder), mode, *([address] if address else [])]
    proc = subprocess.run(args, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--mb", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    a = parser.parse_args()
    from distributed import Client, LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench_cluster."))
    try:
        size = make_folder(tmp, a.ranks, a.mb)
        print(f"{a.ranks} rank traces, {size / 1e6:.0f} MB in all; median of {a.runs} runs, "
              f"each a fresh process")
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as c, \
                Client(c.scheduler_address, set_as_default=False) as client:
            rows = {}
            for mode, address in (("inprocess", None), ("local", None),
                                  ("dask", c.scheduler_address)):
                got = [read(tmp, mode, address) for _ in range(a.runs)]
                rows[mode] = got
            worker_kib = max(client.run(
                lambda: __import__("resource").getrusage(0).ru_maxrss).values())
        shas = {g["sha"] for got in rows.values() for g in got}
        base = statistics.median(g["wall"] for g in rows["inprocess"])
        print(f"{'where':<34} {'wall s':>7} {'x in-proc':>9} {'reader peak':>12} "
              f"{'worker peak':>12}")
        labels = {"inprocess": "in this process, one by one",
                  "local": "local worker processes (default)",
                  "dask": "Dask, 2 workers on 127.0.0.1"}
        for mode, got in rows.items():
            wall = statistics.median(g["wall"] for g in got)
            rss = max(g["rss"] for g in got) / 2**20
            worker = (worker_kib if mode == "dask" else max(g["child_rss"] for g in got))
            worker_s = f"{worker / 2**20:.2f} GiB" if worker else "-"
            print(f"{labels[mode]:<34} {wall:7.2f} {base / wall:8.2f}x {rss:8.2f} GiB "
                  f"{worker_s:>12}")
        print(f"results equal in every run and mode: {len(shas) == 1}; ranks read: "
              f"{rows['dask'][0]['ranks']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"(bench wall {time.perf_counter() - t0:.0f} s)")
