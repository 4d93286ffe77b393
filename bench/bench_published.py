"""Published training throughputs beside bertscope's prediction of the same configuration, every
entry run through the public CLI (`bertscope predict` on one device, `bertscope distributed` on
more) as a user would run it.

    PYTHONPATH=src python bench/bench_published.py --write

The figures, their citations, the exact settings and the recipe each corresponds to are in
bench/published_figures.toml. NOTHING is fitted to them: the prediction uses the catalog's
efficiency models (first principles, cited microbenchmarks, assumed defaults; its `sources:`
line says which). Each published figure is converted to tokens/s per device with the source's
own arithmetic (its unit, below); the error is predicted / published - 1.

The recipe: when the CLI accepts `--recipe` (detected from `distributed --help`), the entry's
recipe is passed and only the entry's explicit overrides (its `attention`, `chain_fusion`)
are added; until
then the recipe is spelled out as the options that exist (`RECIPE_FLAGS`).

`--write` also writes bench/results/bench_published.txt with its command in the header.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "bench" / "published_figures.toml"
RESULT = ROOT / "bench" / "results" / "bench_published.txt"

REQUIRED = ("id", "source", "where", "device", "devices", "model", "seq", "global_batch",
            "micro_batch", "dp", "tp", "pp", "precision", "recipe", "published", "unit")
"""Keys every [[figure]] carries."""
RECIPES = ("eager", "fused", "megatron")
UNITS = ("sequences/s", "tokens/s/device", "iteration_s", "TFLOP/s/device (Narayanan eq. 3)",
         "MFU (PaLM appendix B)")

RECIPE_FLAGS: dict[str, tuple[str, ...]] = {
    "eager": (),
    "fused": ("--fusion", "--attention", "fused-softmax"),
    "megatron": ("--fusion", "--attention", "sdpa"),
}
"""The recipe as the CLI's existing options, used only while the CLI has no `--recipe`:
eager = the defaults; fused = fused elementwise chains and optimizer, one fused softmax;
megatron = fused chains and a flash-style attention kernel (plus `OVERLAPS` on
`distributed`)."""

OVERLAPS = ("overlap_tp_comm", "overlap_grad_reduce", "overlap_param_gather")
"""Communication-overlap switches of `distributed`: the megatron recipe turns them on; a
figure may set any of them (true/false) where its source says what it overlapped."""


def load(path: Path = FIGURES) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The sources and figures of a published-figures file, checked: every figure has the
    REQUIRED keys, a known source, recipe and unit, and dp x tp x pp = devices."""
    data = tomllib.loads(path.read_text())
    sources, figures = data.get("sources", {}), data.get("figure", [])
    seen: set[str] = set()
    for f in figures:
        missing = [k for k in REQUIRED if k not in f]
        if missing:
            raise ValueError(f"{path}: figure {f.get('id', '?')} lacks {', '.join(missing)}")
        if f["id"] in seen:
            raise ValueError(f"{path}: figure id {f['id']} appears twice")
        seen.add(f["id"])
        if f["source"] not in sources:
            raise ValueError(f"{path}: figure {f['id']} names unknown source {f['source']}")
        if f["recipe"] not in RECIPES or f["unit"] not in UNITS:
            raise ValueError(f"{path}: figure {f['id']}: recipe {f['recipe']!r} or unit "
                             f"{f['unit']!r} unknown")
        if f["dp"] * f["tp"] * f["pp"] != f["devices"]:
            raise ValueError(f"{path}: figure {f['id']}: dp x tp x pp != devices")
    return sources, figures


@dataclass(frozen=True)
class Dims:
    """The sizes the sources' own FLOP formulas read (from the model's config)."""

    layers: int
    hidden: int
    heads: int
    head_size: int
    intermediate: int
    vocab: int
    tied: bool


def dims(model: str) -> Dims:
    """The model's sizes, read by bertscope's config reader (sizes only, no FLOP counting)."""
    from bertscope.presets import get_model

    m = get_model(model if not model.endswith(".json") else str(ROOT / model))
    head = getattr(m, "head_size", None) or m.hidden // m.heads
    return Dims(m.num_layers, m.hidden, m.heads, head, m.intermediate, m.vocab_size,
                bool(getattr(m, "tie_word_embeddings", True)))


def narayanan_flops_per_token(d: Dims, seq: int) -> float:
    """Narayanan et al. 2021 eq. (3) per token: F / (B s) = 96 l h^2 (1 + s/6h + V/16lh)."""
    layers, h, v = d.layers, d.hidden, d.vocab
    return 96 * layers * h * h * (1 + seq / (6 * h) + v / (16 * layers * h))


def palm_flops_per_token(d: Dims, seq: int) -> float:
    """PaLM appendix B as MaxText counted it: 6 N + 6 l H d s (causal attention halved), N
    every weight (attention 4 h Hd, a two-matrix MLP 2 h f, embeddings V h, x2 untied)."""
    hd = d.heads * d.head_size
    n = d.layers * (4 * d.hidden * hd + 2 * d.hidden * d.intermediate)
    n += d.vocab * d.hidden * (1 if d.tied else 2)
    return 6 * n + 6 * d.layers * hd * seq


def published_tokens_per_device(f: dict[str, Any]) -> float:
    """The published figure as tokens/s per device, by the source's own arithmetic."""
    unit, value, seq, n = f["unit"], float(f["published"]), f["seq"], f["devices"]
    if unit == "sequences/s":
        return value * seq / n
    if unit == "tokens/s/device":
        return value
    if unit == "iteration_s":
        return f["global_batch"] * seq / value / n
    if unit == "TFLOP/s/device (Narayanan eq. 3)":
        return value * 1e12 / narayanan_flops_per_token(dims(f["model"]), seq)
    if unit == "MFU (PaLM appendix B)":
        from bertscope.hardware import load_device

        peak = load_device(f["device"]).peak_flops(f["precision"])
        return value * peak / palm_flops_per_token(dims(f["model"]), seq)
    raise ValueError(f"unknown unit {unit!r}")


def accepts_recipe() -> bool:
    """Whether the CLI has `--recipe` (another change adds it)."""
    out = _cli(["distributed", "--help"], check=False)
    return "--recipe" in out


def cli_args(f: dict[str, Any], recipe: bool) -> list[str]:
    """The `bertscope` command line of one figure (without the program name)."""
    model = f["model"] if not f["model"].endswith(".json") else str(ROOT / f["model"])
    device = f["device"] if not f["device"].endswith(".toml") else str(ROOT / f["device"])
    mb, dp = f["micro_batch"], f["dp"]
    steps = f["global_batch"] // (mb * dp)
    if steps * mb * dp != f["global_batch"]:
        raise ValueError(f"{f['id']}: global batch is not micro-batch x dp x a whole number")
    common = ["--device", device, "--batch", str(mb), "--micro-batches", str(steps),
              "--seq", str(f["seq"]), "--precision", f["precision"]]
    if "optimizer" in f:
        common += ["--optimizer", f["optimizer"]]
    if f.get("masked_lm_only"):
        common.append("--masked-lm-only")
    if f.get("checkpoint", "none") != "none":
        common += ["--checkpoint", f["checkpoint"]]
    if recipe:
        common += ["--recipe", f["recipe"]]
        if "attention" in f:  # the source's own kernel, over the recipe's
            common += ["--attention", f["attention"]]
    else:
        flags = list(RECIPE_FLAGS[f["recipe"]])
        if "attention" in f:  # the source's own kernel, over the recipe's
            if "--attention" in flags:
                del flags[flags.index("--attention"):flags.index("--attention") + 2]
            flags += ["--attention", f["attention"]]
        common += flags
    if "chain_fusion" in f:  # the source's own stack (DLE 21.11, XLA), over the recipe's
        common.append("--chain-fusion" if f["chain_fusion"] else "--no-chain-fusion")
    if f["devices"] == 1:
        return ["predict", model, *common, "--no-store", "--top", "0"]
    args = ["distributed", model, *common, "--devices", str(f["devices"]), "--dp", str(dp),
            "--tp", str(f["tp"]), "--pp", str(f["pp"]), "--zero", str(f.get("zero", 0))]
    for key in OVERLAPS:  # the figure's own setting, else the recipe's (on for megatron)
        on = f.get(key, None if recipe else f["recipe"] == "megatron")
        if on is not None:
            args.append(f"--{'' if on else 'no-'}{key.replace('_', '-')}")
    if "sp" in f:  # the source's own setting, over the recipe's default (megatron: on)
        args.append("--sp" if f["sp"] else "--no-sp")
    if f["pp"] > 1:
        args += ["--schedule", f.get("schedule", "1f1b")]
        if f.get("virtual_stages"):
            args += ["--virtual-stages", str(f["virtual_stages"])]
    return args


def _cli(args: list[str], *, check: bool = True) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "400"}
    p = subprocess.run([sys.executable, "-m", "bertscope.cli", *args], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    if check and p.returncode != 0:
        raise RuntimeError(f"bertscope {' '.join(args)}: {p.stderr.strip() or p.stdout[-400:]}")
    return p.stdout + p.stderr


_SI = {"k": 1e3, "": 1.0, "m": 1e-3, "µ": 1e-6, "u": 1e-6}
_ITERATION = re.compile(r"iteration (\d+(?:\.\d+)?) (k|m|µ|u)?s\b")


def iteration_seconds(text: str) -> float:
    """The predicted iteration time the CLI printed ("predicted iteration 64.9 ms" or
    "iteration 81.9 ms,")."""
    m = _ITERATION.search(text)
    if m is None:
        raise ValueError(f"no iteration time in the CLI output: {text[:300]!r}")
    return float(m.group(1)) * _SI[m.group(2) or ""]


@dataclass(frozen=True)
class Row:
    """One figure: published and predicted tokens/s per device."""

    figure: dict[str, Any]
    published: float
    predicted: float
    fits: bool
    command: str

    @property
    def error(self) -> float:
        """predicted / published - 1."""
        return self.predicted / self.published - 1


def run(figure: dict[str, Any], recipe: bool) -> Row:
    """Predict one figure through the CLI."""
    args = cli_args(figure, recipe)
    out = _cli(args)
    seconds = iteration_seconds(out)
    tokens = figure["global_batch"] * figure["seq"]
    return Row(figure, published_tokens_per_device(figure), tokens / seconds / figure["devices"],
               "does not fit" not in out, "bertscope " + " ".join(
                   a.replace(str(ROOT) + "/", "") for a in args))


def report(rows: list[Row], recipe: bool) -> list[str]:
    """The table and its summary."""
    spelled = "; ".join(f"{k} = {' '.join(v) or 'defaults'}" for k, v in RECIPE_FLAGS.items())
    lines = ["recipe: passed as --recipe" if recipe
             else f"recipe: the CLI has no --recipe yet, spelled out as {spelled}",
             f"{'id':44} {'device':9} {'n':>5} {'prec':5} {'recipe':8} {'published':>10} "
             f"{'predicted':>10} {'unit':>6} {'error':>7}  fits"]
    for r in rows:
        f = r.figure
        dev = Path(f["device"]).stem.replace("a100-sxm4-40gb", "a100-40gb")
        lines.append(f"{f['id']:44} {dev:9} {f['devices']:>5} {f['precision']:5} "
                     f"{f['recipe']:8} {r.published:10.0f} {r.predicted:10.0f} {'tok/s':>6} "
                     f"{100 * r.error:+6.1f}%  {'yes' if r.fits else 'NO'}")
    errs = [abs(r.error) for r in rows]
    by_source: dict[str, list[float]] = {}
    for r in rows:
        by_source.setdefault(r.figure["source"], []).append(r.error)
    lines.append(f"# {len(rows)} figures from {len(by_source)} sources: median |error| "
                 f"{100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}% "
                 f"({max(rows, key=lambda r: abs(r.error)).figure['id']}); within 10%: "
                 f"{sum(e <= 0.10 for e in errs)}, within 20%: {sum(e <= 0.20 for e in errs)}")
    for src, es in by_source.items():
        mid = 100 * statistics.median(es)
        lines.append(f"#   {src:22} n={len(es):2}  median error {mid:+6.1f}%"
                     f"  range {100 * min(es):+6.1f}% .. {100 * max(es):+6.1f}%")
    lines.append("# tokens/s per device; error = predicted / published - 1; published converted "
                 "with the source's own arithmetic (bench/published_figures.toml, unit_note)")
    return lines


def main() -> None:
    """Run every figure (or those named) and print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="figure ids to run")
    ap.add_argument("--write", action="store_true", help=f"also write {RESULT.relative_to(ROOT)}")
    ap.add_argument("--commands", action="store_true", help="print each CLI command")
    opts = ap.parse_args()
    _, figures = load()
    if opts.only:
        figures = [f for f in figures if f["id"] in set(opts.only)]
    recipe = accepts_recipe()
    rows = []
    for f in figures:
        row = run(f, recipe)
        rows.append(row)
        if opts.commands:
            print(f"$ {row.command}")
    lines = report(rows, recipe)
    print("\n".join(lines))
    if opts.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT).stdout.strip()
        header = [f"# bench_published: made at {commit}",
                  "$ PYTHONPATH=src python bench/bench_published.py --write",
                  "# Published training throughputs (bench/published_figures.toml) vs bertscope's "
                  "prediction through the public CLI.",
                  "# NOTHING is fitted to these figures: the efficiency models are first "
                  "principles, cited microbenchmarks or assumed defaults.",
                  "# Each row's CLI command: bench/bench_published.py --commands."]
        RESULT.write_text("\n".join(header + lines) + "\n")
    if any(not math.isfinite(r.predicted) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
