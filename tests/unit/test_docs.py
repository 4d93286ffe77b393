"""The docs a newcomer reads stay true: every output they show is what its command prints now
(docs/numbers.py), every relative link resolves, the README stays short and keeps its two
set-up commands, and every guide it links exists."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
GUIDES = ("study", "profiling", "traces", "prediction", "sweeps", "distributed", "runs", "api")
"""The guide pages issue #30 asks the README to link (docs/guide/<name>.md)."""


def _numbers() -> ModuleType:
    """docs/numbers.py, loaded under another name (`numbers` is a standard module)."""
    spec = importlib.util.spec_from_file_location("docs_numbers", ROOT / "docs" / "numbers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_numbers"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # runs every shown command once (~15-30 s on 2 cores)
def test_every_shown_output_is_current() -> None:
    stale = _numbers().stale()
    assert stale == [], f"stale docs regions (run: python docs/numbers.py): {stale}"


def test_every_region_names_a_known_example() -> None:
    numbers = _numbers()
    known = set(numbers.EXAMPLES) | set(numbers.GENERATED)
    found = {key for page in PAGES for key in numbers.regions(page.read_text())}
    assert found, "no marked regions found"
    assert found <= known, f"unknown region keys: {sorted(found - known)}"
    # every region is closed: as many openers as matched regions
    for page in PAGES:
        text = page.read_text()
        assert text.count("<!-- out: ") == len(numbers.regions(text)), page


def test_stale_region_is_reported(tmp_path: Path) -> None:
    numbers = _numbers()
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- out: import-rules -->\nhand-typed\n<!-- /out -->\nend\n")
    assert numbers.stale([page]) == ["page.md: import-rules"]
    page.write_text(numbers.update(page.read_text()))  # rewritten: current, text around kept
    assert numbers.stale([page]) == []
    assert page.read_text().startswith("intro\n") and page.read_text().endswith("end\n")
    assert "| `errors` |" in page.read_text()


def test_filters_keep_what_they_say() -> None:
    numbers = _numbers()
    lines = ["a1", "b", "a2", "c", "d"]
    assert numbers.grep("^a")(lines) == ["a1", "...", "a2", "..."]
    assert numbers.grep("^b", after=1)(lines) == ["...", "b", "a2", "..."]
    assert numbers.head(2)(lines) == ["a1", "b", "..."]
    assert numbers.head(9)(lines) == lines
    # a table frame line is dropped, a row is not
    assert numbers.FRAME.match("┏━━━┳━━┓") and numbers.FRAME.match("└───┴──┘")
    assert not numbers.FRAME.match("│ gemm │ 1 │")


def test_long_commands_wrap_between_options() -> None:
    shown = _numbers()._show("distributed bert-large --devices 32 --device a100 "
                             "--global-batch 256 --tp 2 --pp 4 --micro-batches 8 "
                             "--precision bf16")
    lines = shown.splitlines()
    assert all(len(line) <= 94 for line in lines)  # WRAP 92 + " \"
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert not any(line.rstrip(" \\").endswith(("--tp", "--pp", "--device")) for line in lines)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not links
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)}: broken link {target}"


def test_readme_is_short_and_links_every_guide() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for name in GUIDES:
        assert f"(docs/guide/{name}.md)" in text, name
        assert (ROOT / "docs" / "guide" / f"{name}.md").exists(), name
    for page in ("architecture", "decisions"):
        assert f"(docs/{page}.md)" in text
    assert not (ROOT / "docs" / "design.md").exists()


def test_readme_keeps_its_two_setup_commands() -> None:
    # the first screen's commands: .ci/run performs the same steps (venv, pinned install,
    # pytest), so a change to one must be a change to the other
    setup = 'python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[dev]"'
    text = README.read_text()
    assert f"{setup} && .venv/bin/bertscope study --output study" in text
    assert f"{setup} && .venv/bin/python -m pytest" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert '.venv/bin/pip install -q -c constraints.txt -e ".[dev]"' in ci
    assert ci.rstrip().endswith(".venv/bin/python -m pytest")


def test_readme_study_cost_is_the_benchmarks() -> None:
    # the first screen's "about N s and X GiB" is bench/bench_study_cost.py's median, rounded
    text = " ".join(README.read_text().split())
    said = re.search(r"about (\d+) s and ([\d.]+) GiB on a quiet 2-core machine", text)
    assert said, "README's first screen states the study's time and peak memory"
    bench = (ROOT / "bench" / "results" / "bench_study_cost.txt").read_text()
    got = re.search(r"study \(default\)\s+wall\s+([\d.]+) s .*?peak RSS\s+([\d.]+) GiB", bench)
    assert got
    assert int(said.group(1)) == round(float(got.group(1)))
    assert float(said.group(2)) == round(float(got.group(2)), 1)


def test_readme_suite_time_is_the_benchmarks() -> None:
    # the first screen's "about N minutes" is bench/bench_suite_load.py's quiet run, rounded
    text = " ".join(README.read_text().split())
    said = re.search(r"about (\d+) minutes on a quiet 2-core machine", text)
    assert said, "README's first screen states the suite's time"
    bench = (ROOT / "bench" / "results" / "bench_suite_load.txt").read_text()
    quiet = re.findall(r"quiet\s+exit 0\s+([\d.]+) min", bench)
    assert quiet, "bench_suite_load.txt records a passing quiet run"
    assert int(said.group(1)) == round(float(quiet[0]))
