"""How busy the machine was while a run was measured (Linux /proc; None elsewhere).

A shared machine's other work slows a measured run without any sign in its op table:
calibration profiles measured under load disagree 2-5x per token with each other (issue 31).
`bertscope profile` records, beside the page faults it already counts, the 1-minute load
average at the end of the measured iterations and the share of CPU time the hypervisor stole
during them (`/proc/stat`'s steal column, proc(5)); `perf.calibration_check` shows them
beside an input that disagrees with the rest. Both are cheap: one small file read each.
"""

from __future__ import annotations

import os


def cpu_times() -> tuple[int, int] | None:
    """(all CPU time, stolen CPU time) in clock ticks since boot, from /proc/stat's "cpu"
    line (user nice system idle iowait irq softirq steal: the first eight fields); None where
    it is not readable."""
    try:
        with open("/proc/stat") as f:
            first = f.readline().split()
    except OSError:
        return None
    if len(first) < 9 or first[0] != "cpu":
        return None
    try:
        ticks = [int(v) for v in first[1:9]]
    except ValueError:
        return None
    return sum(ticks), ticks[7]


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Stolen share of the CPU time between two `cpu_times` readings; None when either is
    missing or no time passed."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return max(0.0, (after[1] - before[1]) / (after[0] - before[0]))


def load_average() -> float | None:
    """The 1-minute load average (runnable and running tasks, ours included); None where
    /proc/loadavg is not readable."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpus() -> int | None:
    """CPUs this process may run on (its affinity where the OS says), else os.cpu_count()."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


__all__ = ["cpu_times", "cpus", "load_average", "steal_share"]
