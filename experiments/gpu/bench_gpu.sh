#!/usr/bin/env bash
# Speed of the GPU trainer against the same model in PyTorch (eager and
# compiled), measured in the same call: every recipe at `120m` (dim 768, 12
# layers, 12 heads, context 1024), and bf16, fp8-te and mxfp8 at `350m` and
# `1b` (LLaMA proportions, experiments/trainer/model.c) at a micro-batch that
# fits 80 GB, each size with PyTorch compiled of the same shape.
# Runs from the GPU bundle (cuda/bundle.sh):
#   ./bench_gpu.sh OUTDIR [STEPS (12)] [BATCH at 120m (32)] [SIZES ("120m 350m 1b")]
# All three sizes take more than 7 minutes on an H100: one size per call.
# BENCH_RUNS="bf16 flash;mxfp8 flash;fp8-te flash accumulate=hopper,pow2_scale=1" replaces
# every size's list of runs by these (";"-separated "recipe kernel [key=value[,key=value]]");
# BENCH_TORCH=0 skips PyTorch (the ratio column stays empty).
# Prints, per size, recipe (with an optional --set override, e.g. rounding=rz)
# and attention kernel: median ms/step over steps 4..,
# tokens/s, MFU, GPU memory, and the ratio to PyTorch compiled.  GPU memory:
# exmy's in use after the first step (cudaMemGetInfo), PyTorch's peak
# allocated, and under the PyTorch lines its memory in use measured as
# exmy's.
# MFU = tokens/s x (6 x matmul parameters + 6 x L x C x T causal attention)
# per token / 770 TFLOP/s (the card's measured bf16 GEMM peak).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-.}; steps=${2:-12}; B120=${3:-32}; sizes=${4:-120m 350m 1b}
mkdir -p "$out"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The table also goes, line by line, to OUTDIR/table.txt: a call cut short
# by its time limit still brings back the lines measured so far.
exec > >(tee -a "$out/table.txt") 2>&1
data="$tmp/text.u8"
tr -cd "a-zA-Z0-9 _.,\n" < "$here/train" | head -c 8000000 > "$data"
peak=770e12
row() { # name ms mem [ref tokens/s]
  awk -v n="$1" -v ms="$2" -v mem="$3" -v B=$B -v T=$T -v f="$flops_tok" -v p=$peak -v ref="${4:-}" 'BEGIN {
    tok = B * T / (ms / 1e3); mfu = tok * f / p;
    r = ref != "" ? sprintf("%.2f", tok / ref) : "-";
    printf "%-34s %9.1f %11.0f %6.1f%% %8s %8s\n", n, ms, tok, 100 * mfu, mem, r }'
}
median_ms() { grep -o '"ms":[0-9.]*' "$1" | tail -n +4 | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# bench SIZE BATCH SPEC...: PyTorch of that shape, then each "recipe kernel [key=value]"
bench() {
  size=$1; B=$2; shift 2
  # V C L NH NKV H T, as model_named_size (sizes_test checks the presets)
  case $size in
    120m) read -r V C L NH NKV H T <<< "256 768 12 12 12 2048 1024" ;;
    350m) read -r V C L NH NKV H T <<< "256 1024 24 16 16 2816 1024" ;;
    1b) read -r V C L NH NKV H T <<< "256 2048 22 32 4 5632 1024" ;;
    *) echo "bench_gpu: unknown size $size"; return 1 ;;
  esac
  flops_tok=$(awk -v L=$L -v C=$C -v T=$T -v H=$H -v V=$V -v KV=$((NKV * C / NH)) 'BEGIN {
    n = L * (2 * C * C + 2 * KV * C + 3 * C * H) + V * C; printf "%.6e", 6 * n + 6 * L * C * T }')
  echo "bench_gpu: $size, batch $B x $T, $steps steps per run; $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>/dev/null)"
  # PyTorch first: its compiled tokens/s is the reference of the ratio column
  # (BENCH_TORCH=0 leaves it out: a call whose runs continue another's list)
  [ "${BENCH_TORCH:-1}" = 0 ] ||
  PYTHONUNBUFFERED=1 python3 "$here/bench_torch_gpu.py" --size $size --batch $B --steps $((steps + 8)) \
    --out "$tmp/torch-$size.txt" > "$out/bench_torch_$size.log" 2>&1 ||
    echo "bench_gpu: PyTorch reference failed (see $out/bench_torch_$size.log)"
  ref=$(awk '$1 == "compiled" {print $3}' "$tmp/torch-$size.txt" 2>/dev/null)
  printf "%-34s %9s %11s %7s %8s %8s\n" "run" "ms/step" "tokens/s" "MFU" "mem GiB" "x torch.compile"
  while read -r mode ms tok mem in_use; do
    row "pytorch $mode (bf16 autocast, sdpa)" "$ms" "$mem" "$ref"
  done < <(cat "$tmp/torch-$size.txt" 2>/dev/null)
  # PyTorch's memory column is its allocator's peak; exmy's is the GPU's
  # memory in use (its CUDA context, libraries and workspaces included).
  # The same measure for PyTorch, for the like-for-like ratio:
  awk '$5 != "" {printf "(pytorch %s: GPU memory in use after its steps %s GiB)\n", $1, $5}' \
    "$tmp/torch-$size.txt" 2>/dev/null
  for spec in "$@"; do
    set -- $spec
    r=$1; a=${2:-flash}; extra=${3:-} # the attention kernel defaults to flash
    label=${extra#rounding=} # rounding=rz shows as rz, other keys as key=value
    name="exmy $r${label:+ $label} ($a)"
    tag="$size-$r${label:+-${label//[=,]/-}}-$a"
    tag=${tag#120m-} # the 120m logs keep their names
    sets=()
    IFS=, read -r -a kv <<< "$extra"
    for s in "${kv[@]}"; do sets+=(--set "$s"); done
    if "$here/train" --config "$here/configs/$r.cfg" "${sets[@]}" \
         --set size=$size --set batch_size=$B \
         --set steps=$steps --set warmup=2 --set lr=3e-4 --set device=gpu --set attention_kernel=$a \
         --set val_every=0 --set val_batches=1 --set ckpt_every=0 --set stats_every=0 \
         --set diverge_delta=0 \
         --set progress=0 --set data="$data" --set val_data= --set run_dir="$tmp/$tag" \
         > "$out/bench_$tag.log" 2>&1; then
      mem=$(grep -o 'first step: [0-9.]*' "$out/bench_$tag.log" | awk '{print $3}')
      ms=$(median_ms "$tmp/$tag/log.jsonl")
      if [ -n "$ms" ]; then row "$name" "$ms" "$mem" "$ref"
      else echo "$name: no step after the third: $(tail -1 "$out/bench_$tag.log")"; fi
    else
      echo "$name: failed: $(tail -1 "$out/bench_$tag.log")"
    fi
    # the run's checkpoint (13 GB at 1b) goes now: four queues of a machine
    # share its disk
    rm -rf "${tmp:?}/$tag"
  done
}

if [ -n "${BENCH_RUNS:-}" ]; then
  IFS=';' read -r -a runs <<< "$BENCH_RUNS"
  for size in $sizes; do
    case $size in 120m) b=$B120 ;; 350m) b=16 ;; 1b) b=8 ;; *) b=0 ;; esac
    bench "$size" "$b" "${runs[@]}"
  done
  exit 0
fi
for size in $sizes; do
  case $size in
    # e8m3 by rne, rz and sr, fused and materialised: the fused kernel rounds P
    # and dS itself in each mode; bf16 also with cuda_graph = 0: the step's
    # launches one by one, as before graphs; and with activations = bf16,
    # PyTorch autocast's own experiment (lean_activations = 2: its least memory)
    120m) bench 120m "$B120" "bf16 flash" "bf16 flash cuda_graph=0" "bf16 flash activations=bf16" \
            "bf16 flash activations=bf16,lean_activations=2" \
            "fp8-te flash" "e8m3 flash" \
            "e8m3 flash rounding=rz" "e8m3-sr flash" "bf16-sr flash" "fp8-current flash" \
            "bf16 materialized" "fp8-te materialized" "e8m3 materialized" \
            "e8m3 materialized rounding=rz" "e8m3-sr materialized" "mxfp8 flash" "fp8-coat flash" \
            "msamp-o1 flash" "e8m4 flash rounding=rz" "e8m5 flash rounding=rz" "e8m6 flash rounding=rz" ;;
    # micro-batches of 16 and 8 sequences (every recipe at most 30.6 and 37.2
    # GiB measured: experiments/results/speed-h200/)
    # bf16 also with bf16 activations, lean 1 and 2, the configurations
    # within 1.2x PyTorch compiled's memory
    350m) bench 350m 16 "bf16 flash" "bf16 flash activations=bf16" \
            "bf16 flash activations=bf16,lean_activations=2" "fp8-te flash" "mxfp8 flash" ;;
    1b) bench 1b 8 "bf16 flash" "bf16 flash activations=bf16" \
          "bf16 flash activations=bf16,lean_activations=2" "fp8-te flash" "mxfp8 flash" ;;
    *) echo "bench_gpu: unknown size $size"; exit 2 ;;
  esac
done
