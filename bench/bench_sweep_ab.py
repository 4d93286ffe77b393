"""The 131,072-configuration sweep of `bench_sweep.py` (bert-large bf16, batch 1..512 x seq
1..256 on the A100), this checkout against a baseline commit, alternated in one process, CPU
time per configuration on one worker thread (other sessions share this VM's cores; CPU time
on one thread is the steadiest measure of the engine's own cost).

    python bench/bench_sweep_ab.py [BASELINE_REV]   # default HEAD~1
    # results: bench/results/bench_sweep.txt
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from bench_per_config import ROOT, load

ROUNDS = 9


def per_config(mods: dict[str, ModuleType]) -> float:
    """CPU seconds per configuration of the sweep with `mods` in place."""
    sys.modules.update(mods)
    sweep = mods["bertscope.sweep"].sweep
    t = time.process_time()
    r = sweep(["bert-large"], ["a100"], batch=range(1, 513), seq=range(1, 257),
              precision=["bf16"], workers=1)
    return (time.process_time() - t) / r.evaluated


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD~1"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(f"git archive {rev} src | tar -x -C {tmp}", shell=True, check=True,
                       cwd=ROOT)
        base = load(Path(tmp) / "src", "bertscope.sweep")
        new = load(ROOT / "src", "bertscope.sweep")
        a, b = [], []
        for _ in range(ROUNDS):
            a.append(per_config(base))
            b.append(per_config(new))
        ma, mb = statistics.median(a), statistics.median(b)
        pairs = [round(x / y, 2) for x, y in zip(a, b, strict=True)]
        print(f"sweep, CPU us per configuration (1 thread), median of {ROUNDS} alternated "
              f"rounds: baseline {rev} {ma * 1e6:.2f}, now {mb * 1e6:.2f} "
              f"({ma / mb:.2f}x less); per round {pairs}")


if __name__ == "__main__":
    main()
