"""A sweep streamed to Parquet or JSON Lines (`sweep_to`, `bertscope sweep --output
s.parquet` or `s.jsonl`): the file read back equals the gathered frame (`sweep(...).frame`)
written by pandas' own writer, an independent implementation; the best rows equal
`SweepResult.ranked`; a failure mid-run or a grid with nothing to evaluate leaves no file and
no temporary beside it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import bertscope.sweep as sw
from bertscope.cli import main
from bertscope.errors import BertscopeError
from bertscope.sweep import sweep, sweep_to

CASES: list[tuple[list[str], list[str], dict[str, Any]]] = [
    # 2 models (2 groups, so 2 pieces) x (a100: fp32, bf16; tpu-v4: bf16) x 4 batches x 2 seqs
    (["bert-tiny", "bert-mini"], ["a100", "tpu-v4"],
     {"batch": range(1, 5), "seq": (32, 64), "precision": ("fp32", "bf16")}),
    # T5's RMSNorm first turns up in the second piece: the file is finished with the column
    (["bert-tiny", "t5-small"], ["a100"], {"batch": (1, 2), "seq": (32,)}),
    # multi-device points (dp 2) after the single-device ones: NaN category shares there
    (["bert-tiny", "t5-small"], ["a100"], {"batch": (1, 2), "seq": (32,), "dp": (1, 2)}),
]


def _pandas_copy(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as pandas' own Parquet writer writes it, read back."""
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return pd.read_parquet(io.BytesIO(buf.getvalue()))


@pytest.mark.parametrize(("models", "devices", "axes"), CASES)
def test_streamed_parquet_equals_the_gathered_frame(
        models: list[str], devices: list[str], axes: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    summary = sweep_to(out, models, devices, workers=1, **axes)
    result = sweep(models, devices, **axes)
    got = pd.read_parquet(out)
    assert got.equals(_pandas_copy(result.frame))  # rows, order, columns, values, dtypes
    assert summary.evaluated == len(got) == result.evaluated
    assert summary.columns == tuple(result.frame.columns)
    assert [p.name for p in tmp_path.iterdir()] == ["s.parquet"]  # no temporary left
    # SweepResult.export writes the same rows through the same writer
    result.export(tmp_path / "e.parquet")
    assert pd.read_parquet(tmp_path / "e.parquet").equals(got)


def _as_read_json(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its categoricals as plain values (JSON has no categories)."""
    return frame.astype({c: object for c in frame.columns
                         if isinstance(frame[c].dtype, pd.CategoricalDtype)})


@pytest.mark.parametrize(("models", "devices", "axes"), CASES)
def test_streamed_jsonl_equals_the_parquet_and_csv_exports(
        models: list[str], devices: list[str], axes: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    summary = sweep_to(out, models, devices, workers=1, **axes)
    result = sweep(models, devices, **axes)
    # pandas' own readers of the JSON Lines file, of pandas' Parquet and CSV writers' files
    got = pd.read_json(out, lines=True, precise_float=True)
    parquet = _as_read_json(_pandas_copy(result.frame))
    # (CSV writes "" and NaN alike: "" is NaN in the figure columns only)
    figures = result.frame.select_dtypes("number").columns
    csv = pd.read_csv(io.StringIO(result.frame.to_csv(index=False)), keep_default_na=False,
                      na_values={c: [""] for c in figures})
    assert list(got.columns) == list(parquet.columns) == list(csv.columns)
    # dtypes aside (read_json makes whole floats int64), every value exactly equal, NaN
    # (written as null) where the gathered frame has NaN
    pd.testing.assert_frame_equal(got, parquet, check_dtype=False, check_exact=True)
    pd.testing.assert_frame_equal(got, csv, check_dtype=False, check_exact=True)
    assert summary.evaluated == len(got) == result.evaluated
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]  # no temporary left
    # one JSON object per line, no NaN (JSON has none) but null
    lines = out.read_text().splitlines()
    assert len(lines) == len(got) and all(line.startswith("{") for line in lines)
    assert "NaN" not in out.read_text()
    # SweepResult.export writes the same rows through the same writer
    result.export(tmp_path / "e.jsonl")
    assert (tmp_path / "e.jsonl").read_bytes() == out.read_bytes()


def test_the_format_named_wins_over_an_unknown_suffix(tmp_path: Path) -> None:
    out = tmp_path / "rows.dat"
    sweep_to(out, "bert-tiny", "a100", fmt="jsonl", batch=(1, 2), seq=(32,))
    # 1 model x 1 device x 2 batches = 2 rows
    assert len(pd.read_json(out, lines=True)) == 2


def test_the_late_share_column_holds_zero_before_it_and_nan_on_multi_device_rows(
        tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    sweep_to(out, ["bert-tiny", "t5-small"], ["a100"], batch=(1, 2), seq=(32,), dp=(1, 2))
    got = pd.read_parquet(out)
    # bert-tiny (LayerNorm, no RMSNorm) first: its 2 single-device rows hold 0.0
    bert_one = got[(got["model"] == "bert-tiny") & (got["devices"] == 1)]
    assert len(bert_one) == 2 and (bert_one["share_rmsnorm"] == 0.0).all()
    t5_one = got[(got["model"] == "t5-small") & (got["devices"] == 1)]
    assert (t5_one["share_rmsnorm"] > 0).all()
    assert got.loc[got["devices"] == 2, "share_rmsnorm"].isna().all()  # not split there


@pytest.mark.parametrize("sort", ["tokens_per_s", "iteration_s", "model", "device", "fits",
                                  "share_rmsnorm", None])
def test_the_best_rows_equal_the_ranked_frame(sort: str | None) -> None:
    models, devices = ["bert-tiny", "t5-small", "bert-mini"], ["a100", "h100"]
    axes: dict[str, Any] = {"batch": (1, 2, 4), "seq": (32,)}
    summary = sweep_to(None, models, devices, sort=sort, top=7, **axes)
    ranked = sweep(models, devices, **axes).ranked(sort, 7)
    assert pd.DataFrame(summary.top).equals(
        pd.DataFrame(ranked.to_dict(orient="records")))


def test_varied_columns_equal_the_frames() -> None:
    # bert-tiny and bert-mini differ in hidden, but each keeps its own: hidden does not vary
    # within a model; batch and the device do
    axes: dict[str, Any] = {"batch": (1, 2), "seq": (32,)}
    summary = sweep_to(None, ["bert-tiny", "bert-mini"], ["a100", "h100"], **axes)
    assert summary.varied == {"model", "device", "batch"}
    assert summary.varied == sweep(["bert-tiny", "bert-mini"], ["a100", "h100"], **axes).varied


@pytest.mark.parametrize("name", ["s.parquet", "s.jsonl"])
def test_a_failure_mid_run_leaves_no_file(name: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = sw._evaluate

    def failing(task: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the second piece, after the first was written
            raise BertscopeError("piece lost")
        return real(task)

    monkeypatch.setattr(sw, "_evaluate", failing)
    with pytest.raises(BertscopeError, match="piece lost"):
        sweep_to(tmp_path / name, ["bert-tiny", "bert-mini"], ["a100"], batch=(1, 2),
                 seq=(32,), workers=1)
    assert len(calls) == 2
    assert not list(tmp_path.iterdir())  # no output, no temporary


def test_nothing_to_evaluate_is_one_line_and_no_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.parquet"
    # bert-tiny has 512 positions: a 1024-token sequence is skipped, the only one
    rc = main(["sweep", "bert-tiny", "--seq", "1024", "--no-store", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("bertscope: error: nothing to evaluate: every configuration")
    assert not list(tmp_path.iterdir())


def test_the_command_streams_what_the_api_gathers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.parquet"
    rc = main(["sweep", "bert-tiny,bert-mini", "--device", "a100,tpu-v4", "--batch", "1..4",
               "--seq", "32,64", "--precision", "fp32,bf16", "--no-store", "--output",
               str(out)])
    assert rc == 0, capsys.readouterr().err
    # 2 models x (a100: 2 precisions + tpu-v4: bf16) x 4 x 2 = 48 rows
    assert "wrote 48 rows" in capsys.readouterr().out
    frame = sweep(["bert-tiny", "bert-mini"], ["a100", "tpu-v4"], batch=range(1, 5),
                  seq=(32, 64), precision=("fp32", "bf16")).frame
    assert pd.read_parquet(out).equals(_pandas_copy(frame))


def test_the_jsonl_and_json_paths_import_neither_pandas_nor_pyarrow(tmp_path: Path) -> None:
    """Rows go from numpy to JSON directly (no frame, no Arrow), checked in a fresh Python
    by what `sys.modules` holds after the command ran."""
    import json
    import subprocess
    import sys

    probe = ("import json, sys\n"
             "from bertscope.cli import main\n"
             "argv = ['sweep', 'bert-tiny,bert-mini', '--batch', '1,2', '--seq', '32',\n"
             "        '--no-store']\n"
             "codes = [main([*argv, '--output', sys.argv[1]]),\n"
             "         main([*argv, '--format', 'json'])]\n"
             "print(json.dumps([codes, 'pandas' in sys.modules, 'pyarrow' in sys.modules]))\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "s.jsonl")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [[0, 0], False, False]
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 4  # 2 models x 2 batches
