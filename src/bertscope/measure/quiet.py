"""Keep Kineto's own chatter off the terminal.

Kineto (the C++ side of torch.profiler) prints `USDT: ... profiler_start` / `profiler_stop`
lines straight to file descriptor 2 each time a capture starts or stops; no environment
variable turns them off. `quiet_fd2()` points descriptor 2 at a temporary file around those
calls only, then passes on every line that is not Kineto's, so bertscope's own messages (and
any real error printed in between) still reach stderr.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# `USDT:2026-12-02 00:35:06 16131:16131 SyncActivityProfilerHandler.cpp:52] profiler_start`
KINETO_LINE = re.compile(r"^USDT:.*\] profiler_(start|stop)\s*$")


def keep_line(line: str) -> bool:
    """Whether a line caught on descriptor 2 is passed on (everything but Kineto's)."""
    return not KINETO_LINE.match(line)


@contextlib.contextmanager
def quiet_fd2() -> Iterator[None]:
    """Catch what C++ code writes to descriptor 2 inside the block; re-emit all but Kineto's
    start/stop lines on `sys.stderr` afterwards. A no-op where descriptor 2 cannot be dup'ed."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            kept = [ln for ln in text.splitlines(keepends=True) if keep_line(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class QuietProfiler:
    """A torch.profiler.profile whose start, step and stop run under `quiet_fd2`."""

    def __init__(self, prof: object) -> None:
        self.prof = prof

    def __enter__(self) -> object:
        with quiet_fd2():
            self.prof.__enter__()  # type: ignore[attr-defined]
        return self.prof

    def step(self) -> None:
        """`prof.step()`: a scheduled capture stops and the next one starts here."""
        with quiet_fd2():
            self.prof.step()  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        with quiet_fd2():
            self.prof.__exit__(*exc)  # type: ignore[attr-defined]


__all__ = ["KINETO_LINE", "QuietProfiler", "keep_line", "quiet_fd2"]
