"""One option vocabulary (issue 32, item 5): `--device` is the catalog device(s) to predict
for, `--measure-on` the local device to measure on, `--devices N` a count, `--precision` one
precision or a comma list in any case; the old spellings still work, warn once and are not
in help. Each command is stopped where it would start measuring or computing (the function
it calls is replaced by one that records its arguments and refuses), so these tests read
what the parser handed over without doing the work."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.testing

from bertscope.cli import build_app, main
from bertscope.errors import BertscopeError


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _stop(seen: dict[str, Any]):
    """A stand-in for the work a command calls: keeps its arguments, then refuses."""
    def stand_in(*args: Any, **kwargs: Any) -> None:
        seen["args"], seen["kwargs"] = args, kwargs
        raise BertscopeError("stopped by the test")
    return stand_in


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "deprecated" in line]


def _help(command: str) -> str:
    result = typer.testing.CliRunner().invoke(build_app(), [command, "--help"],
                                              env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return re.sub(r"\x1b\[[0-9;]*m", "", result.output)


@pytest.fixture
def study_seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import bertscope.studies.study as study

    seen: dict[str, Any] = {}
    monkeypatch.setattr(study, "study", _stop(seen))
    return seen


def test_study_takes_device_and_precision_lists_in_any_case(capsys, tmp_path,
                                                            study_seen) -> None:
    rc, _, err = run(capsys, "study", "--no-measure", "--no-store", "--output",
                     str(tmp_path / "s"), "--models", "bert-base", "--device", "A100,h100",
                     "--precision", "BF16,fp32")
    assert rc == 2 and "stopped by the test" in err  # it got as far as the work
    cfg = study_seen["args"][0]
    assert cfg.devices == ("A100", "h100")  # device names are looked up case-blind later
    assert cfg.precisions == ("bf16", "fp32")
    assert _warnings(err) == []


def test_study_old_spellings_still_work_and_warn_once_each(capsys, tmp_path,
                                                           study_seen) -> None:
    rc, _, err = run(capsys, "study", "--no-measure", "--no-store", "--output",
                     str(tmp_path / "s"), "--models", "bert-base", "--devices", "a100",
                     "--precisions=bf16", "--devices", "a100")  # given twice, same value
    assert rc == 2 and "stopped by the test" in err
    cfg = study_seen["args"][0]
    assert cfg.devices == ("a100",) and cfg.precisions == ("bf16",)
    assert _warnings(err) == [
        "bertscope: warning: study --devices is deprecated; use --device",
        "bertscope: warning: study --precisions is deprecated; use --precision"]


def test_an_old_and_a_new_spelling_with_different_values_are_refused(capsys,
                                                                     tmp_path) -> None:
    rc, out, err = run(capsys, "study", "--no-measure", "--no-store", "--output",
                       str(tmp_path / "s"), "--devices", "a100", "--device", "h100")
    assert rc == 2 and out == ""
    assert "--devices=a100 and --device=h100 given together" in err
    assert not (tmp_path / "s").exists()


def test_profile_measures_on_the_local_device_old_spelling_warns(capsys,
                                                                 monkeypatch) -> None:
    pytest.importorskip("torch")
    import bertscope.measure.profile as profile

    seen: dict[str, Any] = {}
    monkeypatch.setattr(profile, "profile", _stop(seen))
    rc, _, err = run(capsys, "profile", "bert-tiny", "--measure-on", "CPU", "--no-store")
    assert rc == 2 and seen["kwargs"]["device"] == "cpu" and _warnings(err) == []
    rc, _, err = run(capsys, "profile", "bert-tiny", "--device", "cpu", "--no-store")
    assert rc == 2 and seen["kwargs"]["device"] == "cpu"
    assert _warnings(err) == ["bertscope: warning: profile --device is deprecated; use "
                              "--measure-on"]


@pytest.mark.parametrize("command, module, name", [
    ("calibrate", "bertscope.studies.local_calibration", "calibrate_local"),
    ("validate", "bertscope.studies.validate", "validate"),
])
def test_calibrate_and_validate_measure_on(capsys, monkeypatch, tmp_path, command: str,
                                           module: str, name: str) -> None:
    pytest.importorskip("torch")
    import importlib

    seen: dict[str, Any] = {}
    monkeypatch.setattr(importlib.import_module(module), name, _stop(seen))
    base = [command, "--output", str(tmp_path / "p.json")]
    if command == "validate":
        base.append("--no-store")
    for flag, warned in (("--measure-on", False), ("--device", True)):
        seen.clear()
        rc, _, err = run(capsys, *base, flag, "cuda")
        assert rc == 2 and "stopped by the test" in err, err
        device = seen["kwargs"].get("device") or seen["args"][0]
        assert device == "cuda"
        assert len(_warnings(err)) == int(warned)


@pytest.mark.parametrize("command, old", [("study", "--devices"), ("study", "--precisions"),
                                          ("profile", "--device"), ("calibrate", "--device"),
                                          ("validate", "--device")])
def test_old_spellings_are_not_in_help(command: str, old: str) -> None:
    text = _help(command)  # an option row starts with its name (prose may name predict's)
    assert not re.search(r"^\W*" + re.escape(old) + r"(?![\w-])", text, re.M), (command, old)


def test_the_vocabulary_in_help() -> None:
    assert "--measure-on" in _help("profile")
    assert "--measure-on" in _help("calibrate")
    dist = _help("distributed")
    assert "--devices" in dist and re.search(r"--device(?![\w-])", dist)
    for command in ("predict", "sweep", "study"):
        assert re.search(r"--device(?![\w-])", _help(command)), command
        assert re.search(r"--precision(?![\w-])", _help(command)), command


@pytest.mark.parametrize("argv", [
    ["predict", "bert-tiny", "--device", "a100", "--top", "0", "--no-store"],
    ["ops", "bert-tiny", "--top", "0"],
])
def test_precision_in_upper_case_is_accepted(capsys, argv: list[str]) -> None:
    rc, out, err = run(capsys, *argv, "--precision", "BF16")
    assert rc == 0, err
    assert ", bf16, " in out  # the job line: "... micro-batch(es), bf16, adam"


def test_sweep_precision_list_in_any_case(capsys) -> None:
    rc, out, err = run(capsys, "sweep", "bert-tiny", "--device", "A100", "--precision",
                       "BF16,Fp32", "--top", "5", "--no-store")
    assert rc == 0, err
    assert "bf16" in out and "fp32" in out


def test_version(capsys) -> None:
    from bertscope.cli import installed_version

    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out == f"bertscope {installed_version()}\n"
