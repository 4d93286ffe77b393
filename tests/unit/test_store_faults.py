"""The runs store under faults (issue #33): a corrupt page, a read-only store, a full disk, a
lock held past the busy timeout, ten processes opening a fresh store at once, bad run ids,
unknown kinds, a blank $BERTSCOPE_STORE, and read-only commands on a missing store. Every
failure is one line naming the file; a recording command keeps its result and says in one
warning line that it was not recorded."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bertscope.cli import main
from bertscope.errors import BertscopeError
from bertscope.store import Store, StoreError
from bertscope.store import access as store_access

ROOT = Path(__file__).resolve().parents[2]
PREDICT = ["predict", "bert-tiny", "--seq", "16", "--device", "a100", "--top", "0"]
PAGE = 4096  # SQLite's default page size, the one a new store gets


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _store(path: Path, runs: int = 2) -> list[str]:
    """A store at `path` with `runs` predicted runs (op tables: several pages); their ids."""
    from bertscope.analytic import build
    from bertscope.config import RunConfig
    from bertscope.perf import load_profile, predict
    from bertscope.presets import get_model

    table = predict(build(get_model("bert-tiny"), RunConfig(batch=2, seq=16)),
                    load_profile("a100"))
    s = Store.open(path)
    ids = [s.record("predict", table, device="a100") for _ in range(runs)]
    s.close()
    return ids


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# --- a corrupt page -------------------------------------------------------------------------

def test_a_corrupt_page_is_one_line_and_a_recording_command_keeps_its_result(
        tmp_path: Path, capsys, monkeypatch) -> None:
    path = tmp_path / "runs.sqlite"
    rid = _store(path)[0]
    size = path.stat().st_size
    assert size >= 4 * PAGE
    with path.open("r+b") as f:  # page 2 (the runs table's root): garbage; page 1 kept
        f.seek(PAGE)
        f.write(b"\xa5" * PAGE)
    before = _files(tmp_path)
    capsys.readouterr()
    for argv in (["runs", "list"], ["runs", "show", rid], ["runs", "rm", rid],
                 ["runs", "export", rid, str(tmp_path / "out.csv")]):
        assert main([*argv, "--store", str(path)]) == 2, argv
        line = _one_line(capsys.readouterr().err)
        assert str(path) in line and "damaged" in line, line
    monkeypatch.setenv("COLUMNS", "200")
    assert main([*PREDICT, "--store", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "tokens/s" in out and "recorded as run" not in out  # the result, printed
    line = _one_line(err)
    assert line.startswith(f"bertscope: warning: not recorded in the runs store '{path}'")
    assert _files(tmp_path) == before  # nothing written, nothing left beside it


def test_commands_close_the_store_they_fail_on_without_the_garbage_collector(
        tmp_path: Path, capsys) -> None:
    """A command that fails on a damaged store closes its connection itself: with the garbage
    collector off (an exception's traceback keeps the frames that hold the store alive until
    a collection), nothing is left beside the store, neither -wal nor -shm (CI once saw them
    after the test above, in the full suite only)."""
    import gc

    path = tmp_path / "runs.sqlite"
    rid = _store(path)[0]
    with path.open("r+b") as f:
        f.seek(PAGE)
        f.write(b"\xa5" * PAGE)
    before = _files(tmp_path)
    gc.disable()
    try:
        for argv in (["runs", "list"], ["runs", "show", rid], ["runs", "rm", rid],
                     ["runs", "export", rid, str(tmp_path / "out.csv")], [*PREDICT]):
            main([*argv, "--store", str(path)])
            assert _files(tmp_path) == before, argv
    finally:
        gc.enable()
    capsys.readouterr()


# --- read-only ------------------------------------------------------------------------------

@contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """`folder` and its files made read-only: by permissions, or (as root, whom permissions
    do not stop) by a read-only bind mount; skips where neither is possible."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in folder.iterdir()}
        for p in modes:
            p.chmod(0o444)
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
            for p, m in modes.items():
                p.chmod(m)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot make a read-only folder as root here: {bind.stderr.decode()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)],
                            capture_output=True)
        if ro.returncode != 0:
            pytest.skip(f"cannot remount read-only: {ro.stderr.decode()}")
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_read_only_store_can_be_listed_shown_and_exported(tmp_path: Path, capsys,
                                                             monkeypatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "runs.sqlite"
    rid = _store(path)[0]
    before = _files(folder)
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    with _read_only(folder):
        assert main(["runs", "list", "--store", str(path)]) == 0
        assert rid in capsys.readouterr().out
        assert main(["runs", "show", rid, "--store", str(path)]) == 0
        assert "Largest ops" in capsys.readouterr().out
        assert main(["runs", "export", rid, str(tmp_path / "a.csv"), "--store", str(path)]) == 0
        assert (tmp_path / "a.csv").read_text().startswith("name,")
        s = Store.open(path, write=False)
        assert len(s.list()) == 2 and s.get(rid)["kind"] == "predict"
        s.close()
        capsys.readouterr()
        # writing to it: one line before any work, naming the file and the fix
        for argv in (["runs", "rm", rid, "--store", str(path)], [*PREDICT, "--store", str(path)]):
            assert main(argv) == 2, argv
            line = _one_line(capsys.readouterr().err)
            assert str(path) in line and "read-only" in line and "--no-store" in line, line
        assert _files(folder) == before


# --- a full disk ----------------------------------------------------------------------------

@contextmanager
def _small_tmpfs(folder: Path, size: str = "256k") -> Iterator[Path]:
    """A small tmpfs mounted at `folder` (skips where mounting is not allowed)."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the simulated full disk still runs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def _fill(folder: Path) -> None:
    """Fill the file system under `folder` to the last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_new_store_on_a_full_disk_leaves_no_file_and_keeps_the_result(
        tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with _small_tmpfs(tmp_path / "vol") as vol:
        _fill(vol)
        out_csv = tmp_path / "pred.csv"
        assert main([*PREDICT, "--store", str(vol / "sub" / "runs.sqlite"), "--output",
                     str(out_csv)]) == 0
        out, err = capsys.readouterr()
        line = _one_line(err)
        assert "not recorded" in line and "disk is full" in line, line
        assert out_csv.read_text().startswith("name,") and "tokens/s" in out
        assert sorted(os.listdir(vol)) == ["filler"]  # no store, no temporary file, no folder


def test_an_existing_store_on_a_full_disk_keeps_its_runs(tmp_path: Path, capsys,
                                                         monkeypatch) -> None:
    """A full disk when recording: one warning line, the result kept; the record fails
    whole and the store keeps its runs."""
    monkeypatch.setenv("COLUMNS", "200")
    with _small_tmpfs(tmp_path / "vol", "1m") as vol:
        path = vol / "runs.sqlite"
        ids = _store(path)
        s = Store.open(path)  # opened while there is room (its shared-memory file made)
        _fill(vol)
        capsys.readouterr()
        assert main([*PREDICT, "--store", str(path)]) == 0
        out, err = capsys.readouterr()
        assert "tokens/s" in out
        line = _one_line(err)
        assert line.startswith(f"bertscope: warning: not recorded in the runs store '{path}'")
        assert "disk is full" in line, line
        with pytest.raises(StoreError, match="disk is full"):
            for _ in range(20):  # the write-ahead log grows until the disk refuses it
                _store_table(s)
        s.close()
        (vol / "filler").unlink()
        s = Store.open(path, write=False)
        assert set(ids) <= {r["id"] for r in s.list()}
        s.close()


def _store_table(s: Store) -> str:
    from bertscope.analytic import build
    from bertscope.config import RunConfig
    from bertscope.perf import load_profile, predict
    from bertscope.presets import get_model

    return s.record("predict", predict(build(get_model("bert-base"), RunConfig(batch=2,
                                                                            seq=16)),
                                       load_profile("a100")))


class _FullConnection:
    """A connection whose writes fail as SQLite's do on a full disk."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: object) -> object:
        if sql.lstrip().upper().startswith(("CREATE", "INSERT")):
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def test_a_full_disk_simulated(tmp_path: Path, capsys, monkeypatch) -> None:
    """Without a tmpfs: SQLite's full-disk error on creating a store and on recording into
    one is a warning, the result kept, no file left."""
    real = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: _FullConnection(real(*a, **k)))
    monkeypatch.setenv("COLUMNS", "200")
    new = tmp_path / "new.sqlite"
    assert main([*PREDICT, "--store", str(new)]) == 0
    out, err = capsys.readouterr()
    assert "tokens/s" in out
    assert "disk is full" in _one_line(err)
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(sqlite3, "connect", real)
    old = tmp_path / "old.sqlite"
    _store(old, runs=1)
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: _FullConnection(real(*a, **k)))
    assert main([*PREDICT, "--store", str(old)]) == 0
    assert "disk is full" in _one_line(capsys.readouterr().err)
    with pytest.raises(StoreError, match="disk is full"):
        Store.open(old).record("test")


# --- a lock held by another writer ----------------------------------------------------------

def test_a_lock_held_past_the_busy_timeout_is_one_line(tmp_path: Path, capsys,
                                                       monkeypatch) -> None:
    path = tmp_path / "runs.sqlite"
    rid = _store(path, runs=1)[0]
    monkeypatch.setenv(store_access.ENV_TIMEOUT, "0.2")
    monkeypatch.setenv("COLUMNS", "200")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write in progress
    try:
        capsys.readouterr()
        assert main(["runs", "list", "--store", str(path)]) == 0  # readers are not blocked
        assert rid in capsys.readouterr().out
        assert main(["runs", "rm", rid, "--store", str(path)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert line == (f"bertscope: error: the runs store '{path}' is locked by another "
                        f"process (waited 0.2 s); retry, or pass --no-store")
        assert main([*PREDICT, "--store", str(path)]) == 0
        out, err = capsys.readouterr()
        assert "tokens/s" in out
        assert "not recorded" in _one_line(err) and "locked" in err
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r["id"] for r in Store.open(path, write=False).list()] == [rid]


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e400"])
def test_a_bad_timeout_is_refused(value: str, monkeypatch) -> None:
    monkeypatch.setenv(store_access.ENV_TIMEOUT, value)
    with pytest.raises(BertscopeError, match=store_access.ENV_TIMEOUT):
        store_access.busy_timeout()


# --- ten processes opening a fresh store at the same moment ---------------------------------

_RACER = textwrap.dedent("""
    import os, sys, time
    from bertscope.store import Store
    path, go, i = sys.argv[1], sys.argv[2], sys.argv[3]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    Store.open(path).record("test", None, model=f"m{i}")
""")


@pytest.mark.parametrize("start", ["absent", "empty file"])
def test_ten_processes_opening_a_fresh_store_record_all_ten(start: str, tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    if start == "empty file":  # schema made in place, inside BEGIN IMMEDIATE
        path.touch()
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(path), str(go), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for i in range(10)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        go.touch()
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * 10, [r[1][-300:] for r in results if r[1]]
    s = Store.open(path, write=False)
    models = sorted(r["model"] for r in s.list(kind="test"))
    s.close()
    assert models == sorted(f"m{i}" for i in range(10))
    assert sorted(os.listdir(tmp_path)) == ["go", "runs.sqlite"]  # no temporary file left


# --- ids, kinds, names ----------------------------------------------------------------------

@pytest.mark.parametrize("rid", ["x" * 100_000, "", "a b", "ab\udcff", "../x", "a;drop", "é"])
def test_bad_run_ids_are_refused_before_use_and_quoted_short(rid: str, tmp_path: Path,
                                                             capsys) -> None:
    path = tmp_path / "runs.sqlite"
    _store(path, runs=1)
    with pytest.raises(BertscopeError, match="not a run id"):
        Store.open(path).get(rid)
    assert main(["runs", "show", rid, "--store", str(path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "not a run id" in line and len(line) < 250, line[:300]


def test_run_ids_bertscope_makes_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    rid = _store(path, runs=1)[0]
    assert store_access.check_run_id(rid) == rid
    assert store_access.check_run_id("A-b_9" * 12 + "abcd") == "A-b_9" * 12 + "abcd"  # 64
    with pytest.raises(BertscopeError):
        store_access.check_run_id("a" * 65)


def test_unprintable_and_undecodable_text_is_shown_escaped(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """A model name with an undecodable byte and a terminal escape, and a summary of bytes
    that are not UTF-8 (a store edited by hand): shown escaped, never a crash."""
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "runs.sqlite"
    s = Store.open(path)
    rid = s.record("predict", None, model="bad\udcffname\x1b[2J", device="a100",
                   summary={"note": "x\udcfe\x07y"})
    s.conn.execute("UPDATE runs SET device = CAST(X'61ff62' AS TEXT) WHERE id = ?", (rid,))
    s.close()
    capsys.readouterr()
    assert main(["runs", "show", rid, "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bad\\udcffname\\x1b[2J" in out and "\x1b" not in out
    assert "a\\xffb" in out and "x\\udcfe\\x07y" in out
    assert main(["runs", "list", "--store", str(path)]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_an_unknown_kind_is_refused_naming_the_kinds(tmp_path: Path, capsys) -> None:
    path = tmp_path / "runs.sqlite"
    s = Store.open(path)
    s.record("test", None)
    s.close()
    assert main(["runs", "list", "--kind", "predcit", "--store", str(path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "'predcit'" in line and "predict, profile" in line, line
    assert main(["runs", "list", "--kind", "profile", "--store", str(path)]) == 0  # none yet
    assert main(["runs", "list", "--kind", "test", "--store", str(path)]) == 0  # in the store


@pytest.mark.parametrize("value", [" ", "", "\t \n"])
def test_a_blank_store_variable_is_refused(value: str, tmp_path: Path, capsys,
                                           monkeypatch) -> None:
    monkeypatch.setenv("BERTSCOPE_STORE", value)
    monkeypatch.chdir(tmp_path)
    assert main(PREDICT) == 2
    line = _one_line(capsys.readouterr().err)
    assert "BERTSCOPE_STORE is blank" in line
    assert main(["runs", "list"]) == 2
    capsys.readouterr()
    assert os.listdir(tmp_path) == []
    assert main([*PREDICT, "--no-store"]) == 0  # nothing to record: the variable is not read


@pytest.mark.parametrize("argv", [["rm", "abcd1234"], ["show", "abcd1234"], ["list"],
                                  ["export", "abcd1234", "{d}/x.csv"],
                                  ["compare", "abcd1234", "abcd1235"]])
def test_commands_on_a_missing_store_do_not_create_it(argv: list[str], tmp_path: Path,
                                                      capsys) -> None:
    store = tmp_path / "sub" / "runs.sqlite"
    args = [a.replace("{d}", str(tmp_path)) for a in argv]
    assert main(["runs", *args, "--store", str(store)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "no runs store" in line and str(store) in line
    assert os.listdir(tmp_path) == []


def test_a_recording_command_creates_the_store_only_when_it_records(tmp_path: Path,
                                                                      monkeypatch) -> None:
    store = tmp_path / "a" / "b" / "runs.sqlite"
    monkeypatch.setenv("COLUMNS", "200")
    assert main([*PREDICT, "--device", "nope", "--store", str(store)]) == 2  # bad input
    assert os.listdir(tmp_path) == []  # no store, no folder for it
    assert main([*PREDICT, "--store", str(store)]) == 0
    s = Store.open(store, write=False)
    assert len(s.list()) == 1
    s.close()
    assert sorted(os.listdir(store.parent)) == ["runs.sqlite"]


def test_a_store_under_a_file_fails_before_the_work(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("x")
    assert main([*PREDICT, "--store", str(tmp_path / "file" / "runs.sqlite")]) == 2
    assert "not a folder" in _one_line(capsys.readouterr().err)


# --- recording last -------------------------------------------------------------------------

def test_profile_writes_its_output_before_a_failing_record(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "runs.sqlite"
    _store(path, runs=1)
    monkeypatch.setenv(store_access.ENV_TIMEOUT, "0.1")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        out_json = tmp_path / "p.json"
        rc = main(["profile", "bert-tiny", "--seq", "8", "--batch", "1", "--iters", "1",
                   "--warmup", "0", "--top", "0", "--output", str(out_json),
                   "--store", str(path)])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "not recorded" in _one_line(err) and "locked" in err
    assert out_json.stat().st_size > 0 and f"wrote {out_json}" in out


def test_a_truncated_store_is_one_line_and_export_never_overwrites_the_store(
        tmp_path: Path, capsys) -> None:
    path = tmp_path / "runs.sqlite"
    rid = _store(path, runs=1)[0]
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(path.read_bytes()[:3 * PAGE])
    assert main(["runs", "list", "--store", str(cut)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(cut) in line and "damaged" in line, line
    before = path.read_bytes()
    same = tmp_path / "runs.json"
    path.rename(same)
    assert main(["runs", "export", rid, str(same), "--store", str(same)]) == 2
    assert "(the runs store)" in _one_line(capsys.readouterr().err)
    assert same.read_bytes() == before
