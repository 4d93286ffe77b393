"""Run-to-run noise of measured iterations on this machine: the same configs profiled
repeatedly, side by side, printing the spread (max/min) of the iteration and optimizer times;
or (`--gemm-windows`) one GEMM's throughput in consecutive windows, with the CPU time the
hypervisor stole in each (/proc/stat), to see how fast the machine's speed moves.

    .venv/bin/python bench/bench_noise.py --repeat 3
    .venv/bin/python bench/bench_noise.py --gemm-windows 30 --window 5
"""

from __future__ import annotations

import argparse
import time

from bertscope.measure.profile import profile
from bertscope.studies.measured import parse_specs


def _cpu_ticks() -> tuple[int, int]:
    """(steal, total) CPU ticks so far, from /proc/stat's aggregate line."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[7], sum(v)


def gemm_windows(windows: int, window_s: float, size: int) -> None:
    """Print the GFLOP/s of back-to-back fp32 size x size GEMMs in each window, the steal
    share of the window, and the spread (max/min) over the windows."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    rates = []
    for i in range(windows):
        s0, t0 = _cpu_ticks()
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < window_s:
            torch.mm(a, b)
            n += 1
        dt = time.perf_counter() - start
        s1, t1 = _cpu_ticks()
        rates.append(2 * size**3 * n / dt / 1e9)
        print(f"window {i:3d}: {rates[-1]:7.1f} GFLOP/s, steal "
              f"{100 * (s1 - s0) / max(1, t1 - t0):4.1f}%", flush=True)
    print(f"[spread] {size}^3 fp32 GEMM over {windows} windows of {window_s:g} s: min "
          f"{min(rates):.1f}, max {max(rates):.1f} GFLOP/s, max/min {max(rates) / min(rates):.2f}")


def main() -> None:
    """Profile each config `--repeat` times and print the spread (or `--gemm-windows`)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="bert-small:4:128,bert-base:2:128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gemm-windows", type=int, default=0)
    ap.add_argument("--window", type=float, default=5.0, help="seconds per GEMM window")
    ap.add_argument("--size", type=int, default=1024, help="GEMM size (square)")
    args = ap.parse_args()
    if args.gemm_windows:
        gemm_windows(args.gemm_windows, args.window, args.size)
        return
    seen: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for spec in parse_specs(args.configs):
            r = profile(*spec.configs(), iters=3, warmup=1)
            d = r.table.df
            opt = float(d.loc[d["phase"] == "optimizer", "time_s"].sum())
            seen.setdefault(str(spec), []).append((r.facts.iteration_s, opt))
            print(f"{spec}: iteration {r.facts.iteration_s:.3f} s, optimizer {opt:.3f} s",
                  flush=True)
    for spec, runs in seen.items():
        it = [a for a, _ in runs]
        op = [b for _, b in runs]
        print(f"[spread] {spec}: iteration max/min {max(it) / min(it):.2f}, optimizer "
              f"max/min {max(op) / min(op):.2f} over {len(runs)} runs")


if __name__ == "__main__":
    main()
