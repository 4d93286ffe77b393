"""Installing like a package (issue #32, item 1): what the main job needs is a dependency;
an optional library that is missing is found before any work starts and named in one line
with the pip command that installs it; `bertscope --version`.

A missing library is simulated with `sys.modules[name] = None` (import fails, and
`importlib.util.find_spec` answers None), so the tests run in the dev environment where
everything is installed."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from bertscope.cli import main
from bertscope.errors import BertscopeError
from bertscope.requirements import INSTALL, install_command, installed, missing, require

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "bertscope"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _without(monkeypatch: pytest.MonkeyPatch, *libraries: str) -> None:
    """Make `libraries` look uninstalled for the rest of the test."""
    for lib in libraries:
        monkeypatch.setitem(sys.modules, lib, None)


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], pip: str) -> str:
    """Run the command; it must exit 2 before printing anything on stdout, with one error
    line on stderr that names `pip` (the fixing command)."""
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert out == "", out  # nothing computed and shown before the refusal
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertscope: error: "), err
    assert pip in lines[0], lines[0]
    assert "bertscope[" not in lines[0]  # bertscope is no package index entry
    return lines[0]


# --- the mechanism ---------------------------------------------------------------------


def test_a_blocked_module_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert installed("json") and installed("pytest")
    assert not installed("no_such_library_xyz")
    _without(monkeypatch, "pyarrow")
    assert not installed("pyarrow")
    assert missing("json", "pyarrow", "no_such_library_xyz") == ["pyarrow",
                                                                 "no_such_library_xyz"]


def test_require_names_the_feature_the_libraries_and_one_pip_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    require("anything", "json")  # installed: nothing happens
    _without(monkeypatch, "torch", "transformers")
    with pytest.raises(BertscopeError) as e:
        require("profile --hf", "torch", "transformers")
    assert str(e.value) == ("profile --hf needs torch and transformers, which are not "
                            "installed: pip install torch transformers")
    with pytest.raises(BertscopeError, match=r"; or pass --no-measure$"):
        require("x", "torch", otherwise="or pass --no-measure")


def test_every_install_command_is_a_plain_pip_install_of_its_library() -> None:
    for lib, command in INSTALL.items():
        assert command == f"pip install {lib}", (lib, command)  # the index names them so
    assert install_command("matplotlib", "pyarrow") == "pip install matplotlib pyarrow"
    with pytest.raises(KeyError):
        install_command("no_such_library_xyz")


# --- each command refuses before any work ------------------------------------------------

@pytest.mark.parametrize(("library", "pip", "args"), [
    ("matplotlib", "pip install matplotlib",
     ["predict", "bert-base", "--device", "a100", "--plot", "{tmp}/out.png"]),
    ("pyarrow", "pip install pyarrow", ["ops", "bert-base", "--output", "{tmp}/out.parquet"]),
    ("pyarrow", "pip install pyarrow",
     ["ops", "bert-base", "--format", "parquet", "--output", "{tmp}/out.bin"]),
    ("pyarrow", "pip install pyarrow",
     ["predict", "bert-base", "--device", "a100", "--output", "{tmp}/out.parquet"]),
    ("pyarrow", "pip install pyarrow",
     ["trace", str(ROOT / "tests/data/traces/cuda_bert_train.json.gz"), "--output",
      "{tmp}/out.parquet"]),
    ("pyarrow", "pip install pyarrow",
     ["sweep", "bert-base", "--batch", "8,16", "--output", "{tmp}/out.parquet"]),
    ("pyarrow", "pip install pyarrow",
     ["distributed", "bert-base", "--device", "a100", "--devices", "8", "--global-batch",
      "256", "--search", "--output", "{tmp}/out.parquet"]),
    ("torch", "pip install torch", ["profile", "bert-mini", "--output", "{tmp}/out.json"]),
    ("transformers", "pip install transformers",
     ["profile", "bert-mini", "--hf", "--output", "{tmp}/out.json"]),
    ("torch", "pip install torch", ["calibrate", "--output", "{tmp}/out.json"]),
    ("torch", "pip install torch", ["validate", "--output", "{tmp}/out.json"]),
    ("matplotlib", "pip install matplotlib", ["study", "--output", "{tmp}/out"]),
    ("pyarrow", "pip install pyarrow", ["study", "--output", "{tmp}/out"]),
    ("torch", "pip install torch", ["study", "--measure", "--output", "{tmp}/out"]),
], ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]) if isinstance(v, list) else "")
def test_a_missing_library_refuses_before_any_work(
        library: str, pip: str, args: list[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store" / "runs.sqlite"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("BERTSCOPE_STORE", str(store))  # where a recording command records
    _without(monkeypatch, library)
    _refused(capsys, [a.replace("{tmp}", str(work)) for a in args], pip)
    assert list(work.iterdir()) == []  # no output file or folder, not even a temporary one
    assert not store.exists()  # nothing recorded


def test_runs_export_to_parquet_refuses_without_pyarrow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.sqlite"
    assert main(["predict", "bert-mini", "--device", "a100", "--store", str(store)]) == 0
    capsys.readouterr()
    _without(monkeypatch, "pyarrow")
    out = tmp_path / "rows.parquet"
    _refused(capsys, ["runs", "export", "1", str(out), "--store", str(store)],
             "pip install pyarrow")
    assert not out.exists()


def test_study_without_torch_writes_the_predicted_report_and_says_how_to_measure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """No --measure given and no torch: the predicted sections, exit 0, and one line on
    stderr saying how to add the measured part."""
    _without(monkeypatch, "torch")
    out = tmp_path / "s"
    rc = main(["study", "--output", str(out), "--models", "bert-base", "--device", "a100",
               "--precision", "fp32", "--no-store"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    assert (out / "report.html").is_file() and (out / "study.json").is_file()
    notes = [line for line in err.splitlines() if "pip install torch" in line]
    assert len(notes) == 1 and "measured part" in notes[0], err
    assert "Traceback" not in err
    assert "torch" not in sys.modules or sys.modules["torch"] is None  # never imported


# --- version and declared dependencies ---------------------------------------------------


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"bertscope {importlib.metadata.version('bertscope')}"


def _distribution(requirement: str) -> str:
    """The normalized distribution name of a requirement string ("pyarrow>=14" -> pyarrow)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _third_party_imports(folder: Path) -> dict[str, str]:
    """Top-level module imported anywhere in `folder`'s .py files (module and function
    level; `if TYPE_CHECKING:` blocks too, which only over-asks) -> a file that imports it;
    the standard library and bertscope itself left out, and so are imports guarded by an
    `except ImportError` (a fallback: cli's click for older typer). pandas' `to_parquet`
    counts as an import of pyarrow (pandas writes Parquet through it)."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                   and any(ast.unparse(h.type or ast.Name("")).endswith("ImportError")
                           for h in t.handlers)
                   for part in (*t.body, *t.handlers) for n in ast.walk(part)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Attribute) and node.attr == "to_parquet":
                names = ["pyarrow"]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "bertscope":
                    found.setdefault(top, str(path.relative_to(SRC)))
    return found


@functools.cache
def _packages() -> Mapping[str, list[str]]:
    """Import name -> the installed distributions that provide it (read once: ~1 s)."""
    return importlib.metadata.packages_distributions()


def _distributions_of(module: str) -> set[str]:
    """The normalized names of the distributions that provide the import `module`."""
    dists = _packages().get(module, [module])
    return {_distribution(d) for d in dists}


def test_what_the_study_and_its_report_import_is_a_dependency() -> None:
    """Every library the study and its report import is in pyproject's `dependencies`, so a
    plain `pip install .` runs the main job; torch (the measured part) alone is optional,
    and it has an extra and a pip command."""
    deps = {_distribution(d) for d in PYPROJECT["project"]["dependencies"]}
    imports = {**_third_party_imports(SRC / "report"), **_third_party_imports(SRC / "studies")}
    assert {"matplotlib", "pyarrow", "pandas", "numpy"} <= set(imports)  # the scan sees them
    optional = {"torch"}
    undeclared = {m: f for m, f in imports.items()
                  if m not in optional and not _distributions_of(m) & deps}
    assert not undeclared, f"imported by the study but not a dependency: {undeclared}"
    assert "torch" in INSTALL
    assert any(_distribution(r) == "torch" for r in PYPROJECT["project"][
        "optional-dependencies"]["torch"])
    assert "torch" not in deps


def test_every_other_import_is_a_dependency_or_an_optional_library_with_a_pip_command(
        ) -> None:
    """Anywhere in the package: a third-party import is declared, or optional and known to
    `requirements.INSTALL` (so a missing one is one line naming the pip command)."""
    deps = {_distribution(d) for d in PYPROJECT["project"]["dependencies"]}
    deps |= {_distribution(r) for d in list(deps)  # and what those bring (typer: click)
             for r in importlib.metadata.requires(d) or () if "extra ==" not in r}
    imports = _third_party_imports(SRC)
    loose = {m: f for m, f in imports.items()
             if not _distributions_of(m) & deps and m not in INSTALL}
    assert not loose, loose


def test_every_extra_named_in_a_hint_or_doc_exists() -> None:
    """`bertscope[NAME]` (an extra) in the sources, README and docs names an extra of
    pyproject.toml; and no source message tells users to pip install `bertscope[...]`
    (bertscope is installed from its source, so that is no command a user can run)."""
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted(SRC.rglob("*.py"))]
    for path in texts:
        text = path.read_text()
        for name in re.findall(r"(?:bertscope|\.)\[([a-z0-9_,-]+)\]", text):
            assert set(name.split(",")) <= extras, (path, name)
        if path.suffix == ".py":
            assert "pip install 'bertscope[" not in text, path
