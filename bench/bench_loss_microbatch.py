"""Diagnosis: why the loss backward of a 2-micro-batch CPU run is slower per byte than one
batch's (bench/results/validate_cpu_r3.txt at d715217: bert-mini:16:128:ckpt:mb2's backward
loss rows).

Times the ATen ops autograd runs for cross-entropy backward on [tokens, vocab] fp32 logits,
nll_loss_backward (a zero-filled gradient plus a scatter) and _log_softmax_backward_data,
each call with its minor page faults (getrusage), in a fresh process per setting:

- `one`: one batch of `--tokens` rows per step (as bert-mini:16:128);
- `mb2`: two micro-batches of half the rows per step, the first micro-batch's logits and
  log-probabilities still alive while the second runs (as autograd holds a micro-batch's
  graph until its backward, and the trainer's loop keeps the previous loss's tensors until
  they are rebound);

each with glibc's defaults (`system`) or the profiler's setting (`keep`:
`measure.allocator.keep_freed_memory`).

    .venv/bin/python bench/bench_loss_microbatch.py --tokens 2048 --vocab 30522 --steps 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, time
import torch
from bertscope.measure.allocator import keep_freed_memory
mode, alloc, tokens, vocab, steps, threads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
if alloc == "keep":
    keep_freed_memory()
torch.set_num_threads(threads)
aten = torch.ops.aten
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def timed(fn):
    f0, t0 = faults(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, faults() - f0
rows = {"nll_loss_backward": [], "_log_softmax_backward_data": [], "log_softmax": []}
parts = 1 if mode == "one" else 2
n = tokens // parts
keep = []
for step in range(steps):
    keep = []  # the previous step's tensors die here (as a training loop rebinds them)
    for p in range(parts):
        x = torch.randn(n, vocab)
        t = torch.randint(0, vocab, (n,))
        out, s, f = timed(lambda: aten._log_softmax(x, 1, False))
        rows["log_softmax"].append((step, p, s, f))
        loss = aten.nll_loss_forward(out, t, None, 1, -100)
        g, s, f = timed(lambda: aten.nll_loss_backward(torch.ones(()), out, t, None, 1, -100,
                                                       loss[1]))
        rows["nll_loss_backward"].append((step, p, s, f))
        gx, s, f = timed(lambda: aten._log_softmax_backward_data(g, out, 1, torch.float32))
        rows["_log_softmax_backward_data"].append((step, p, s, f))
        keep.append((x, out, g, gx))  # alive until the next micro-batch's backward is done
        del x, out, g, gx
print(json.dumps(rows))
"""


def main() -> None:
    """Run each (mode, allocator) in a fresh process; print per-op medians after warm-up."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    for alloc in ("keep", "system"):
        for mode in ("one", "mb2"):
            out = subprocess.run([sys.executable, "-c", _CHILD, mode, alloc, str(args.tokens),
                                  str(args.vocab), str(args.steps), str(args.threads)],
                                 check=True, capture_output=True, text=True)
            rows = json.loads(out.stdout.strip().splitlines()[-1])
            for op, calls in rows.items():
                warm = [c for c in calls if c[0] >= 2]  # two warm-up steps
                per = statistics.median(c[2] for c in warm)
                flt = statistics.median(c[3] for c in warm)
                all_s = " ".join(f"{c[2] * 1e3:.0f}" for c in calls)
                print(f"{alloc:6s} {mode:3s} {op:28s} median {per * 1e3:7.1f} ms/call, "
                      f"{flt:8.0f} faults/call; every call (ms): {all_s}")


if __name__ == "__main__":
    main()
