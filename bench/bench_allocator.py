"""Benchmark: what glibc's page faults cost a CPU training iteration, and what keeping freed
memory (`bertscope profile --host-allocator keep`, the default) changes.

Each run is a fresh process (the allocator setting is process-wide) that profiles the config
and reports its median iteration time and the minor page faults per measured iteration; the
two settings alternate (system, keep, keep, system, ...) so a slow spell of a shared machine
does not fall on one side only. Prints keep/system time ratios, measured in the same run.

    .venv/bin/python bench/bench_allocator.py --configs bert-base:2:128,bert-small:4:256
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = """
import json, resource, sys
from bertscope.measure.profile import profile
from bertscope.studies.measured import parse_specs
spec = parse_specs(sys.argv[1])[0]
iters = int(sys.argv[3])
before = []
def progress(stage, done, total):
    if stage != "measure":  # the last warm-up or settling iteration's end
        before[:] = [resource.getrusage(resource.RUSAGE_SELF).ru_minflt]
r = profile(*spec.configs(), iters=iters, warmup=2, statistic="median",
            host_allocator=sys.argv[2], progress=progress)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before[0]) / iters
print(json.dumps({"iteration_s": r.facts.iteration_s, "faults": faults,
                  "allocator": r.facts.host_allocator}))
"""


def _run(spec: str, allocator: str, iters: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, spec, allocator, str(iters)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Alternate the two allocator settings per config; print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="bert-base:2:128,bert-small:4:256")
    ap.add_argument("--pairs", type=int, default=2, help="ABBA pairs per config")
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    for spec in args.configs.split(","):
        seen: dict[str, list[dict[str, float]]] = {"system": [], "keep": []}
        for i in range(args.pairs):
            order = ("system", "keep") if i % 2 == 0 else ("keep", "system")
            for allocator in order:
                r = _run(spec, allocator, args.iters)
                seen[allocator].append(r)
                print(f"{spec} {allocator:6s} iteration {r['iteration_s']:.3f} s, "
                      f"{r['faults']:,.0f} minor faults per iteration "
                      f"(in effect: {r['allocator']})", flush=True)
        med = {k: statistics.median(r["iteration_s"] for r in v) for k, v in seen.items()}
        faults = {k: statistics.median(r["faults"] for r in v) for k, v in seen.items()}
        print(f"[{spec}] median iteration: system {med['system']:.3f} s, keep "
              f"{med['keep']:.3f} s, keep/system {med['keep'] / med['system']:.2f}; faults per "
              f"iteration {faults['system']:,.0f} -> {faults['keep']:,.0f}", flush=True)


if __name__ == "__main__":
    main()
