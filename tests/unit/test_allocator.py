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
    from bertscope.config import RunConfig
    from bertscope.errors import BertscopeError
    from bertscope.measure.profile import profile
    from bertscope.presets import get_model

    with pytest.raises(BertscopeError,
                       match="unknown host allocator 'jemalloc'; choose one of: keep, system"):
        profile(get_model("bert-tiny"), RunConfig(batch=1, seq=8), host_allocator="jemalloc")
    assert {a.value for a in HostAllocator} == {"keep", "system"}


def test_settled_is_one_percent_of_the_resident_set() -> None:
    """1 GiB resident, 4 KiB pages: 1% is 10,737,418 bytes = 2,621.4 pages."""
    from bertscope.measure.allocator import settled

    assert settled(2621, 2**30, page_bytes=4096)  # 10,735,616 bytes <= 10,737,418
    assert not settled(2622, 2**30, page_bytes=4096)  # 10,739,712 bytes
    assert settled(0, 0, page_bytes=4096)


@pytest.mark.parametrize(("per_iteration", "settling", "kept"), [
    # two iterations faulting 100,000 and 50,000 pages are thrown away, then 10 each is kept
    ([100_000, 50_000, 10, 10, 10], 2, [10, 10, 10]),
    # never settling: MAX_SETTLING (4) thrown away, the next 3 kept as they are
    ([90_000] * 7, 4, [90_000] * 3),
    ([0, 0, 0], 0, [0, 0, 0]),
])
def test_profiled_iterations_settle_before_they_are_kept(monkeypatch, per_iteration, settling,
                                                          kept) -> None:
    """`_Session.capture` throws away profiled iterations while each faults more than 1% of
    the resident set (here 1 GiB: 2,621 pages), at most MAX_SETTLING, then keeps `iters`."""
    pytest.importorskip("torch")
    import bertscope.measure.profile as prof

    counts = iter([c for f in per_iteration for c in (0, f)])  # (before, after) per step
    monkeypatch.setattr(prof, "minor_faults", lambda: next(counts))
    monkeypatch.setattr("bertscope.measure.allocator.resident_bytes", lambda: 2**30)
    monkeypatch.setattr("bertscope.measure.allocator.PAGE_BYTES", 4096)
    steps: list[int] = []

    class Trainer:
        def step(self) -> None:
            steps.append(1)

        def sync(self) -> None:
            pass

    told: list[tuple[str, int, int]] = []
    session = prof._Session(Trainer(), [prof.torch.profiler.ProfilerActivity.CPU], False,
                            lambda *a: told.append(a))
    cap = session.capture(3, whole=False, settle=prof.MAX_SETTLING)
    assert cap.settling == settling and cap.faults == kept
    assert len(cap.done) == 3 and len(steps) == settling + 3
    assert [t for t in told if t[0] == "measure"] == [("measure", i, 3) for i in (1, 2, 3)]
    assert len(cap.walked_us) == 3  # only kept iterations are walked into the result


# Keep freed memory, then touch and free a 64 MiB block: the process keeps its pages until
# `release_freed_memory` gives them back (resident memory read from /proc/self/statm).
_RELEASE = """
import ctypes
from bertscope.measure.allocator import keep_freed_memory, release_freed_memory, resident_bytes
print(release_freed_memory())  # not applied yet: nothing to give back
keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
size = 64 * 2**20
p = libc.malloc(size)
ctypes.memset(p, 1, size)
libc.free(p)
kept = resident_bytes()
print(release_freed_memory())
print(kept - resident_bytes())
"""


@glibc
def test_release_gives_kept_memory_back() -> None:
    """A freed 64 MiB block stays resident while freed memory is kept; released, at least
    60 MiB of it leaves the resident set (a few pages of the heap's chunk headers and top
    pad may stay), and nothing is released where keeping was never applied."""
    out = subprocess.run([sys.executable, "-c", _RELEASE], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["False", "True"]
    assert int(out[2]) >= 60 * 2**20
