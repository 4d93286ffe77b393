"""Same numbers before and after a change: run a fixed set of CLI commands (ops, predict,
distributed, trace; several configs each, exports included) and compare what they print and
write with outputs captured before the change.

    python bench/golden.py capture   # writes bench/results/golden/<name>.txt
    python bench/golden.py check     # runs again, prints a diff per command that changed

Wall-clock figures (the layout search's "in N ms") are masked before comparing, and the
checkout's path is written as `{root}` (trace commands print their input's path), so the
outputs compare the same from any clone. Exports are
compared as text (CSV/JSON rows) after the printed output; columns an export gained since the
capture (new op-table columns) are dropped before comparing, so new columns pass and every old
value must be the same.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "bench" / "results" / "golden"
TRACES = ROOT / "tests" / "data" / "traces"

# name -> arguments of `bertscope`; "{out}" is replaced by an export path in a temp folder
COMMANDS: dict[str, list[str]] = {
    "ops_base": ["ops", "bert-base", "--batch", "4", "--seq", "128", "--output", "{out}.csv"],
    "ops_large_lamb": [
        "ops",
        "bert-large",
        "--batch",
        "32",
        "--seq",
        "128",
        "--precision",
        "bf16",
        "--optimizer",
        "lamb",
        "--top",
        "15",
    ],
    "ops_albert_ckpt": [
        "ops",
        "albert-base-v2",
        "--batch",
        "8",
        "--seq",
        "512",
        "--precision",
        "fp16",
        "--checkpoint", "full",
        "--micro-batches",
        "4",
        "--no-dropout",
        "--output",
        "{out}.json",
    ],
    "ops_roberta_mlm": [
        "ops",
        "roberta-base",
        "--batch",
        "16",
        "--seq",
        "256",
        "--masked-lm-only",
        "--optimizer",
        "sgd",
    ],
    "predict_large_a100": [
        "predict",
        "bert-large",
        "--device",
        "a100",
        "--precision",
        "bf16",
        "--batch",
        "64",
        "--seq",
        "128",
        "--output",
        "{out}.csv",
    ],
    "predict_base_v100_fusion": [
        "predict",
        "bert-base",
        "--device",
        "v100",
        "--precision",
        "fp16",
        "--optimizer",
        "lamb",
        "--fusion",
        "--top",
        "12",
    ],
    "predict_albert_h100": [
        "predict",
        "albert-large-v2",
        "--device",
        "h100",
        "--batch",
        "8",
        "--seq",
        "512",
        "--checkpoint", "full",
        "--micro-batches",
        "2",
    ],
    "predict_tpu": [
        "predict",
        "roberta-large",
        "--device",
        "tpu-v4",
        "--precision",
        "bf16",
        "--batch",
        "32",
        "--seq",
        "128",
        "--optimizer",
        "adamw",
    ],
    "dist_large_dp": [
        "distributed",
        "bert-large",
        "--devices",
        "8",
        "--device",
        "a100",
        "--precision",
        "bf16",
        "--global-batch",
        "256",
    ],
    "dist_large_tp_pp": [
        "distributed",
        "bert-large",
        "--devices",
        "16",
        "--device",
        "h100",
        "--precision",
        "bf16",
        "--global-batch",
        "512",
        "--tp",
        "2",
        "--pp",
        "2",
        "--micro-batches",
        "8",
        "--zero",
        "1",
        "--checkpoint",
        "selective",
        "--sp",
    ],
    "dist_base_interleaved": [
        "distributed",
        "bert-base",
        "--devices",
        "8",
        "--device",
        "v100",
        "--global-batch",
        "128",
        "--pp",
        "2",
        "--schedule",
        "interleaved",
        "--micro-batches",
        "8",
        "--precision",
        "fp16",
        "--optimizer",
        "lamb",
    ],
    "dist_error": [
        "distributed",
        "bert-base",
        "--devices",
        "8",
        "--device",
        "v100",
        "--precision",
        "bf16",
        "--global-batch",
        "128",
        "--pp",
        "4",
        "--schedule",
        "interleaved",
    ],
    "dist_search": [
        "distributed",
        "bert-large",
        "--devices",
        "16",
        "--device",
        "a100",
        "--precision",
        "bf16",
        "--global-batch",
        "256",
        "--search",
        "--top",
        "8",
        "--micro-batches",
        "4",
        "--output",
        "{out}.csv",
    ],
    "dist_search_tpu": [
        "distributed",
        "roberta-large",
        "--devices",
        "32",
        "--device",
        "tpu-v4",
        "--precision",
        "bf16",
        "--global-batch",
        "512",
        "--search",
        "--seq",
        "512",
    ],
    "trace_cuda": ["trace", str(TRACES / "cuda_bert_train.json.gz")],
    "trace_rocm_csv": ["trace", str(TRACES / "rocm_infer.json.gz"), "--output", "{out}.csv"],
    "trace_triton_json": ["trace", str(TRACES / "triton_compiled.json.gz"), "--format", "json"],
    "trace_multirank": ["trace", str(TRACES / "multirank"), "--top", "5"],
}

_MASKS = [(re.compile(r"layouts in \d+ ms"), "layouts in N ms")]


def run(name: str, args: list[str], tmp: Path) -> str:
    """What one command prints (stdout, then stderr) and writes, wall-clock figures masked."""
    out = str(tmp / name)
    argv = [a.replace("{out}", out) for a in args]
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb",
           "BERTSCOPE_STORE": "off"}  # no "recorded as run <id>" lines to differ
    proc = subprocess.run(
        [sys.executable, "-m", "bertscope.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
    )
    text = f"$ bertscope {' '.join(args)}\nexit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    for path in sorted(tmp.glob(f"{name}.*")):
        text += f"\n--- {path.suffix} export ---\n{path.read_text()}"
    text = text.replace(out, "{out}").replace(str(ROOT), "{root}")
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text


_SECTION = re.compile(r"\n--- \.(csv|json) export ---\n")


def _old_columns_only(before: str, after: str) -> str:
    """`after` with export columns that `before` lacks removed (CSV columns, JSON row keys)."""
    b_parts, a_parts = _SECTION.split(before), _SECTION.split(after)
    if len(b_parts) != len(a_parts):
        return after
    out = [a_parts[0]]
    for i in range(1, len(a_parts), 2):
        kind, b_text, a_text = a_parts[i], b_parts[i + 1], a_parts[i + 1]
        if kind == "csv":
            keep = next(csv.reader(io.StringIO(b_text)))
            rows = list(csv.DictReader(io.StringIO(a_text)))
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=keep, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
            a_text = buf.getvalue() if set(keep) <= set(rows[0] if rows else keep) else a_text
        else:
            b_doc, a_doc = json.loads(b_text), json.loads(a_text)
            keys = set(b_doc["rows"][0]) if b_doc.get("rows") else set()
            a_doc["rows"] = [{k: v for k, v in r.items() if k in keys} for r in a_doc["rows"]]
            a_text, b_text = json.dumps(a_doc, indent=1), json.dumps(b_doc, indent=1)
            b_parts[i + 1] = b_text
        out += [f"\n--- .{kind} export ---\n", a_text]
    return "".join(out)


def _json_stdout_as_export(text: str) -> str:
    """A command that printed JSON: its output marked as a JSON export section."""
    head, sep, body = text.partition("\n{")
    if sep and head.count("\n") == 1:
        try:  # a printed path starting "{root}/" is not JSON
            json.loads("{" + body)
        except ValueError:
            return text
        return f"{head}\n\n--- .json export ---\n{{{body}"
    return text


def _normalized_before(before: str) -> str:
    """`before` with JSON exports re-dumped the way `_old_columns_only` dumps them."""
    parts = _SECTION.split(before)
    out = [parts[0]]
    for i in range(1, len(parts), 2):
        text = parts[i + 1]
        if parts[i] == "json":
            text = json.dumps(json.loads(text), indent=1)
        out += [f"\n--- .{parts[i]} export ---\n", text]
    return "".join(out)


def main(mode: str) -> int:
    """capture: write the outputs; check: compare with them (exit 1 on any difference)."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    changed = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, args in COMMANDS.items():
            text = run(name, args, tmp)
            path = GOLDEN / f"{name}.txt"
            if mode == "capture":
                path.write_text(text)
                print(f"captured {name}")
                continue
            before = path.read_text()
            if text != before:
                before, text = _json_stdout_as_export(before), _json_stdout_as_export(text)
                text, before = _old_columns_only(before, text), _normalized_before(before)
            if text == before:
                print(f"same     {name}")
                continue
            changed += 1
            print(f"CHANGED  {name}")
            diff = difflib.unified_diff(
                before.splitlines(), text.splitlines(), "before", "after", lineterm="", n=1
            )
            print("\n".join(list(diff)[:60]))
    if mode == "check":
        print(
            f"{len(COMMANDS) - changed} of {len(COMMANDS)} commands print and write the "
            f"same as before"
        )
    return 1 if changed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("capture", "check"):
        sys.exit("usage: python bench/golden.py capture|check")
    sys.exit(main(sys.argv[1]))
