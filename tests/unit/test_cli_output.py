"""Terminal output a person reads (issue 32, item 6): the result first and provenance on
request, tables rather than dict reprs, sizes like 1.0 GiB, op names never split mid-word, and
plain unwrapped lines without trailing spaces when stdout is not a terminal (capsys is not
one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertscope.analytic import ops
from bertscope.cli import main
from bertscope.report.tables import binary

TRACES = Path(__file__).parents[1] / "data" / "traces"

COMMANDS = {
    "predict": ["predict", "llama2-70b", "--device", "a100", "--batch", "1", "--seq", "4096",
                "--precision", "bf16", "--top", "5", "--no-store"],
    "distributed": ["distributed", "bert-large", "--devices", "8", "--device", "a100",
                    "--global-batch", "64", "--tp", "2", "--precision", "bf16"],
    "search": ["distributed", "bert-base", "--devices", "4", "--device", "a100",
               "--global-batch", "32", "--search", "--top", "3"],
    "sweep": ["sweep", "bert-tiny", "--device", "a100,h100", "--batch", "2,4", "--top", "3",
              "--no-store"],
    "ops": ["ops", "bert-tiny", "--top", "5"],
    "trace": ["trace", str(TRACES / "cuda_bert_train.json.gz"), "--no-store"],
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.mark.parametrize("columns", [None, "50"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_redirected_line_ends_in_a_space(name: str, columns: str | None, capsys,
                                            monkeypatch) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    out = run(capsys, *COMMANDS[name])
    assert out.strip()
    bad = [line for line in out.splitlines() if line != line.rstrip()]
    assert bad == [], bad[:3]


def test_redirected_text_is_not_wrapped_at_the_terminal_width(capsys, monkeypatch) -> None:
    """A 40-column COLUMNS sizes tables, not sentences: the verdict and a table's title are a
    line each, however long."""
    monkeypatch.setenv("COLUMNS", "40")
    out = run(capsys, *COMMANDS["predict"]).splitlines()
    verdict = [line for line in out if line.startswith("memory: ")]
    assert len(verdict) == 1 and verdict[0].endswith("--checkpoint full")
    assert any(line.startswith("Top 5 ops by predicted time") and
               line.endswith("eff = roofline time / predicted time)") for line in out)


def test_predict_prints_the_result_first_and_sources_on_request(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    lines = run(capsys, *COMMANDS["predict"]).splitlines()
    assert lines[0].startswith("llama2-70b batch 1 x seq 4096")
    assert lines[1].startswith("predicted iteration ")
    # ~69e9 parameters x 16 B (fp32 weights, gradients, two Adam moments) ~ 1.1e12 B alone,
    # far above the A100's 80 GB: the verdict comes right after the time
    assert lines[2].startswith("memory: does not fit one device, needs ")
    assert lines[3].startswith("peaks: ") and lines[3].endswith("(sources: --verbose)")
    assert not any(line.startswith("sources:") for line in lines)
    verbose = run(capsys, *COMMANDS["predict"], "--verbose").splitlines()
    assert any(line.startswith("sources: GEMM bf16") for line in verbose)
    assert verbose[:3] == lines[:3]


def test_distributed_prints_the_verdict_after_the_result(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    lines = run(capsys, *COMMANDS["distributed"]).splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("Layout: "))
    assert i == 1  # after the one line that says what is modelled
    # bert-large (~335e6 parameters x 16 B ~ 5.4 GB, halved by tp 2) fits 80 GB
    assert re.fullmatch(r"memory: fits, [\d.]+ GiB of 74\.5 GiB per device", lines[i + 1])
    assert not any(line.startswith("sources:") for line in lines)
    verbose = run(capsys, *COMMANDS["distributed"], "-v").splitlines()
    assert any(line.startswith("sources: ") for line in verbose)


def test_distributed_says_when_a_layout_does_not_fit(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    # llama2-70b on 2 devices, no sharding of the optimizer: ~69e9 x 16 B / 2 (tp 2) ~ 550 GB
    # per device against 80 GB
    lines = run(capsys, "distributed", "llama2-70b", "--devices", "2", "--device", "a100",
                "--global-batch", "2", "--tp", "2", "--precision", "bf16").splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("Layout: "))
    assert lines[i + 1].startswith("memory: does not fit, needs ")
    assert "of 74.5 GiB per device" in lines[i + 1]


def test_op_names_are_never_split_mid_word(capsys, monkeypatch) -> None:
    """On a narrow console each op cell is one whole name, or the start of one ending in
    "…", on one line: never a name folded onto the next row."""
    monkeypatch.setenv("COLUMNS", "70")
    out = run(capsys, "predict", "bert-base", "--device", "a100", "--top", "12",
              "--no-store")
    names = set(ops("bert-base").columns["name"].tolist())
    top = out[out.index("Top 12 ops by predicted time"):]
    cells = [line.split("│")[1].strip() for line in top.splitlines()
             if line.startswith("│")]
    assert len(cells) == 12  # one line per op: no continuation rows
    for cell in cells:
        assert cell in names or (cell.endswith("…") and any(
            n.startswith(cell[:-1]) for n in names)), cell


def test_sizes_are_written_one_way() -> None:
    assert binary(2**30) == "1.0 GiB"
    assert binary(1.5 * 2**20) == "1.5 MiB"
    assert binary(681 * 2**30) == "681 GiB"
    assert binary(999.4 * 2**20) == "999 MiB"
    assert binary(1020 * 2**20) == "1.0 GiB"  # 1020/1024 = 0.996: never "1.02e+03 MiB"
    assert binary(57.5 * 2**30) == "57.5 GiB"
    assert binary(512) == "512 B"


def test_no_size_or_number_prints_in_e_notation(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = run(capsys, *COMMANDS["predict"])
    assert not re.search(r"\d\.?\d*e[+-]\d", out)
    assert re.search(r"\b1\.3 TiB\b", out)  # llama2-70b's peak: 1.27 TiB, to one decimal


def test_runs_show_prints_tables_not_a_dict(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    store = str(tmp_path / "runs.sqlite")
    run(capsys, "sweep", "bert-tiny", "--device", "a100", "--batch", "2,4", "--store", store)
    rid = _last_id(capsys, store)
    out = run(capsys, "runs", "show", rid, "--store", store)
    assert "{'" not in out and "[{" not in out  # no Python repr
    assert re.search(r"^│ evaluated\s+│ 2\s+│$", out, re.M)  # 2 configurations: batch 2, 4
    assert re.search(r"^best \(2\)$", out, re.M)  # the best rows, a column each
    assert re.search(r"^│ batch\s+│\s+4 │\s+2 │$", out, re.M)  # best first: batch 4
    assert "bertscope " in out.splitlines()[0] and "{" not in out.splitlines()[0]


def _last_id(capsys, store: str) -> str:
    out = run(capsys, "runs", "list", "--store", store)
    return re.findall(r"│ ([0-9a-f]{8}) │", out)[0]


def test_calibrate_prints_a_table_with_short_numbers(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = run(capsys, "calibrate", "--from-trace",
              str(TRACES / "calibrate" / "nvidia_train.json"), "--output",
              str(tmp_path / "p.json"))
    assert "{" not in out and '"' not in out  # no JSON
    assert not re.search(r"\d\.\d{4,}", out)  # three significant digits, not sixteen
    assert re.search(r"^│ gemm\s+│ default\s+│\s+fp32 │$", out, re.M)  # the fixture's format
    assert re.search(r"^│\s+│ per_format\.fp32\.max_fraction\s+│\s+0\.\d{1,3} │$", out, re.M)
    assert re.search(r"^│ overhead\s+│ seconds_per_launch\s+│\s+3 µ │$", out, re.M)  # 3 us
