"""Whole-process sweeps written to Parquet against llm-analysis 0.2.2 `train()`, in one run,
alternating: `bertscope sweep ... --output s.parquet` as a user runs it (a fresh process:
start, imports, grid, engine on the local workers, the rows streamed to Parquet, the table
printed) on the issue's 262,144-configuration grid, and on a 1,048,576-configuration grid
(with and without --output), each round beside a sample of llm-analysis `train()` calls.

    python3 -m venv /tmp/la && /tmp/la/bin/pip install llm-analysis==0.2.2  # never in .venv:
    # it downgrades transformers
    python bench/bench_sweep_parquet.py --llm-python /tmp/la/bin/python [--baseline REV]
    # results: bench/results/bench_sweep_parquet.txt (this script writes it)

Targets (issue 34): the 262,144-configuration grid at least 100x cheaper per configuration
than `train()` as a whole process with the Parquet write; 1M configurations in under 3 s.

Costs are per configuration of the grid (what the command was asked for; the per-evaluated
figure, tpu-v4 having no fp32, is printed beside). Each is measured twice: wall time, and CPU
time (the command's and its worker processes', from `RUSAGE_CHILDREN`; llm-analysis: its
process's `time.process_time` over the calls, import excluded). Other sessions share this
VM's two cores; under their load wall times stretch by the share they take, and CPU time is
the steadier measure. The command runs with bytecode caching on, as an installed package has
its .pyc files (one untimed run first writes them; this checkout's environment sets
PYTHONDONTWRITEBYTECODE, which would recompile bertscope on every start).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "bench_sweep_parquet.txt"
GRID_262K = ["bert-base,bert-large", "--device", "a100,h100,mi300x,tpu-v4", "--batch", "1..256",
             "--seq", "64,128,256,512", "--precision", "fp32,bf16", "--optimizer",
             "adam,lamb", "--micro-batches", "1..8"]
"""2 models x 4 devices x 256 batches x 4 seqs x 2 precisions x 2 optimizers x 8
micro-batch counts = 262,144 configurations (the issue's grid)."""
GRID_1M = ["bert-base,bert-large,roberta-base,albert-base-v2", "--device",
           "a100,h100,mi300x,tpu-v4", "--batch", "1..256", "--seq", "64,128,256,512",
           "--precision", "fp32,bf16", "--optimizer", "adam,lamb", "--micro-batches",
           "1,2,4,8", "--checkpoint", "none,full", "--dropout", "on,off"]
"""4 x 4 x 256 x 4 x 2 x 2 x 4 x 2 x 2 = 1,048,576 configurations (bench_sweep.py's)."""
LLM = """
import json, logging, sys, time
from llm_analysis.analysis import train
logging.disable(logging.CRITICAL)
configs = [(b, s) for b in (1, 8, 32, 64) for s in (128, 256, 512)] * 4  # 48 calls
def call(b, s):
    train(model_name="facebook_opt-350m", gpu_name="a100-sxm-80gb", dtype_name="w16a16e16",
          batch_size_per_gpu=b, seq_len=s, total_num_gpus=1, log_level="CRITICAL")
call(8, 128)  # warm: lazy imports and caches of the first call
t, c = time.perf_counter(), time.process_time()
for b, s in configs:
    call(b, s)
print(json.dumps({"wall": (time.perf_counter() - t) / len(configs),
                  "cpu": (time.process_time() - c) / len(configs), "calls": len(configs)}))
"""
"""llm-analysis 0.2.2 `train()` per call (its comparable model: facebook_opt-350m, 24 layers,
hidden 1024, 16 heads, FFN 4096, bert-large's shape; a100-sxm-80gb, bf16, one GPU)."""


def _env(src: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if src is not None:  # a baseline checkout's package ahead of this one
        env["PYTHONPATH"] = str(src)
    env.pop(_SCHEDULER, None)  # local workers only
    env["COLUMNS"] = "400"  # the count line on one line
    return env


_SCHEDULER = "BERTSCOPE_SCHEDULER"


def bertscope(args: list[str], out: Path | None, src: Path | None = None) -> dict[str, float]:
    """Wall and CPU seconds of one `bertscope sweep` process (workers included) and the
    rows it says it evaluated; `src`: a baseline's source folder instead of this one."""
    cmd = [sys.executable, "-m", "bertscope.cli", "sweep", *args, "--no-store",
           *(["--output", str(out)] if out else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    got = subprocess.run(cmd, capture_output=True, text=True, env=_env(src), check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    evaluated = int(got.stdout.split("evaluated ", 1)[1].split(" ", 1)[0].replace(",", ""))
    grid = int(got.stdout.split("configurations in ", 1)[1].split("(", 1)[1].split(" ", 1)[0]
               .replace(",", ""))
    if out is not None:
        out.unlink()
    return {"wall": wall, "cpu": cpu, "evaluated": evaluated, "grid": grid}


def llm_analysis(python: str) -> dict[str, float]:
    """Wall and CPU seconds per llm-analysis `train()` call (in its own environment)."""
    got = subprocess.run([python, "-c", LLM], capture_output=True, text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llm-python", default=os.environ.get("LLM_ANALYSIS_PYTHON",
                                                          "/tmp/sweepscale-la/bin/python"),
                    help="the Python of a virtual environment with llm-analysis==0.2.2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also time the 262,144-configuration command at this git revision "
                         "(its src/ extracted to a temporary folder), alternated")
    a = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"llm": [], "262k": [], "1m": [], "1m_no": [],
                                               "base": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.parquet"
        base = None
        if a.baseline:
            subprocess.run(f"git archive {a.baseline} src | tar -x -C {tmp}", shell=True,
                           check=True, cwd=ROOT)
            base = Path(tmp) / "src"
            bertscope(GRID_262K, out, base)  # untimed, as below
        bertscope(GRID_262K, out)  # untimed: writes the .pyc files, warms the page cache
        for _ in range(a.rounds):  # alternate A/B; medians of the rounds
            runs["llm"].append(llm_analysis(a.llm_python))
            runs["262k"].append(bertscope(GRID_262K, out))
            if base is not None:
                runs["base"].append(bertscope(GRID_262K, out, base))
            runs["1m"].append(bertscope(GRID_1M, out))
            runs["1m_no"].append(bertscope(GRID_1M, None))
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()
           if v}
    llm, s, big, big_no = med["llm"], med["262k"], med["1m"], med["1m_no"]
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=ROOT, check=True).stdout.strip()
    lines = [f"# {RESULTS.stem}: made at {rev}", f"$ {' '.join(['python', *sys.argv])}",
             f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, load average "
             f"{os.getloadavg()[0]:.1f} at the end; medians of {a.rounds} alternated rounds"]
    for clock in ("wall", "cpu"):
        per = s[clock] / s["grid"]
        lines += [
            f"[{clock} time]",
            f"llm-analysis 0.2.2 train():          {llm[clock] * 1e6:9.1f} us per configuration "
            f"({int(llm['calls'])} calls)",
            f"bertscope sweep --output .parquet:   {s[clock]:9.2f} s whole process for "
            f"{int(s['grid']):,} configurations ({int(s['evaluated']):,} evaluated): "
            f"{per * 1e6:.2f} us per configuration",
            f"  vs llm-analysis: {llm[clock] / per:6.0f}x cheaper per configuration "
            f"(target >= 100x; per evaluated {llm[clock] / (s[clock] / s['evaluated']):.0f}x)",
            *([f"  baseline {a.baseline}, same command: {med['base'][clock]:.2f} s "
               f"({med['base'][clock] / s['grid'] * 1e6:.2f} us per configuration, "
               f"{llm[clock] / (med['base'][clock] / s['grid']):.0f}x; now "
               f"{med['base'][clock] / s[clock]:.2f}x faster)"] if "base" in med else []),
            f"1M grid, --output .parquet:  {big[clock]:6.2f} s whole process for "
            f"{int(big['grid']):,} configurations ({int(big['evaluated']):,} evaluated; target "
            f"< 3 s); without --output {big_no[clock]:.2f} s"]
    lines.append("# per round (wall s): llm us " + str([round(r["wall"] * 1e6) for r in
                                                        runs["llm"]]) + ", 262k " +
                 str([round(r["wall"], 2) for r in runs["262k"]]) + ", baseline " +
                 str([round(r["wall"], 2) for r in runs["base"]]) + ", 1M " +
                 str([round(r["wall"], 2) for r in runs["1m"]]))
    lines.append("# per round (CPU s): llm us " + str([round(r["cpu"] * 1e6) for r in
                                                       runs["llm"]]) + ", 262k " +
                 str([round(r["cpu"], 2) for r in runs["262k"]]) + ", baseline " +
                 str([round(r["cpu"], 2) for r in runs["base"]]) + ", 1M " +
                 str([round(r["cpu"], 2) for r in runs["1m"]]))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
