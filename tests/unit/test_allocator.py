"""The host-allocator switch: glibc keeps freed memory after it (no page faults on reuse)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from bertscope.measure.allocator import HostAllocator

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

# Allocate and free a 64 MiB block twice, touching every page; count the minor faults of the
# second round. glibc's default serves a block this large with mmap and unmaps it on free, so
# the second round faults all 16,384 of its 4 KiB pages in again; with freed memory kept, the
# second round reuses pages that are already mapped.
_SCRIPT = """
import ctypes, resource, sys
from bertscope.measure.allocator import keep_freed_memory, host_allocator
if sys.argv[1] == "keep":
    print(keep_freed_memory().value, host_allocator().value)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
size = 64 * 2**20
def touch():
    p = libc.malloc(size)
    ctypes.memset(p, 1, size)
    libc.free(p)
touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


def _thp_always() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" in f.read()
    except OSError:
        return False


@glibc
@pytest.mark.skipif(_thp_always(), reason="huge pages make the fault counts tiny either way")
def test_keep_freed_memory_stops_refaulting_a_reused_block() -> None:
    system = int(_faults("system")[-1])
    keep = _faults("keep")
    assert keep[:2] == ["keep", "keep"]
    assert system >= 16_384 * 0.9  # 64 MiB / 4 KiB pages
    assert int(keep[-1]) < 16_384 * 0.1


def test_profile_rejects_an_unknown_allocator_before_training() -> None:
    pytest.importorskip("torch")
    from bertscope.config import RunConfig, get_model
    from bertscope.errors import BertscopeError
    from bertscope.measure.profile import profile

    with pytest.raises(BertscopeError,
                       match="unknown host allocator 'jemalloc'; choose one of: keep, system"):
        profile(get_model("bert-tiny"), RunConfig(batch=1, seq=8), host_allocator="jemalloc")
    assert {a.value for a in HostAllocator} == {"keep", "system"}
