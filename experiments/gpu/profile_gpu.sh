#!/usr/bin/env bash
# Where one training step's GPU time goes, kernel by kernel: the trainer
# under Nsight Compute collecting only step STEP (EXMY_GPU_PROFILE_STEP,
# ncu --profile-from-start off), each kernel's gpu__time_duration summed by
# name (profile_summary.py).  From the GPU bundle (cuda/bundle.sh):
#   ./profile_gpu.sh OUTDIR [RECIPE (bf16)] [ATTENTION (flash)] [SIZE (120m)] [BATCH (32)] [key=value,...]
# ncu runs the kernels one at a time, at the clocks and with the caches the
# run left them (--clock-control none --cache-control none); CUDA graphs are
# off so that every kernel is a launch of its own.  The same step of a run of
# the same configuration without ncu gives the wall time beside which the
# kernels' sum is printed.  Writes OUTDIR/profile_TAG.csv (ncu's rows), .txt
# (the table), .log (the trainer's output under ncu) and .plain.log (without).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: profile_gpu.sh OUTDIR [RECIPE] [ATTENTION] [SIZE] [BATCH] [key=value,...]}
recipe=${2:-bf16}; attn=${3:-flash}; size=${4:-120m}; batch=${5:-32}; extra=${6:-}
step=4
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then echo "profile_gpu: no ncu (Nsight Compute) on this machine"; exit 2; fi
[ -f "$here/configs/$recipe.cfg" ] || { echo "profile_gpu: no recipe $recipe"; exit 2; }
mkdir -p "$out"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
data="$tmp/text.u8"
tr -cd "a-zA-Z0-9 _.,\n" < "$here/train" | head -c 8000000 > "$data"
sets=()
IFS=, read -r -a kv <<< "$extra"
for s in "${kv[@]}"; do [ -n "$s" ] && sets+=(--set "$s"); done
tag=$recipe${extra:+-${extra//[=,]/-}}-$attn-$size
args=(--config "$here/configs/$recipe.cfg" "${sets[@]}"
  --set size=$size --set batch_size=$batch --set steps=$step --set warmup=2 --set lr=3e-4
  --set device=gpu --set attention_kernel=$attn --set cuda_graph=0 --set val_every=0
  --set val_batches=1 --set ckpt_every=0 --set stats_every=0 --set diverge_delta=0
  --set progress=0 --set data="$data" --set val_data=)
# The wall time of the step comes from the same run without ncu: under ncu
# every launch is intercepted, which inflates a step of many small kernels
# (fp8-te's 1407 launches: 175.9 ms under ncu, 92.6 in the benchmark).
"$here/train" "${args[@]}" --set run_dir="$tmp/plain" > "$out/profile_$tag.plain.log" 2>&1 ||
  { echo "profile_gpu: the trainer failed: $(tail -1 "$out/profile_$tag.plain.log")"; exit 1; }
wall=$(grep "\"step\":$step," "$tmp/plain/log.jsonl" | grep -o '"ms":[0-9.]*' | cut -d: -f2)
EXMY_GPU_PROFILE_STEP=$step "$ncu" --profile-from-start off --csv --page raw --print-units base \
  --metrics gpu__time_duration.sum --clock-control none --cache-control none \
  "$here/train" "${args[@]}" --set run_dir="$tmp/run" \
  > "$out/profile_$tag.csv" 2> "$out/profile_$tag.log"
rc=$?
[ $rc -eq 0 ] || { echo "profile_gpu: ncu or the trainer failed ($rc): $(tail -2 "$out/profile_$tag.log")"; exit 1; }
echo "profile_gpu: $recipe ($attn), $size, batch $batch x 1024, step $step of $step; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" |
  tee "$out/profile_$tag.txt"
python3 "$here/profile_summary.py" "$out/profile_$tag.csv" "$wall" 40 | tee -a "$out/profile_$tag.txt"
