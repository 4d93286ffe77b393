"""Where work runs: one function mapped over items, in this process, on local worker
processes or threads, or on a Dask cluster, results coming back in item order.

    with mapped(read_one, files, scheduler=None) as results:   # local (the default)
        for r in results: ...
    with mapped(read_one, files, scheduler="tcp://10.0.0.5:8786") as results:  # Dask
        ...

Locally, with nothing to start: one item (or one core) runs in this process; several items
run on worker processes forked where forking is safe (`fork_safe`), else on threads (and on
threads when asked: work whose numpy loops release the GIL, the sweep's small grids). Forked
workers follow the stop protocol (`bertscope.stop`): they start with SIGINT and SIGTERM
held (`blocked_signals`), ignore SIGINT and die with this process (`worker_initializer`);
a run left early (Ctrl-C, SIGTERM, an error) cancels what has not started and lets each
worker finish its item (`stop_pool`).

With a scheduler address (`tcp://HOST:PORT`; the CLI's `--scheduler ADDRESS` or
`$BERTSCOPE_SCHEDULER`) a `dask.distributed.Client` maps the function over the items
(`client.map`): the function and each item are pickled to the workers (the function by
reference: the workers need bertscope installed) and only results come back. Items that
name files (a folder of rank traces) are read where the workers run: the paths must reach
the same files there (a shared file system; they are sent absolute). A worker lost
mid-item is replaced by the scheduler, which runs the item again on another worker, up to
its `distributed.scheduler.allowed-failures` (3 by default); past that the run fails in one
line (`BertscopeError`). An unreachable scheduler is one line too, after `CONNECT_TIMEOUT_S`.
dask is imported only here and only then: `bertscope` imports, and every command starts,
without it; multiprocessing and concurrent.futures likewise only where a pool starts (one
item, the common case of `bertscope trace FILE`, runs without them: ~2 MiB of imports).
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from bertscope.errors import BertscopeError, shown
from bertscope.requirements import require
from bertscope.stop import STOP, blocked_signals, worker_initializer

if TYPE_CHECKING:
    from concurrent.futures import Executor

T = TypeVar("T")
R = TypeVar("R")

ENV = "BERTSCOPE_SCHEDULER"
"""The environment variable the CLI's `--scheduler` reads when the option is not given."""
CONNECT_TIMEOUT_S = 10.0
"""How long to try reaching a scheduler before saying it cannot be reached."""
MAX_LOCAL_WORKERS = 16
"""Most local worker processes or threads."""
STOP_WAIT_S = 60.0
"""How long a stopping run waits for each worker process to finish its item."""
HINT = "start one with `dask scheduler` or drop --scheduler"
"""What an unreachable scheduler's message tells the user to do."""


def check_scheduler(address: Any) -> str | None:
    """`address` when it is a usable scheduler address (a non-empty string without spaces,
    such as tcp://HOST:PORT), None for None; a one-line error otherwise (a public API
    argument), and when dask's distributed scheduler is not installed."""
    if address is None:
        return None
    if not isinstance(address, str) or not address.strip() or any(c.isspace() for c in address):
        raise BertscopeError(f"scheduler: expected a Dask scheduler address such as "
                             f"tcp://HOST:8786, got {shown(address)}")
    require("--scheduler", "distributed", otherwise="or drop --scheduler to run locally")
    return address


def fork_safe() -> bool:
    """Whether worker processes may be forked from this one: a POSIX fork start method, no
    other thread running (a forked copy of a threaded runtime can deadlock: a Dask client,
    a running pool) and no torch loaded. Never spawn or forkserver: they re-run the
    caller's main module, which a script calling bertscope at top level does not guard."""
    import multiprocessing

    return ("fork" in multiprocessing.get_all_start_methods()
            and threading.active_count() == 1 and "torch" not in sys.modules)


def local_workers(items: int, workers: int | None = None) -> int:
    """Local workers for `items` items: `workers` (default one per CPU core), no more than
    the items or `MAX_LOCAL_WORKERS`, at least one."""
    return max(1, min(workers or os.cpu_count() or 1, items, MAX_LOCAL_WORKERS))


@contextmanager
def mapped(fn: Callable[[T], R], items: Sequence[T], *, scheduler: str | None = None,
           workers: int | None = None, processes: bool = True, ahead: int | None = None,
           what: str = "items") -> Iterator[Iterator[R]]:
    """Within: `fn` over `items`, results in item order as they are read (see the module
    docstring for where each runs). Locally: `workers` (default one per core); `processes`
    False runs several items on threads instead of processes; `ahead` bounds the items
    submitted and not yet read (None: all at once), so that results a slow reader has not
    taken yet (a sweep writing its rows) do not pile up in memory. `fn` must be a
    module-level function and the items picklable (forked processes, Dask). `what` names the
    items in messages ("trace files"). Leaving the block early stops the work (`stop_pool`,
    or the Dask futures cancelled); the stop request (`STOP`) is checked after each
    result."""
    items = list(items)
    if scheduler is not None:
        with _on_dask(fn, items, scheduler, what) as results:
            yield results
        return
    n = local_workers(len(items), workers)
    if n == 1:
        yield _checked(map(fn, items))
        return
    pool = local_pool(n, processes=processes)
    with pool:
        try:
            if ahead is None:
                with blocked_signals():  # workers forked here start with SIGINT held
                    results = pool.map(fn, items, chunksize=max(1, len(items) // (8 * n)))
                yield _checked(results)
            else:
                yield _checked(_windowed(pool, fn, items, max(ahead, n)))
        except BaseException:  # Ctrl-C, SIGTERM, a failed item: no worker outlives it
            stop_pool(pool)
            raise


def _windowed(pool: Executor, fn: Callable[[T], R], items: list[T], ahead: int
              ) -> Iterator[R]:
    """`fn` over `items` on `pool`, at most `ahead` submitted and not yet read; results in
    item order. The first submissions start the workers (with SIGINT held: the stop
    protocol); the pool forks them all then, none later."""
    pending: collections.deque[Any] = collections.deque()
    with blocked_signals():
        pending.extend(pool.submit(fn, item) for item in items[:ahead])
    for item in items[ahead:]:
        result = pending.popleft().result()
        pending.append(pool.submit(fn, item))
        yield result
    while pending:
        yield pending.popleft().result()


def _checked(results: Iterator[R]) -> Iterator[R]:
    """The results, the stop request read after each."""
    for r in results:
        STOP.check()
        yield r


def local_pool(n_workers: int, *, processes: bool) -> Executor:
    """`n_workers` forked worker processes (`processes`, where `fork_safe`; following the
    stop protocol: enter `blocked_signals` around their first use) or threads."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    if processes and fork_safe():
        return ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context("fork"),
                                   initializer=worker_initializer, initargs=(os.getpid(),))
    return ThreadPoolExecutor(n_workers)


def stop_pool(pool: Executor) -> None:
    """End a pool left early (the stop protocol, `bertscope.stop`): items not started are
    cancelled and each worker process (which ignores SIGINT and dies with this process:
    `stop.worker_initializer`) finishes the item it holds and exits; no worker traceback,
    no BrokenProcessPool. Workers are not terminated mid-item: one killed while sending its
    result leaves the pool's reader thread waiting for the rest of the message forever (a
    hang at exit). Threads likewise finish the item they hold."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.join(timeout=STOP_WAIT_S)
    for proc in procs:  # an item that would not end: the last resort
        if proc.is_alive():
            proc.kill()


@contextmanager
def _on_dask(fn: Callable[[T], R], items: list[T], address: str,
             what: str) -> Iterator[Iterator[R]]:
    """`fn` over `items` on the Dask cluster at `address` (see the module docstring)."""
    from distributed import Client

    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, ValueError, TypeError) as e:  # refused, timed out, a bad address
        raise BertscopeError(f"cannot reach the Dask scheduler at {address}: {e}; {HINT}"
                             ) from None
    futures: list[Any] = []
    try:
        futures = client.map(fn, items, pure=False)
        yield _results(futures, address, what)
    finally:
        with contextlib.suppress(Exception):
            client.cancel([f for f in futures if f is not None and not f.done()])
        with contextlib.suppress(Exception):
            client.close(timeout=CONNECT_TIMEOUT_S)


def _results(futures: list[Any], address: str, what: str) -> Iterator[Any]:
    """Each future's result in order, each released once read (the cluster forgets it);
    a worker lost too often or a lost scheduler as one line."""
    from distributed import KilledWorker

    for i, f in enumerate(futures):
        try:
            r = f.result()
        except KilledWorker as e:
            last = getattr(e.last_worker, "address", "unknown")
            raise BertscopeError(
                f"a Dask worker died each time it ran {what} {i + 1} of {len(futures)} "
                f"({e.allowed_failures + 1} tries, the last on {last}); nothing was written; "
                f"see the workers' logs, or drop --scheduler") from None
        except (OSError, TimeoutError) as e:  # the scheduler went away mid-run
            raise BertscopeError(f"lost the Dask scheduler at {address} ({e}); nothing was "
                                 f"written; {HINT}") from None
        f.release()
        futures[i] = None
        STOP.check()
        yield r


__all__ = ["CONNECT_TIMEOUT_S", "ENV", "check_scheduler", "fork_safe", "local_pool",
           "local_workers", "mapped", "stop_pool"]
