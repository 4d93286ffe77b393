"""Benchmark: predict bert-large on an A100 (bf16, batch 64, seq 128); target under 1 s end to end.

Prints, measured in the same run: the op-table build (the baseline), predict on it, fuse plus
predict, each as a ratio to the build; then the whole `bertscope predict` command as a fresh
process, next to the bare cost of importing the CLI (the floor every command pays) and of its
third-party libraries alone; and whether the command imports pandas (it should not).

    .venv/bin/python bench/bench_predict.py
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import time

import typer

from _timing import median_time
from bertscope.analytic import ops
from bertscope.perf import fuse, load_profile, predict

TARGET_S = 1.0
REPEAT = 11
PROCESS_REPEAT = 5
RUN = dict(batch=64, seq=128, precision="bf16")
ARGV = ["predict", "bert-large", "--device", "a100", "--precision", "bf16", "--batch", "64",
        "--seq", "128"]
HEAVY = ("pandas", "pyarrow", "matplotlib", "torch")
ENV = {**os.environ, "COLUMNS": "200"}


def _process(args: list[str], repeat: int = PROCESS_REPEAT) -> float:
    """Median wall time of a fresh `python ARGS` process."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, capture_output=True, env=ENV)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _heavy_imports() -> list[str]:
    """The heavy libraries loaded after running the command in a fresh interpreter."""
    code = ("import contextlib, io, sys\n"
            "from bertscope.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    assert main({ARGV!r}) == 0\n"
            "assert 'predicted iteration' in out.getvalue()\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=ENV)
    return [m for m in out.stdout.strip().split(",") if m]


def main() -> None:
    """Time build, predict and the CLI; print the ratios."""
    profile = load_profile("a100")
    table = ops("bert-large", **RUN)
    build = median_time(lambda: ops("bert-large", **RUN), REPEAT)
    pred = median_time(lambda: predict(table, profile), REPEAT)
    fused = median_time(lambda: predict(fuse(table), profile), REPEAT)
    p = predict(table, profile).export_meta()["prediction"]
    print(f"bert-large b64 s128 bf16 on a100: {len(table)} rows, predicted "
          f"{p['time_s'] * 1e3:.1f} ms/iteration, {p['tokens_per_s'] / 1e3:.1f} k tokens/s")
    print(f"op-table build {build * 1e3:.1f} ms (baseline); predict {pred * 1e3:.1f} ms "
          f"(predict/build {pred / build:.2f}); fuse+predict {fused * 1e3:.1f} ms "
          f"(ratio {fused / build:.2f})")
    cli = _process(["-m", "bertscope.cli", *ARGV])
    floor = _process(["-c", "import bertscope.cli"])
    # the third-party floor: what any typer + rich + numpy CLI pays (typer >= 0.29 also
    # builds pydantic adapters for every option: typer._adapters)
    adapters = ", typer._adapters" if importlib.util.find_spec("typer._adapters") else ""
    libs = _process(["-c", f"import numpy, typer{adapters}, rich.console, rich.table"])
    print(f"typer {typer.__version__}")
    print(f"CLI end to end {cli:.2f} s (median of {PROCESS_REPEAT}; target {TARGET_S:.0f} s, "
          f"ratio {cli / TARGET_S:.2f}); import floor {floor:.2f} s, so the command itself "
          f"takes {cli - floor:.2f} s; third-party libraries alone {libs:.2f} s "
          f"(CLI/libraries {cli / libs:.2f})")
    heavy = _heavy_imports()
    print(f"pandas imported by the command: {'yes' if 'pandas' in heavy else 'no'} "
          f"(heavy libraries loaded: {', '.join(heavy) or 'none'})")


if __name__ == "__main__":
    main()
