"""Start-up: `import bertscope` imports nothing heavy, its public names resolve on first use
(PEP 562), and `bertscope trace`'s command path (the package, the CLI, the trace command
registered in its typer app) loads neither numpy nor pandas. Checked in fresh Pythons by what
`sys.modules` holds, never by the clock."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import bertscope

_PROBE = textwrap.dedent("""
    import importlib, json, sys
    for name in sys.argv[1:]:
        importlib.import_module(name)
    if "bertscope.cli" in sys.modules:
        sys.modules["bertscope.cli"].build_app(("trace",))  # what `bertscope trace` builds
    print(json.dumps(sorted(sys.modules)))
""")


def _loaded(*modules: str) -> set[str]:
    """The modules a fresh Python holds after importing `modules` (and building the trace
    command's app when the CLI is among them)."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_trace_command_path_imports_neither_numpy_nor_pandas() -> None:
    loaded = _loaded("bertscope", "bertscope.cli", "bertscope.cli.trace")
    assert {"bertscope.cli.trace", "typer"} <= loaded  # the probe did import the command
    assert "numpy" not in loaded and "pandas" not in loaded
    assert "dask" not in loaded and "distributed" not in loaded  # only with --scheduler
    assert "bertscope.analytic" not in loaded  # no producer the command does not use
    others = {f"bertscope.cli.{m}" for m in ("predict", "distributed", "sweep", "study")}
    assert not loaded & others


def test_the_profiler_imports_pandas_only_after_it_measured() -> None:
    """`profile` trains with torch alone: pandas (and pyarrow) come with the rows, after the
    training memory is released, so they never add to the training iteration's peak
    (bench/results/bench_study_cost.txt)."""
    loaded = _loaded("bertscope.measure.profile", "bertscope.cli.profile")
    assert "torch" in loaded
    assert "pandas" not in loaded and "pyarrow" not in loaded


def test_the_probe_sees_numpy_where_it_is_imported() -> None:
    # the same check fails for what does need numpy: the reader's columns are arrays
    assert "numpy" in _loaded("bertscope.trace")
    assert "numpy" in _loaded("bertscope.analytic")
    # dask only when a scheduler is used: the modules that can use one import without it
    loaded = _loaded("bertscope.trace", "bertscope.sweep", "bertscope.cluster")
    assert "bertscope.cluster" in loaded and "dask" not in loaded and "distributed" not in loaded


def test_import_bertscope_alone_loads_no_subpackage() -> None:
    loaded = _loaded("bertscope")
    assert not {m for m in loaded if m.startswith("bertscope.")}
    assert "numpy" not in loaded


@pytest.mark.parametrize("name", bertscope.__all__)
def test_every_public_name_resolves_to_its_definition(name: str) -> None:
    value = getattr(bertscope, name)
    home = importlib.import_module(bertscope._LAZY[name])
    if value is home:  # `sweep`, once its package is imported (another test may have)
        assert callable(value) and name == "sweep"
    else:
        assert value is getattr(home, name)
    assert name in dir(bertscope)
    exec(f"from bertscope import {name} as got", ns := {})  # the `from` form too
    assert ns["got"] is getattr(bertscope, name)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        bertscope.no_such_name  # noqa: B018


def test_sweep_is_callable_whether_or_not_its_package_was_imported() -> None:
    # `bertscope.sweep` names the package and the function; the import system rebinds the
    # attribute to the package once it is imported, which calls the function
    code = textwrap.dedent("""
        import bertscope
        first = bertscope.sweep
        import bertscope.sweep.engine as engine  # the package's submodules stay importable
        after = bertscope.sweep
        kw = dict(batch=(8,), seq=(128,))
        a = bertscope.sweep(["bert-base"], ["a100"], **kw).frame
        b = first(["bert-base"], ["a100"], **kw).frame
        print(type(first).__name__, type(after).__name__, len(a),
              a["iteration_s"].tolist() == b["iteration_s"].tolist(), engine.__name__)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["function", "_CallablePackage", "1", "True",
                                   "bertscope.sweep.engine"]


_BLAS = textwrap.dedent("""
    import os, sys
    from bertscope.cli import main
    main(sys.argv[1:] + ["--help"])
    import numpy  # what the command would import next
    print("threads:", os.environ.get("OPENBLAS_NUM_THREADS"))
""")


@pytest.mark.parametrize(("command", "env", "expected"), [
    ("trace", None, "1"),  # a BLAS-free command: numpy's BLAS pool not started per core
    ("sweep", None, "1"),
    ("trace", "3", "3"),  # the user's choice stands
    ("profile", None, "None"),  # torch's measurements keep the machine's defaults
    ("calibrate", None, "None"),
])
def test_blas_free_commands_start_one_blas_thread(command: str, env: str | None,
                                                  expected: str) -> None:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env is not None:
        environ["OPENBLAS_NUM_THREADS"] = env
    proc = subprocess.run([sys.executable, "-c", _BLAS, command], capture_output=True,
                          text=True, timeout=120, check=False, env=environ)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"threads: {expected}"


_ARENA = """
import os, sys
sys.argv = ["bertscope", *sys.argv[1:], "--help"]
from bertscope.cli import main
main()  # a measuring command re-executes this script with MALLOC_ARENA_MAX set
print("arena:", os.environ.get("MALLOC_ARENA_MAX"))
"""


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["profile", "bert-tiny"], None, "1"),  # measures kernels: one malloc arena from start
    (["validate"], None, "1"),
    (["ops", "bert-tiny"], None, "None"),  # no measurement: no re-execution
    (["profile", "bert-tiny", "--host-allocator", "system"], None, "None"),  # user's choice
    (["profile", "bert-tiny"], "4", "4"),  # the user's own setting stands
])
def test_measuring_commands_run_with_one_malloc_arena(args: list[str], env: str | None,
                                                      expected: str) -> None:
    import os
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("MALLOC_ARENA_MAX is glibc's")
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if env is not None:
        environ["MALLOC_ARENA_MAX"] = env
    proc = subprocess.run([sys.executable, "-c", _ARENA, *args], capture_output=True,
                          text=True, timeout=120, check=False, env=environ)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"arena: {expected}"


_RUN = textwrap.dedent("""
    import json, sys
    from bertscope.cli import main
    rc = main(sys.argv[1:])
    print(json.dumps([rc, sorted(sys.modules)]))
""")

_TRACE = "tests/data/traces/hf/bert_cpu_train.json.gz"
_POOL = {"multiprocessing", "concurrent.futures", "statistics"}
"""What one trace file does not need: no worker pool (one item runs in this process), no
median (the statistic the trace report uses is the mean)."""


@pytest.mark.parametrize(("args", "absent"), [
    ([], _POOL | {"pandas"}),  # the terminal report (rich renders it)
    (["--by", "rank"], _POOL | {"pandas", "matplotlib"}),
    (["--format", "csv"], _POOL | {"pandas", "rich"}),  # exports: no renderer at all
    (["--format", "json"], _POOL | {"pandas", "rich"}),
    (["--format", "jsonl"], _POOL | {"pandas", "rich"}),
])
def test_the_trace_command_run_imports_only_what_it_needs(
        args: list[str], absent: set[str], tmp_path: Path) -> None:
    # a whole run, the run recorded into a store named by the variable (no platformdirs)
    import os

    env = {**os.environ, "BERTSCOPE_STORE": str(tmp_path / "runs.sqlite")}
    proc = subprocess.run([sys.executable, "-c", _RUN, "trace", _TRACE, *args],
                          capture_output=True, text=True, timeout=120, check=False, env=env,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr
    rc, modules = json.loads(proc.stdout.strip().splitlines()[-1])
    loaded = set(modules)
    assert rc == 0 and {"numpy", "sqlite3", "bertscope.trace"} <= loaded  # it did the work
    assert not absent & loaded
    assert "platformdirs" not in loaded
