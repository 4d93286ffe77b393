"""Regenerate every command output shown in README.md and docs/**/*.md, so no number in the
docs is typed by hand.

A shown output is a marked region of a markdown file:

    <!-- out: KEY -->
    ```text
    $ bertscope ops bert-tiny --batch 2 --seq 32
    ...what the command printed...
    ```
    <!-- /out -->

KEY names an entry of `EXAMPLES` below: the command(s) it runs, which lines of their output
to show, and numbers that vary between runs (elapsed seconds) masked as `…`. The region's
contents are written by this script, never by hand.

    python docs/numbers.py            rewrite every region in place
    python docs/numbers.py --check    exit 1 (naming each stale region) if any differs
    python docs/numbers.py --measured also run the MEASURED examples (profiling: torch, slow,
                                      machine-dependent; never part of --check)

Every command runs in a fresh temporary folder (files it writes land there) with the
source tree of this checkout on PYTHONPATH, 100 columns, and the runs store off.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (this file is docs/numbers.py)."""
COLUMNS = 100
"""Terminal width the commands render for."""
WRAP = 92
"""A shown command longer than this is broken into `\\`-continued lines."""

Filter = Callable[[list[str]], list[str]]


def head(n: int) -> Filter:
    """Keep the first `n` lines (a `...` line says more followed)."""
    def keep(lines: list[str]) -> list[str]:
        return lines[:n] + (["..."] if len(lines) > n else [])
    return keep


def grep(*patterns: str, after: int = 0) -> Filter:
    """Keep the lines matching any regex of `patterns` (and `after` lines after each);
    a `...` line stands for each run of dropped lines."""
    rx = [re.compile(p) for p in patterns]

    def keep(lines: list[str]) -> list[str]:
        chosen: set[int] = set()
        for i, line in enumerate(lines):
            if any(r.search(line) for r in rx):
                chosen.update(range(i, min(i + after + 1, len(lines))))
        out: list[str] = []
        for i, line in enumerate(lines):
            if i in chosen:
                out.append(line)
            elif not out or out[-1] != "...":
                out.append("...")
        return out
    return keep


def everything(lines: list[str]) -> list[str]:
    """Keep every line."""
    return lines


def nothing(lines: list[str]) -> list[str]:
    """Show the command only (a set-up step whose output does not matter here)."""
    return []


FRAME = re.compile(r"^\s*[\u2500-\u257f][\s\u2500-\u257f]*$")
"""A table's frame line (top, header rule, bottom): dropped, so tables stay short."""

ELAPSED = (r"\b(in|took) [\d.,]+ ?(s|ms|µs)\b", r"\1 … s")
"""Wall-clock seconds a command reports about itself: they differ run to run."""

RUN_ID = (r"\b[0-9a-f]{8}\b", "1a2b3c4d")
"""A run's id in the runs store: random."""
WHEN = (r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b", "2026-01-01 12:00")
"""A run's time in the runs store."""


@dataclass(frozen=True)
class Step:
    """One command: `bertscope ARGS` (or `python -c` when `python` is set)."""

    args: str
    """The command line after `bertscope`, or Python source with `python`."""
    keep: Filter = everything
    """Which lines of its output to show."""
    python: bool = False
    """Run `args` as Python source (shown as a python block, its output below it)."""


@dataclass(frozen=True)
class Example:
    """A shown output: the steps run in order in one temporary folder."""

    steps: tuple[Step, ...]
    masks: tuple[tuple[str, str], ...] = field(default=(ELAPSED,))
    """(regex, replacement) pairs applied to every output line."""
    measured: bool = False
    """Needs torch and real training (slow, machine-dependent): only with --measured."""
    columns: int = COLUMNS
    """Terminal width the commands render for."""


def one(args: str, keep: Filter = everything, *, measured: bool = False,
        columns: int = COLUMNS) -> Example:
    """An example of a single `bertscope` command."""
    return Example((Step(args, keep),), measured=measured, columns=columns)


def _allowed_table() -> str:
    """The import rules as a markdown table, read from tests/unit/test_architecture.py's
    ALLOWED (the test is the rule; this is its picture)."""
    import importlib.util

    path = ROOT / "tests" / "unit" / "test_architecture.py"
    spec = importlib.util.spec_from_file_location("_arch_rules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    allowed: dict[str, set[str]] = module.ALLOWED
    ground: set[str] = getattr(module, "GROUND", set())
    rows = ["| package | may import (besides itself) |", "|---|---|"]
    for name, deps in allowed.items():
        names = sorted(deps - ground) if ground and ground <= deps else sorted(deps)
        if ground and ground <= deps:
            names = ["the ground floor", *names]
        shown = ", ".join(names) if names else "nothing"
        rows.append(f"| `{name}` | {shown} |")
    if ground:
        rows.append("")
        rows.append("The ground floor: " + ", ".join(f"`{g}`" for g in sorted(ground)) + ".")
    return "\n".join(rows)


GENERATED: dict[str, Callable[[], str]] = {"import-rules": _allowed_table}
"""Regions written by a function of this script rather than by running a command."""

EXAMPLES: dict[str, Example] = {
    # README: the tour (one small output per core command)
    "readme-study": one(
        "study --no-measure --models bert-base --device a100,h100 --precision bf16 "
        "--output study-bert-base",
        grep(r"^1\. ", after=2)),
    "readme-ops": one("ops bert-base --batch 8 --seq 128 --top 3", head(3)),
    "readme-predict": one(
        "predict bert-base --batch 8 --seq 128 --device a100 --precision bf16 --top 0",
        grep(r"^predicted iteration", r"^bound ", r"^┃ bound",
             r"^│ (compute|memory|overhead) ")),
    "readme-profile": one(
        "profile bert-tiny --batch 2 --seq 32 --iters 2 --top 3",
        grep(r"^bert-tiny", r"^iteration", r"^of the profiled", r"^┃ category", r"^│ gemm"),
        measured=True),
    "readme-trace": Example((
        Step("predict bert-base --batch 8 --seq 128 --device a100 --precision bf16 "
             "--timeline iter.json --top 0", nothing),
        Step("trace iter.json --by category --top 2", head(6)))),
    "readme-sweep": one(
        "sweep bert-base,bert-large --device a100,h100 --batch 8,32 --seq 128,512 "
        "--precision bf16 --top 2", columns=120),
    "readme-distributed": one(
        "distributed bert-large --devices 32 --device a100 --global-batch 256 --tp 2 --pp 4 "
        "--micro-batches 8 --precision bf16", grep(r"^Layout", after=1)),
    # guides
    "study-findings": one(  # the README's study, more of its findings
        "study --no-measure --models bert-base --device a100,h100 --precision bf16 "
        "--output study-bert-base",
        grep(r"^[2-9]\. ", r"^1[01]\. ", r"^wrote ", after=2)),
    "models": one("models", head(10)),
    "devices": one("devices", head(8), columns=160),
    "ops-t5": one("ops t5-small --seq 512 --decoder-seq 114 --top 3", head(3)),
    "ops-llama": one("ops llama3-8b --batch 1 --seq 8192 --precision bf16 --attention sdpa "
                     "--top 0", head(3)),
    "predict-bound": one(
        "predict bert-large --batch 32 --seq 512 --device h100 --precision bf16 --top 0",
        grep(r"^predicted iteration", r"^By category", r"^By bound", after=6)),
    "predict-fusion": one(
        "predict bert-large --batch 32 --seq 512 --device h100 --precision bf16 --fusion "
        "--top 0", grep(r"^predicted iteration", r"[Ff]us", after=1)),
    "trace-modules": one("trace tests/data/traces/hf/bert_cpu_train.json.gz --by module",
                         head(14)),
    "trace-cuda": one("trace tests/data/traces/cuda_bert_train.json.gz --by category",
                      head(12)),
    "sweep-layouts": one(
        "sweep bert-large --device h100 --batch 8,32 --seq 512 --micro-batches 4 "
        "--precision bf16 --dp 1,4,16 --tp 1,2,4 --pp 1,2 --zero 0,1 "
        "--sort tokens_per_s_per_device --top 3", columns=120),
    "sweep-knobs": one(
        "sweep bert-base --device a100 --batch 32 --seq 128 --precision bf16 "
        "--gemm-peak 1,2 --bandwidth 1,2 --top 4", columns=120),
    "sweep-dims": one(
        "sweep bert-base --device h100 --hidden 768,1024,2048 --heads 16 --batch 16 --top 3",
        columns=120),
    "distributed-search": one(
        "distributed bert-large --devices 32 --device a100 --global-batch 256 "
        "--precision bf16 --search --top 3", grep(r"^searched", r"^Best layout", after=1)),
    "distributed-gpt3": one(
        "distributed gpt3-175b --seq 2048 --precision bf16 --devices 1024 --device a100 "
        "--global-batch 1536 --tp 8 --pp 16 --dp 8 --micro-batches 192 --checkpoint full",
        grep(r"^Layout", r"^│ (compute|pipeline bubble|iteration)", after=1)),
    "distributed-segment-memory": one(
        "distributed txl-wt103-large --device a100 --devices 8 --global-batch 64",
        grep(r"^│ (activations|segment memory|total)")),
    "runs-list": Example((
        Step("predict bert-base --batch 8 --seq 128 --device a100 --top 0 --store runs.sqlite",
             grep(r"^recorded as run")),
        Step("runs list --store runs.sqlite")),
        masks=(ELAPSED, RUN_ID, WHEN)),
    "api-ops": Example((Step(
        "import bertscope\n"
        "t = bertscope.ops(\"bert-base\", batch=8, seq=128, precision=\"bf16\")\n"
        "print(t.by_category()[[\"flops\", \"bytes\"]].head(3))\n",
        python=True),)),
    "api-sweep": Example((Step(
        "import bertscope\n"
        "g = bertscope.sweep([\"bert-base\", \"bert-large\"], [\"a100\", \"h100\"],\n"
        "                    batch=[8, 32], seq=[128, 512], precision=[\"bf16\"])\n"
        "print(g.frame.nlargest(3, \"tokens_per_s\")[[\"model\", \"device\", \"batch\", "
        "\"seq\", \"tokens_per_s\"]].to_string(index=False))\n",
        python=True),)),
}
"""Every shown output, by the KEY its region names."""

MARK = re.compile(r"<!-- out: (?P<key>[\w-]+) -->\n(?P<body>.*?)<!-- /out -->", re.S)


def _env(columns: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update(COLUMNS=str(columns), LINES="50", BERTSCOPE_STORE="off", NO_COLOR="1",
               TERM="dumb", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    env.pop("FORCE_COLOR", None)
    return env


def _show(args: str) -> str:
    """`$ bertscope ARGS`, broken into `\\` lines of at most WRAP characters."""
    words = [shlex.quote(w) for w in shlex.split(args)]
    pieces: list[str] = []  # an option and its value stay on one line
    for word in words:
        if pieces and pieces[-1].startswith("--") and " " not in pieces[-1] \
                and not word.startswith("--"):
            pieces[-1] += " " + word
        else:
            pieces.append(word)
    lines, line = [], "$ bertscope"
    for piece in pieces:
        if len(line) + 1 + len(piece) > WRAP:
            lines.append(line + " \\")
            line = "    " + piece
        else:
            line += " " + piece
    return "\n".join([*lines, line])


def _run(step: Step, cwd: Path, columns: int) -> list[str]:
    """The step's output lines (stdout, then stderr); an error names the command."""
    for name in ("tests", "examples"):  # paths in the shown commands resolve in the folder
        if not (cwd / name).exists():
            (cwd / name).symlink_to(ROOT / name)
    argv = ([sys.executable, "-c", step.args] if step.python
            else [sys.executable, "-m", "bertscope.cli", *shlex.split(step.args)])
    done = subprocess.run(argv, cwd=cwd, env=_env(columns), capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{step.args}` exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    text = done.stdout + done.stderr
    return [line.rstrip() for line in text.rstrip("\n").splitlines()
            if not FRAME.match(line)]


def render(key: str, outputs: dict[tuple[int, str], list[str]] | None = None) -> str:
    """The text of region KEY (without its markers), produced now. `outputs` keeps each
    command's output for other regions that show the same command (one run per check)."""
    if key in GENERATED:
        return GENERATED[key]() + "\n"
    example = EXAMPLES[key]
    outputs = {} if outputs is None else outputs
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bertscope-docs-") as tmp:
        shown: list[str] = []
        keys = [(example.columns, "\n".join(s.args for s in example.steps[:i + 1]))
                for i in range(len(example.steps))]
        if not all(k in outputs for k in keys):  # later steps read earlier steps' files
            for k, step in zip(keys, example.steps, strict=True):
                outputs[k] = _run(step, Path(tmp), example.columns)
        for k, step in zip(keys, example.steps, strict=True):
            lines = step.keep(outputs[k])
            for pattern, repl in example.masks:
                lines = [re.sub(pattern, repl, line) for line in lines]
            if step.python:
                out += ["```python", step.args.rstrip("\n"), "```"]
                out += ["```text", *lines, "```"]
            else:
                shown += [_show(step.args), *lines]
        if shown:
            out += ["```text", *shown, "```"]
    return "\n".join(out) + "\n"


def pages() -> list[Path]:
    """The markdown files that may hold regions: README.md and docs/**/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def regions(text: str) -> list[str]:
    """The KEYs of the regions of a page, in order."""
    return [m.group("key") for m in MARK.finditer(text)]


class Session:
    """Regions and command outputs rendered so far (each command runs once per session)."""

    def __init__(self) -> None:
        self.regions: dict[str, str] = {}
        self.outputs: dict[tuple[int, str], list[str]] = {}


def update(text: str, *, measured: bool = False, session: Session | None = None) -> str:
    """The page with every region rewritten (MEASURED ones only with `measured`)."""
    session = Session() if session is None else session
    cache = session.regions

    def fill(m: re.Match[str]) -> str:
        key = m.group("key")
        if key not in EXAMPLES and key not in GENERATED:
            raise KeyError(f"unknown docs region {key!r} (add it to docs/numbers.py)")
        if key in EXAMPLES and EXAMPLES[key].measured and not measured:
            return m.group(0)
        if key not in cache:
            cache[key] = render(key, session.outputs)
        return f"<!-- out: {key} -->\n{cache[key]}<!-- /out -->"
    return MARK.sub(fill, text)


def stale(files: Iterable[Path] | None = None) -> list[str]:
    """'FILE: KEY' of every region (MEASURED ones aside) whose text is not what its
    command prints now."""
    session = Session()
    out = []
    for path in pages() if files is None else files:
        text = path.read_text()
        fresh = update(text, session=session)
        if fresh != text:
            old = dict(zip(regions(text), [m.group(0) for m in MARK.finditer(text)],
                           strict=True))
            new = dict(zip(regions(fresh), [m.group(0) for m in MARK.finditer(fresh)],
                           strict=True))
            name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
            out += [f"{name}: {k}" for k in old if old[k] != new.get(k)]
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite the regions, or with --check report the stale ones (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if any region is stale")
    parser.add_argument("--measured", action="store_true",
                        help="also run the measured (profiling) examples")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for line in bad:
            print(f"stale: {line}", file=sys.stderr)
        if bad:
            print("run: python docs/numbers.py", file=sys.stderr)
        return 1 if bad else 0
    session = Session()
    for path in pages():
        text = path.read_text()
        fresh = update(text, measured=args.measured, session=session)
        if fresh != text:
            path.write_text(fresh)
            print(f"updated {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    # this file's folder is first on sys.path when run as a script, where its name would
    # shadow the standard library's `numbers` for modules imported later (pytest's)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "docs"]
    sys.exit(main())
