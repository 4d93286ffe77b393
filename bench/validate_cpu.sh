#!/usr/bin/env bash
# The CPU validation of #14 (bench/results/validate_cpu.txt): calibrate on seven configs
# (fp32 and bf16, Adam and LAMB, three BERT sizes), predict five held out (bf16 + LAMB,
# checkpointing with 2 micro-batches, GPT-2, no dropout, another sequence length), 3 rounds of
# 5 iterations. About 12 minutes on a 2-core VM.
# Usage (repo root, bertscope installed):  bash bench/validate_cpu.sh [RESULTS_DIR]
# RESULTS_DIR keeps each measurement (about 13 MB) and is reused when it holds them, so a
# second run re-predicts without measuring; without it, a temporary folder (deleted).
# Writes bench/results/validate_cpu.json (the report) and bench/results/validate_cpu.txt
# (what the command printed, under a header naming this script and the commit).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then
  results="$1"
  mkdir -p "$results"
else
  results="$(mktemp -d)"
  trap 'rm -rf "$results"' EXIT
fi
out=bench/results/validate_cpu
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git status --porcelain -- src 2>/dev/null)" ]; then
  commit="$commit (with uncommitted changes in src)"
fi
{
  echo "# validate_cpu: made at $commit"
  echo "\$ bench/validate_cpu.sh $*"
  echo "# $(date -u +%Y-%m-%d), $(nproc) CPUs"
  BERTSCOPE_STORE=off bertscope validate \
    --calibrate bert-mini:16:128,bert-mini:16:128:bf16,bert-small:8:128,bert-small:8:128:bf16,bert-medium:4:128,bert-mini:8:128:lamb,bert-medium:4:128:lamb \
    --validate bert-small:8:128:bf16:lamb,bert-mini:16:128:ckpt:mb2,examples/configs/tiny-gpt2.json:8:128,bert-small:4:128:nodropout,bert-mini:16:64:bf16 \
    --iters 5 --warmup 1 --rounds 3 --results-dir "$results" --output "$out.json" 2>&1
} > "$out.txt.new"
mv "$out.txt.new" "$out.txt"
cat "$out.txt"
