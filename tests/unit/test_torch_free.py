"""Prediction is torch-free: every module of the packages that model (analytic, optable, perf,
parallel, hardware, trace, and the shared config, taxonomy, io, errors) imports in a Python
where `import torch` fails. Modules are found by walking the packages, so a new module is
covered as soon as it exists. The same check on `bertscope.measure.profile` fails, which
shows the check can fail. Studies, which measure on use, import without torch too."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

TORCH_FREE = ("bertscope.analytic", "bertscope.optable", "bertscope.perf", "bertscope.parallel",
              "bertscope.hardware", "bertscope.trace", "bertscope.config", "bertscope.taxonomy",
              "bertscope.io", "bertscope.errors", "bertscope.sweep",
              "bertscope.store", "bertscope.families", "bertscope.family", "bertscope.presets")

_SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # before anything else: `import torch` raises ImportError
    import importlib, json, pkgutil, traceback

    def walk(name):
        mod = importlib.import_module(name)
        yield name
        if hasattr(mod, "__path__"):
            for info in pkgutil.walk_packages(mod.__path__, name + "."):
                if not info.name.endswith(".__main__"):  # importing it runs the command
                    yield info.name

    imported, failed = [], {}
    for top in json.loads(sys.argv[1]):
        try:
            names = list(walk(top))
        except Exception as e:
            failed[top] = f"{type(e).__name__}: {e}"
            continue
        for name in names:
            try:
                importlib.import_module(name)
                imported.append(name)
            except Exception as e:
                failed[name] = f"{type(e).__name__}: {e}"
    print(json.dumps({"imported": imported, "failed": failed,
                      "torch_loaded": sys.modules.get("torch") is not None}))
""")


def _import_without_torch(*packages: str) -> tuple[set[str], dict[str, str], bool]:
    """Import `packages` and every module under them in a fresh Python without torch: the
    modules imported, those that failed (name -> why), and whether torch got loaded."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(packages)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return set(out["imported"]), dict(out["failed"]), bool(out["torch_loaded"])


def test_modelling_packages_import_without_torch() -> None:
    imported, failed, torch_loaded = _import_without_torch(*TORCH_FREE)
    assert failed == {}, failed
    assert set(TORCH_FREE) <= imported
    # the walk reached the modules inside the packages, the moved ones' homes included
    assert {"bertscope.perf.predict", "bertscope.parallel.ddp_model", "bertscope.trace.breakdown",
            "bertscope.optable.combine", "bertscope.analytic.encoder"} <= imported
    assert not torch_loaded


def test_studies_import_without_torch() -> None:
    """Studies import their measuring side on use: the CLI and the reading side of
    validation (saved results, comparisons) work without torch."""
    imported, failed, torch_loaded = _import_without_torch("bertscope.studies")
    assert failed == {}, failed
    assert {"bertscope.studies.validate", "bertscope.studies.ddp"} <= imported
    assert not torch_loaded


def test_the_command_line_and_reports_import_without_torch() -> None:
    """`bertscope ops/predict/distributed/trace` work without torch; `profile`, `calibrate`
    and `validate` refuse in one line when it is missing (`cli.options.need_torch`)."""
    imported, failed, torch_loaded = _import_without_torch("bertscope.cli", "bertscope.report")
    assert failed == {}, failed
    assert {"bertscope.cli.profile", "bertscope.cli.options", "bertscope.report.predict"} \
        <= imported
    assert not torch_loaded


def test_the_check_fails_for_a_module_that_needs_torch() -> None:
    needs_torch = {"bertscope.measure.profile", "bertscope.measure.microbench"}
    imported, failed, _ = _import_without_torch(*sorted(needs_torch))
    assert set(failed) == needs_torch and not imported & needs_torch
    assert all("torch" in why for why in failed.values()), failed
