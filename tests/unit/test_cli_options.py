"""Job options generated from the config's fields (`cli.options.add_job_command`): every
command that takes a job takes all of it, one spelling per setting, and a new field reaches
every such command without touching the CLI."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import pytest
import typer.testing

import bertscope.config
from bertscope.cli import build_app, main
from bertscope.config import RunConfig, setting
from bertscope.job import Layout

JOB_COMMANDS = {"ops", "predict", "profile", "distributed"}
"""Commands that take a job (the model argument and the run settings)."""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _strip(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _help(app: typer.Typer, command: str) -> str:
    result = typer.testing.CliRunner().invoke(app, [command, "--help"],
                                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return _strip(result.output)


def _job_commands(app: typer.Typer) -> set[str]:
    return {c.name for c in app.registered_commands
            if hasattr(c.callback, "__job_command__")}


@dataclass(kw_only=True, slots=True, frozen=True)
class _RunWithLossScale(RunConfig):
    """A run config with one field more, as a new feature would add it."""

    loss_scale: int = setting(1, "Static loss scale (a test-only field).")


def test_the_job_commands_are_the_ones_that_take_a_job() -> None:
    assert _job_commands(build_app()) == JOB_COMMANDS


@pytest.mark.parametrize("command", sorted(JOB_COMMANDS))
def test_every_job_command_offers_every_run_field(command: str) -> None:
    text = _help(build_app(), command)
    for f in fields(RunConfig):
        flag = "--" + (f.metadata.get("flag") or f.name).replace("_", "-")
        assert flag in text, (command, flag)


def test_distributed_offers_every_layout_field_and_the_issues_options() -> None:
    text = _help(build_app(), "distributed")
    for f in fields(Layout):
        flag = "--" + (f.metadata.get("flag") or f.name).replace("_", "-")
        assert flag in text, flag
    for flag in ("--attention", "--dropout", "--fusion", "--masked-lm-only", "--decoder-seq"):
        assert flag in text, flag


def test_a_new_run_field_reaches_every_job_command(monkeypatch, capsys) -> None:
    """A field added to RunConfig (here in a test-only subclass) is an option of every job
    command, and the job the command builds carries its value."""
    monkeypatch.setattr(bertscope.config, "RunConfig", _RunWithLossScale)
    app = build_app()
    for command in _job_commands(app):
        assert "--loss-scale" in _help(app, command), command
    seen = []

    def build(job):  # the analytic producer, as `ops` calls it
        seen.append(job)
        raise SystemExit(0)

    monkeypatch.setattr("bertscope.analytic.build", build)
    result = typer.testing.CliRunner().invoke(app, ["ops", "bert-tiny", "--loss-scale", "4"])
    assert result.exit_code == 0, result.output
    assert isinstance(seen[0].run, _RunWithLossScale) and seen[0].run.loss_scale == 4


def test_checkpoint_has_one_spelling(capsys) -> None:
    base = ("ops", "bert-tiny", "--batch", "2", "--seq", "16", "--top", "0")
    rc1, full, err1 = run(capsys, *base, "--checkpoint", "full")
    rc2, sel, err2 = run(capsys, *base, "--checkpoint", "selective")
    rc3, plain, _ = run(capsys, *base)
    assert rc1 == rc2 == rc3 == 0, (err1, err2)
    assert "recompute" in full and "recompute" in sel and "recompute" not in plain
    rc, _, err = run(capsys, *base, "--checkpointing")
    assert rc == 2 and "--checkpointing" in err


def test_the_profiler_refuses_what_it_does_not_measure(capsys) -> None:
    for extra in (("--checkpoint", "selective"), ("--fusion",)):
        rc, _, err = run(capsys, "profile", "bert-tiny", *extra)
        assert rc == 2, extra
        assert "not measured" in err and len(err.strip().splitlines()) == 1


DIST = ("distributed", "bert-base", "--devices", "8", "--device", "a100", "--pp", "2")


def test_distributed_global_batch_or_batch(capsys) -> None:
    """--global-batch 64 over dp 4 and 4 micro-batches is micro-batches of 64 / (4 x 4) = 4
    sequences: the same job as --batch 4."""
    rc1, by_global, err = run(capsys, *DIST, "--global-batch", "64", "--micro-batches", "4")
    rc2, by_batch, _ = run(capsys, *DIST, "--batch", "4", "--micro-batches", "4")
    assert rc1 == rc2 == 0, err
    assert by_global == by_batch
    assert "m4" in by_global and "micro-batch 4:" in by_global
    assert "global batch 64 x seq 128, fp32, adam" in by_global
    rc, _, err = run(capsys, *DIST, "--global-batch", "64", "--batch", "4")
    assert rc == 2 and "not both" in err
    rc, _, err = run(capsys, *DIST)
    assert rc == 2 and "--global-batch" in err


def test_distributed_takes_the_attention_and_fusion_of_the_job(capsys) -> None:
    """SDPA never writes the s x s scores and fusion merges memory-bound chains: each makes
    the distributed iteration faster than eager attention, unfused."""
    def tokens(*extra: str) -> float:
        rc, out, err = run(capsys, *DIST, "--global-batch", "64", *extra)
        assert rc == 0, err
        m = re.search(r"iteration (\S+) (\S?s),", _strip(out))
        scale = {"s": 1, "ms": 1e-3, "µs": 1e-6}[m.group(2)]
        return float(m.group(1)) * scale

    eager = tokens()
    assert tokens("--attention", "sdpa") < eager
    assert tokens("--fusion") < eager
