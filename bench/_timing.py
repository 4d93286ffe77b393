"""Shared timing helper of the benchmarks (run them as `python bench/NAME.py`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int = 7,
                setup: Callable[[], object] = lambda: None) -> float:
    """Median wall time of `fn()` over `repeat` calls, after one warm-up call; `setup()` runs
    before each call, untimed."""
    setup()
    fn()  # warm up imports and caches
    times = []
    for _ in range(repeat):
        setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
