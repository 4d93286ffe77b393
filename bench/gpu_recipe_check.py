"""Predicted vs measured for the GPU runs of bench/gpu_checks.sh (issue #31), without torch.

Reads the profile results (`*.json`) and their shape-recorded traces (`*.trace.json.gz`) that
the script recorded, then, through the public CLI:
  1. `calibrate --from-trace` on every trace (one device profile fitted to all runs), and on
     all runs but one (leave-one-out: the held-out run's prediction is out of sample);
  2. `predict` of each run with the catalog device (`--device CATALOG`), the all-trace fit,
     the leave-one-out fit and the device's own microbenchmark profile when present;
  3. prints measured vs predicted iteration time per run and source, and the time shares of
     GEMMs / batched GEMMs / the rest, measured vs predicted.

Usage:  python bench/gpu_recipe_check.py DIR|BUNDLE [--catalog h200]
DIR holds what gpu_checks.sh wrote, its archives unpacked. BUNDLE is the .json.gz that keeps
one such run's results without its traces (bench/results/gpu_recipe_check.json.gz, made with
--bundle DIR OUT): runs without a trace beside them are predicted from the catalog and the
microbenchmark profile only."""
from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's
from bertscope.cli import main as bertscope

GEMM = {"gemm"}
BATCHED = {"batched_gemm"}


def _cli(*args: str) -> None:
    """Run `bertscope ARGS` in this process, its printout dropped (results go to --output
    files), recording nothing; fail loudly."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = bertscope(list(args))
    if rc != 0:
        raise SystemExit(f"bertscope {' '.join(args)} failed: {err.getvalue().strip()[-400:]}")


def _stem(p: Path) -> str:
    """A result's name without .json or .json.gz."""
    return p.name.removesuffix(".gz").removesuffix(".json")


def _shares(rows: list[dict]) -> tuple[float, float, float]:
    """(GEMM, batched GEMM, everything else) shares of the rows' summed time."""
    t = {"g": 0.0, "b": 0.0, "o": 0.0}
    for r in rows:
        s = r.get("time_s")
        if s is None or s != s:
            continue
        key = "g" if r["category"] in GEMM else "b" if r["category"] in BATCHED else "o"
        t[key] += s
    total = sum(t.values()) or 1.0
    return t["g"] / total, t["b"] / total, t["o"] / total


def _run_args(meta: dict) -> list[str]:
    run = meta["run"]
    return [meta["model"]["name"], "--batch", str(run["batch"]), "--seq", str(run["seq"]),
            "--precision", run["precision"], "--attention", run["attention"],
            "--dropout" if run["dropout"] else "--no-dropout", "--optimizer", run["optimizer"]]


def _predict(meta: dict, device: str, tmp: Path, tag: str) -> tuple[float, list[dict]]:
    out = tmp / f"{tag}.json"
    _cli("predict", *_run_args(meta), "--device", device, "--top", "0", "--no-store",
         "--output", str(out))
    doc = json.loads(out.read_text())
    return float(doc["meta"]["prediction"]["time_s"]), doc["rows"]


def main() -> int:
    """Calibrate from the traces in DIR, predict every run, print predicted vs measured."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--catalog", default="h200")
    ap.add_argument("--bundle", type=Path, metavar="OUT",
                    help="write DIR's results (no traces) as one .json.gz and stop")
    args = ap.parse_args()
    os.environ["BERTSCOPE_STORE"] = "off"  # calibrate and predict record no runs
    if args.bundle is not None:
        return _write_bundle(args.dir, args.bundle)
    if args.dir.is_file():  # a bundle: its runs unpacked into a temporary folder
        with tempfile.TemporaryDirectory() as td:
            doc = json.loads(gzip.decompress(args.dir.read_bytes()))
            for name, run in doc["runs"].items():
                (Path(td) / f"{name}.json").write_text(json.dumps(run))
            (Path(td) / "microbench-profile.json").write_text(
                json.dumps(doc["microbench_profile"]))
            args.dir = Path(td)
            return _compare(args)
    return _compare(args)


def _write_bundle(folder: Path, out: Path) -> int:
    """One gzipped JSON of a gpu_checks.sh folder's results and microbenchmark profile."""
    runs = {_stem(p): json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))
            if not p.name.startswith("microbench-profile")}
    micro = folder / "microbench-profile.json"
    doc = {"runs": runs,
           "microbench_profile": json.loads(micro.read_text()) if micro.exists() else None}
    for key, name in (("versions", "versions.txt"), ("log", "log.txt")):
        if (folder / name).exists():
            doc[key] = (folder / name).read_text()
    out.write_bytes(gzip.compress(json.dumps(doc).encode(), 9))
    print(f"wrote {out} ({len(runs)} runs)")
    return 0


def _compare(args: argparse.Namespace) -> int:
    """Calibrate from the traces in args.dir, predict every run, print predicted vs
    measured."""
    runs = sorted(p for p in [*args.dir.glob("*.json"), *args.dir.glob("*.json.gz")]
                  if ".trace." not in p.name and not p.name.startswith("microbench-profile"))
    traces = {p: p.with_name(_stem(p) + ".trace.json.gz") for p in runs}
    traces = {p: t for p, t in traces.items() if t.exists()}
    if not runs:
        raise SystemExit(f"no profile results in {args.dir}")
    micro = next((q for q in (args.dir / "microbench-profile.json",
                              args.dir / "microbench-profile.json.gz") if q.exists()),
                 args.dir / "microbench-profile.json")
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        fit_all = tmp / "fit-all.json"
        if traces:
            _cli("calibrate", "--from-trace", *map(str, traces.values()), "--output",
                 str(fit_all))
        if micro.name.endswith(".gz"):  # the CLI reads a plain device file
            plain = tmp / "microbench-profile.json"
            plain.write_bytes(gzip.decompress(micro.read_bytes()))
            micro = plain
        print(f"# runs: {len(runs)}; fits: "
              + ("all traces, leave-one-out per run" if traces else "none (no traces here)")
              + ("; device microbenchmarks" if micro.exists() else ""))
        print("# measured: the iteration's wall time without the profiler (the least of the\n"
              "# warm-up iterations after the first); kernels: the profiled iteration's op\n"
              "# (kernel) time, the mean over its measured iterations")
        print(f"{'run':36} {'measured':>9} {'kernels':>9} {'source':>10} {'predicted':>9} "
              f"{'pred/meas':>9} {'pred/kern':>9}  shares gemm/bmm/rest: measured | predicted")
        errors: dict[str, list[float]] = {}
        for p in runs:
            doc = json.loads(gzip.decompress(p.read_bytes()) if p.name.endswith(".gz")
                             else p.read_text())
            meta = doc["meta"]
            # the iteration without the profiler where the run kept it (the profiler's per-op
            # host cost inflates a profiled eager GPU iteration), else the profiled one
            # (the least of them: noise on the host only adds time), else the profiled one
            measured = float(min(meta.get("unprofiled_iteration_times_s") or ())
                             or meta["iteration_s"])
            kernels = float(meta["op_time_s"])
            m_sh = _shares(doc["rows"])
            sources = {"catalog": args.catalog}
            if traces:
                sources["fit-all"] = str(fit_all)
            others = [str(t) for q, t in traces.items() if q != p]
            if others and p in traces:
                loo = tmp / f"loo-{_stem(p)}.json"
                _cli("calibrate", "--from-trace", *others, "--output", str(loo))
                sources["leave-out"] = str(loo)
            if micro.exists():
                sources["microbench"] = str(micro)
            for tag, dev in sources.items():
                t, rows = _predict(meta, dev, tmp, f"{_stem(p)}-{tag}")
                sh = _shares(rows)
                errors.setdefault(tag, []).append(t / measured - 1)
                print(f"{_stem(p):36} {measured * 1e3:7.1f}ms {kernels * 1e3:7.1f}ms {tag:>10} "
                      f"{t * 1e3:7.1f}ms {t / measured:9.2f} {t / kernels:9.2f}  "
                      f"{m_sh[0]:.2f}/{m_sh[1]:.2f}/{m_sh[2]:.2f} | "
                      f"{sh[0]:.2f}/{sh[1]:.2f}/{sh[2]:.2f}")
        for tag, errs in errors.items():
            print(f"# {tag}: median |error| {statistics.median(abs(e) for e in errs):.1%}, "
                  f"max {max(abs(e) for e in errs):.1%} over {len(errs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
