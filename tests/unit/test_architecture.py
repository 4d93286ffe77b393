"""The layout rules of docs/design.md, enforced: which package may import which (lazy imports
inside functions included), torch only where measuring happens, no file over 500 lines, no
op-name matching in the distributed model."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "bertscope"

GROUND = {"config", "family", "presets", "hf_config", "job", "taxonomy", "optable", "io",
          "errors", "lazyre"}
ALLOWED: dict[str, set[str]] = {
    # the ground floor knows no producer, consumer or screen
    "errors": set(),
    "io": {"errors"},
    "lazyre": set(),
    # config re-exports the presets and the config.json reader, which build on its classes
    "family": set(),
    "config": {"errors", "io", "family", "presets", "hf_config"},
    "hf_config": {"config", "errors", "io"},
    "presets": {"config", "errors", "hf_config"},
    # the job: model + run + layout, declared once
    "job": {"config", "errors"},
    "taxonomy": {"errors", "io", "lazyre"},
    "optable": {"config", "job", "taxonomy", "io", "errors"},
    "hardware": GROUND,
    # producers
    "analytic": GROUND,
    "trace": GROUND,
    "measure": GROUND | {"analytic", "trace", "hardware", "perf", "parallel"},
    # pure consumers (parallel builds its per-rank rows with the analytic producer and times
    # them with the performance model: the two exceptions the design names)
    "perf": GROUND | {"hardware"},
    "parallel": GROUND | {"hardware", "perf", "analytic"},
    # the runs store joins stored rows by the calibration's keys (perf.fit)
    "store": GROUND | {"perf"},
    # the sweep engine runs the analytic producer on arrays and times rows with perf's formula
    "sweep": GROUND | {"hardware", "perf", "analytic", "parallel"},
    # workflows that measure and predict together
    # (the study writes its report folder itself, so `bertscope.study()` gives the same
    # folder as the command: it may call report/ and sweep/)
    "studies": GROUND | {"hardware", "analytic", "trace", "measure", "perf", "parallel",
                         "sweep", "report"},
    # screens
    "report": GROUND | {"hardware", "analytic", "trace", "perf", "parallel", "sweep"},
    "cli": GROUND | {"hardware", "analytic", "trace", "measure", "perf", "parallel", "studies",
                     "report", "sweep", "store"},
    "__init__": GROUND | {"analytic", "trace", "sweep", "studies"},
}
TORCH_OK = {"measure", "studies"}


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.stem != "__init__" \
        else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: use absolute imports")
            out.append((node.lineno, node.module or ""))
    return out


FILES = sorted(SRC.rglob("*.py"))


def test_every_package_has_a_rule() -> None:
    packages = {_package(p) for p in FILES}
    assert packages <= set(ALLOWED), packages - set(ALLOWED)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_layout(path: Path) -> None:
    own = _package(path)
    bad = []
    for line, module in _imports(path):
        parts = module.split(".")
        if parts[0] == "torch" and own not in TORCH_OK:
            bad.append(f"line {line}: torch (only {sorted(TORCH_OK)} may import it)")
        if parts[0] != "bertscope" or len(parts) < 2:
            continue
        target = parts[1]
        if target != own and target not in ALLOWED[own]:
            bad.append(f"line {line}: {module} ({own} may import {sorted(ALLOWED[own])})")
    assert not bad, f"{path.relative_to(SRC)}: " + "; ".join(bad)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_source_file_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= 500, f"{path.relative_to(SRC)} has {lines} lines"


def test_no_top_level_cli_modules() -> None:
    assert not list(SRC.glob("cli_*.py"))
    assert (SRC / "cli" / "__init__.py").is_file()


def test_the_distributed_model_never_reads_op_names() -> None:
    """Roles (tp_split, pp_stage) decide tensor and pipeline splits, not op names."""
    pattern = re.compile(r"""\[["']name["']\]|\.name\.|["'](ffn1|ffn2|qkv|dgrad|wgrad|"""
                         r"""bias_grad|grad_accumulate|tied_embedding|mlm_decoder)["']""")
    hits = [f"{p.name}:{i}: {line.strip()}" for p in sorted((SRC / "parallel").glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_the_rules_catch_a_violation(tmp_path: Path) -> None:
    """The checker itself fails on a forbidden import (so the tests above could fail)."""
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from bertscope.measure.profile import profile\n")
    assert (2, "bertscope.measure.profile") in _imports(bad)
    assert "measure" not in ALLOWED["perf"]
