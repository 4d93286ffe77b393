"""Every command x every kind of input file it reads x every way such a file goes bad: the
generated half of the bad-input corpus (the hand-picked half, with the files' fields wrong one
at a time, is tests/unit/test_bad_input_corpus.py). A file kind is a slot in a command line
(a model's config.json, a device file, a trace, a saved profile result, a pattern file); a bad
file is one of `BAD_FILES`, made for the slot's suffix. Every case must exit 2 with one short
line on stderr, no traceback, and leave nothing behind."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bertscope.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "tests" / "data" / "traces" / "cuda_bert_train.json.gz")
DEPTH = 100_000  # far past any real file's nesting, and past Python's recursion limit
DIGITS = 100_000  # an integer of this many digits: past Python's int/str conversion limit

# command lines with one file slot, "{f}"; "{d}" is the case's folder
SLOTS: dict[str, tuple[str, tuple[str, ...]]] = {
    # name: (suffix of the file, argv)
    "ops-model": (".json", ("ops", "{f}", "--seq", "16")),
    "predict-model": (".json", ("predict", "{f}", "--seq", "16", "--device", "a100")),
    "sweep-model": (".json", ("sweep", "{f}", "--seq", "16", "--no-store")),
    "distributed-model": (".json", ("distributed", "{f}", "--seq", "16", "--devices", "2",
                                    "--device", "a100", "--global-batch", "4")),
    "study-model": (".json", ("study", "--no-measure", "--models", "{f}", "--output",
                              "{d}/study")),
    "predict-device-toml": (".toml", ("predict", "bert-tiny", "--seq", "16", "--device",
                                      "{f}")),
    "predict-device-json": (".json", ("predict", "bert-tiny", "--seq", "16", "--device",
                                      "{f}")),
    "sweep-device": (".toml", ("sweep", "bert-tiny", "--seq", "16", "--device", "{f}",
                               "--no-store")),
    "distributed-device": (".toml", ("distributed", "bert-tiny", "--seq", "16", "--devices",
                                     "2", "--device", "{f}", "--global-batch", "4")),
    "trace": (".json", ("trace", "{f}")),
    "trace-gz": (".json.gz", ("trace", "{f}")),
    "trace-patterns": (".toml", ("trace", TRACE, "--patterns", "{f}")),
    "calibrate-trace": (".json", ("calibrate", "--from-trace", "{f}", "--output",
                                  "{d}/profile.json")),
    "calibrate-result": (".json", ("calibrate", "--from", "{f}", "--output",
                                   "{d}/profile.json")),
    "study-trace": (".json", ("study", "--from-trace", "{f}", "--output", "{d}/study")),
}


def _nested(suffix: str) -> bytes:
    if suffix == ".toml":
        return b"x = " + b"[" * DEPTH + b"]" * DEPTH + b"\n"
    return b"[" * DEPTH + b"]" * DEPTH


def _digits(suffix: str) -> bytes:
    if suffix == ".toml":
        return b"x = 1" + b"0" * DIGITS + b"\n"
    return b'{"x": 1' + b"0" * DIGITS + b"}"


# how a file goes bad: suffix -> its bytes (None: the path is left missing)
BAD_FILES: dict[str, Callable[[str], bytes | None]] = {
    "missing": lambda s: None,
    "empty": lambda s: b"",
    "garbage": lambda s: bytes(range(256)) * 4,
    "not-utf8": lambda s: b'{"name": "\xff\xfe"}' if s != ".toml" else b'name = "\xff\xfe"\n',
    "truncated": lambda s: b'{"hidden_size": 64, "model_type": ' if s != ".toml"
    else b'name = "x\n[',
    "wrong-top-level": lambda s: b"[1, 2, 3]" if s != ".toml" else b"x = [1, 2, 3]\n",
    "nested": _nested,
    "huge-integer": _digits,
}


def _write(path: Path, data: bytes, suffix: str) -> None:
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)


CASES = [(slot, bad) for slot in SLOTS for bad in BAD_FILES]


@pytest.mark.parametrize(("slot", "bad"), CASES, ids=[f"{s}-{b}" for s, b in CASES])
def test_a_bad_file_in_any_slot_is_one_line_exit_2(slot: str, bad: str, tmp_path: Path,
                                                     monkeypatch, capsys) -> None:
    suffix, argv = SLOTS[slot]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTSCOPE_STORE", str(tmp_path / "runs.db"))
    path = tmp_path / f"input{suffix}"
    data = BAD_FILES[bad](suffix)
    if data is not None:
        _write(path, data, suffix)
    before = set(os.listdir(tmp_path))
    rc = main([a.replace("{f}", str(path)).replace("{d}", str(tmp_path)) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (slot, bad, rc, out[-300:], err[-300:])
    assert err.startswith("bertscope: error: "), err[:300]
    assert len(err.strip().splitlines()) == 1 and len(err) < 500, err[:300]
    assert "Traceback" not in out + err
    assert set(os.listdir(tmp_path)) == before, "nothing written"


def test_a_folder_where_a_file_is_read_is_one_line_exit_2(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    # the slots' files given as a folder: each command says so in one line
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTSCOPE_STORE", str(tmp_path / "runs.db"))
    folder = tmp_path / "folder.json"
    folder.mkdir()
    for slot, (_, argv) in SLOTS.items():
        rc = main([a.replace("{f}", str(folder)).replace("{d}", str(tmp_path))
                   for a in argv])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("bertscope: error: "), (slot, err[:300])
        assert len(err.strip().splitlines()) == 1, (slot, err[:300])
