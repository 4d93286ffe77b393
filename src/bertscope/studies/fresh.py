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

The child follows the stop protocol (`bertscope.stop`): it is started in a process group of
its own that dies with this process (`stop.spawn`, `kill -9` included), a stop request here
is passed on to it once, and it stops as `profile` does: a partial result written to
`stop.partial_path(PATH)` (exit 3, `Interrupted` with it kept here) or nothing (exit 130).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bertscope.errors import BertscopeError
from bertscope.stop import (
    INTERRUPTED_EXIT,
    PARTIAL_EXIT,
    STOP,
    Interrupted,
    handle_signals,
    partial_path,
    spawn,
    wait_child,
)
from bertscope.studies.measured import parse_specs


def measure_fresh(spec: str, path: str | Path, *, iters: int, warmup: int,
                  device: str = "cpu", statistic: str = "min") -> Path:
    """Profile `spec` ("model:batch:seq[:field...]", as `measured.parse_specs` reads it) in
    a new Python process and write its result to `path` (`ProfileResult.write_json`); the
    path. A failed child is a one-line error with the child's last line; an interrupted one
    `Interrupted` (its partial result, if any, kept at `partial_path(path)`)."""
    cmd = [sys.executable, "-m", "bertscope.studies.fresh", spec, str(path), str(iters),
           str(warmup), device, statistic]
    with tempfile.TemporaryFile() as err:
        rc = wait_child(spawn(cmd, stdout=subprocess.DEVNULL, stderr=err,
                              stdin=subprocess.DEVNULL))
        err.seek(0)
        text = err.read().decode(errors="replace")
    if rc == PARTIAL_EXIT:
        raise Interrupted(partial_path(path))
    if rc == INTERRUPTED_EXIT or (rc != 0 and STOP):
        raise Interrupted()
    if rc != 0:
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise BertscopeError(f"re-measuring {spec} in a fresh process failed: {last}")
    return Path(path)


def main(argv: list[str]) -> int:
    """The child: keep freed memory from the start, profile the spec, write the result
    (a partial one to `partial_path(PATH)`, exit 3)."""
    from bertscope.measure.allocator import keep_freed_memory  # torch
    from bertscope.measure.profile import ProfileResult, profile

    spec_text, path, iters, warmup, device, statistic = argv
    keep_freed_memory()
    (spec,) = parse_specs(spec_text)
    m, run = spec.configs()
    with STOP.graceful():  # writing the result included: it is kept whole
        result = profile(m, run, iters=int(iters), warmup=int(warmup), device=device,
                         statistic=statistic)
        fresh = replace(result.facts, fresh_process=True)
        dest = partial_path(path) if fresh.partial else Path(path)
        ProfileResult(table=result.table.with_records(fresh), analytic=result.analytic
                      ).write_json(dest)
    return PARTIAL_EXIT if fresh.partial else 0


if __name__ == "__main__":
    with handle_signals():
        try:
            sys.exit(main(sys.argv[1:]))
        except BertscopeError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except (Interrupted, KeyboardInterrupt):
            sys.exit(INTERRUPTED_EXIT)
