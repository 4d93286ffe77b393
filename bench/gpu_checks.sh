#!/usr/bin/env bash
# The CUDA checks of issue #31 (training recipes), as one script for a session that is lent a
# GPU (device tool): BERT-large and a GPT-2-medium decoder trained under the `eager` recipe
# (autocast bf16, eager attention) and with SDPA attention, each profiled with a shape-recorded
# Kineto trace; the device's own microbenchmark calibration. The analysis (calibrating from the
# traces, predicted vs measured) runs on any machine afterwards, without torch:
#   python bench/gpu_recipe_check.py DIR      (DIR: where its archives were unpacked)
#
# Usage on the device machine, repo root, with platformdirs carried as a wheel in .whl/:
#   OUT=/some/dir bash bench/gpu_checks.sh
# Dry run on a CPU (tiny shapes, to check the commands):  GPU_CHECKS_DRY=1 bash bench/gpu_checks.sh
# Everything lands in ${OUT:-out/gpu}: one RUN.tar.gz per profiled run (its result, trace and
# printout), misc.tar.gz (versions, microbenchmarks) and log.txt, made even when a step fails
# (each step has its own time limit and the rest go on). Unpack them all into one folder.
set -uo pipefail
out="${OUT:-out/gpu}"
work="${GPU_CHECKS_WORK:-/tmp/gpu_checks}"  # outside $OUT: only the archives come back
rm -rf "$work"; mkdir -p "$work" "$out"
export PYTHONUNBUFFERED=1 COLUMNS=160 BERTSCOPE_STORE=off
if ls .whl/*.whl >/dev/null 2>&1; then  # the device image lacks platformdirs
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
B=(python3 -m bertscope.cli)
log="$out/log.txt"
step() {  # step NAME SECONDS CMD...: run one check, its output in $work/NAME.txt
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$work/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$log"
  tail -n 4 "$work/$name.txt" >> "$log"
}
finish() {  # one archive per run (the device tool returns at most 8 files of 16 MiB)
  local f
  for f in "$work"/*.txt; do
    local n; n=$(basename "$f" .txt)
    case "$n" in nvidia-smi|versions|calibrate-microbench|gemm-caps) continue;; esac
    (cd "$work" && tar -czf "$out/$n.tar.gz" "$n".*)
  done
  (cd "$work" && tar -czf "$out/misc.tar.gz" nvidia-smi.txt versions.txt calibrate-microbench.txt \
    gemm-caps.txt microbench-profile.json 2>/dev/null)
  ls -la "$out" >> "$log"
}
trap finish EXIT

if [ "${GPU_CHECKS_DRY:-0}" = 1 ]; then
  dev=cpu; runs="bert-tiny:2:32 gpt2:1:32"; iters=1; warm=1
else
  dev=cuda; runs="bert-large:32:128 gpt2-medium:8:1024"; iters=3; warm=4
  nvidia-smi > "$work/nvidia-smi.txt" 2>&1
  python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" \
    > "$work/versions.txt" 2>&1
fi
echo "device=$dev runs=$runs iters=$iters warmup=$warm $(date -u +%FT%TZ)" | tee -a "$log"

for spec in $runs; do
  IFS=: read -r model batch seq <<< "$spec"
  for attn in eager sdpa; do
    name="$model-b$batch-s$seq-bf16-$attn"
    step "$name" 110 "${B[@]}" profile "$model" --measure-on "$dev" --batch "$batch" --seq "$seq" \
      --precision bf16 --attention "$attn" --iters "$iters" --warmup "$warm" --top 0 \
      --output "$work/$name.json" --trace-out "$work/$name.trace.json" --no-store
    [ -f "$work/$name.trace.json" ] && gzip -f "$work/$name.trace.json"
  done
done
# the device's own GEMM and bandwidth microbenchmarks (attainable fractions measured here)
# the phase-2 shape of NVIDIA's BERT recipe, SDPA only
if [ "$dev" = cuda ]; then
  name=bert-large-b8-s512-bf16-sdpa
  step "$name" 110 "${B[@]}" profile bert-large --measure-on cuda --batch 8 --seq 512 \
    --precision bf16 --attention sdpa --iters "$iters" --warmup "$warm" --top 0 \
    --output "$work/$name.json" --trace-out "$work/$name.trace.json" --no-store
  [ -f "$work/$name.trace.json" ] && gzip -f "$work/$name.trace.json"
  # attainable GEMM rates per format at training shapes (evidence for the catalog's caps)
  step gemm-caps 90 python3 bench/gpu_gemm_caps.py
fi
step calibrate-microbench 150 "${B[@]}" calibrate --measure-on "$dev" \
  --output "$work/microbench-profile.json"
