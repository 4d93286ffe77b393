#!/usr/bin/env bash
# The CUDA checks of the measured-profiling and performance-model issues, as one script for a
# session that is lent a GPU (device tool). Not yet run on a GPU: no session so far had one.
# Usage (on the device machine, repo root):  bash bench/gpu_checks.sh
# Writes everything under ${OUT:-out/gpu} (ignored); commit a summary as
# bench/results/gpu_checks.txt with its header (see bench/results/README.md).
set -euo pipefail
out="${OUT:-out/gpu}"
mkdir -p "$out"
python3 -m venv .venv-gpu
.venv-gpu/bin/pip install -q -e ".[dev]" 2>&1 | tail -2   # the device's own torch build
B=.venv-gpu/bin/bertscope
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
for model in bert-base bert-large; do
  for prec in fp32 bf16; do
    COLUMNS=160 $B profile "$model" --device cuda --batch 32 --seq 128 --precision "$prec" \
      --iters 5 --warmup 2 --output "$out/profile-$model-$prec.json" \
      > "$out/profile-$model-$prec.txt" 2>&1
  done
done
COLUMNS=160 $B validate --device cuda --calibrate bert-small:64:128,bert-base:16:128 \
  --validate bert-base:32:128,bert-large:16:128,bert-medium:64:128 \
  --output "$out/validate-cuda.json" > "$out/validate-cuda.txt" 2>&1
$B profile bert-mini --device cuda --batch 8 --seq 128 --iters 1 --warmup 1 \
  --output "$out/trace-fixture.json" --trace-out "$out/trace-fixture.trace.json" > /dev/null
gzip -9 -f "$out/trace-fixture.trace.json"
ls -la "$out"
