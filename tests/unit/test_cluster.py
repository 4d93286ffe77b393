"""`bertscope.cluster` locally: results in item order wherever the items ran (this process,
forked workers, threads), an item's one-line error reaching the caller whole, and a
scheduler address checked before any work. The Dask side runs on a real cluster in
tests/integration/test_dask.py."""

from __future__ import annotations

import sys

import pytest

from bertscope import cluster
from bertscope.errors import BertscopeError


def _square(x: int) -> int:
    if x < 0:
        raise BertscopeError(f"item {x}: negative")
    return x * x


@pytest.mark.parametrize(("workers", "processes"), [(1, True), (2, True), (2, False)])
def test_results_come_back_in_item_order(workers: int, processes: bool) -> None:
    with cluster.mapped(_square, range(40), workers=workers, processes=processes) as got:
        assert list(got) == [i * i for i in range(40)]  # 0, 1, 4, ... by definition


@pytest.mark.parametrize("workers", [1, 2])
def test_an_items_error_reaches_the_caller_as_it_was_raised(workers: int) -> None:
    with pytest.raises(BertscopeError, match=r"^item -3: negative$"), \
            cluster.mapped(_square, [1, 2, -3, 4], workers=workers) as got:
        list(got)


_STARTED: list[int] = []


def _count(x: int) -> int:
    _STARTED.append(x)
    return x * x


def test_ahead_bounds_the_items_submitted_and_not_yet_read() -> None:
    _STARTED.clear()
    with cluster.mapped(_count, list(range(12)), workers=2, processes=False,
                        ahead=3) as results:
        for read, r in enumerate(results, start=1):
            # submitted by the time the read-th result is read: the 3 first, then one more
            # per result read; all 12 at once (no window) would start them all now
            assert len(_STARTED) <= read + 3
            assert r == (read - 1) ** 2  # in item order
    assert sorted(_STARTED) == list(range(12))


def test_local_workers_are_bounded_by_items_and_cap() -> None:
    assert cluster.local_workers(1, 8) == 1
    assert cluster.local_workers(100, 3) == 3
    assert cluster.local_workers(100, 1000) == cluster.MAX_LOCAL_WORKERS
    assert cluster.local_workers(0) == 1


@pytest.mark.parametrize("bad", ["", "  ", "tcp://a b:1", 8786, b"tcp://x:1"])
def test_a_bad_address_is_one_line(bad: object) -> None:
    with pytest.raises(BertscopeError, match="expected a Dask scheduler address"):
        cluster.check_scheduler(bad)


def test_no_address_is_local() -> None:
    assert cluster.check_scheduler(None) is None


def test_a_scheduler_without_distributed_names_the_pip_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import blocked: "not installed"
    with pytest.raises(BertscopeError, match=r"pip install distributed;"):
        cluster.check_scheduler("tcp://127.0.0.1:8786")


def test_the_public_functions_check_the_address_first(tmp_path) -> None:
    from bertscope.sweep import sweep
    from bertscope.trace import analyze_trace

    with pytest.raises(BertscopeError, match="expected a Dask scheduler address"):
        analyze_trace(tmp_path / "missing.json", scheduler="")
    with pytest.raises(BertscopeError, match="expected a Dask scheduler address"):
        sweep("bert-tiny", "a100", scheduler=3)
