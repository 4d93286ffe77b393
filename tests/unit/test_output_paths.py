"""Outputs checked as a set before work (issue #33, item 4): no output is an input or another
output (through symbolic links, hard links and relative paths), and every write goes through
the atomic writer, which checks the written size and leaves nothing behind on failure."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bertscope.cli import main
from bertscope.errors import BertscopeError
from bertscope.io import atomic_path, atomic_write, whole_json, write_or_rescue
from bertscope.paths import check_paths

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "traces" / "cuda_bert_train.json.gz"
_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100,
         "max_position_embeddings": 64}
_TRACE = {"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "pid": 1, "tid": 1,
     "args": {"Input Dims": [[4, 8], [8, 16]]}}]}
DIST = ("distributed", "bert-tiny", "--seq", "16", "--devices", "2", "--global-batch", "4",
        "--device", "a100")


def _setup(d: Path) -> None:
    (d / "config.json").write_text(json.dumps(_BERT))
    (d / "t.json").write_text(json.dumps(_TRACE))
    (d / "sub").mkdir()
    (d / "traces").mkdir()
    (d / "traces" / "rank0.json").write_text(json.dumps(_TRACE))
    (d / "link.json").symlink_to(d / "t.json")
    os.link(d / "t.json", d / "hard.json")
    os.link(d / "config.json", d / "hard_config.json")


CASES: dict[str, tuple[tuple[str, ...], str]] = {
    # the cases
    "calibrate-trace-is-output": (("calibrate", "--from-trace", "t.json", "--output", "t.json"),
                                  "--output is the input t.json (--from-trace)"),
    "trace-is-output": (("trace", "t.json", "--output", "t.json", "--format", "json"),
                        "--output is the input t.json (the trace)"),
    "ops-config-is-output": (("ops", "config.json", "--output", "config.json"),
                             "--output is the input config.json (the model)"),
    "predict-output-is-timeline": (("predict", "bert-tiny", "--device", "a100", "--output",
                                    "o.json", "--timeline", "o.json"),
                                   "--output and --timeline are the same file"),
    "distributed-output-is-timeline": ((*DIST, "--search", "--output", "s.json", "--timeline",
                                        "s.json"), "--output and --timeline are the same file"),
    "profile-output-is-trace": (("profile", "bert-tiny", "--output", "p.json", "--trace-out",
                                 "p.json"), "--output and --trace-out are the same file"),
    # the same file by other names
    "symlink-to-input": (("calibrate", "--from-trace", "t.json", "--output", "link.json"),
                         "--output is the input t.json"),
    "hard-link-to-input": (("trace", "t.json", "--output", "hard.json", "--format", "json"),
                           "--output is the input t.json"),
    "hard-link-to-config": (("ops", "config.json", "--output", "hard_config.json"),
                            "--output is the input config.json"),
    "relative-path": (("ops", "config.json", "--output", "sub/../config.json"),
                      "--output is the input config.json"),
    "absolute-and-relative": (("predict", "bert-tiny", "--device", "a100", "--output",
                               "{d}/o.json", "--timeline", "./o.json"),
                              "are the same file"),
    "plot-is-output": (("predict", "bert-tiny", "--device", "a100", "--plot", "o.svg",
                        "--timeline", "o.svg"), "--plot and --timeline are the same file"),
    # other inputs and outputs
    "output-in-trace-folder": (("trace", "traces", "--output", "traces/summary.json"),
                               "--output is inside the input folder traces"),
    "output-is-store": (("predict", "bert-tiny", "--device", "a100", "--output", "{store}"),
                        "--output and the runs store are the same file"),
    "sweep-model-is-output": (("sweep", "config.json", "--seq", "16", "--output", "c.csv",
                               "--store", "config.json"),
                              "the runs store is the input config.json"),
    "study-output-is-model": (("study", "--models", "config.json", "--output", "config.json",
                               "--no-measure"), "--output is the input config.json (--models)"),
    "calibrate-result-is-output": (("calibrate", "--from", "t.json", "--output", "hard.json"),
                                   "--output is the input t.json (--from)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_output_that_clobbers_is_refused_before_work(case: str, tmp_path: Path,
                                                        monkeypatch, capsys) -> None:
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    store = os.environ["BERTSCOPE_STORE"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv, says = CASES[case]
    rc = main([a.replace("{d}", str(tmp_path)).replace("{store}", store) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out[-300:], err)
    assert err.startswith("bertscope: error: ") and len(err.strip().splitlines()) == 1, err
    assert says in err, err
    assert "Traceback" not in out + err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not Path(store).exists()  # the store was not even created


def test_distinct_outputs_still_work(tmp_path: Path, monkeypatch, capsys) -> None:
    _setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "config.json", "--seq", "16", "--device", "a100", "--output",
                 "sub/o.json", "--timeline", "o.json"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "sub" / "o.json").read_text())["rows"]
    assert json.loads((tmp_path / "o.json").read_text())["traceEvents"]
    assert (tmp_path / "config.json").read_text() == json.dumps(_BERT)


def test_check_paths_compares_files_not_names(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("x")
    b.write_text("x")  # same content, another file
    check_paths({"in": a}, {"out": b})
    check_paths({"in": "bert-base"}, {"out": tmp_path / "bert-base"})  # a name, not a file
    check_paths({"in": None}, {"out": None, "other": [None, a]})
    os.link(a, tmp_path / "c")
    with pytest.raises(BertscopeError, match="out is the input"):
        check_paths({"in": a}, {"out": tmp_path / "c"})
    with pytest.raises(BertscopeError, match="first and second are the same file"):
        check_paths({}, {"first": tmp_path / "new", "second": tmp_path / "x" / ".." / "new"})
    (tmp_path / "dir").mkdir()
    with pytest.raises(BertscopeError, match="inside out"):
        check_paths({"in": a}, {"out": tmp_path / "dir", "file": tmp_path / "dir" / "f.json"})
    with pytest.raises(BertscopeError, match=r"the input \(in\) is inside out"):
        check_paths({"in": a}, {"out": tmp_path})


# -- the atomic writer ---------------------------------------------------------------------

def _only(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_a_full_disk_leaves_the_old_file_and_nothing_else(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "out.csv"
    target.write_text("old\n")

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(BertscopeError, match=r"out\.csv: cannot write \(No space left"):
        atomic_write(target, b"new contents\n")
    assert _only(tmp_path) == ["out.csv"] and target.read_text() == "old\n"


def test_short_writes_are_completed_and_a_lying_one_is_caught(tmp_path: Path,
                                                              monkeypatch) -> None:
    real = os.write
    data = bytes(range(256)) * 40
    monkeypatch.setattr(os, "write", lambda fd, b: real(fd, bytes(b)[:100]))  # 100 at a time
    atomic_write(tmp_path / "a.bin", data)
    assert (tmp_path / "a.bin").read_bytes() == data
    # a write that says it wrote everything but kept only half: the size check sees it
    monkeypatch.setattr(os, "write", lambda fd, b: real(fd, bytes(b)[:len(b) // 2]) * 0
                        + len(b))
    with pytest.raises(BertscopeError, match="5,120 of 10,240 bytes written"):
        atomic_write(tmp_path / "b.bin", data)
    assert _only(tmp_path) == ["a.bin"]
    monkeypatch.setattr(os, "write", lambda fd, b: 0)  # nothing taken: a full disk
    with pytest.raises(BertscopeError, match="No space left"):
        atomic_write(tmp_path / "c.bin", data)
    assert _only(tmp_path) == ["a.bin"]


def test_a_foreign_writer_that_fails_leaves_nothing(tmp_path: Path) -> None:
    # Kineto on a full disk: its own <name>.tmp beside an empty (or no) file, no error
    for wrote in (b"", None, b'{"traceEvents": [{"ph": "X"'):
        with (pytest.raises(BertscopeError, match=r"t\.json: the writer"),
              atomic_path(tmp_path / "t.json", check=whole_json) as tmp):
            Path(tmp + ".tmp").write_bytes(b'{"traceEvents": [')
            if wrote is not None:
                Path(tmp).write_bytes(wrote)
        assert _only(tmp_path) == []
    with atomic_path(tmp_path / "t.json", check=whole_json) as tmp:
        Path(tmp).write_text(json.dumps(_TRACE) + "\n")
    assert _only(tmp_path) == ["t.json"]


def test_an_interrupted_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "x.json") as tmp:
        Path(tmp).write_text("{")
        raise KeyboardInterrupt
    assert _only(tmp_path) == []


def test_a_failed_rescue_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(os, "write", lambda fd, b: 0)
    with pytest.raises(BertscopeError, match="no rescue file either"):
        write_or_rescue(tmp_path / "r.json", b"{}")
    assert _only(tmp_path) == []


def test_a_failed_trace_export_is_an_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from bertscope.measure.profile import _export_trace

    class Silent:  # what Kineto does on a full disk: an empty file, a .tmp, no exception
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_bytes(b"")
            Path(path + ".tmp").write_bytes(b"[")

    with pytest.raises(BertscopeError, match=r"t\.json: the writer wrote an empty file"):
        _export_trace(Silent(), tmp_path / "t.json")
    assert _only(tmp_path) == []


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 KiB tmpfs mounted at tmp_path/vol, where the machine allows it."""
    vol = tmp_path / "vol"
    vol.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(vol)],
                          capture_output=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()[:80]}")
    yield vol
    subprocess.run(["umount", str(vol)], capture_output=True, timeout=30)


def test_exports_on_a_full_disk_are_one_line_and_leave_nothing(small_disk: Path,
                                                               capsys) -> None:
    (small_disk / "keep.json").write_text("old\n")
    (small_disk / "filler").write_bytes(b"x" * (60 << 10))  # the disk is now full
    for argv in (["ops", "bert-large", "--output", str(small_disk / "keep.json")],
                 ["trace", str(TRACE), "--no-store", "--output",
                  str(small_disk / "t.json")],
                 # rows streamed piece by piece (2 models: 2 pieces)
                 ["sweep", "bert-tiny,bert-mini", "--batch", "1..8", "--seq", "32",
                  "--no-store", "--output", str(small_disk / "s.jsonl")]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, err
        assert "No space left" in err and len(err.strip().splitlines()) == 1, err
        assert _only(small_disk) == ["filler", "keep.json"]
        assert (small_disk / "keep.json").read_text() == "old\n"


def test_markup_in_output_paths_is_printed_as_written(tmp_path: Path, monkeypatch,
                                                      capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["ops", "bert-tiny", "--seq", "16", "--output", "[red]o.csv"]) == 0
    assert " rows to [red]o.csv" in capsys.readouterr().out
    assert (tmp_path / "[red]o.csv").is_file()


def test_a_pipe_or_device_is_not_replaced_by_a_file(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    assert main(["ops", "bert-tiny", "--output", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert fifo.is_fifo() and _only(tmp_path) == ["out.csv"]
    with pytest.raises(BertscopeError, match="not a regular file"):
        atomic_write(fifo, b"x")
