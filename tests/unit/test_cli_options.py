"""Run options declared once (`cli.options.job_command`): one vocabulary across commands, the
old spellings as hidden aliases, and the typed job they build."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from bertscope.cli import main
from bertscope.cli.options import RUN_OPTIONS
from bertscope.config import RunConfig, get_model
from bertscope.errors import BertscopeError
from bertscope.job import Job


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _strip(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_every_run_setting_has_one_option() -> None:
    """RUN_OPTIONS and RunConfig list the same settings (checkpoint <-> checkpointing), so a
    new RunConfig field fails here until the command line offers it."""
    settings = {f.name for f in fields(RunConfig)}
    offered = {"checkpointing" if name == "checkpoint" else name for name in RUN_OPTIONS}
    assert offered == settings


def test_checkpoint_full_is_the_old_checkpointing_flag(capsys) -> None:
    base = ("ops", "bert-tiny", "--batch", "2", "--seq", "16", "--top", "0")
    rc1, new, err1 = run(capsys, *base, "--checkpoint", "full")
    rc2, old, err2 = run(capsys, *base, "--checkpointing")
    rc3, plain, _ = run(capsys, *base)
    assert rc1 == rc2 == rc3 == 0, (err1, err2)
    assert new == old
    assert "recompute" in new and "recompute" not in plain


def test_selective_checkpointing_is_refused_outside_the_distributed_model(capsys) -> None:
    rc, _, err = run(capsys, "ops", "bert-tiny", "--checkpoint", "selective")
    assert rc == 2
    assert "bertscope distributed" in err and len(err.strip().splitlines()) == 1


def test_the_hidden_aliases_stay_out_of_the_help(capsys) -> None:
    rc, out, _ = run(capsys, "ops", "--help")
    assert rc == 0
    out = _strip(out)
    for flag in ("--batch", "--seq", "--precision", "--optimizer", "--checkpoint",
                 "--micro-batches", "--masked-lm-only"):
        assert flag in out, flag
    assert "--checkpointing" not in out
    rc, out, _ = run(capsys, "distributed", "--help")
    out = _strip(out)
    assert "--micro-batches" in out and "--microbatches" not in out
    assert "--batch " not in out  # the global batch is its own option


DIST = ("distributed", "bert-base", "--devices", "8", "--device", "a100", "--global-batch",
        "64", "--pp", "2")


def test_distributed_micro_batches_alias_and_default_precision(capsys) -> None:
    rc1, new, err = run(capsys, *DIST, "--micro-batches", "4")
    rc2, old, _ = run(capsys, *DIST, "--microbatches", "4")
    assert rc1 == rc2 == 0, err
    assert new == old and "m4" in new
    # one default everywhere: fp32, as ops and predict
    assert "seq 128, fp32, adam" in new


def test_job_round_trips_and_checks_the_pair() -> None:
    job = Job(model=get_model("roberta-base"), run=RunConfig(batch=2, seq=64, precision="bf16",
                                                            micro_batches=3))
    assert Job.from_dict(job.as_dict()) == job
    with pytest.raises(BertscopeError, match="exceeds"):
        Job(model=get_model("bert-base"), run=RunConfig(batch=1, seq=513))
    doc = job.as_dict()
    doc["run"]["speed"] = 1
    with pytest.raises(BertscopeError, match="no field 'speed'"):
        Job.from_dict(doc)
