"""The command line: output, exports, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from bertscope import io as bertscope_io
from bertscope.analytic import ops
from bertscope.cli import main
from bertscope.errors import BertscopeError


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_ops_prints_breakdowns(capsys) -> None:
    rc, out, err = run(capsys, "ops", "bert-tiny", "--batch", "2", "--seq", "32", "--top", "3")
    assert rc == 0, err
    for needle in ("By category", "By sublayer group", "By phase", "Top 3 ops", "gemm",
                   "params 4,"):
        assert needle in out


def test_models_lists_presets(capsys) -> None:
    rc, out, _ = run(capsys, "models")
    assert rc == 0
    assert "bert-large" in out and "albert-xxlarge-v2" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["ops", "bert-bse"], "did you mean bert-base"),
        (["ops", "bert-base", "--batch", "0"], "batch must be a positive integer"),
        (["ops", "bert-base", "--batch", "many"], "--batch"),
        (["ops", "bert-base", "--precision", "fp64"], "--precision"),
        (["ops", "bert-base", "--seq", "4096"], "exceeds"),
        (["ops", "bert-base", "--format", "csv", "--output", "x.json"],
         "the suffix .json says json, --format says csv"),
        (["ops", "bert-base", "--format", "parquet"], "parquet is binary"),
        (["ops", "bert-base", "--output", "x.xlsx"], "unknown format 'xlsx'"),
        (["ops", "bert-base", "--output", "/no/such/dir/x.csv"], "does not exist"),
        (["ops", "missing/config.json"], "no such file"),
        (["ops"], "Missing argument"),
        (["frobnicate"], "No such command"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(capsys, argv, needle) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_exports_round_trip(tmp_path, capsys, fmt: str) -> None:
    path = tmp_path / f"table.{fmt}"
    rc, _, err = run(capsys, "ops", "bert-tiny", "--batch", "1", "--seq", "16",
                     "--output", str(path))
    assert rc == 0, err
    want = ops("bert-tiny", batch=1, seq=16).df
    if fmt == "csv":
        got = pd.read_csv(path)
    elif fmt == "json":
        doc = json.loads(path.read_text())
        # bert-tiny BertModel: embeddings (30522+512+2)*128 + 256 = 3,972,864; layers
        # 2 * (4*16,512 + 66,048 + 65,664 + 512) = 396,544; pooler 16,512 -> 4,385,920.
        # Heads: MLM transform 16,512 + LN 256 + decoder bias 30,522; NSP 128*2+2 = 258.
        assert doc["meta"]["params"] == 4_385_920 + 16_512 + 256 + 30_522 + 258
        got = pd.DataFrame(doc["rows"])
    else:
        got = pd.read_parquet(path)
    assert len(got) == len(want)
    assert got["flops"].sum() == pytest.approx(want["flops"].sum())
    assert set(got["category"]) == set(want["category"])


def test_failed_export_leaves_old_file_whole(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.csv"
    path.write_text("old contents\n")
    table = ops("bert-tiny", batch=1, seq=8)

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(bertscope_io.os, "replace", boom)
    with pytest.raises(BertscopeError, match=r"t.csv: cannot write \(disk full\)"):
        table.export(path)
    assert path.read_text() == "old contents\n"
    assert os.listdir(tmp_path) == ["t.csv"]  # no temp file left behind
