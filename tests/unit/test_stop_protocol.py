"""The stop protocol (`bertscope.stop`): SIGINT and SIGTERM ask every measuring loop to stop
after the iteration in progress; a partial result is marked in its content and its file name
and never reused as complete; exit 3 when something was kept, 130 when nothing was; pool
workers and child processes die with the parent, `kill -9` included.

In-process tests call the handler (or signal this process) inside tiny loops; a few
subprocess tests send real signals to real commands."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertscope import stop
from bertscope.optable import ProfileFacts
from bertscope.stop import STOP, Interrupted, StopRequest, partial_path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p)}
LINUX = sys.platform.startswith("linux")


@pytest.fixture(autouse=True)
def clear_stop() -> Iterator[None]:
    """Every test starts and ends with no stop request (it is sticky by design)."""
    STOP.reset()
    yield
    STOP.reset()


# -- the request ---------------------------------------------------------------------------
def test_a_first_signal_in_a_graceful_loop_only_asks() -> None:
    req = StopRequest()
    with req.graceful():
        req.signal(signal.SIGTERM, None)  # returns: the iteration in progress goes on
        assert req
        with pytest.raises(KeyboardInterrupt):  # a second one abandons it
            req.signal(signal.SIGINT, None)
    assert req  # sticky: the enclosing loops see it too (validate's configs, the study)
    with pytest.raises(Interrupted) as e:
        req.check()
    assert e.value.kept is None and e.value.exit_code == 130
    req.reset()
    assert not req
    req.check()  # nothing asked: no error


def test_a_signal_outside_a_measuring_loop_interrupts_at_once() -> None:
    req = StopRequest()
    with pytest.raises(KeyboardInterrupt):
        req.signal(signal.SIGINT, None)
    assert req  # and is remembered, should the KeyboardInterrupt be swallowed somewhere


def test_a_real_sigterm_ends_a_loop_after_its_iteration() -> None:
    """SIGTERM to this process in the 2nd of 5 iterations: the 2nd finishes whole, the 3rd
    never starts, and the previous handler is back afterwards."""
    before = signal.getsignal(signal.SIGTERM)
    done = []
    with stop.handle_signals(), STOP.graceful():
        for i in range(5):
            if i == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            done.append(i)  # the rest of the iteration runs
            if STOP:
                break
    assert done == [0, 1]
    assert signal.getsignal(signal.SIGTERM) is before
    assert not STOP  # the command's end forgets it


@pytest.mark.parametrize(("kept", "code"), [("r.partial.json", 3), (None, 130)])
def test_interrupted_exit_codes(kept: str | None, code: int) -> None:
    assert Interrupted(kept).exit_code == code
    assert (stop.PARTIAL_EXIT, stop.INTERRUPTED_EXIT) == (3, 130)


@pytest.mark.parametrize(("path", "expected"), [
    ("out.json", "out.partial.json"),
    ("runs/a.b.json", "runs/a.b.partial.json"),
    ("noext", "noext.partial"),
    ("out.partial.json", "out.partial.json"),  # already marked: not twice
])
def test_partial_path(path: str, expected: str) -> None:
    assert partial_path(path) == Path(expected)
    assert stop.is_partial_path(expected) and not stop.is_partial_path("out.json")


# -- the command line ----------------------------------------------------------------------
def _app(body: object) -> object:
    """A typer app whose one command, `ops`, runs `body`."""
    import typer

    app = typer.Typer()
    app.callback()(lambda: None)  # a group: `ops` names the command
    app.command("ops")(body)
    return app


def test_cli_exit_codes_for_a_stopped_command(monkeypatch, capsys) -> None:
    import bertscope.cli as cli

    def interrupted() -> None:
        raise Interrupted()

    monkeypatch.setattr(cli, "build_app", lambda modules=(): _app(interrupted))
    assert cli.main(["ops"]) == 130
    assert capsys.readouterr().err == "bertscope: interrupted\n"

    def kept() -> None:
        raise Interrupted("r.partial.json")

    monkeypatch.setattr(cli, "build_app", lambda modules=(): _app(kept))
    assert cli.main(["ops"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "r.partial.json" in err


def test_cli_never_exits_0_once_asked_to_stop(monkeypatch, capsys) -> None:
    """A request whose KeyboardInterrupt was lost (raised in a finalizer) still ends the
    command with 130."""
    import bertscope.cli as cli

    def lost() -> None:
        with STOP.graceful():
            STOP.signal(signal.SIGINT, None)

    monkeypatch.setattr(cli, "build_app", lambda modules=(): _app(lost))
    assert cli.main(["ops"]) == 130
    assert capsys.readouterr().err == "bertscope: interrupted\n"


# -- children ------------------------------------------------------------------------------
def test_wait_child_passes_a_stop_on_once(tmp_path: Path) -> None:
    """A stop request while waiting reaches the child as one SIGTERM; its own exit status
    comes back (here 7, from its SIGTERM handler)."""
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    proc = stop.spawn([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    with STOP.graceful():
        STOP.signal(signal.SIGTERM, None)
    assert stop.wait_child(proc) == 7


@pytest.mark.parametrize(("rc", "kept"), [(3, True), (130, False)])
def test_a_stopped_fresh_child_is_interrupted_here(tmp_path: Path, monkeypatch, rc: int,
                                                   kept: bool) -> None:
    from bertscope.studies import fresh

    monkeypatch.setattr(fresh, "spawn", lambda cmd, **kw: stop.spawn(
        [sys.executable, "-c", f"raise SystemExit({rc})"], **kw))
    with pytest.raises(Interrupted) as e:
        fresh.measure_fresh("bert-tiny:1:8", tmp_path / "r.json", iters=1, warmup=0)
    assert e.value.kept == (str(tmp_path / "r.partial.json") if kept else None)


@pytest.mark.skipif(not LINUX, reason="parent-death signals are Linux's (prctl)")
def test_kill_9_of_the_parent_leaves_no_child(tmp_path: Path) -> None:
    """A parent that started a child with `stop.spawn` and a forked pool worker with
    `stop.worker_initializer` is killed with SIGKILL: neither outlives it."""
    parent = textwrap.dedent("""
        import os, sys, time
        from concurrent.futures import ProcessPoolExecutor
        import multiprocessing
        from bertscope import stop
        child = stop.spawn([sys.executable, "-c", "import time; time.sleep(120)"])
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                   initializer=stop.worker_initializer,
                                   initargs=(os.getpid(),))
        worker = pool.submit(os.getpid).result()
        pool.submit(time.sleep, 120)
        print(child.pid, worker, flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], env=ENV, stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30  # a hang guard, not a timing
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)]
    finally:  # clean-up should the test fail
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by init, does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# -- the sweep's worker pool ---------------------------------------------------------------
SWEEP = ["sweep", "bert-tiny,bert-mini,bert-small,bert-medium,bert-base,bert-large",
         "--device", "a100,h100", "--batch", "1..256", "--seq", "64,128,256,512",
         "--precision", "fp32,bf16,fp16", "--num-layers", "1..24", "--no-store", "--yes"]
"""A grid of ~900,000 configurations in 18 pieces: forked workers where there are 2 cores."""


@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_ctrl_c_to_a_sweeps_process_group(tmp_path: Path) -> None:
    """Ctrl-C to the process group once the workers run: exit 130, one line, no traceback,
    no worker left."""
    proc = subprocess.Popen([sys.executable, "-m", "bertscope.cli", *SWEEP], env=ENV,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 20  # workers fork within seconds (threads on 1 core)
    while proc.poll() is None and not _children(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    workers = _children(proc.pid)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be interrupted")
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.decode() == "bertscope: interrupted\n"
    assert not [p for p in workers if _alive(p)]


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


# -- measuring loops (torch) ---------------------------------------------------------------
PROFILE = ["profile", "bert-tiny", "--batch", "1", "--seq", "8", "--no-store"]
SIGNAL_AT = textwrap.dedent("""
    import os, signal, sys
    from bertscope.measure import profile as prof
    sig, at = getattr(signal, sys.argv[1]), int(sys.argv[2])
    prof.MAX_SETTLING = 0  # every profiled iteration is a measured one
    real, calls = prof._Trainer.step, []
    def step(self):
        calls.append(1)
        if len(calls) == at:  # the signal arrives as this iteration starts
            os.kill(os.getpid(), sig)
        real(self)
    prof._Trainer.step = step
    from bertscope.cli import main
    sys.exit(main(sys.argv[3:]))
""")
"""Runs the CLI in a process that signals itself as training step N starts."""


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "at", "code", "kept"), [
    ("SIGTERM", 1, 130, None),  # in the first of 2 warm-up iterations: nothing measured
    ("SIGINT", 3, 3, 2),  # warm-up 1, measured 1, then in the 2nd of 3 measured: 2 kept
])
def test_a_signal_during_profile(tmp_path: Path, sig: str, at: int, code: int,
                                 kept: int | None) -> None:
    pytest.importorskip("torch")
    warmup = 2 if kept is None else 1
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT, sig, str(at), *PROFILE,
                           "--iters", "3", "--warmup", str(warmup), "--output", "o.json"],
                          env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertscope: interrupted")
    assert not (tmp_path / "o.json").exists()  # never a complete result's name
    if kept is None:
        assert list(tmp_path.iterdir()) == []
    else:
        meta = json.loads((tmp_path / "o.partial.json").read_text())["meta"]
        assert meta["partial"] is True and meta["iters"] == kept


def _saved_result(tmp_path: Path, name: str, *, partial: bool) -> Path:
    from tests.saved_measurements import saved_measurement

    doc = json.loads((saved_measurement("validate_cpu") / "bert-base-2-128.round0.json"
                      ).read_text())
    doc["meta"]["partial"] = partial
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _fake_profile(results: list[object], *, partial: bool = False,
                  ask_stop: bool = False) -> object:
    """A stand-in for `measure.profile.profile` returning a result with these facts."""
    def run(*_a: object, **_k: object) -> object:
        if ask_stop:
            with STOP.graceful():
                STOP.signal(signal.SIGTERM, None)

        def write_json(path: Path) -> Path:
            Path(path).write_text("{}")
            return Path(path)

        result = SimpleNamespace(facts=ProfileFacts(partial=partial, page_faults=()),
                                 write_json=write_json, table=None)
        results.append(result)
        return result
    return run


def test_validate_never_reuses_a_partial_result(tmp_path: Path, monkeypatch) -> None:
    """A saved result marked partial, even under a complete result's name (the file an
    interrupted validate once left), is measured again, not reused."""
    pytest.importorskip("torch")
    from bertscope.measure import profile as profile_mod
    from bertscope.studies import measured
    from bertscope.studies import validate as val

    _saved_result(tmp_path, "bert-base-2-128.json", partial=True)
    ran: list[object] = []
    monkeypatch.setattr(profile_mod, "profile", _fake_profile(ran))

    def calibrated(device: str, results: list[object], **kw: object) -> None:
        raise Interrupted()  # the test ends here

    monkeypatch.setattr(val, "calibrate_local", calibrated)
    lines: list[str] = []
    with pytest.raises(Interrupted):
        val.validate(measured.parse_specs("bert-base:2:128"),
                     measured.parse_specs("bert-mini:2:8"), results_dir=tmp_path,
                     log=lines.append)
    assert len(ran) == 2  # both measured: the partial one was not taken as complete
    assert any("holds a partial result" in ln for ln in lines)


def test_validate_stopped_mid_measurement_keeps_it_marked(tmp_path: Path,
                                                          monkeypatch) -> None:
    pytest.importorskip("torch")
    from bertscope.measure import profile as profile_mod
    from bertscope.studies import measured
    from bertscope.studies import validate as val

    ran: list[object] = []
    monkeypatch.setattr(profile_mod, "profile", _fake_profile(ran, partial=True,
                                                              ask_stop=True))
    with pytest.raises(Interrupted) as e:
        val.validate(measured.parse_specs("bert-mini:2:8"),
                     measured.parse_specs("bert-small:2:8"), results_dir=tmp_path)
    assert len(ran) == 1  # the second config never started
    assert e.value.kept == str(tmp_path / "bert-mini-2-8.partial.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert-mini-2-8.partial.json"]


def test_validate_asked_to_stop_in_a_last_iteration_goes_no_further(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """The stop came in the config's last iteration: its result is complete and kept under
    its own name, and the next config is not measured (exit 3: the folder holds it)."""
    pytest.importorskip("torch")
    from bertscope.measure import profile as profile_mod
    from bertscope.studies import measured
    from bertscope.studies import validate as val

    ran: list[object] = []
    monkeypatch.setattr(profile_mod, "profile", _fake_profile(ran, ask_stop=True))
    with pytest.raises(Interrupted) as e:
        val.validate(measured.parse_specs("bert-mini:2:8"),
                     measured.parse_specs("bert-small:2:8"), results_dir=tmp_path)
    assert len(ran) == 1 and e.value.exit_code == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert-mini-2-8.json"]


def test_study_quick_stopped_in_its_measured_iteration(tmp_path: Path, monkeypatch) -> None:
    """A SIGINT during the study's one measured iteration (which completes: the fresh child
    writes its result, exit 0) is not ignored: the study ends there (exit 130 under the CLI)
    and leaves no folder."""
    from bertscope.studies import study as study_mod
    from bertscope.studies.study import StudyConfig, study

    ran: list[str] = []

    def measured_in_child(spec: str, path: Path, **_k: object) -> Path:
        ran.append(spec)
        with STOP.graceful():  # the signal reaches this process while the child measures
            STOP.signal(signal.SIGINT, None)
        Path(path).write_text("{}")
        return Path(path)

    monkeypatch.setattr(study_mod, "require", lambda *a, **k: None)  # no torch needed here
    monkeypatch.setattr(study_mod, "measure_fresh", measured_in_child)
    monkeypatch.setattr(study_mod, "load_result", lambda path: SimpleNamespace(
        facts=SimpleNamespace(device="cpu", iteration_s=0.1), table=None))
    out = tmp_path / "study"
    with pytest.raises(Interrupted) as e:
        study(StudyConfig(output=out, quick=True, models=("bert-base",), devices=("a100",),
                          precisions=("fp32",)))
    assert ran == ["bert-mini:4:128:lamb"] and e.value.exit_code == 130
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary one


def test_ddp_launch_is_stopped_and_keeps_nothing(tmp_path: Path, monkeypatch) -> None:
    """A stop while torchrun runs ends its process group (`_kill_group`) and the run keeps
    nothing (`Interrupted`, exit 130)."""
    pytest.importorskip("torch")
    from bertscope.measure import ddp

    ended: list[int] = []
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(ddp, "spawn", lambda cmd, **kw: stop.spawn(sleeper, **kw))
    real_kill = ddp._kill_group

    def kill(proc: subprocess.Popen[bytes], workers: object = ()) -> None:
        ended.append(proc.pid)
        real_kill(proc, ())

    monkeypatch.setattr(ddp, "_kill_group", kill)
    with STOP.graceful():
        STOP.signal(signal.SIGTERM, None)
    with pytest.raises(Interrupted) as e:
        ddp._run_torchrun(tmp_path, 2, "cpu", 1)
    assert len(ended) == 1 and e.value.exit_code == 130
    assert not _alive(ended[0])


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="parent-death signals are Linux's (prctl)")
def test_kill_9_of_a_ddp_parent_leaves_no_process(tmp_path: Path) -> None:
    """`profile --nproc 2` killed with SIGKILL while its ranks run: torchrun and both ranks
    end too (they kept running before #33). A SIGKILLed parent cannot remove its launch
    folder, so TMPDIR points into tmp_path: the run's leftovers stay out of the machine's /tmp."""
    pytest.importorskip("torch")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "bertscope.cli", *PROFILE, "--nproc", "2",
                             "--iters", "1000", "--warmup", "1"],
                            env={**ENV, "TMPDIR": str(scratch)}, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # hang guards, not timings
        while len(_launched(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        launched = _launched(proc.pid)
        assert len(launched) >= 3, "torchrun and 2 ranks never ran"
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in launched) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in launched if _alive(p)]
        # the launch folder (and torchrun's own) landed in scratch, not in the machine's /tmp
        assert any(d.name.startswith("bertscope-ddp-") for d in scratch.iterdir())
    finally:
        for pid in _launched(proc.pid, any_parent=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _launched(parent: int, *, any_parent: bool = False) -> list[int]:
    """torchrun (a child of `parent`) and the ranks it started (by their command lines);
    with `any_parent`, every such process."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = stat.read_bytes()
        except OSError:
            continue
        if b"torch.distributed.run" in cmd or b"bertscope.measure.ddp_worker" in cmd:
            pid = int(stat.parent.name)
            if _alive(pid) and (any_parent or _descends(pid, parent)):
                found.append(pid)
    return found


def _descends(pid: int, ancestor: int) -> bool:
    """Whether `ancestor` is `pid`'s parent or grandparent."""
    for _ in range(2):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
    return False


@pytest.mark.slow
def test_a_fresh_child_stopped_mid_measurement_writes_a_partial_result(
        tmp_path: Path, monkeypatch) -> None:
    """The fresh re-measure child's own loop (`fresh.main`, here in this process): SIGTERM
    in its 2nd of 3 measured iterations -> exit 3, the result at PATH.partial.json."""
    pytest.importorskip("torch")
    from bertscope.measure import profile as prof
    from bertscope.studies import fresh

    monkeypatch.setattr(prof, "MAX_SETTLING", 0)
    real, calls = prof._Trainer.step, []

    def step(self: object) -> None:
        calls.append(1)
        if len(calls) == 2:  # warm-up 0, measured 1, then the signal in the 2nd
            os.kill(os.getpid(), signal.SIGTERM)
        real(self)

    monkeypatch.setattr(prof._Trainer, "step", step)
    with stop.handle_signals():
        rc = fresh.main(["bert-tiny:1:8", str(tmp_path / "r.json"), "3", "0", "cpu", "min"])
    assert rc == 3 and not (tmp_path / "r.json").exists()
    meta = json.loads((tmp_path / "r.partial.json").read_text())["meta"]
    assert meta["partial"] is True and meta["iters"] == 2 and meta["fresh_process"] is True


def test_calibrate_microbenchmarks_stop_after_the_point_in_progress(monkeypatch) -> None:
    """A stop during the first GEMM point: that point finishes, no other starts, nothing is
    returned (calibrate saves nothing)."""
    pytest.importorskip("torch")
    from bertscope.measure import microbench as mb
    from bertscope.studies.local_calibration import run_microbench

    timed: list[object] = []

    def best_time(fn: object, dev: object, **kw: object) -> float:
        timed.append(fn)
        STOP.signal(signal.SIGTERM, None)  # inside the graceful loop: only asks
        return 1.0

    monkeypatch.setattr(mb, "_best_time", best_time)
    with pytest.raises(Interrupted) as e:
        run_microbench("cpu", quick=True)
    assert len(timed) == 1 and e.value.exit_code == 130


@pytest.mark.slow
def test_a_signal_while_profile_writes_keeps_the_result_whole(tmp_path: Path, monkeypatch,
                                                              capsys) -> None:
    """SIGTERM as the finished result is being written: the write completes (the complete
    result under its own name), then the command honours the stop with exit 3."""
    pytest.importorskip("torch")
    from bertscope.cli import main
    from bertscope.measure import profile as prof

    real = prof.ProfileResult.write_json

    def write_json(self: object, path: Path) -> Path:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(self, path)  # type: ignore[arg-type]

    monkeypatch.setattr(prof.ProfileResult, "write_json", write_json)
    out = tmp_path / "o.json"
    assert main([*PROFILE, "--iters", "2", "--warmup", "0", "--output", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "complete result" in err[0]
    meta = json.loads(out.read_text())["meta"]
    assert meta["partial"] is False and meta["iters"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]  # no temporary left


@pytest.mark.slow
def test_a_stop_while_settling_keeps_nothing(monkeypatch) -> None:
    """Profiled iterations thrown away while the heap settles are no measurement: a stop
    among them is `Interrupted` with nothing kept (it was exit 2, "bad input")."""
    pytest.importorskip("torch")
    from bertscope.config import RunConfig
    from bertscope.measure import profile as prof
    from bertscope.presets import get_model

    monkeypatch.setattr(prof, "settling", lambda faults: True)  # never settles
    real, calls = prof._Trainer.step, []

    def step(self: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        real(self)

    monkeypatch.setattr(prof._Trainer, "step", step)
    with stop.handle_signals(), pytest.raises(Interrupted) as e:
        prof.profile(get_model("bert-tiny"), RunConfig(batch=1, seq=8), iters=2, warmup=0,
                     host_allocator="keep")
    assert len(calls) == 2 and e.value.exit_code == 130
