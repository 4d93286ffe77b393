"""The repository stays lean (#30): bench/results holds one current summary per benchmark,
each naming the command that regenerates it and the commit it was made at, under a size
budget; no tracked file is large. Reads `git ls-files`; skipped outside a git checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = "bench/results"
RESULTS_BUDGET = 10 * 2**20  # bytes: the whole tracked folder
FILE_LIMIT = 5 * 2**20  # bytes: any one tracked file
HEADER = re.compile(r"# (?P<name>\S+): made at (?P<commit>[0-9a-f]{7,40})\b")


def tracked(under: str = "") -> list[Path]:
    """Tracked files (those present in the working tree), relative to the repository root."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "ls-files", "-z", "--", under or "."], cwd=ROOT,
                          capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"git ls-files failed: {proc.stderr.decode(errors='replace').strip()}")
    names = [n for n in proc.stdout.decode().split("\0") if n]
    return [Path(n) for n in names if (ROOT / n).is_file()]


def test_bench_results_fit_the_budget() -> None:
    total = sum((ROOT / p).stat().st_size for p in tracked(RESULTS))
    assert 0 < total <= RESULTS_BUDGET, f"{RESULTS}: {total:,} bytes tracked"


def test_no_tracked_file_is_large() -> None:
    large = {str(p): (ROOT / p).stat().st_size for p in tracked()
             if (ROOT / p).stat().st_size > FILE_LIMIT}
    assert not large


def _summary_problem(path: Path, root: Path = ROOT) -> str | None:
    """Why a bench/results summary's header is wrong, or None: its first line names the
    summary (its file stem) and a commit, its second line is the command (`$ ...`)."""
    lines = (root / path).read_text(encoding="utf-8").splitlines()
    m = HEADER.fullmatch(lines[0]) if lines else None
    if m is None or m["name"] != path.stem:
        return f"first line is not '# {path.stem}: made at <commit>'"
    if len(lines) < 2 or not lines[1].startswith("$ ") or len(lines[1]) < 4:
        return "second line is not '$ <command>'"
    return None


def test_every_summary_names_its_command_and_commit() -> None:
    """Top-level .txt files are summaries with the header; a .json (or .json.gz) beside them
    is the raw output of the summary of the same stem; golden/ is the golden-output store."""
    files = [p for p in tracked(RESULTS) if p.parent == Path(RESULTS)]
    summaries = {p.stem: p for p in files if p.suffix == ".txt"}
    assert "validate_cpu" in summaries
    problems = {str(p): why for p in summaries.values() if (why := _summary_problem(p))}
    assert not problems
    for p in files:
        if p.name == "README.md" or p.suffix == ".txt":
            continue
        stem = p.name.removesuffix(".gz").removesuffix(".json")
        assert p.name.endswith((".json", ".json.gz")) and stem in summaries, \
            f"{p}: neither a summary nor the raw output of one"
    nested = {p.parts[2] for p in tracked(RESULTS) if p.parent != Path(RESULTS)}
    assert nested <= {"golden"}, f"folders other than golden/ in {RESULTS}: {nested}"


def test_the_header_check_rejects_what_it_should(tmp_path: Path) -> None:
    """The header rule itself, on hand-made files: name must match the stem, a hex commit,
    then a command line."""
    cases = {
        "good.txt": "# good: made at 4f084c1\n$ bash bench/good.sh\nbody\n",
        "wrongname.txt": "# other: made at 4f084c1\n$ cmd\n",
        "nohash.txt": "# nohash: made at HEAD\n$ cmd\n",
        "nocmd.txt": "# nocmd: made at 4f084c1\n# a note\n",
        "empty.txt": "",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    got = {name: _summary_problem(Path(name), tmp_path) is None for name in cases}
    assert got == {"good.txt": True, "wrongname.txt": False, "nohash.txt": False,
                   "nocmd.txt": False, "empty.txt": False}


SCREENSHOTS = "docs/study"
SCREENSHOTS_BUDGET = 600 * 2**10  # bytes: every section's screenshot and the first screen


def test_every_study_section_has_a_small_screenshot() -> None:
    """docs/study holds one screenshot per section of the study (NN-<key>.png, the keys the
    section modules give their `Section`), made by bench/study_screenshot.py; with
    docs/study_report.png they stay within the budget."""
    import ast

    keys = set()
    for src in (ROOT / "src" / "bertscope" / "studies" / "sections").glob("*.py"):
        for node in ast.walk(ast.parse(src.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Section"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                keys.add(node.args[0].value)
    shots = [p for p in tracked(SCREENSHOTS) if p.suffix == ".png"]
    assert len(keys) >= 10
    assert {p.stem.split("-", 1)[1] for p in shots} == keys
    total = sum((ROOT / p).stat().st_size for p in [*shots, Path("docs/study_report.png")])
    assert total <= SCREENSHOTS_BUDGET, f"{total:,} bytes of screenshots"
