"""Benchmarks of measured profiling, each a ratio measured side by side in one run.

1. Profiling overhead: iteration time under torch.profiler with bertscope's module scopes
   vs the same iteration with neither (target <= 1.10).
2. Reference model vs Hugging Face BertForPreTraining: training tokens/s at the same
   config, fp32 on CPU (target >= 1.0).

Iterations alternate between the two sides (ABBA) so drifts (thermal, other load) hit both.

    .venv/bin/python bench/bench_profile.py --model bert-base --batch 4 --seq 128 --iters 3
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch

from bertscope.config import RunConfig
from bertscope.measure.attribution import ITER
from bertscope.measure.profile import _Trainer
from bertscope.presets import get_model


def _time_step(trainer: _Trainer) -> float:
    t0 = time.perf_counter()
    trainer.step()
    trainer.sync()
    return time.perf_counter() - t0


def overhead(model: str, run: RunConfig, iters: int) -> None:
    """Profiled (scopes + torch.profiler) vs plain iteration time."""
    m = get_model(model)
    dev = torch.device("cpu")
    plain = _Trainer(m, run, dev, hf=False, seed=0)
    plain.hooks.remove()  # the baseline runs without bertscope's scopes
    scoped = _Trainer(m, run, dev, hf=False, seed=0)
    _time_step(plain), _time_step(scoped)  # warm-up
    base, prof = [], []
    activities = [torch.profiler.ProfilerActivity.CPU]
    for i in range(iters):
        base.append(_time_step(plain))
        with (torch.profiler.profile(activities=activities, record_shapes=True,
                                     with_flops=True),
              torch.autograd.profiler.record_function(f"{ITER}{i}")):
            prof.append(_time_step(scoped))
    b, p = statistics.median(base), statistics.median(prof)
    print(f"[overhead] {model} b{run.batch} s{run.seq}: plain {b:.3f} s/iter, profiled "
          f"{p:.3f} s/iter, ratio {p / b:.3f} (target <= 1.10)")


def reference_vs_hf(model: str, run: RunConfig, iters: int) -> None:
    """Tokens/s of the reference model vs Hugging Face's, fp32, same config and optimizer."""
    m = get_model(model)
    dev = torch.device("cpu")
    ref = _Trainer(m, run, dev, hf=False, seed=0)
    hf = _Trainer(m, run, dev, hf=True, seed=0)
    for t in (ref, hf):
        t.hooks.remove()
        _time_step(t)  # warm-up
    r_times, h_times = [], []
    for i in range(iters):  # ABBA order: neither side always runs first
        if i % 2 == 0:
            r_times.append(_time_step(ref))
            h_times.append(_time_step(hf))
        else:
            h_times.append(_time_step(hf))
            r_times.append(_time_step(ref))
    r = run.tokens / statistics.median(r_times)
    h = run.tokens / statistics.median(h_times)
    print(f"[reference vs HF] {model} b{run.batch} s{run.seq} fp32: reference {r:.1f} "
          f"tokens/s, HF BertForPreTraining {h:.1f} tokens/s, ratio {r / h:.3f} "
          f"(target >= 1.0)")


def main() -> None:
    """Run both benchmarks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--only", choices=["overhead", "hf"], default=None)
    args = ap.parse_args()
    run = RunConfig(batch=args.batch, seq=args.seq)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.only != "hf":
        overhead(args.model, run, args.iters)
        gc.collect()
    if args.only != "overhead":
        reference_vs_hf(args.model, run, args.iters)


if __name__ == "__main__":
    main()
