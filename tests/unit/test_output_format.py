"""One `--format` in ops, trace, sweep, predict and distributed (issue 32, item 5): the same
option (one enum, one help), the same rule (--format, else the --output suffix, else the
table; a suffix naming another format is one line, exit 2, nothing written), the same JSON
shape ({"meta", "rows"}), and sweep's JSON document: its grid's axes, its counts and the best
--top rows, which equal the gathered frame's ranking (`SweepResult.ranked`, pandas' sort: an
independent path)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import typer

from bertscope.cli import app, main
from bertscope.sweep import sweep

TRACE = str(Path(__file__).parents[1] / "data" / "traces" / "cuda_bert_train.json.gz")
COMMANDS = {
    "ops": ["ops", "bert-tiny", "--seq", "16"],
    "trace": ["trace", TRACE, "--no-store"],
    "sweep": ["sweep", "bert-tiny", "--seq", "16", "--batch", "1,2", "--no-store"],
    "predict": ["predict", "bert-tiny", "--seq", "16", "--device", "a100", "--no-store"],
    "distributed": ["distributed", "bert-tiny", "--seq", "16", "--device", "a100", "--devices",
                    "4", "--global-batch", "8", "--search"],
}
SWEEP = ["sweep", "bert-tiny,bert-mini", "--device", "a100,h100", "--batch", "1,2", "--seq",
         "32", "--top", "3", "--no-store"]
"""2 models x 2 devices x 2 batches = 8 configurations, the best 3 shown."""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def test_the_format_option_is_one_option_in_every_command() -> None:
    group = typer.main.get_command(app)
    options = [next(p for p in group.commands[name].params  # type: ignore[attr-defined]
                    if "--format" in p.opts) for name in COMMANDS]
    assert len({o.help for o in options}) == 1
    assert all(list(o.type.choices) == ["table", "csv", "json", "jsonl", "parquet"]
               for o in options)


def test_sweep_json_on_stdout_is_the_axes_counts_and_best_rows(capsys) -> None:
    doc = json.loads(run(capsys, *SWEEP, "--format", "json"))  # stdout holds it alone
    meta = doc["meta"]
    assert meta["command"] == "sweep" and meta["sort"] == "tokens_per_s"
    assert (meta["grid_size"], meta["evaluated"], meta["skipped"], meta["top"]) == (8, 8, 0, 3)
    axes = meta["axes"]
    assert axes["models"] == ["bert-tiny", "bert-mini"]
    assert axes["batch"] == [1, 2] and axes["seq"] == [32] and axes["precision"] == ["fp32"]
    assert axes["hidden"] is None  # each model keeps its own
    ranked = sweep(["bert-tiny", "bert-mini"], ["a100", "h100"], batch=(1, 2),
                   seq=(32,)).ranked("tokens_per_s", 3)
    want = ranked.astype({c: object for c in ranked.columns
                          if isinstance(ranked[c].dtype, pd.CategoricalDtype)})
    assert len(doc["rows"]) == 3
    assert list(doc["rows"][0]) == list(ranked.columns)
    got = pd.DataFrame(doc["rows"])
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True), check_dtype=False,
                                  check_exact=True)


def test_sweep_json_to_a_file_is_the_same_document(tmp_path: Path, capsys) -> None:
    stdout = json.loads(run(capsys, *SWEEP, "--format", "json"))
    out = run(capsys, *SWEEP, "--output", str(tmp_path / "best.json"))
    assert "wrote the best 3 rows to" in out and "Top 3 by tokens_per_s" in out
    saved = json.loads((tmp_path / "best.json").read_text())
    for doc in (stdout, saved):
        doc["meta"].pop("seconds")
    assert saved == stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_is_meta_and_rows_and_jsonl_a_row_a_line(name: str, tmp_path: Path,
                                                      capsys) -> None:
    doc = json.loads(run(capsys, *COMMANDS[name], "--format", "json"))
    assert set(doc) == {"meta", "rows"} and doc["rows"]
    if name == "sweep":  # every row goes to a file (the stdout document: the best ones)
        run(capsys, *COMMANDS[name], "--output", str(tmp_path / "r.jsonl"))
        lines = (tmp_path / "r.jsonl").read_text().splitlines()
        assert len(lines) == doc["meta"]["evaluated"] == 2  # batches 1 and 2
    else:
        lines = run(capsys, *COMMANDS[name], "--format", "jsonl").splitlines()
        assert len(lines) == len(doc["rows"])
    rows = [json.loads(line) for line in lines]
    assert [list(r) for r in rows] == [list(doc["rows"][0])] * len(rows)  # same columns


@pytest.mark.parametrize("name", ["ops", "trace", "predict", "distributed"])
def test_jsonl_reads_back_as_the_csv_export(name: str, tmp_path: Path, capsys) -> None:
    run(capsys, *COMMANDS[name], "--output", str(tmp_path / "t.jsonl"))
    run(capsys, *COMMANDS[name], "--output", str(tmp_path / "t.csv"))
    got = pd.read_json(tmp_path / "t.jsonl", lines=True, precise_float=True)
    csv = pd.read_csv(tmp_path / "t.csv", keep_default_na=False,
                      na_values={c: [""] for c in got.select_dtypes("number").columns})
    pd.testing.assert_frame_equal(got, csv, check_dtype=False, check_exact=True)


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize(("fmt", "suffix"), [("csv", ".json"), ("jsonl", ".parquet"),
                                             ("table", ".csv"), ("json", ".txt")])
def test_a_suffix_naming_another_format_is_one_line(name: str, fmt: str, suffix: str,
                                                    tmp_path: Path, capsys) -> None:
    out = tmp_path / f"out{suffix}"
    rc = main([*COMMANDS[name], "--format", fmt, "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"bertscope: error: {out}: the suffix {suffix} says "
                          f"{'table' if suffix == '.txt' else suffix[1:]}, --format says {fmt}")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_format_named_wins_over_an_unknown_suffix(name: str, tmp_path: Path, capsys) -> None:
    run(capsys, *COMMANDS[name], "--format", "jsonl", "--output", str(tmp_path / "rows.dat"))
    lines = (tmp_path / "rows.dat").read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    rc = main([*COMMANDS[name], "--output", str(tmp_path / "rows.xlsx")])
    assert rc == 2 and "unknown format 'xlsx'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ops", "predict", "distributed"])
def test_the_table_saved_as_text_is_what_a_redirect_would_hold(
        name: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    def same(text: str) -> str:  # the search's own time ("layouts in 6 ms") varies by run
        return re.sub(r"in [\d.]+ (ms|s|us|µs)\b", "in T", text)

    shown = run(capsys, *COMMANDS[name], "--top", "3")
    assert run(capsys, *COMMANDS[name], "--top", "3", "--output", str(tmp_path / "o.txt")) == ""
    assert same((tmp_path / "o.txt").read_text()) == same(shown)


def test_rows_on_stdout_are_the_rows_alone(capsys) -> None:
    """--format csv without --output: stdout holds the rows and nothing else (the report,
    the store's line), as a pipe wants them; predict's rows are its op table's."""
    from bertscope import ops

    got = pd.read_csv(io.StringIO(run(capsys, *COMMANDS["predict"], "--format", "csv")))
    assert len(got) == len(ops("bert-tiny", seq=16)) and "time_s" in got
    rc = main(["distributed", "bert-tiny", "--seq", "16", "--device", "a100", "--devices", "4",
               "--global-batch", "8", "--format", "csv"])  # one layout: a report, no rows
    err = capsys.readouterr().err
    assert rc == 2 and "--format csv writes the costed layouts of --search" in err
