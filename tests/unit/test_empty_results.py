"""An empty result is not success (issue 33, item 6): a sweep with nothing evaluated, a
console zero columns wide, one option given two different values: each exits 2 with one
line that says why (or, for COLUMNS, prints at a sane width), and writes nothing."""

from __future__ import annotations

import pytest

import bertscope
from bertscope.cli import MAX_COLUMNS, MIN_COLUMNS, check_console_env, main
from bertscope.store import Store


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _refused(rc: int, out: str, err: str, *needles: str) -> None:
    assert rc == 2 and out == ""
    line = err.strip()
    assert line.startswith("bertscope: error: ") and "\n" not in line, err
    assert "Traceback" not in err
    for n in needles:
        assert n in line, line


@pytest.mark.parametrize(("axes", "reason"), [
    (["--seq", "1024"], "seq 1024 exceeds bert-tiny's 512 positions"),    # 512 positions
    (["--heads", "3"], "not divisible by 3 heads"),                        # hidden 128
    (["--precision", "tf32", "--device", "tpu-v4"], "no tf32"),            # no TF32 on TPUs
])
def test_a_sweep_with_nothing_evaluated_exits_2(capsys, tmp_path, axes, reason) -> None:
    """bert-tiny: hidden 128, 2 heads, 512 positions (its config.json): each grid below has
    one configuration, which the model or device cannot run."""
    out, db = tmp_path / "rows.csv", tmp_path / "runs.db"
    rc, stdout, err = run(capsys, "sweep", "bert-tiny", *axes, "--output", str(out),
                          "--store", str(db))
    _refused(rc, stdout, err, "nothing to evaluate", "skipped", reason)
    assert not out.exists()  # no header-only file
    if db.exists():  # the store may be opened before the work; no run is recorded in it
        store = Store.open(db)
        try:
            assert store.list() == []
        finally:
            store.close()


def test_the_api_says_why_a_sweep_is_empty() -> None:
    r = bertscope.sweep("bert-tiny", seq=[1024, 2048])
    assert r.evaluated == 0 and r.skipped == r.grid_size == 2
    assert "seq 1024 exceeds" in r.empty
    assert bertscope.sweep("bert-tiny", seq=[128, 1024]).empty == ""  # one runs: not empty


def test_a_partly_skipped_sweep_still_succeeds(capsys) -> None:
    rc, out, _ = run(capsys, "sweep", "bert-tiny", "--seq", "128,1024", "--no-store")
    assert rc == 0 and "bert-tiny" in out


@pytest.mark.parametrize(("given", "kept"), [
    ("0", None), ("-5", None), ("abc", None), ("", None), (" ", None), ("1e3", None),
    ("٣٠", None),                      # non-ASCII digits
    ("000", None),
    ("80", "80"), (" 100 ", "100"),
    ("5", str(MIN_COLUMNS)),           # too narrow for a single column: widened
    ("99999999999999999999", str(MAX_COLUMNS)),
    ("5000", str(MAX_COLUMNS)),
])
def test_columns_is_made_usable(given, kept) -> None:
    env = {"COLUMNS": given, "TERMINAL_WIDTH": given, "OTHER": "x"}
    check_console_env(env)
    assert env.get("COLUMNS") == kept and env.get("TERMINAL_WIDTH") == kept
    assert env["OTHER"] == "x"
    unset: dict[str, str] = {}
    check_console_env(unset)
    assert unset == {}


@pytest.mark.parametrize(("given", "kept"), [("0", None), ("x", None), ("40", "40"),
                                             ("9" * 30, "100000")])
def test_lines_is_made_usable(given, kept) -> None:
    env = {"LINES": given}
    check_console_env(env)
    assert env.get("LINES") == kept


@pytest.mark.parametrize("columns", ["0", "-1", "garbage"])
def test_predict_prints_its_tables_whatever_columns_says(capsys, monkeypatch, columns) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    rc, out, err = run(capsys, "predict", "bert-tiny", "--device", "a100", "--no-store")
    assert rc == 0 and err == ""
    assert "bert-tiny" in out and len(out.splitlines()) > 10


@pytest.mark.parametrize(("name", "value"), [("COLUMNS", "0"), ("TERMINAL_WIDTH", "0"),
                                           ("TERMINAL_WIDTH", "abc")])
def test_help_prints_whatever_the_width_says(name, value) -> None:
    """typer reads TERMINAL_WIDTH when its help module is first imported: a real process."""
    import os
    import subprocess
    import sys

    env = {**os.environ, name: value}
    proc = subprocess.run([sys.executable, "-m", "bertscope.cli", "ops", "--help"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "--checkpoint" in proc.stdout


@pytest.mark.parametrize(("argv", "needles"), [
    (["ops", "bert-tiny", "--batch", "8", "--batch", "16"], ("--batch=8", "--batch=16")),
    (["ops", "bert-tiny", "--checkpoint", "none", "--checkpoint=full"], ("--checkpoint",)),
    (["ops", "bert-tiny", "--dropout", "--no-dropout"], ("--dropout", "--no-dropout")),
    (["sweep", "bert-tiny", "--seq=64", "--seq", "128", "--no-store"], ("--seq",)),
    (["predict", "bert-tiny", "--device", "a100", "--device", "h100", "--no-store"],
     ("--device",)),
])
def test_an_option_given_two_values_is_refused(capsys, argv, needles) -> None:
    rc, out, err = run(capsys, *argv)
    _refused(rc, out, err, "given together", *needles)


def test_an_option_repeated_with_the_same_value_is_fine(capsys) -> None:
    rc, out, _ = run(capsys, "ops", "bert-tiny", "--batch", "8", "--batch", "8")
    assert rc == 0 and "batch 8" in out


def test_a_value_that_looks_like_an_option_is_a_value(capsys) -> None:
    """`--top -1` is --top's value (refused by --top's own check), not a second option."""
    rc, out, err = run(capsys, "predict", "bert-tiny", "--device", "a100", "--top", "-1",
                       "--no-store")
    _refused(rc, out, err, "--top")


def test_the_old_checkpointing_flag_names_the_new_one(capsys) -> None:
    rc, out, err = run(capsys, "ops", "bert-tiny", "--checkpoint", "none", "--checkpointing")
    _refused(rc, out, err, "--checkpoint")
