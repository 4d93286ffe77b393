"""One configuration through `ops` and `predict` (the API the commands call), this checkout
against a baseline commit, alternated in one process (A, B, A, B, ...), CPU time per call.

    python bench/bench_per_config.py [BASELINE_REV]   # default: the parent of this file's commit
    # results: bench/results/bench_per_config.txt

The baseline's `src/` is extracted with `git archive` into a temporary folder and imported
under its own module objects (the two packages' modules are swapped in `sys.modules` before
each call), so both run on the same machine in the same minutes. CPU time (process_time), as
other sessions share this machine's two cores.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [("bert-large b8 s128 bf16", dict(batch=8, seq=128, precision="bf16")),
           ("bert-large b64 s512 bf16 lamb ckpt x4",
            dict(batch=64, seq=512, precision="bf16", optimizer="lamb", checkpoint="full",
                 micro_batches=4))]
ROUNDS, CALLS = 9, 20


def load(src: Path, *packages: str) -> dict[str, ModuleType]:
    """Import bertscope (analytic, perf and `packages`) from `src`; its modules."""
    import importlib

    for k in [k for k in sys.modules if k.startswith("bertscope")]:
        del sys.modules[k]
    sys.path.insert(0, str(src))
    try:
        for name in ("bertscope.analytic", "bertscope.perf", *packages):
            importlib.import_module(name)
    finally:
        sys.path.pop(0)
    return {k: v for k, v in sys.modules.items() if k.startswith("bertscope")}


def per_call(mods: dict[str, ModuleType], kw: dict[str, object], what: str) -> float:
    """CPU seconds per call of ops (what="ops") or ops + predict (what="predict")."""
    sys.modules.update(mods)
    analytic, perf = mods["bertscope.analytic"], mods["bertscope.perf"]
    prof = perf.load_profile("a100")
    t = time.process_time()
    for _ in range(CALLS):
        table = analytic.ops("bert-large", **kw)
        if what == "predict":
            perf.predict(table, prof)
    return (time.process_time() - t) / CALLS


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD~1"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(f"git archive {rev} src | tar -x -C {tmp}", shell=True, check=True,
                       cwd=ROOT)
        base = load(Path(tmp) / "src")
        new = load(ROOT / "src")
        print(f"baseline {rev} vs this checkout; CPU ms per call, median of {ROUNDS} "
              f"alternated rounds of {CALLS} calls")
        for label, kw in CONFIGS:
            for what in ("ops", "predict"):
                a, b = [], []
                for _ in range(ROUNDS):
                    a.append(per_call(base, kw, what))
                    b.append(per_call(new, kw, what))
                ma, mb = statistics.median(a), statistics.median(b)
                print(f"{label:40s} {what:8s} baseline {ma * 1e3:6.2f} ms  now "
                      f"{mb * 1e3:6.2f} ms  ({ma / mb:.2f}x faster)")


if __name__ == "__main__":
    main()
