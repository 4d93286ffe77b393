"""The layout rules of docs/architecture.md, enforced.

- Who may import whom: `ALLOWED` (per top-level package; imports inside functions included),
  torch only where measuring happens (`TORCH_OK`), absolute imports only.
- No import cycles among `src/bertscope` modules (`test_no_import_cycles`). The graph has an
  edge for every import a module can run: module-level and function-level alike
  (`if TYPE_CHECKING:` blocks excluded: they never run); `from a import b` where `a.b` is a
  module is an import of `a.b`; relative imports resolved. Importing `bertscope.a.b` runs
  `bertscope/a/__init__.py` first, so it is an edge to the package `bertscope.a` too: a
  package `__init__` that re-exports its submodules is part of the graph, and
  `from bertscope.perf import predict` imports both `bertscope.perf` and
  `bertscope.perf.predict`. Only a module's own enclosing packages are exempt as the implied
  parents of what it imports (they are initialised before it); naming one is an edge like any
  other (`import bertscope`, or `from bertscope.perf import X` in perf/ where X is no
  submodule: it reads a namespace that may be half built). A lazy name of the front door
  (`bertscope._LAZY`, PEP 562), used as `from bertscope import study` or `bertscope.study`,
  is an edge to the module that defines it (the front door itself imports nothing).
  A cycle is fixed by moving the shared concept into the module it belongs to, never by
  hiding an import in a function.
- Imports sit at module level, except lazy optional heavy dependencies at the package edges
  (torch, matplotlib, pyarrow, transformers, ...), kept lazy so that importing a module stays
  cheap (tests/unit/test_lazy_imports.py, test_torch_free.py).
- One concept per module, named for it: a file over ~600 lines means look again
  (`test_no_source_file_over_600_lines`); no op-name matching in the distributed model.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "bertscope"

GROUND = {"config", "family", "families", "presets", "hf_config", "job", "taxonomy", "optable",
          "io", "errors", "lazyre", "stop", "bounded", "paths", "requirements", "packing",
          "recipes", "cluster"}
ALLOWED: dict[str, set[str]] = {
    # the ground floor knows no producer, consumer or screen
    "errors": set(),
    # which optional library a feature needs, and the pip command (checked before work)
    "requirements": {"errors"},
    "io": {"errors", "requirements"},
    "bounded": {"errors", "io"},
    "paths": {"errors"},
    "lazyre": set(),
    "stop": set(),  # the stop protocol: signals, partial results, children
    # where work runs: in-process, local worker processes, or a Dask cluster
    "cluster": {"errors", "requirements", "stop"},
    # the family specs are data (the code they name is resolved on use); Family is built
    # from them; presets and the config.json reader build on config's classes
    "families": {"errors"},
    "family": {"families"},
    # real sequence lengths: padded, unpadded, packed (RunConfig's fields read them)
    "packing": {"errors"},
    # training recipes are data files of job defaults (read here, checked by their fields'
    # owners: config for the run's, job for the layout's)
    "recipes": {"errors", "bounded"},
    "config": {"errors", "io", "family", "packing", "recipes"},
    "hf_config": {"config", "errors", "io", "bounded", "families"},
    "presets": {"config", "errors", "hf_config"},
    # the job: model + run + layout, declared once
    "job": {"config", "errors", "recipes"},
    "taxonomy": {"errors", "io", "bounded", "lazyre"},
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


def _imports(path: Path, *, in_functions: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every import in a file (with `in_functions`, of those inside
    functions only), relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    scopes = [f for f in ast.walk(tree) if isinstance(f, functions)] if in_functions else [tree]
    out = []
    for node in (n for scope in scopes for n in ast.walk(scope)):
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
def test_no_source_file_over_600_lines(path: Path) -> None:
    # one concept per module; over ~600 lines means look again (is it two concepts?), not
    # "cut it in two": a split by line count (`*_more.py`) is no split by concept
    lines = len(path.read_text().splitlines())
    assert lines <= 600, f"{path.relative_to(SRC)} has {lines} lines: look again"


EDGES = {"cli", "studies"}
"""Packages whose functions may import bertscope modules on use: each command imports its
heavy modules when it runs (start-up time; `bertscope trace` and `ops` stay free of pandas and
torch, tests/unit/test_lazy_imports.py), and the studies import the torch side (measure/)
only when they measure."""


@pytest.mark.parametrize("path", [p for p in FILES if _package(p) not in EDGES],
                         ids=lambda p: str(p.relative_to(SRC)))
def test_bertscope_modules_are_imported_at_module_level(path: Path) -> None:
    # a function-level import of a bertscope module hides the graph (and usually a circle):
    # outside the package edges (EDGES) every bertscope import is at module level; lazy
    # imports of heavy optional libraries (torch, matplotlib, pyarrow, transformers, pandas)
    # stay allowed everywhere
    hidden = [f"line {line}: {module}" for line, module in _imports(path, in_functions=True)
              if module == "bertscope" or module.startswith("bertscope.")]
    assert not hidden, f"{path.relative_to(SRC)}: " + "; ".join(hidden)


def test_no_module_named_for_a_line_cap() -> None:
    # a file named for where another one ran out of lines (`hf_more.py`, `sections_more.py`)
    # is no concept: fold it into its concept's module or a package of named modules
    capped = [str(p.relative_to(SRC)) for p in FILES
              if p.stem.endswith(("_more", "_extra", "_rest")) or "_part" in p.stem]
    assert not capped, f"named for a line cap, not a concept: {capped}"


# --- the import graph -------------------------------------------------------------------

def _module_name(path: Path, root: Path) -> str:
    """`bertscope.a.b` of root/a/b.py (`bertscope.a` of root/a/__init__.py)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runs(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` that can run: the bodies of `if TYPE_CHECKING:` left out (their
    `else` kept)."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            stack += node.orelse
            continue
        out.append(node)
        stack += ast.iter_child_nodes(node)
    return out


def _enclosing(module: str) -> set[str]:
    """The packages enclosing `module` (`a`, `a.b` of `a.b.c`)."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph(root: Path = SRC, lazy: dict[str, str] | None = None
                 ) -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line}, over the modules under `root` (see the
    module docstring for what is an edge). `lazy`: the front door's PEP 562 table (name ->
    module); default `bertscope._LAZY`."""
    if lazy is None:
        import bertscope

        lazy = bertscope._LAZY
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    top = root.name
    graph: dict[str, dict[str, int]] = {m: {} for m in paths}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        own = _enclosing(module)
        for node in _runs(ast.parse(path.read_text(), str(path))):
            named: list[str] = []  # the modules the statement imports
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == top and node.attr in lazy):  # `bertscope.study`
                named = [lazy[node.attr]]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in paths:
                        named.append(sub)
                    elif base == top and alias.name in lazy:
                        named.append(lazy[alias.name])
                    else:  # a name base's module (or package __init__) defines
                        named.append(base)
            for target in named:
                if target.split(".")[0] != top:
                    continue
                hits = {target} | (_enclosing(target) - own)
                for hit in hits & set(paths) - {module}:
                    graph[module].setdefault(hit, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The strongly connected components of `graph` with more than one module (Tarjan): each
    holds every module on some cycle through any of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def name_cycle(graph: dict[str, dict[str, int]], component: frozenset[str]) -> str:
    """A shortest cycle through the first module of `component`, with the line of each
    import: "a -> b (a:12) -> a (b:3)"."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first, inside the component, until back at start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in component and w not in previous:
                    previous[w] = v
                    nxt.append(w)
        if start in previous:
            break
        frontier = nxt
    path = [start]
    while len(path) == 1 or path[-1] != start:
        path.append(previous[path[-1]])
    path.reverse()
    named = path[0] + "".join(f" -> {b} ({a.rpartition('.')[2]}:{graph[a][b]})"
                              for a, b in itertools.pairwise(path))
    rest = sorted(component - set(path))
    return named + (f" [and {len(rest)} more on cycles with them: {', '.join(rest)}]"
                    if rest else "")


KNOWN_CYCLES: set[frozenset[str]] = set()
"""Import cycles tolerated for now: none (the test fails on any cycle, and on a listed one
that changed or disappeared, so this cannot go stale)."""


def cycle_problems(graph: dict[str, dict[str, int]], known: set[frozenset[str]]) -> list[str]:
    """Each cycle of `graph` not in `known`, named, and each of `known` that is no longer a
    cycle of `graph` (exactly: a known knot that grew or shrank is both)."""
    found = set(cycles(graph))
    return [*(f"import cycle: {name_cycle(graph, c)}" for c in sorted(found - known, key=min)),
            *(f"KNOWN_CYCLES lists {sorted(c)}, no longer a cycle as such: update the list"
              for c in sorted(known - found, key=min))]


def test_no_import_cycles() -> None:
    problems = cycle_problems(import_graph(), KNOWN_CYCLES)
    assert not problems, "\n".join(problems)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The graph builder finds function-level, submodule, relative and package imports and
    skips TYPE_CHECKING ones, so the cycle test above can fail."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg.sub import b\n",  # function level, submodule
        "sub/__init__.py": "from .c import C\n",  # relative, re-export
        "sub/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
                    "else:\n    import pkg.d\n",
        "sub/c.py": "from pkg.sub import b\nC = 1\n",  # own package: no edge to pkg.sub
        "d.py": "from pkg import sub\n",
        "e.py": "from pkg.sub import C\n",  # a name of sub/__init__
        "f.py": "import pkg\nfrom pkg import g\nX = pkg.thing\n",  # lazy names
        "g.py": "",
        "h.py": "",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    lazy = {"thing": "pkg.h", "unused": "pkg.a"}
    graph = import_graph(root, lazy=lazy)
    assert {m: set(e) for m, e in graph.items()} == {
        "pkg": set(),
        "pkg.a": {"pkg.sub", "pkg.sub.b"},
        "pkg.sub": {"pkg.sub.c"},
        "pkg.sub.b": {"pkg.d"},
        "pkg.sub.c": {"pkg.sub.b"},
        "pkg.d": {"pkg.sub"},
        "pkg.e": {"pkg.sub"},
        "pkg.f": {"pkg", "pkg.g", "pkg.h"},
        "pkg.g": set(),
        "pkg.h": set(),
    }
    # sub -> sub.c -> sub.b -> d -> sub: one cycle, named from its first module
    assert cycles(graph) == [frozenset({"pkg.d", "pkg.sub", "pkg.sub.b", "pkg.sub.c"})]
    assert name_cycle(graph, cycles(graph)[0]) == \
        "pkg.d -> pkg.sub (d:1) -> pkg.sub.c (sub:1) -> pkg.sub.b (c:1) -> pkg.d (b:5)"
    # b now imports a, whose import of sub.b is in a function: a knot without d
    (root / "sub/b.py").write_text("import pkg.a\n")
    graph = import_graph(root, lazy={})
    assert set(graph["pkg.sub.b"]) == {"pkg.a"}
    knot = frozenset({"pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c"})
    assert cycles(graph) == [knot]
    # the allowance is exact: a listed knot passes, a stale or changed listing fails
    assert cycle_problems(graph, {knot}) == []
    assert cycle_problems(graph, set()) == [
        "import cycle: pkg.a -> pkg.sub.b (a:2) -> pkg.a (b:1) [and 2 more on cycles with "
        "them: pkg.sub, pkg.sub.c]"]
    stale = frozenset({"pkg.d", "pkg.e"})
    assert cycle_problems(graph, {knot, stale}) == [
        "KNOWN_CYCLES lists ['pkg.d', 'pkg.e'], no longer a cycle as such: update the list"]
    assert len(cycle_problems(graph, {knot - {"pkg.a"}})) == 2  # changed: new and stale


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
