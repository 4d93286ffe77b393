"""The GPU GEMM model's fraction of peak beside a measured one, shape by shape (issue #31).

Reads a result of bench/gpu_gemm_caps.py (default bench/results/gpu_gemm_caps.txt: one H200,
random normal data, training shapes) and prices each measured (format, M, N, K) with
`perf.gpu_gemm.for_device(<device>).for_format(<format>)`: the tile/wave model times the
catalog's cap for that format, with the epilogue (the M x N output written after the main loop:
4 bytes per element for fp32/tf32, 2 for 16-bit and for fp8, which gpu_gemm_caps.py runs with
bf16 outputs) charged; the "no epi" column leaves it out. Prints measured, modelled and
measured/modelled per shape, then per format the median and range of that ratio. Nothing is
fitted: the comparison says where the catalog's caps (best-shape searches) sit above what
training shapes reach.

    PYTHONPATH=src python bench/gemm_caps_vs_model.py [--device h200] [--input FILE] [--write]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
from pathlib import Path

from bertscope.hardware import load_device
from bertscope.perf.gpu_gemm import for_device

OUTPUT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
"""Bytes per output element of each measured format (gpu_gemm_caps.py: fp8 writes bf16)."""

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "gemm_caps_vs_model.txt"
ROW = re.compile(r"(fp32|tf32|bf16|fp16|fp8)\s+(.+?)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+([\d.]+)$")


def main() -> None:
    """Compare every measured shape of `--input` with the model of `--device`; print, and
    with --write save bench/results/gemm_caps_vs_model.txt."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="h200", help="catalog device the measurement ran on")
    ap.add_argument("--input", type=Path, default=ROOT / "bench/results/gpu_gemm_caps.txt")
    ap.add_argument("--write", action="store_true")
    opts = ap.parse_args()
    model = for_device(load_device(opts.device))
    if model is None:
        raise SystemExit(f"{opts.device}: no tile/wave GEMM model (not a GPU with an SM count)")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    src = opts.input.relative_to(ROOT) if opts.input.is_relative_to(ROOT) else opts.input
    out = [f"# gemm_caps_vs_model: made at {rev}",
           f"$ PYTHONPATH=src python bench/gemm_caps_vs_model.py --device {opts.device}"
           + (" --write" if opts.write else ""),
           f"# measured: {src} (fractions of the datasheet dense peak); model: tile/wave x "
           f"the catalog cap of the format",
           f"{'format':6s} {'shape':26s} {'M':>6s} {'N':>6s} {'K':>6s} {'measured':>9s} "
           f"{'model':>6s} {'no epi':>6s} {'cap':>6s} {'meas/model':>10s} {'no epi':>6s}"]
    ratios: dict[str, list[float]] = {}
    plain: dict[str, list[float]] = {}
    for line in opts.input.read_text().splitlines():
        hit = ROW.match(line.strip())
        if not hit:
            continue
        fmt, name, m, n, k, measured = hit.groups()
        fm = model.for_format(fmt)
        dims = {"m": [int(m)], "n": [int(n)], "k": [int(k)], "batch": [0],
                "flops": [2.0 * int(m) * int(n) * int(k)], "count": [1]}
        without = float(fm.fraction(dims)[0])  # no bytes_written column: no epilogue
        dims["bytes_written"] = [OUTPUT_BYTES[fmt] * int(m) * int(n)]
        predicted = float(fm.fraction(dims)[0])
        ratio = float(measured) / predicted
        ratios.setdefault(fmt, []).append(ratio)
        plain.setdefault(fmt, []).append(float(measured) / without)
        out.append(f"{fmt:6s} {name:26s} {m:>6s} {n:>6s} {k:>6s} {float(measured):9.3f} "
                   f"{predicted:6.3f} {without:6.3f} {fm.max_fraction:6.3f} {ratio:10.2f} "
                   f"{float(measured) / without:6.2f}")
    out.append("# per format: measured / modelled fraction, median [min, max] over the shapes, "
               "with the epilogue and (no epi) without it")
    for fmt, rs in ratios.items():
        ps = plain[fmt]
        out.append(f"#   {fmt:5s} median {statistics.median(rs):.2f}  "
                   f"[{min(rs):.2f}, {max(rs):.2f}]  no epi {statistics.median(ps):.2f}  "
                   f"[{min(ps):.2f}, {max(ps):.2f}]  n={len(rs)}")
    print("\n".join(out))
    if opts.write:
        RESULT.write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
