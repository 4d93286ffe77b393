"""Keep freed host memory in the process while measuring on a CPU, as a caching allocator does.

glibc's malloc gives large freed blocks back to the kernel (blocks over the mmap threshold
are unmapped on free, the heap top is trimmed), so every training iteration faults its
activations, gradients and temporaries back in as fresh zeroed pages. On the 2-core VM this
project is developed on, that is ~130,000 minor faults and about a fifth of a bert-base
iteration, and the cost per fault varies from run to run (bench/results/bench_allocator.txt).
PyTorch's CUDA caching allocator keeps freed blocks for reuse, and CPU deployments commonly
swap in jemalloc or tcmalloc for the same reason; measured op times should be those steady
costs, not the kernel's. `keep_freed_memory()` asks glibc for that behaviour through
`mallopt`: no mmap'd blocks (M_MMAP_MAX = 0), no trimming (M_TRIM_THRESHOLD), and a large
top pad (M_TOP_PAD) so the heap grows in big steps.

The settings are process-wide and stay for the life of the process (glibc has no way back
to its adaptive defaults); the process keeps its peak memory. On other C libraries nothing
changes and the function says so.
"""

from __future__ import annotations

import ctypes
import platform

from bertscope.config import HostAllocator

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_SETTINGS = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 2**30))
"""(mallopt parameter, value) pairs; the largest values an int argument takes."""


_applied = False


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


def host_allocator() -> HostAllocator:
    """The host allocator in effect in this process."""
    return HostAllocator.KEEP if _applied else HostAllocator.SYSTEM


__all__ = ["HostAllocator", "host_allocator", "keep_freed_memory"]
