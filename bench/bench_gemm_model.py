"""BERT-large sequences/s predicted with the first-principles GPU GEMM model (perf/gpu_gemm.py)
beside the saturating assumed default it replaced as the default of catalog GPUs (same
bandwidth and overhead models), and the fraction of peak a few of its GEMM shapes get.

    PYTHONPATH=src python bench/bench_gemm_model.py > bench/results/bench_gemm_model.txt
"""

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.hardware import DeviceKind, load_device
from bertscope.job import Job
from bertscope.perf import predict
from bertscope.perf.efficiency import _DEFAULTS, load_profile
from bertscope.perf.gpu_gemm import for_device
from bertscope.presets import get_model

old_g = _DEFAULTS[DeviceKind.GPU][0]
RUNS = (("v100", "fp16"), ("v100", "fp32"), ("a100", "bf16"), ("a100", "tf32"),
        ("a100", "fp32"), ("h100", "bf16"), ("h100", "fp8"))


def seq_per_s(table, profile, seq: int) -> float:
    return predict(table, profile).export_meta()["prediction"]["tokens_per_s"] / seq


for dev, prec in RUNS:
    for b, s in ((64, 128), (32, 128), (8, 512), (16, 512)):
        for att in ("eager", "sdpa"):
            run = RunConfig(batch=b, seq=s, precision=prec, attention=att)
            t = build(Job(model=get_model("bert-large"), run=run))
            prof = load_profile(dev)
            new = seq_per_s(t, prof, s)
            if prec == "fp8":  # the old default is the same model; no fp8 before
                print(f"{dev:5s} {prec:5s} b{b:<3d} s{s:<4d} {att:6s} seq/s {new:7.1f}")
                continue
            old = seq_per_s(t, prof.with_models(gemm=old_g), s)
            print(f"{dev:5s} {prec:5s} b{b:<3d} s{s:<4d} {att:6s} seq/s before {old:7.1f}  "
                  f"after {new:7.1f}  ({(new / old - 1) * 100:+.1f}%)")

print()
print("fraction of peak (cap x tile/wave/K/reuse) per GEMM shape, bert-large:")
shapes = {"FFN1 fwd b32 s128 (M 4096, N 4096, K 1024)": (4096, 4096, 1024, 1),
          "QKV fwd b32 s128 (M 4096, N 1024, K 1024)": (4096, 1024, 1024, 1),
          "wgrad FFN1 b8 s512 (M 4096, N 1024, K 4096)": (4096, 1024, 4096, 1),
          "scores b32 s128 (128 x 128 x 64, 512 heads)": (128, 128, 64, 512),
          "NSP head b32 (M 32, N 2, K 1024)": (32, 2, 1024, 1)}
for dev, fmt in (("v100", "fp16"), ("a100", "bf16"), ("h100", "bf16"), ("mi300x", "bf16")):
    model = for_device(load_device(dev)).for_format(fmt)
    for label, (m, n, k, b) in shapes.items():
        f = float(model.max_fraction * model.utilization(m, n, k, b))
        print(f"{dev:7s} {fmt}  {label:48s} {f:.3f}")
