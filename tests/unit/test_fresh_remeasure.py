"""A CPU measurement whose every iteration faulted pages in is taken again in a fresh
process (`validate.unsettled_faults`, `studies.fresh`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertscope.errors import BertscopeError

pytest.importorskip("torch")
from bertscope.measure import allocator
from bertscope.measure import profile as profile_mod
from bertscope.optable import ProfileFacts
from bertscope.studies import fresh as fresh_mod
from bertscope.studies import measured
from bertscope.studies import validate as val
from tests.saved_measurements import saved_measurement

SAVED = saved_measurement("validate_cpu")


@pytest.fixture
def many(monkeypatch) -> int:
    """A process of 1 GiB resident in 4 KiB pages: 5,243 pages are 2% of it, twice
    `SETTLED_SHARE` (1%: 2,621 pages)."""
    monkeypatch.setattr(allocator, "resident_bytes", lambda: 2**30)
    monkeypatch.setattr(allocator, "PAGE_BYTES", 4096)
    return 5243


def test_unsettled_faults_needs_every_iteration_to_fault(many: int) -> None:
    assert measured.unsettled_faults(ProfileFacts(page_faults=(many, many + 5, many))) == many
    assert measured.unsettled_faults(ProfileFacts(page_faults=(0, many, many))) is None  # settled
    assert measured.unsettled_faults(ProfileFacts(page_faults=(many // 4,) * 3)) is None  # 0.5%
    assert measured.unsettled_faults(ProfileFacts(page_faults=())) is None
    assert measured.unsettled_faults(ProfileFacts(page_faults=(None,))) is None
    assert measured.unsettled_faults(ProfileFacts()) is None


def test_validate_keeps_the_fresh_measurement(tmp_path: Path, monkeypatch, many: int) -> None:
    """The in-process profile faulted on every iteration: validate writes nothing of it and
    keeps what the fresh process measured (here: a saved result copied into place)."""
    spoiled = SimpleNamespace(facts=ProfileFacts(page_faults=(many,) * 3),
                              write_json=lambda *_: pytest.fail("spoiled result written"))
    monkeypatch.setattr(profile_mod, "profile", lambda *a, **k: spoiled)
    asked: list[str] = []

    def fake_fresh(spec: str, path: Path, **kw: object) -> Path:
        asked.append(spec)
        shutil.copy(SAVED / "bert-small-4-256.round0.json", path)
        return Path(path)

    monkeypatch.setattr(val, "measure_fresh", fake_fresh)
    kept: list[object] = []

    def stop(device: str, results: list[object], **kw: object) -> None:
        kept.extend(results)
        raise BertscopeError("stop here")

    monkeypatch.setattr(val, "calibrate_local", stop)
    shutil.copy(SAVED / "bert-base-2-128.round0.json", tmp_path / "bert-base-2-128.json")
    lines: list[str] = []
    with pytest.raises(BertscopeError, match="stop here"):
        val.validate(measured.parse_specs("bert-small:4:256"),
                     measured.parse_specs("bert-base:2:128"),
                     results_dir=tmp_path, log=lines.append)
    assert asked == ["bert-small:4:256"]
    assert (tmp_path / "bert-small-4-256.json").is_file()
    assert any(f"faulted {many:,} pages" in line for line in lines)
    assert kept[0].table.run.batch == 4 and kept[0].table.run.seq == 256


def test_measure_fresh_runs_a_child_process(tmp_path: Path) -> None:
    """A real child: bert-tiny, one iteration; its result loads and says where it came from."""
    out = fresh_mod.measure_fresh("bert-tiny:1:16:lamb", tmp_path / "r.json", iters=1,
                                  warmup=0)
    result = measured.load_result(out)
    assert result.facts.fresh_process is True
    assert result.table.run.optimizer.value == "lamb" and result.table.run.seq == 16
    assert result.facts.host_allocator == "keep"


def test_a_failed_child_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(BertscopeError, match=r"re-measuring nope:1:16 in a fresh process "
                                             r"failed: error: .*nope"):
        fresh_mod.measure_fresh("nope:1:16", tmp_path / "r.json", iters=1, warmup=0)
