"""Attainable GEMM rates on this GPU at training shapes, per number format (issue #31 item 4).

For each format (fp32, tf32, bf16, fp16, fp8 e4m3 through torch._scaled_mm where the GPU has
it) and each shape (the linear-layer GEMMs of BERT-large at 32 x 128 tokens, GPT-2-medium at
8 x 1024, GPT-3-175B's layer split 8 ways at 2,048 x 4 tokens, and 8192^3), the mean of 20
timed products (CUDA events) after 5 warm-ups, on random normal data. Prints one line per
(format, shape): TFLOP/s and the fraction of the dense peak given with --peaks (the datasheet
figures of the device; default: NVIDIA H200 SXM's).

Usage (on a CUDA machine):  python bench/gpu_gemm_caps.py [--peaks fp32=67e12,...]"""
from __future__ import annotations

import argparse
import sys

import torch

# NVIDIA H200 SXM datasheet, dense (https://www.nvidia.com/en-us/data-center/h200/): FP32 67
# TFLOP/s, TF32 494.5 (989 with sparsity), BF16/FP16 989.5 (1,979 with sparsity), FP8 1,979
H200 = {"fp32": 67e12, "tf32": 494.5e12, "bf16": 989.5e12, "fp16": 989.5e12, "fp8": 1979e12}

SHAPES = {  # name: (M, N, K) with M = tokens
    "bert-large qkv fwd": (4096, 3072, 1024),
    "bert-large ffn1 fwd": (4096, 4096, 1024),
    "bert-large ffn2 fwd": (4096, 1024, 4096),
    "bert-large ffn1 wgrad": (4096, 1024, 4096),
    "gpt2-medium ffn1 fwd": (8192, 4096, 1024),
    "gpt2-medium lm-head fwd": (8192, 50304, 1024),
    "gpt3-175b tp8 ffn1 fwd": (8192, 6144, 12288),
    "gpt3-175b tp8 ffn2 fwd": (8192, 12288, 6144),
    "gpt3-175b tp8 qkv fwd": (8192, 4608, 12288),
    "square 8192": (8192, 8192, 8192),
}


def _time(fn, warm: int = 5, reps: int = 20) -> float:
    """Mean seconds of `fn()` over `reps` calls after `warm`, timed with CUDA events."""
    for _ in range(warm):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def _gemm(fmt: str, m: int, n: int, k: int):
    """A zero-argument product of an (m, k) by a (k, n) matrix in `fmt` (None: unsupported)."""
    torch.backends.cuda.matmul.allow_tf32 = fmt == "tf32"
    if fmt == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or torch.cuda.get_device_capability() < (8, 9):
            return None
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major B
        one = torch.ones((), device="cuda")
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16)
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
             "fp16": torch.float16}[fmt]
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    return lambda: torch.mm(a, b)


def main() -> int:
    """Print the attainable rate and peak fraction per format and shape."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peaks", default="", help="fmt=FLOP/s,... (default: NVIDIA H200 SXM)")
    args = ap.parse_args()
    peaks = dict(H200)
    for item in filter(None, args.peaks.split(",")):
        fmt, value = item.split("=")
        peaks[fmt] = float(value)
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; mean of 20 after 5")
    print(f"{'format':6} {'shape':26} {'M':>6} {'N':>6} {'K':>6} {'TFLOP/s':>8} {'of peak':>8}")
    for fmt in ("fp32", "tf32", "bf16", "fp16", "fp8"):
        for name, (m, n, k) in SHAPES.items():
            fn = _gemm(fmt, m, n, k)
            if fn is None:
                print(f"{fmt:6} {name:26} unsupported here")
                continue
            rate = 2 * m * n * k / _time(fn)
            print(f"{fmt:6} {name:26} {m:6} {n:6} {k:6} {rate / 1e12:8.1f} "
                  f"{rate / peaks[fmt]:8.3f}")
            del fn
            torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    return 0


if __name__ == "__main__":
    sys.exit(main())
