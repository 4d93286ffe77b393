"""`bertscope trace`: formats, output files, rank selection and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from bertscope.cli import trace as cli_trace
from bertscope.errors import BertscopeError

DATA = Path(__file__).parents[1] / "data" / "traces"
CUDA = str(DATA / "cuda_bert_train.json.gz")


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        """bertscope"""

    cli_trace.register(app)
    return app


def run(*args: str) -> str:
    r = CliRunner().invoke(_app(), ["trace", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_table_output() -> None:
    out = run(CUDA, "--top", "3")
    for needle in ("By category", "By sublayer", "By phase", "Devices", "Streams",
                   "Top 3 names", "communication", "exposed comm"):
        assert needle in out, needle
    assert "Names no pattern matched" not in out


def test_multirank_table_has_per_rank_columns() -> None:
    out = run(str(DATA / "multirank"))
    assert "rank 0 %" in out and "rank 1 %" in out


def test_csv_and_json(tmp_path: Path) -> None:
    out = run(CUDA, "--format", "csv")
    lines = out.splitlines()
    assert lines[0].startswith("name,layer,sublayer,category,phase")
    run(CUDA, "--output", str(tmp_path / "t.json"))  # format from the suffix
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["meta"]["trace"]["unknown_s"] == 0.0
    assert {r["category"] for r in doc["rows"]} >= {"gemm", "communication", "optimizer"}
    run(CUDA, "--output", str(tmp_path / "t.csv"))
    df = pd.read_csv(tmp_path / "t.csv")
    assert len(df) == len(doc["rows"])
    run(CUDA, "--output", str(tmp_path / "t.txt"))
    assert "By category" in (tmp_path / "t.txt").read_text()


def test_rank_and_patterns(tmp_path: Path) -> None:
    pats = tmp_path / "p.toml"
    pats.write_text("[[pattern]]\nregex = '^ampere_sgemm'\ncategory = 'other'\n")
    doc = json.loads(run(str(DATA / "multirank"), "--rank", "1", "--format", "json",
                         "--patterns", str(pats)))
    assert doc["meta"]["ranks"] == [1]
    sgemm = [r for r in doc["rows"] if r["name"].startswith("ampere_sgemm")]
    assert sgemm and {r["category"] for r in sgemm} == {"other"}


@pytest.mark.parametrize(("args", "needle"), [
    (["/nonexistent/t.json"], "no such trace file or folder"),
    ([CUDA, "--rank", "4"], "rank 0, not rank 4"),
    ([CUDA, "--top", "-1"], "--top must be"),
    ([CUDA, "--output", "/nonexistent/dir/x.csv"], "does not exist"),
    ([CUDA, "--patterns", "/nonexistent/p.toml"], "p.toml: no such file"),
])
def test_errors(args: list[str], needle: str) -> None:
    with pytest.raises(BertscopeError, match=needle):
        CliRunner().invoke(_app(), ["trace", *args], catch_exceptions=False)


def test_wired_into_the_bertscope_command(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    from bertscope import cli

    if "trace" not in {c.name for c in cli.app.registered_commands}:
        pytest.skip("bertscope.cli does not register the trace command yet")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    assert cli.main(["trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertscope: error: ") and "truncated" in err
    assert err.count("\n") == 1


def test_trace_by_module_prints_the_module_tree() -> None:
    from typer.testing import CliRunner

    from bertscope.cli import app

    path = Path(__file__).parents[1] / "data" / "traces" / "hf" / "gpt2_cpu_train.json.gz"
    res = CliRunner().invoke(app, ["trace", str(path), "--by", "module", "--no-store"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    # each block nested under the model, its attention under the block (two more spaces)
    block = next(i for i, line in enumerate(lines) if "GPT2Block_0" in line)
    attn = next(i for i, line in enumerate(lines) if "GPT2Attention_0" in line)
    indent = lines[block].index("GPT2Block_0")
    assert attn > block and lines[attn].index("GPT2Attention_0") == indent + 2
    assert "By category" not in res.output  # only the breakdown asked for


@pytest.mark.parametrize("args", [["--by", "modules"], ["--by", "module", "--format", "csv"]])
def test_trace_by_refuses_bad_values(args: list[str], capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    from bertscope.cli import main

    path = Path(__file__).parents[1] / "data" / "traces" / "hf" / "gpt2_cpu_train.json.gz"
    assert main(["trace", str(path), *args, "--no-store"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--by" in err and "Traceback" not in err


def test_the_terminal_report_imports_no_pandas() -> None:
    # pandas is imported when a DataFrame is asked for, not for the report (start-up time)
    import subprocess
    import sys

    path = Path(__file__).parents[1] / "data" / "traces" / "multirank"
    code = ("import sys\nfrom bertscope.cli import main\n"
            f"rc = main(['trace', {str(path)!r}, '--no-store'])\n"
            "print(rc, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split()[-2:] == ["0", "False"], out.stdout[-300:]


def test_trace_digest_equals_hashlib_on_both_paths(tmp_path, monkeypatch) -> None:
    import hashlib

    from bertscope.cli import trace as cli_trace

    p = tmp_path / "t.json"
    p.write_bytes(bytes(range(256)) * 5000)  # 1.28 MB, several 1 MiB blocks
    want = hashlib.sha256(p.read_bytes()).hexdigest()
    assert cli_trace._sha256(p) == want  # the built-in sha256
    monkeypatch.setattr(cli_trace, "BUILTIN_SHA256_MAX", 0)
    assert cli_trace._sha256(p) == want  # hashlib's
