#!/usr/bin/env bash
# Speed of the GPU trainer at `120m` (dim 768, 12 layers, 12 heads, context
# 1024) against the same model in PyTorch, measured in the same call.
# Runs from the GPU bundle (cuda/bundle.sh):
#   ./bench_gpu.sh OUTDIR [STEPS (12)] [BATCH (32)]
# Prints, per recipe (with an optional --set override, e.g. rounding=rz) and
# attention kernel: median ms/step over steps 4..,
# tokens/s, MFU, GPU memory, and the ratio to PyTorch compiled.
# MFU = tokens/s x (6 x matmul parameters + 6 x L x C x T causal attention)
# per token / 770 TFLOP/s (the card's measured bf16 GEMM peak).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-.}; steps=${2:-12}; B=${3:-32}
mkdir -p "$out"; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
data="$tmp/text.u8"
tr -cd "a-zA-Z0-9 _.,\n" < "$here/train" | head -c 8000000 > "$data"
L=12; C=768; T=1024; H=2048; V=256
flops_tok=$(awk -v L=$L -v C=$C -v T=$T -v H=$H -v V=$V 'BEGIN {
  n = L * (4 * C * C + 3 * C * H) + V * C; printf "%.6e", 6 * n + 6 * L * C * T }')
peak=770e12
row() { # name ms mem
  awk -v n="$1" -v ms="$2" -v mem="$3" -v B=$B -v T=$T -v f="$flops_tok" -v p=$peak -v ref="${4:-}" 'BEGIN {
    tok = B * T / (ms / 1e3); mfu = tok * f / p;
    r = ref != "" ? sprintf("%.2f", tok / ref) : "-";
    printf "%-34s %9.1f %11.0f %6.1f%% %8s %8s\n", n, ms, tok, 100 * mfu, mem, r }'
}
median_ms() { grep -o '"ms":[0-9.]*' "$1" | tail -n +4 | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "bench_gpu: 120m, batch $B x $T, $steps steps per run; $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>/dev/null)"
# PyTorch first: its compiled tokens/s is the reference of the ratio column
PYTHONUNBUFFERED=1 python3 "$here/bench_torch_gpu.py" --batch $B --steps $((steps + 8)) --out "$tmp/torch.txt" \
  > "$out/bench_torch.log" 2>&1 || echo "bench_gpu: PyTorch reference failed (see $out/bench_torch.log)"
ref=$(awk '$1 == "compiled" {print $3}' "$tmp/torch.txt" 2>/dev/null)
printf "%-34s %9s %11s %7s %8s %8s\n" "run" "ms/step" "tokens/s" "MFU" "mem GiB" "x torch.compile"
while read -r mode ms tok mem; do
  row "pytorch $mode (bf16 autocast, sdpa)" "$ms" "$mem" "$ref"
done < <(cat "$tmp/torch.txt" 2>/dev/null)
# e8m3 by rne, rz and sr, fused and materialised: the fused kernel rounds P
# and dS itself in each mode
# bf16 also with cuda_graph = 0: the step's launches one by one, as before graphs
for spec in "bf16 flash" "bf16 flash cuda_graph=0" "fp8-te flash" "e8m3 flash" "e8m3 flash rounding=rz" "e8m3-sr flash" \
            "bf16-sr flash" "fp8-current flash" "bf16 materialized" "fp8-te materialized" \
            "e8m3 materialized" "e8m3 materialized rounding=rz" "e8m3-sr materialized" \
            "mxfp8 flash" "fp8-coat flash" "msamp-o1 flash" "e8m4 flash rounding=rz" \
            "e8m5 flash rounding=rz" "e8m6 flash rounding=rz"; do
  set -- $spec
  r=$1; a=$2; extra=${3:-}
  label=${extra#rounding=} # rounding=rz shows as rz, other keys as key=value
  name="exmy $r${label:+ $label} ($a)"
  tag="$r${label:+-${label//=/-}}-$a"
  if "$here/train" --config "$here/configs/$r.cfg" ${extra:+--set "$extra"} \
       --set size=120m --set batch_size=$B \
       --set steps=$steps --set warmup=2 --set lr=3e-4 --set device=gpu --set attention_kernel=$a \
       --set val_every=0 --set val_batches=1 --set ckpt_every=0 --set stats_every=0 \
       --set progress=0 --set data="$data" --set val_data= --set run_dir="$tmp/$tag" \
       > "$out/bench_$tag.log" 2>&1; then
    mem=$(grep -o 'first step: [0-9.]*' "$out/bench_$tag.log" | awk '{print $3}')
    row "$name" "$(median_ms "$tmp/$tag/log.jsonl")" "$mem" "$ref"
  else
    echo "$name: failed: $(tail -1 "$out/bench_$tag.log")"
  fi
done
