"""Keep freed host memory in the process while measuring on a CPU, as a caching allocator does.

glibc's malloc gives large freed blocks back to the kernel (blocks over the mmap threshold
are unmapped on free, the heap top is trimmed), so every training iteration faults its
activations, gradients and temporaries back in as fresh zeroed pages. On the 2-core VM this
project is developed on, that is ~130,000 minor faults and about a fifth of a bert-base
iteration, and the cost per fault varies from run to run (bench/results/bench_allocator.txt).
PyTorch's CUDA caching allocator keeps freed blocks for reuse, and CPU deployments commonly
swap in jemalloc or tcmalloc for the same reason; measured op times should be those steady
costs, not the kernel's. `keep_freed_memory()` asks glibc for that behaviour through
`mallopt`: no mmap'd blocks (M_MMAP_MAX = 0), no trimming (M_TRIM_THRESHOLD), a large
top pad (M_TOP_PAD) so the heap grows in big steps, and one arena (M_ARENA_MAX = 1): with
threads' own arenas, a 2-micro-batch bert-mini run faulted ~104,000 pages in again in every
profiled iteration and its loss backward ran 2-5x slower per byte; with one arena from
process start (MALLOC_ARENA_MAX=1), none (bench/results/bench_loss_microbatch.txt). Arenas
already attached to a thread stay, so `validate` applies the settings before it builds
anything (then at most a few thousand faults in one of its measured iterations).

Keeping freed memory removes the faults of steady state, not of growth: an iteration whose
tensors land on heap pages the process has never touched still faults them in (first touch;
on this project's VM the first touch of a page costs up to ~13 us, against ~0.5 us for a
page the kernel recycles: bench/results/bench_loss_microbatch.txt). The profiler's own
buffers grow the heap in its first captured iterations and move later tensors onto fresh
pages, so `profile` runs profiled settling iterations until one faults in less than
`SETTLED_SHARE` of the resident set (`settled`).

The settings are process-wide and stay for the life of the process (glibc has no way back
to its adaptive defaults); the process keeps its peak memory until `release_freed_memory`
gives the free pages back (`profile` does once its iterations are over, before it builds its
rows). On other C libraries nothing changes and the functions say so.
"""

from __future__ import annotations

import ctypes
import mmap
import platform

from bertscope.config import HostAllocator

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -4, -8
_SETTINGS = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 2**30),
             (_M_ARENA_MAX, 1))
"""(mallopt parameter, value) pairs; the largest values an int argument takes."""


_applied = False
PAGE_BYTES = mmap.PAGESIZE
"""Bytes per page of this machine."""


def keep_freed_memory() -> HostAllocator:
    """Tune glibc's malloc to keep freed memory (once per process); returns the allocator
    now in effect: KEEP, or SYSTEM where the C library is not glibc or refuses."""
    global _applied
    if _applied:
        return HostAllocator.KEEP
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return HostAllocator.SYSTEM
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return HostAllocator.SYSTEM
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not all(mallopt(param, value) == 1 for param, value in _SETTINGS):  # 1 = success
        return HostAllocator.SYSTEM
    _applied = True
    return HostAllocator.KEEP


SETTLED_SHARE = 0.01
"""An iteration is settled when the pages it faults in are at most this share of the
process's resident memory (steady state: bert-mini:16:128 faults ~0.4% per profiled
iteration, a 2-micro-batch run's first profiled iterations 15-20%)."""


def minor_faults() -> int | None:
    """Minor page faults of this process so far; None where `resource` is unavailable."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def resident_bytes() -> int | None:
    """Resident memory of this process (Linux /proc/self/statm); None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * PAGE_BYTES


def settled(faults: int, resident: int, page_bytes: int | None = None) -> bool:
    """Whether an iteration that faulted `faults` pages in a process of `resident` bytes
    is in steady state: faults x page size <= SETTLED_SHARE x resident."""
    page = PAGE_BYTES if page_bytes is None else page_bytes
    return faults * page <= SETTLED_SHARE * resident


def settling(faults: int | None) -> bool:
    """Whether an iteration that faulted `faults` pages is not in steady state in this
    process (`settled` against its resident memory now); False where faults or resident
    memory cannot be counted."""
    resident = resident_bytes()
    return faults is not None and resident is not None and not settled(faults, resident)


def release_freed_memory() -> bool:
    """Give the kept freed memory back to the kernel (glibc `malloc_trim(0)`: every whole free
    page of the heap), once measuring is over: a process that kept its peak while it measured
    need not keep it while it reports. Returns whether glibc released any; False where
    `keep_freed_memory` was not applied (the C library trims by itself then)."""
    if not _applied:
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return bool(trim(0))


def host_allocator() -> HostAllocator:
    """The host allocator in effect in this process."""
    return HostAllocator.KEEP if _applied else HostAllocator.SYSTEM


__all__ = ["PAGE_BYTES", "SETTLED_SHARE", "HostAllocator", "host_allocator", "keep_freed_memory",
           "minor_faults", "release_freed_memory", "resident_bytes", "settled", "settling"]
