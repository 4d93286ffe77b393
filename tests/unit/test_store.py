"""The runs store: recording, list/show/compare/export/rm, concurrency, crashes, old
schemas, foreign files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertscope.analytic import build
from bertscope.cli import main
from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.perf import load_profile, predict
from bertscope.presets import get_model
from bertscope.store import _SCHEMA_V1, APPLICATION_ID, SCHEMA_VERSION, Store

ROOT = Path(__file__).resolve().parents[2]


def _pred(device: str = "a100"):
    return predict(build(get_model("bert-tiny"), RunConfig(batch=2, seq=16)),
                   load_profile(device))


def test_record_list_show_export_rm(tmp_path) -> None:
    s = Store.open(tmp_path / "r.sqlite")
    a = s.record("predict", _pred(), device="a100", summary={"time_s": 1.0})
    b = s.record("predict", _pred("h100"), device="h100")
    assert {r["id"] for r in s.list()} == {a, b}
    assert [r["id"] for r in s.list(device="h100")] == [b]
    got = s.get(a)
    assert got["kind"] == "predict" and got["model"] == "bert-tiny"
    assert got["summary"] == {"time_s": 1.0} and got["versions"]["bertscope"]
    ops = s.ops(a)
    assert len(ops) == len(_pred()) and ops["time_s"].sum() == pytest.approx(
        _pred().export_meta()["prediction"]["time_s"])
    s.remove(a)
    assert [r["id"] for r in s.list()] == [b]
    with pytest.raises(BertscopeError, match="no run"):
        s.get(a)


def test_cli_records_and_compares(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    store = tmp_path / "runs.sqlite"
    monkeypatch.setenv("BERTSCOPE_STORE", str(store))
    for dev in ("a100", "h100"):
        assert main(["predict", "bert-tiny", "--seq", "16", "--device", dev]) == 0
    assert main(["predict", "bert-tiny", "--seq", "16", "--device", "v100", "--no-store"]) == 0
    capsys.readouterr()
    runs = Store.open(store).list()
    assert len(runs) == 2  # --no-store recorded nothing
    h100, a100 = runs[0]["id"], runs[1]["id"]
    assert main(["runs", "list", "--kind", "predict"]) == 0
    out = capsys.readouterr().out
    assert a100 in out and h100 in out
    assert main(["runs", "compare", a100, h100]) == 0
    out = capsys.readouterr().out
    assert "By category" in out and "By sublayer group" in out and "B vs A" in out
    assert main(["runs", "export", a100, str(tmp_path / "a.csv")]) == 0
    assert (tmp_path / "a.csv").read_text().startswith("name,")
    assert main(["runs", "export", a100, str(tmp_path / "a.jsonl")]) == 0  # the suffixes
    lines = (tmp_path / "a.jsonl").read_text().splitlines()  # every command reads
    assert len(lines) == len((tmp_path / "a.csv").read_text().splitlines()) - 1  # less header
    capsys.readouterr()
    for bad in ("a.txt", "a.xlsx"):  # a table, or no format: refused, nothing written
        assert main(["runs", "export", a100, str(tmp_path / bad)]) == 2
        assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / bad).exists()
    assert main(["runs", "rm", a100]) == 0
    assert main(["runs", "show", a100]) == 2  # gone: one-line error


def test_measured_against_predicted_gives_per_op_errors(tmp_path) -> None:
    """A stored measured profile compared with a stored prediction: errors per join key."""
    from bertscope.measure.profile import profile
    from bertscope.store.compare import compare_ops

    m, run = get_model("bert-tiny"), RunConfig(batch=2, seq=16)
    measured = profile(m, run, iters=1, warmup=1)
    s = Store.open(tmp_path / "r.sqlite")
    a = s.record("profile", measured.table, device="cpu")
    b = s.record("predict", predict(build(m, run), load_profile("a100")), device="a100")
    cmp = compare_ops(s.ops(a), s.ops(b))
    keys = cmp["keys"].dropna(subset=["error"])
    assert len(keys) > 10 and {"gemm", "memory"} <= set(keys["kind"])
    gemm = cmp["category"].loc["gemm"]
    assert gemm["a_s"] > 0 and gemm["b_s"] > 0


_WRITER = textwrap.dedent("""
    import sys
    from bertscope.store import Store
    s = Store.open(sys.argv[1])
    for i in range(int(sys.argv[2])):
        s.record("test", None, model=f"m{i}", summary={"i": i})
""")


def test_two_processes_recording_at_once_both_land(tmp_path) -> None:
    path = tmp_path / "r.sqlite"
    Store.open(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), "25"])
             for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(Store.open(path).list(kind="test")) == 50


_HANG = textwrap.dedent("""
    import sys, time
    from bertscope.store import Store
    s = Store.open(sys.argv[1])
    with s._tx():
        s.conn.execute("INSERT INTO runs (id, kind, created, inputs, summary, versions) "
                       "VALUES ('dead', 'test', 0, '{}', '{}', '{}')")
        print("inside", flush=True)
        time.sleep(60)
""")


def test_a_writer_killed_mid_write_leaves_no_partial_run(tmp_path) -> None:
    path = tmp_path / "r.sqlite"
    Store.open(path).record("test", None)
    p = subprocess.Popen([sys.executable, "-c", _HANG, str(path)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "inside"
    p.kill()
    p.wait(timeout=30)
    s = Store.open(path)
    assert [r["kind"] for r in s.list()] == ["test"]  # the killed run never landed
    with pytest.raises(BertscopeError):
        s.get("dead")


def test_a_store_of_the_previous_schema_is_migrated(tmp_path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    for stmt in filter(None, (x.strip() for x in _SCHEMA_V1.split(";"))):
        conn.execute(stmt)
    conn.execute("INSERT INTO runs (id, kind, created, inputs, summary, versions) VALUES "
                 "('abcd1234', 'predict', 1.0, '{}', '{}', '{}')")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    s = Store.open(path)
    assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert s.get("abcd1234")["machine"] == ""  # the column version 2 added
    assert s.record("test", None)


def test_corrupt_or_foreign_files_are_refused_not_overwritten(tmp_path, capsys) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(os.urandom(4096))
    before = junk.read_bytes()
    with pytest.raises(BertscopeError, match="not a bertscope runs store"):
        Store.open(junk)
    assert junk.read_bytes() == before
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(BertscopeError, match="something else"):
        Store.open(other)
    rc = main(["runs", "list", "--store", str(junk)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_off_records_nothing(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("BERTSCOPE_STORE", "off")
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "bert-tiny", "--seq", "16", "--device", "a100"]) == 0
    assert "recorded as run" not in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_sweep_and_study_record_their_summaries(tmp_path, monkeypatch, capsys) -> None:
    store = tmp_path / "runs.sqlite"
    monkeypatch.setenv("BERTSCOPE_STORE", str(store))
    assert main(["sweep", "bert-tiny", "--batch", "1..4", "--device", "a100,h100"]) == 0
    assert main(["study", "--output", str(tmp_path / "s"), "--no-measure", "--models",
                 "bert-base", "--device", "a100", "--precision", "bf16"]) == 0
    capsys.readouterr()
    s = Store.open(store)
    kinds = {r["kind"]: r["id"] for r in s.list()}
    assert set(kinds) == {"sweep", "study"}
    sw = s.get(kinds["sweep"])["summary"]
    assert sw["evaluated"] == 8 and len(sw["best"]) == 5
    st = s.get(kinds["study"])["summary"]
    assert "Where an iteration's time goes" in st["findings"]
