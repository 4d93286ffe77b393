"""The stop protocol: how a measuring command stops on SIGINT or SIGTERM, and how the processes
it starts stop with it.

One request per process (`STOP`). `bertscope.cli.main` installs `STOP.signal` for SIGINT and
SIGTERM. A loop that measures runs inside `STOP.graceful()`: there a first signal only sets
the request, which the loop reads between iterations (`if STOP`), so the iteration in progress
finishes whole; a second signal, or a signal outside such a loop, raises KeyboardInterrupt at
once (raising at an arbitrary point inside a measuring loop was lost when it landed in a
finalizer). The request is sticky until the command ends (`reset`), so every enclosing loop
(validate's configs, the study's sections, a sweep's pieces) sees it too and none carries on.

A loop that stops either returns what it measured, marked partial in its content (a profile
result's `partial`) and, when written, in its file name (`partial_path`: `*.partial.json`,
never read back as a complete result), or raises `Interrupted`: with `kept` naming what was
kept (exit `PARTIAL_EXIT`, 3) or nothing (exit `INTERRUPTED_EXIT`, 130).

Children (`spawn`, `wait_child`, `worker_initializer`) die with the parent, `kill -9`
included: on Linux each asks the kernel for a parent-death signal (`prctl(PR_SET_PDEATHSIG)`),
which needs no cooperation from a parent that cannot run any more (a process group alone
would: the parent must be alive to signal it). A child started by `spawn` also gets its own
process group, so a terminal's Ctrl-C reaches the parent alone, which passes the stop on once
(`wait_child`) instead of the child seeing two signals (the terminal's and the parent's), and
whatever the child starts in that group can be ended together (`kill_group`). Pool workers
(forked) stay in the parent's group and ignore SIGINT: the parent stops them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where children are started: the CLI's start-up stays lean
    import subprocess

PARTIAL_EXIT = 3
"""Exit code of a command interrupted after it kept something measured (a result marked
partial, or measurements saved so far)."""
INTERRUPTED_EXIT = 130
"""Exit code of a command interrupted with nothing to keep (128 + SIGINT, as shells do)."""
PARTIAL_SUFFIX = ".partial"
"""Inserted before a partial result's file extension (`partial_path`)."""
_PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent (thread) dies."""


class Interrupted(Exception):
    """A command stopped on request (SIGINT or SIGTERM). `kept`: the file or folder holding
    what it kept (exit `PARTIAL_EXIT`), None when nothing was (exit `INTERRUPTED_EXIT`)."""

    def __init__(self, kept: str | Path | None = None) -> None:
        self.kept = None if kept is None else str(kept)
        super().__init__(f"interrupted; partial result kept in {self.kept}" if self.kept
                         else "interrupted")

    @property
    def exit_code(self) -> int:
        """`PARTIAL_EXIT` when something was kept, else `INTERRUPTED_EXIT`."""
        return PARTIAL_EXIT if self.kept else INTERRUPTED_EXIT


class StopRequest:
    """A request to stop a long measurement after the step in progress (SIGINT or SIGTERM
    under the CLI; see the module docstring). True once asked, until `reset`."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._depth = 0

    def __bool__(self) -> bool:
        return self._event.is_set()

    @contextmanager
    def graceful(self) -> Iterator[None]:
        """Within: a first signal sets the request instead of interrupting."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth = max(0, self._depth - 1)

    def signal(self, signum: int, frame: object) -> None:
        """The signal handler (installed by `bertscope.cli.main` for SIGINT and SIGTERM):
        set the request; raise KeyboardInterrupt unless a graceful loop takes a first one."""
        first = not self._event.is_set()
        self._event.set()
        if self._depth and first:
            return
        raise KeyboardInterrupt

    def check(self, kept: str | Path | None = None) -> None:
        """Raise `Interrupted(kept)` when a stop was asked (a loop's stopping point)."""
        if self._event.is_set():
            raise Interrupted(kept)

    def reset(self) -> None:
        """Forget the request (a command's start and end)."""
        self._event.clear()


STOP = StopRequest()
"""The process's stop request (see `StopRequest`)."""


@contextmanager
def handle_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM go to `STOP.signal` (from the main thread only; elsewhere
    nothing changes); the request starts clear and the previous handlers come back after."""
    previous: dict[int, Any] = {}
    STOP.reset()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, STOP.signal)
    except ValueError:  # not the main thread: leave signals alone
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        STOP.reset()


def partial_path(path: str | Path) -> Path:
    """Where a partial result meant for `path` is written: "out.json" -> "out.partial.json"
    (the name says it; a complete result's name is never given to it)."""
    p = Path(path)
    if is_partial_path(p):
        return p
    return p.with_name(f"{p.stem}{PARTIAL_SUFFIX}{p.suffix}" if p.suffix
                       else f"{p.name}{PARTIAL_SUFFIX}")


def is_partial_path(path: str | Path) -> bool:
    """Whether a file name marks a partial result (`partial_path`)."""
    p = Path(path)
    return p.stem.endswith(PARTIAL_SUFFIX) or p.name.endswith(PARTIAL_SUFFIX)


# -- children that die with the parent ---------------------------------------------------------
def _prctl() -> Any:
    """libc's prctl (Linux), looked up in the parent: a child between fork and exec must not
    dlopen (another thread of the parent may have held the loader's lock at the fork)."""
    global _PRCTL
    if _PRCTL is None and sys.platform.startswith("linux"):
        import ctypes

        try:
            _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # no prctl: the parent's own clean-up must do
            _PRCTL = False
    return _PRCTL or None


_PRCTL: Any = None


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux; nothing
    elsewhere), then exit at once if the parent is already gone (`parent`: its pid, known
    before the fork; else only an orphan adopted by init counts). Call it in the child:
    `spawn`'s preexec, a pool's initializer, a worker's first lines. The signal survives
    exec; it fires when the parent *thread* that forked ends, so fork from a thread that
    lives as long as the child should (bertscope forks from the main thread)."""
    prctl = _prctl()
    if prctl is None:
        return
    prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    ppid = os.getppid()
    if (parent is not None and ppid != parent) or ppid == 1:
        os._exit(INTERRUPTED_EXIT)  # the parent died before we asked: nobody reads our work


def spawn(cmd: Sequence[str], *, death_signal: int = signal.SIGKILL,
          **popen: Any) -> subprocess.Popen[bytes]:
    """Start `cmd` in a process group of its own that gets `death_signal` when this process
    dies (`die_with_parent`; POSIX only: elsewhere just the group); `popen`: more
    `subprocess.Popen` arguments (env, stdout, ...)."""
    import subprocess

    parent = os.getpid()
    if os.name != "posix":
        return subprocess.Popen(list(cmd), **popen)
    _prctl()  # looked up here, before the fork

    def preexec() -> None:
        die_with_parent(death_signal, parent)

    return subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=preexec, **popen)


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the process group of a child `spawn` started (its leader's pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def wait_child(proc: subprocess.Popen[bytes], *,
               on_stop: Callable[[subprocess.Popen[bytes]], None] | None = None,
               on_error: Callable[[subprocess.Popen[bytes]], None] | None = None,
               poll_s: float = 0.2) -> int:
    """Wait for a child `spawn` started, as a measuring loop: a stop request is passed on
    once, by `on_stop(proc)` (default: SIGTERM to its group, so it stops after its own
    iteration), and the wait goes on until it exits; a second signal or any error ends it by
    `on_error(proc)` (default: SIGKILL to its group) and re-raises. Returns its exit
    status."""
    import subprocess

    told = False
    try:
        with STOP.graceful():
            while True:
                try:
                    return proc.wait(timeout=poll_s)
                except subprocess.TimeoutExpired:
                    pass
                if STOP and not told:
                    told = True
                    (on_stop or (lambda p: kill_group(p, signal.SIGTERM)))(proc)
    except BaseException:
        (on_error or kill_group)(proc)
        with contextlib.suppress(Exception):
            proc.wait(timeout=5.0)
        raise


def worker_initializer(parent: int | None = None) -> None:
    """A pool worker's first call (`ProcessPoolExecutor(initializer=worker_initializer,
    initargs=(os.getpid(),))`): ignore SIGINT (a Ctrl-C to the process group is the
    parent's to handle: it ends the pool), take SIGTERM's default action (the parent's way
    to end it, silently), die with the parent (pid `parent`), then unblock the signals
    `blocked_signals` held while it was forked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(signal.SIGKILL, parent)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@contextmanager
def blocked_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM held back in this thread (delivered on leaving), so that
    workers forked meanwhile start with them blocked until `worker_initializer` has set
    their handlers (a Ctrl-C during the fork then never runs the parent's handler in a
    worker). Nothing where the platform has no signal masks."""
    _prctl()  # looked up before the workers fork (`die_with_parent` in their initializer)
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    sigs = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


__all__ = ["INTERRUPTED_EXIT", "PARTIAL_EXIT", "STOP", "Interrupted", "StopRequest",
           "blocked_signals", "die_with_parent", "handle_signals", "is_partial_path",
           "kill_group", "partial_path", "spawn", "wait_child", "worker_initializer"]
