#!/usr/bin/env bash
# Run inside tests/system/without_cuda.sh: the trainer of a build made without
# CUDA trains on the CPU, and device = gpu says in one line that this build has
# no CUDA, exits 2 and creates nothing.
#   tests/system/without_cuda.sh tests/system/no_cuda_trainer.sh OUTPUT_BASE
set -uo pipefail
OB=${1:?usage: no_cuda_trainer.sh OUTPUT_BASE}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
result() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok: $2"; else fail=$((fail + 1)); echo "FAILED: $2"; fi; }

bazel --output_base="$OB" run --symlink_prefix=/ //experiments/trainer:train -- \
  --config experiments/configs/e8m3.cfg --set steps=20 --set run_dir="$tmp/cpu" --set progress=0 \
  >"$tmp/cpu.out" 2>&1
grep -q '"step":20' "$tmp/cpu/log.jsonl" 2>/dev/null
result $? "a CPU run of e8m3 trains 20 steps"

rc=0
bazel --output_base="$OB" run --symlink_prefix=/ //experiments/trainer:train -- \
  --config experiments/configs/e8m3.cfg --set steps=20 --set device=gpu --set run_dir="$tmp/gpu" \
  >"$tmp/gpu.out" 2>"$tmp/gpu.err" || rc=$?
# Bazel's own lines go to stderr too: the trainer's are those that start with "train:"
said=$(grep '^train:' "$tmp/gpu.err")
[ "$rc" -eq 2 ] && [ "$(printf '%s\n' "$said" | wc -l)" -eq 1 ] && [[ "$said" == *"no CUDA"* ]] &&
  [ ! -e "$tmp/gpu" ]
result $? "device = gpu: exit 2 ($rc), one line ($said), no run directory"
echo "no_cuda_trainer: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
