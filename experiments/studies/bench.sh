#!/usr/bin/env bash
# Speed of the trainer on the CPU, each figure beside its reference from the same run:
#  - `tiny`, fp32 recipe: tokens/s of the C trainer vs the PyTorch reference model
#    (reference/llama_torch.py, same config, AdamW, clipping) on the same 2 cores;
#  - the e8m3 recipe's step time vs fp32's (target <= 1.3x);
#  - fp32 and e8m3 with gemm = openblas (OpenBLAS's sgemm, whose bits depend on
#    the CPU and the thread count) beside the default exmy_sgemm (the same bits
#    everywhere; target: at most 10% fewer tokens/s).
# The runs alternate for ROUNDS rounds; each figure is the best round's
# median step time (a shared machine's load comes in bursts).
# usage: bazel run //experiments/studies:bench -- [STEPS (12)] [ROUNDS (3)] [SIZE (tiny)] [BATCH (16)]
set -euo pipefail
steps=${1:-12}; rounds=${2:-3}; size=${3:-tiny}; batch=${4:-16}
here="$(pwd)"
train="$here/experiments/trainer/train"
ref="$here/experiments/reference"
ws="${BUILD_WORKSPACE_DIRECTORY:-$here}"
data="$ws/data/brown/train.u8"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
if [ ! -s "$data" ]; then
  echo "bench: $data missing (run experiments/data/prepare_brown.sh); using source text instead"
  # the trainer's and the studies' C sources, in the order of their names
  for f in "$here"/experiments/trainer/*.c "$here"/experiments/studies/*.c; do echo "${f##*/} $f"; done |
    sort | cut -d' ' -f2 | xargs cat > "$tmp/text.u8"; data="$tmp/text.u8"
fi
pin=()
if command -v taskset >/dev/null && [ "$(nproc)" -gt 2 ]; then pin=(taskset -c 0,1); fi
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
echo "bench: $size, batch $batch, $steps steps per run, 2 threads ${pin[*]:+(pinned to cores 0,1)}; $(uptime | sed 's/.*load/load/')"

# median step time of the C trainer (steps 4.. of its log), in ms
c_run() {
  local recipe=$1 gemm=${2:-exmy}
  "${pin[@]}" "$train" --config "$here/experiments/configs/$recipe.cfg" --set size="$size" \
    --set batch_size="$batch" --set steps="$steps" --set warmup=5 --set val_every=0 --set val_batches=1 \
    --set ckpt_every=0 --set stats_every=0 --set progress=0 --set data="$data" --set val_data= \
    --set threads=2 --set gemm="$gemm" --set run_dir="$tmp/$recipe-$gemm" >/dev/null
  grep -o '"ms":[0-9.]*' "$tmp/$recipe-$gemm/log.jsonl" | tail -n +4 | cut -d: -f2 | sort -n |
    awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
tokens=$(/usr/bin/python3 -c "from sys import path; path.insert(0, '$ref'); from llama_torch import SIZES; print($batch * SIZES['$size'][6])" 2>/dev/null || echo 0)
min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || (b != "" && b + 0 < a + 0)) print b; else print a }'; }
fp32_ms=""; e8m3_ms=""; torch_ms=""; torch_line="not run"; fp32_ob_ms=""; e8m3_ob_ms=""
for r in $(seq "$rounds"); do
  f=$(c_run fp32)
  fo=$(c_run fp32 openblas)
  torch_line=$(cd "$ref" && "${pin[@]}" /usr/bin/python3 bench_torch.py "$size" "$batch" "$steps" 2 "$data" 2>&1 | tail -1) || true
  t=$(sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p' <<<"$torch_line")
  e=$(c_run e8m3)
  eo=$(c_run e8m3 openblas)
  echo "round $r: median ms/step: C fp32 $f (OpenBLAS $fo), PyTorch ${t:-n/a}, C e8m3 $e (OpenBLAS $eo)"
  fp32_ms=$(min "$fp32_ms" "$f"); e8m3_ms=$(min "$e8m3_ms" "$e"); torch_ms=$(min "$torch_ms" "$t")
  fp32_ob_ms=$(min "$fp32_ob_ms" "$fo"); e8m3_ob_ms=$(min "$e8m3_ob_ms" "$eo")
done
echo "best of $rounds rounds:"
awk -v f="$fp32_ms" -v e="$e8m3_ms" -v t="${torch_ms:-0}" -v n="$tokens" -v tl="$torch_line" \
    -v fo="$fp32_ob_ms" -v eo="$e8m3_ob_ms" 'BEGIN {
  printf "C trainer, fp32 recipe : %8.1f ms/step  %8.0f tokens/s\n", f, n * 1000 / f
  if (t > 0) printf "PyTorch reference      : %8.1f ms/step  %8.0f tokens/s   -> C / PyTorch = %.2fx tokens/s\n", t, n * 1000 / t, t / f
  else printf "PyTorch reference      : not measured (%s)\n", tl
  printf "C trainer, e8m3 recipe : %8.1f ms/step  %8.0f tokens/s   -> e8m3 / fp32 time = %.2fx (target <= 1.3x)\n", e, n * 1000 / e, e / f
  printf "fp32, gemm = openblas  : %8.1f ms/step  %8.0f tokens/s   -> exmy_sgemm / OpenBLAS = %.2fx tokens/s (target >= 0.9x)\n", fo, n * 1000 / fo, fo / f
  printf "e8m3, gemm = openblas  : %8.1f ms/step  %8.0f tokens/s   -> exmy_sgemm / OpenBLAS = %.2fx tokens/s (target >= 0.9x)\n", eo, n * 1000 / eo, eo / e
}'
