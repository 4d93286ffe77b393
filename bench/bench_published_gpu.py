"""Published single-GPU BERT-large pre-training throughputs (NVIDIA DeepLearningExamples,
PyTorch BERT) beside bertscope's prediction of the same configuration on the catalog GPU.

    PYTHONPATH=src python bench/bench_published_gpu.py > bench/results/bench_published_gpu.txt

Each row: the README's 1-GPU figure (sequences/s), its micro-batch and accumulation steps,
and the prediction with the published implementation's switches as bertscope has them
(LAMB, fused elementwise chains, and in the 21.11 release the MLM head on masked positions
only). fp16 is the AMP ("mixed precision") column, tf32 the A100 "TF32" column, fp32 V100's
"FP32". The A100 40GB rows run on the catalog's A100 80GB with its memory bandwidth scaled to
the 40GB part's 1,555 GB/s (a what-if knob: same SMs and clocks; the 80GB SXM4 has 2,039 GB/s).

Sources (figures quoted in the rows below):
- 21.11: https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/LanguageModeling/BERT/README.md
  "Pre-training NVIDIA DGX A100 (8x A100 80GB)" and "Pre-training NVIDIA DGX-1 With 32G",
  GPUs = 1 rows. Its phase 2 uses "Binned pretraining for phase2 with LDDL using a bin size
  of 64": sequences are padded to their bin, not to 512, so its seq-512 figures are not
  512-token iterations (its tokens/s at 512 exceed those at 128, which full-length sequences
  cannot do) and bertscope, which charges every sequence 512 tokens, reads about 2x low there.
- 19.07: https://github.com/NVIDIA/DeepLearningExamples/blob/23a6382cbe8f77c22b0a7b7d263191ee6b947dfa/PyTorch/LanguageModeling/BERT/README.md
  "Pre-training NVIDIA DGX-1 With 32G", 1 GPU (no accumulation stated: 1 taken).
- 20.06: a stored copy of the README of that release (repository commit not resolved; NGC
  publishes the same release's page at
  https://catalog.ngc.nvidia.com/orgs/nvidia/-/resources/bert_for_pytorch/20.06.10/performance);
  its "Batch size / GPU" is the accumulated batch: micro-batch = it / accumulation steps.
"""

from __future__ import annotations

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.job import Job
from bertscope.perf import Knobs, fuse, load_profile, predict
from bertscope.presets import get_model

A100_40GB_BW = 1555 / 2039
# (release, device, precision, micro-batch, seq, accumulation steps, published seq/s,
#  MLM on masked positions only)
ROWS = [
    ("21.11", "a100", "tf32", 128, 128, 64, 317, True),
    ("21.11", "a100", "fp16", 256, 128, 32, 580, True),
    ("21.11", "a100", "tf32", 16, 512, 256, 110, True),
    ("21.11", "a100", "fp16", 32, 512, 128, 210, True),
    ("21.11", "v100", "fp32", 32, 128, 128, 50, True),
    ("21.11", "v100", "fp16", 64, 128, 64, 224, True),
    ("21.11", "v100", "fp32", 4, 512, 512, 19, True),
    ("21.11", "v100", "fp16", 8, 512, 256, 75, True),
    ("20.06", "a100-40gb", "tf32", 54, 128, 1208, 234, False),
    ("20.06", "a100-40gb", "fp16", 64, 128, 1024, 415, False),
    ("20.06", "a100-40gb", "tf32", 8, 512, 4096, 41, False),
    ("20.06", "a100-40gb", "fp16", 16, 512, 2048, 78, False),
    ("20.06", "v100", "fp32", 8, 128, 8192, 40, False),
    ("20.06", "v100", "fp16", 16, 128, 4096, 158, False),
    ("20.06", "v100", "fp32", 2, 512, 16384, 9, False),
    ("20.06", "v100", "fp16", 4, 512, 8192, 33, False),
    ("19.07", "v100", "fp32", 32, 128, 1, 40.32, False),
    ("19.07", "v100", "fp16", 64, 128, 1, 171.52, False),
    ("19.07", "v100", "fp32", 4, 512, 1, 8.36, False),
    ("19.07", "v100", "fp16", 8, 512, 1, 30.08, False),
]


def predicted(device: str, precision: str, batch: int, seq: int, accum: int,
              masked: bool) -> float:
    """Sequences per second bertscope predicts for the row's configuration."""
    knobs = Knobs(bandwidth=A100_40GB_BW) if device == "a100-40gb" else Knobs()
    profile = load_profile("a100" if device == "a100-40gb" else device)
    run = RunConfig(batch=batch, seq=seq, micro_batches=accum, precision=precision,
                    optimizer="lamb", masked_lm_only=masked)
    table = fuse(build(Job(model=get_model("bert-large"), run=run)))
    t = predict(table, profile, knobs=knobs)
    return batch * accum / float(t.df["time_s"].sum())


def main() -> None:
    print(f"{'release':7} {'device':10} {'prec':5} {'micro x accum':>14} {'seq':>4} "
          f"{'published':>10} {'predicted':>10} {'pred/pub':>8}")
    by: dict[tuple[str, int], list[float]] = {}
    for rel, dev, prec, b, s, acc, pub, masked in ROWS:
        p = predicted(dev, prec, b, s, acc, masked)
        by.setdefault((rel, s), []).append(p / pub)
        print(f"{rel:7} {dev:10} {prec:5} {f'{b} x {acc}':>14} {s:>4} {pub:10.1f} {p:10.1f} "
              f"{p / pub:8.2f}")
    for (rel, s), r in sorted(by.items()):
        print(f"# {rel} seq {s}: predicted/published {min(r):.2f}-{max(r):.2f}")


if __name__ == "__main__":
    main()
