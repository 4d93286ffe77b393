"""Traces and sweeps on a real `dask.distributed` cluster: a scheduler and two worker
processes on 127.0.0.1 (one module-scoped `LocalCluster`, closed after), driven through the
CLI's `--scheduler ADDRESS` and the Python API.

- The rank-trace folder and a small sweep give, through the scheduler, exactly the local
  run's output (the files compared byte for byte, the frames value for value), and the
  work did run on the cluster (the scheduler saw the tasks).
- A sweep streamed to Parquet through the scheduler (rows written piece by piece as the
  workers' results come in) reads back equal to the local run's.
- A worker killed while it runs a task (a worker plugin that ends its process when a task
  starts executing): once, the scheduler runs the task again on the other worker and the
  output equals the local one (a trace folder, a streamed sweep); every time, past
  `allowed-failures`, the command fails in one line, exit 2, and writes nothing (no output,
  no temporary: the streamed Parquet had pieces written when it stopped).
- An address nobody listens on: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distributed")

import cloudpickle
import dask
import pandas as pd
from distributed import Client, LocalCluster, WorkerPlugin

import bertscope.cluster as cluster
from bertscope.cli import main
from bertscope.sweep import sweep

TRACES = Path(__file__).parents[1] / "data" / "traces" / "multirank"
SWEEP = ["sweep", "bert-tiny,bert-mini", "--device", "a100,tpu-v4", "--batch", "1..8",
         "--seq", "32,64", "--no-store"]
"""Two models (two groups, so two pieces for the workers) x 2 devices x 8 x 2."""


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[LocalCluster]:
    """A scheduler (in this process) and two worker processes on 127.0.0.1; a task is
    tried on at most 2 workers (allowed-failures 1) so that the exhausted case is quick.
    Closed after the module: its port closed and no worker or nanny process left (the
    multiprocessing resource tracker, which outlives any spawn, aside)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None) as c:
        address = c.scheduler_address
        yield c
    import psutil

    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):  # the scheduler's port is closed
        socket.create_connection((host, int(port)), timeout=5).close()

    left = [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            and "resource_tracker" not in " ".join(p.cmdline())]
    assert not left, [p.cmdline() for p in left]  # no worker or nanny outlives the cluster


@pytest.fixture
def address(local_cluster: LocalCluster) -> str:
    """The scheduler's address, its two workers up (after a test that killed some)."""
    with Client(local_cluster.scheduler_address, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=120)
    return local_cluster.scheduler_address


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().err


def _prefixes(c: LocalCluster) -> set[str]:
    """The task names (key prefixes, leading underscores dropped) the scheduler has seen."""
    return set(c.scheduler.task_prefixes)


def test_trace_folder_on_the_cluster_equals_the_local_run(
        address: str, local_cluster: LocalCluster, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    local, remote = tmp_path / "local.json", tmp_path / "remote.json"
    assert _run(capsys, "trace", str(TRACES), "--output", str(local), "--no-store")[0] == 0
    rc, err = _run(capsys, "trace", str(TRACES), "--output", str(remote), "--no-store",
                   "--scheduler", address)
    assert rc == 0, err
    assert "breakdown_file" in _prefixes(local_cluster)  # read on the workers
    assert remote.read_bytes() == local.read_bytes()


def test_sweep_on_the_cluster_equals_the_local_run(
        address: str, local_cluster: LocalCluster, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    local, remote = tmp_path / "local.csv", tmp_path / "remote.csv"
    assert _run(capsys, *SWEEP, "--output", str(local))[0] == 0
    rc, err = _run(capsys, *SWEEP, "--output", str(remote), "--scheduler", address)
    assert rc == 0, err
    assert "evaluate" in _prefixes(local_cluster)
    assert remote.read_bytes() == local.read_bytes()
    # streamed to Parquet piece by piece as the workers' results come in: the local rows
    local, remote = tmp_path / "local.parquet", tmp_path / "remote.parquet"
    assert _run(capsys, *SWEEP, "--output", str(local))[0] == 0
    rc, err = _run(capsys, *SWEEP, "--output", str(remote), "--scheduler", address)
    assert rc == 0, err
    assert pd.read_parquet(remote).equals(pd.read_parquet(local))
    # 2 models x the a100 (the tpu-v4 lacks fp32, the default precision) x 8 x 2
    assert len(pd.read_parquet(remote)) == 2 * 1 * 8 * 2
    # the API too, every column value for value
    kw: dict[str, Any] = dict(batch=range(1, 9), seq=(32, 64), precision=("fp32", "bf16"))
    a = sweep(["bert-tiny", "bert-mini"], ["a100", "tpu-v4"], scheduler=address, **kw).frame
    b = sweep(["bert-tiny", "bert-mini"], ["a100", "tpu-v4"], **kw).frame
    # 2 models x (a100: fp32, bf16; tpu-v4: bf16) x 8 batches x 2 seqs
    assert len(a) == 2 * 3 * 8 * 2
    assert a.equals(b)


class KillWorker(WorkerPlugin):
    """Ends the worker's process (as a crash or an OOM kill would) when a task starts
    executing, while the `armed` file exists: once (the first worker to create the `once`
    file, atomically) or, with `once` None, every time. Removing `armed` makes it inert on
    every worker, whether or not its unregistration reached them."""

    name = "kill-worker"

    def __init__(self, armed: str, once: str | None) -> None:
        self.armed = armed
        self.once = once

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        """os._exit on entering "executing" (no clean-up: the nanny sees a death)."""
        if finish != "executing" or not os.path.exists(self.armed):
            return
        if self.once is not None:
            try:
                os.close(os.open(self.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return  # another worker died already
        os._exit(1)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import us


@contextmanager
def _killing(address: str, armed: Path, once: Path | None) -> Iterator[None]:
    """Within: the `KillWorker` plugin on the cluster's workers, armed."""
    armed.touch()
    client = Client(address, set_as_default=False)
    try:
        client.register_plugin(KillWorker(str(armed), None if once is None else str(once)))
        yield
    finally:
        armed.unlink()
        with contextlib.suppress(Exception):  # a worker dying meanwhile: inert anyway
            client.unregister_worker_plugin(KillWorker.name)
        client.close()


def test_a_worker_killed_once_the_task_runs_again(
        address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local, remote = tmp_path / "local.json", tmp_path / "remote.json"
    marker = tmp_path / "killed"
    assert _run(capsys, "trace", str(TRACES), "--output", str(local), "--no-store")[0] == 0
    with _killing(address, tmp_path / "armed", marker):
        rc, err = _run(capsys, "trace", str(TRACES), "--output", str(remote), "--no-store",
                       "--scheduler", address)
    assert marker.exists()  # a worker did die
    assert rc == 0, err
    assert remote.read_bytes() == local.read_bytes()


def test_a_sweep_worker_killed_once_the_piece_runs_again(
        address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local, remote = tmp_path / "local.parquet", tmp_path / "remote.parquet"
    marker = tmp_path / "killed"
    assert _run(capsys, *SWEEP, "--output", str(local))[0] == 0
    with _killing(address, tmp_path / "armed", marker):
        rc, err = _run(capsys, *SWEEP, "--output", str(remote), "--scheduler", address)
    assert marker.exists()  # a worker did die
    assert rc == 0, err
    assert pd.read_parquet(remote).equals(pd.read_parquet(local))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_task_that_kills_every_worker_fails_in_one_line(
        address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    out = tmp_path / f"remote{suffix}"
    with _killing(address, tmp_path / "armed", None):
        rc, err = _run(capsys, *SWEEP, "--output", str(out), "--scheduler", address)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("bertscope: error: a Dask worker died "
                                                   "each time it ran sweep piece ")
    assert "2 tries" in err  # allowed-failures 1: two workers tried
    assert not list(tmp_path.iterdir())  # no output, no temporary


def test_an_unreachable_scheduler_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on (bound, then closed)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    out = tmp_path / "t.json"
    address = f"tcp://127.0.0.1:{port}"
    rc, err = _run(capsys, "trace", str(TRACES), "--output", str(out), "--no-store",
                   "--scheduler", address)
    assert rc == 2
    assert err.count("\n") == 1
    assert err.startswith(f"bertscope: error: cannot reach the Dask scheduler at {address}: ")
    assert err.rstrip().endswith("start one with `dask scheduler` or drop --scheduler")
    assert not out.exists()
    # from the environment variable too
    monkeypatch.setenv(cluster.ENV, address)
    rc, err = _run(capsys, "trace", str(TRACES), "--output", str(out), "--no-store")
    assert rc == 2 and "cannot reach the Dask scheduler" in err
