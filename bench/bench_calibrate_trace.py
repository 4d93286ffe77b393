"""Held-out check of `calibrate --from-trace` on this CPU: record traces (record_shapes=True)
of bert-mini training at two configurations, fit a profile on them, and predict those and a
third, held-out configuration (4x the tokens): GEMM and whole-iteration time against each
trace. Traces go to a temporary folder.

    PYTHONPATH=src python bench/bench_calibrate_trace.py
    # results: bench/results/bench_calibrate_trace.txt
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.measure.profile import profile
from bertscope.perf.predict import predict
from bertscope.presets import get_model
from bertscope.studies.trace_calibration import calibrate_from_traces
from bertscope.taxonomy import gemm_mask
from bertscope.trace import read_trace


def main() -> None:
    """Record, fit on two, predict three; one line per configuration."""
    tmp = Path(tempfile.mkdtemp(prefix="bertscope-bench-"))
    m = get_model("bert-mini")
    runs = {"a": RunConfig(batch=8, seq=64), "b": RunConfig(batch=4, seq=128),
            "held": RunConfig(batch=16, seq=128)}
    paths = {k: tmp / f"{k}.json" for k in runs}
    for k, r in runs.items():
        profile(m, r, iters=3, warmup=1, trace_out=paths[k])
    prof, _ = calibrate_from_traces([paths["a"], paths["b"]])
    for k, r in runs.items():
        t = read_trace(paths[k]).df
        p = predict(build(m, r), prof).df
        tg, pg = (float(x.loc[gemm_mask(x["category"]), "time_s"].sum()) for x in (t, p))
        tt, pt = float(t["time_s"].sum()), float(p["time_s"].sum())
        print(f"{k:5s} batch {r.batch} seq {r.seq}: trace GEMM {tg * 1e3:.1f} ms, predicted "
              f"{pg * 1e3:.1f} ms ({(pg / tg - 1) * 100:+.1f}%); all ops trace {tt * 1e3:.1f} "
              f"ms, predicted {pt * 1e3:.1f} ms ({(pt / tt - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
