"""Measure one config in a fresh process, for a run whose measurement the current process's
heap spoiled.

A long validation profiles many configs in one process; with freed memory kept
(`allocator.keep_freed_memory`) a later config can still land on a heap laid out by the
earlier ones so that every measured iteration faults pages in again: in one session's
validation a checkpointed 2-micro-batch bert-mini run faulted 226,208 pages per iteration in
two rounds of three and its measured loss backward doubled (bench/results/validate_cpu_r4.txt
at d715217),
while the same config profiled alone settled (7,631 pages in its first measured iteration,
0-4 after). `validate` measures such a config again here, in a new interpreter with a
clean heap.

    path = measure_fresh("bert-mini:16:128:ckpt:mb2", "out.json", iters=3, warmup=1)
    # the child: python -m bertscope.studies.fresh SPEC PATH ITERS WARMUP DEVICE STATISTIC
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from bertscope.errors import BertscopeError
from bertscope.studies.measured import parse_specs


def measure_fresh(spec: str, path: str | Path, *, iters: int, warmup: int,
                  device: str = "cpu", statistic: str = "min") -> Path:
    """Profile `spec` ("model:batch:seq[:field...]", as `measured.parse_specs` reads it) in
    a new Python process and write its result to `path` (`ProfileResult.write_json`); the
    path. A failed child is a one-line error with the child's last line."""
    cmd = [sys.executable, "-m", "bertscope.studies.fresh", spec, str(path), str(iters),
           str(warmup), device, statistic]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BertscopeError(f"re-measuring {spec} in a fresh process failed: {last}")
    return Path(path)


def main(argv: list[str]) -> int:
    """The child: keep freed memory from the start, profile the spec, write the result."""
    from bertscope.measure.allocator import keep_freed_memory  # torch
    from bertscope.measure.profile import ProfileResult, profile

    spec_text, path, iters, warmup, device, statistic = argv
    keep_freed_memory()
    (spec,) = parse_specs(spec_text)
    m, run = spec.configs()
    result = profile(m, run, iters=int(iters), warmup=int(warmup), device=device,
                     statistic=statistic)
    fresh = replace(result.facts, fresh_process=True)
    ProfileResult(table=result.table.with_records(fresh), analytic=result.analytic
                  ).write_json(path)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BertscopeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
