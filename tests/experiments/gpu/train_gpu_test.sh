#!/usr/bin/env bash
# The trainer with device = gpu against device = cpu, end to end:
#  1. fp32 and bf16, `tiny`, 50 steps: losses agree to 1e-3 relative at every step,
#     the final validation's four epsilon-sharpness values to 1e-2;
#  2. every recipe config trains on the GPU (test size, 12 steps), its losses
#     within 5e-2 of the CPU's (quantized recipes: a float32 difference may
#     move a value to its format neighbour), statistics lines present; nvfp4's
#     GEMMs all on NVFP4's bf16 images (the train's path counts);
#  3. checkpoints: a GPU run interrupted and resumed on the GPU reproduces the
#     uninterrupted run bit for bit; one written on the GPU resumes on the CPU
#     and one written on the CPU resumes on the GPU (losses within 1e-3);
#  4. the fused attention (attention_kernel = flash) against the materialised
#     one on bf16 `tiny`, and on e8m3 with P and dS rounded rz and sr: losses
#     within 1e-2;
#  5. CUDA graphs (cuda_graph = 1, the default) against eager launches
#     (cuda_graph = 0): every logged value but the timings bit-identical, with
#     statistics steps and validations (eager, between replays) in the run,
#     unscaled, under current and delayed scaling (fp8-current, msamp-o1,
#     fp8-te, fp8-coat) and on MX images (mxfp8, mxfp4); recipes whose
#     launches change per step (sr) run eagerly;
#  6. the fused attention's lean activations (lean_activations = 1, the
#     default: q, k, v kept for one layer, ln1, ln2, hg too where no GEMM
#     reads them in float32, else every layer's; one buffer behind every
#     GEMM site's dY slot; 2: ln1, ln2, hg one layer always, recomputed in
#     the backward where a GEMM reads them) against every layer's and a slot
#     per site (lean_activations = 0): every logged value but the timings
#     bit-identical, on recipes whose GEMMs read all three in float32 (fp32,
#     Smooth-SwiGLU on fp32, MX, fp32 with bf16 activations), none (bf16,
#     graphs on; e8m3 sr with quantized attention), GQA, and bf16 with bf16
#     activations (SwiGLU's tensors and O stored in bf16 at 1 and 2, in
#     float32 at 0); the arenas 2 <= 1 < 0;
#  7. activations = bf16: GPU (materialised) vs CPU and flash vs materialised,
#     bf16 tiny, 20 losses within 1e-2; the same for GQA (the fused kernel
#     rounds each head's dK and dV), refused under the fused kernel with sr
#     P and dS.
# usage: train_gpu_test.sh TRAIN_BINARY CONFIG_DIR
set -uo pipefail
train=$(realpath "$1"); configs=$(realpath "$2")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# data: 3 MB of text (bytes are tokens) that never changes: sentences of a
# small vocabulary drawn by a Park-Miller generator (exact in awk's doubles,
# so mawk and gawk write the same bytes).  Data cut from a binary would change
# with every build, and with it the chaotic tail of a bf16 trajectory.
data="$tmp/text.u8"
awk 'BEGIN {
  n = split("the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were her she there all would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three", w, " ")
  x = 20261123
  while (bytes < 3000000) {
    line = ""
    len = 6 + (x % 9)
    for (i = 0; i < len; i++) {
      x = (x * 16807) % 2147483647
      line = line (i ? " " : "") w[1 + int(x / 2147483647 * (x % 3 ? 40 : 150))]
    }
    line = line "."
    print line
    bytes += length(line) + 1
  }
}' | head -c 3000000 > "$data"
pass=0; fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

run() { # run NAME CONFIG [--set k=v]...
  local name=$1 cfg=$2; shift 2
  "$train" --config "$configs/$cfg.cfg" --set data="$data" --set val_data= --set progress=0 \
    --set val_every=0 --set val_batches=2 --set ckpt_every=0 --set stats_every=0 \
    --set run_dir="$tmp/$name" "$@" > "$tmp/$name.out" 2>&1
}
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/$1/log.jsonl" | sed 's/"step"://; s/,"loss":/ /'; }
# max relative difference of the losses of two runs over the steps both logged (from step $3)
maxrel() {
  join <(losses "$1" | sort -k1,1) <(losses "$2" | sort -k1,1) |
    awk -v from="${3:-1}" '$1 >= from { d = $2 - $3; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
      if (r > m) m = r; n++ } END { printf "%.3e %d\n", m, n }'
}

# The epsilon-sharpness fields of a run's last validation line, "key value" sorted.
esharp() {
  grep '"val_loss"' "$tmp/$1/log.jsonl" | tail -1 | grep -o '"esharp_[a-z]*_[0-9e.-]*":[^,}]*' |
    sed 's/"//g; s/:/ /' | sort
}

# 1. CPU vs GPU, fp32 and bf16
for r in fp32 bf16; do
  run "cpu-$r" "$r" --set size=tiny --set steps=50 --set warmup=10 --set lr=1e-3 &&
    run "gpu-$r" "$r" --set size=tiny --set steps=50 --set warmup=10 --set lr=1e-3 --set device=gpu ||
    { bad "$r: run failed: $(tail -2 "$tmp"/*-$r.out)"; continue; }
  read -r m n < <(maxrel "cpu-$r" "gpu-$r")
  if [ "$n" = 50 ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-3) }'; then
    ok "$r tiny: CPU and GPU losses over $n steps, max rel diff $m (<= 1e-3)"
  else bad "$r tiny: max rel diff $m over $n steps"; fi
  read -r m n < <(join <(esharp "cpu-$r") <(esharp "gpu-$r") |
    awk '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (!(r <= m)) m = r; n++ }
         END { printf "%.3e %d\n", m, n }')
  if [ "$n" = 4 ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-2) }'; then
    ok "$r tiny: CPU and GPU epsilon-sharpness at the last validation, 4 values, max rel diff $m (<= 1e-2)"
  else bad "$r tiny: epsilon-sharpness max rel diff $m over $n values ($(esharp "gpu-$r" | tr '\n' ' '))"; fi
done

# 2. every recipe on the GPU
for cfgfile in "$configs"/*.cfg; do
  r=$(basename "$cfgfile" .cfg)
  if ! run "cpu-t-$r" "$r" --set size=test --set steps=12 --set warmup=3 --set lr=1e-2 --set stats_every=4 ||
     ! run "gpu-t-$r" "$r" --set size=test --set steps=12 --set warmup=3 --set lr=1e-2 --set stats_every=4 --set device=gpu; then
    bad "$r: run failed: $(tail -1 "$tmp/gpu-t-$r.out")"; continue
  fi
  read -r m n < <(maxrel "cpu-t-$r" "gpu-t-$r")
  stats_cpu=$(grep -c '"stats":\[{' "$tmp/cpu-t-$r/log.jsonl"); stats_gpu=$(grep -c '"stats":\[{' "$tmp/gpu-t-$r/log.jsonl")
  if [ "$n" = 12 ] && awk -v m="$m" 'BEGIN { exit !(m <= 5e-2) }' && [ "$stats_gpu" = "$stats_cpu" ]; then
    ok "$r on the GPU: 12 steps, max rel diff to the CPU $m, $stats_gpu statistics lines"
  else bad "$r: max rel diff $m over $n steps; statistics lines cpu $stats_cpu gpu $stats_gpu"; fi
done
# nvfp4's GEMMs on NVFP4's bf16 images, none on the reference (exmy_cuda_qgemm)
paths=$(grep -o '[0-9]* on NVFP4 bf16 images, [0-9]* on the reference' "$tmp/gpu-t-nvfp4.out")
if [[ "$paths" =~ ^[1-9][0-9]*\ on\ NVFP4\ bf16\ images,\ 0\ on ]]; then
  ok "nvfp4 on the GPU: $paths"
else bad "nvfp4 on the GPU: not every GEMM on NVFP4's bf16 images (${paths:-no path counts})"; fi

# 3. checkpoints across devices
common=(--set size=tiny --set steps=20 --set warmup=5 --set lr=1e-3)
run full-gpu bf16 "${common[@]}" --set device=gpu
run full-cpu bf16 "${common[@]}"
run int-gpu bf16 "${common[@]}" --set device=gpu --set interrupt_at=10
cp -r "$tmp/int-gpu" "$tmp/int-gpu-to-cpu"
"$train" --resume "$tmp/int-gpu" --set progress=0 --set device=gpu > "$tmp/res1.out" 2>&1
if cmp -s <(losses full-gpu) <(losses int-gpu); then ok "GPU interrupted at 10 and resumed on the GPU: 20 losses bit-identical"
else bad "GPU resume differs: $(diff <(losses full-gpu) <(losses int-gpu) | head -3)"; fi
"$train" --resume "$tmp/int-gpu-to-cpu" --set progress=0 --set device=cpu > "$tmp/res2.out" 2>&1
read -r m n < <(maxrel full-gpu int-gpu-to-cpu 11)
if [ "$n" = 10 ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-3) }'; then ok "GPU checkpoint resumed on the CPU: steps 11-20 within $m of the GPU run"
else bad "GPU -> CPU resume: $m over $n steps ($(tail -1 "$tmp/res2.out"))"; fi
run int-cpu bf16 "${common[@]}" --set interrupt_at=10
"$train" --resume "$tmp/int-cpu" --set progress=0 --set device=gpu > "$tmp/res3.out" 2>&1
read -r m n < <(maxrel full-cpu int-cpu 11)
if [ "$n" = 10 ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-3) }'; then ok "CPU checkpoint resumed on the GPU: steps 11-20 within $m of the CPU run"
else bad "CPU -> GPU resume: $m over $n steps ($(tail -1 "$tmp/res3.out"))"; fi

# 4. fused attention
if run flash-bf16 bf16 "${common[@]}" --set device=gpu --set attention_kernel=flash; then
  read -r m n < <(maxrel full-gpu flash-bf16)
  if [ "$n" = 20 ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-2) }'; then ok "flash vs materialised attention, bf16 tiny: 20 losses within $m"
  else bad "flash attention: $m over $n steps"; fi
else bad "flash run failed: $(tail -1 "$tmp/flash-bf16.out")"; fi
# quantized attention fused for the other rounding modes the recipes use: P and
# dS rounded rz (the paper's bit masking) and sr (the same Philox words as the
# materialised path), so only the order of the sums differs
for mode in rz sr; do
  if run "mat-e8m3-$mode" e8m3 "${common[@]}" --set device=gpu --set rounding=$mode &&
     run "flash-e8m3-$mode" e8m3 "${common[@]}" --set device=gpu --set rounding=$mode \
       --set attention_kernel=flash; then
    read -r m n < <(maxrel "mat-e8m3-$mode" "flash-e8m3-$mode")
    if [ "$n" = 20 ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-2) }'; then
      ok "flash vs materialised attention, e8m3 $mode tiny: 20 losses within $m"
    else bad "flash attention e8m3 $mode: $m over $n steps"; fi
  else bad "e8m3 $mode flash run failed: $(tail -1 "$tmp/flash-e8m3-$mode.out")"; fi
done

# 5. CUDA graphs: the same bits as eager launches
values() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//; s/"ms":[^,}]*,\{0,1\}//' "$tmp/$1/log.jsonl"; }
for spec in "bf16 flash" "e8m3 materialized" "fp32 materialized" "fp8-current flash" \
            "msamp-o1 materialized" "fp8-te flash" "fp8-coat materialized" "mxfp8 flash" \
            "mxfp4 materialized"; do
  set -- $spec
  g=(bf16 "${common[@]}" --set device=gpu --set attention_kernel=$2 --set stats_every=7 --set val_every=5)
  g[0]=$1
  if run "graph1-$1-$2" "${g[@]}" --set cuda_graph=1 && run "graph0-$1-$2" "${g[@]}" --set cuda_graph=0; then
    if ! grep -q 'CUDA graphs: on' "$tmp/graph1-$1-$2.out" || ! grep -q 'CUDA graphs: off' "$tmp/graph0-$1-$2.out"; then
      bad "cuda_graph $1 $2: not on with 1 and off with 0 ($(grep 'CUDA graphs' "$tmp/graph1-$1-$2.out"))"
    elif [ "$(grep -c '"loss"' "$tmp/graph1-$1-$2/log.jsonl")" = 20 ] &&
         cmp -s <(values "graph1-$1-$2") <(values "graph0-$1-$2"); then
      ok "cuda_graph = 1 vs 0, $1 $2 tiny: 20 steps (stats, validation between), every logged value bit-identical"
    else bad "cuda_graph $1 $2 differs: $(diff <(values "graph1-$1-$2") <(values "graph0-$1-$2") | head -3)"; fi
  else bad "cuda_graph $1 $2 run failed: $(tail -1 "$tmp/graph1-$1-$2.out") $(tail -1 "$tmp/graph0-$1-$2.out")"; fi
done
if run graph-bf16-sr bf16-sr "${common[@]}" --set device=gpu --set steps=3 &&
   grep -q 'CUDA graphs: off' "$tmp/graph-bf16-sr.out"; then ok "bf16-sr (per-step sr offsets): CUDA graphs off, eager"
else bad "bf16-sr: $(grep 'CUDA graphs' "$tmp/graph-bf16-sr.out") $(tail -1 "$tmp/graph-bf16-sr.out")"; fi

# 6. lean activations under the fused attention: the same bits as the full
# layout, in less memory (2, which recomputes, in no more than 1)
arena() { grep -o 'activation arena: [0-9.]*' "$tmp/$1.out" | grep -o '[0-9.]*$'; }
for spec in "fp32" "fp32 swiglu_scale=row" "bf16" "e8m3 rounding=sr" "mxfp8" "fp32 n_kv_heads=2" \
            "fp8-smooth-swiglu" "fp32 activations=bf16" "bf16 activations=bf16"; do
  set -- $spec
  name="lean-$1${2:+-${2//[=_]/}}"
  g=("$1" "${common[@]}" --set steps=8 --set warmup=2 --set device=gpu --set attention_kernel=flash
     --set stats_every=3 --set val_every=4)
  [ -n "${2:-}" ] && g+=(--set "$2")
  if run "$name-2" "${g[@]}" --set lean_activations=2 && run "$name-1" "${g[@]}" --set lean_activations=1 &&
     run "$name-0" "${g[@]}" --set lean_activations=0; then
    a2=$(arena "$name-2"); a1=$(arena "$name-1"); a0=$(arena "$name-0")
    if [ "$(grep -c '"loss"' "$tmp/$name-1/log.jsonl")" = 8 ] &&
       cmp -s <(values "$name-1") <(values "$name-0") && cmp -s <(values "$name-2") <(values "$name-0") &&
       awk -v a="$a2" -v b="$a1" -v c="$a0" 'BEGIN { exit !(a > 0 && a <= b && b < c) }'; then
      ok "lean_activations = 2, 1 vs 0, flash, $spec tiny: 8 steps (stats, validation), every logged value bit-identical; arena $a2, $a1 vs $a0 MiB"
    else bad "lean_activations $spec: arena $a2, $a1 vs $a0 MiB; $(diff <(values "$name-1") <(values "$name-0") | head -3) $(diff <(values "$name-2") <(values "$name-0") | head -3)"; fi
  else bad "lean_activations $spec run failed: $(tail -1 "$tmp/$name-2.out") $(tail -1 "$tmp/$name-1.out") $(tail -1 "$tmp/$name-0.out")"; fi
done

# bf16 activations under the bf16 recipe: SwiGLU's tensors and O stored in
# bf16 when lean (the lines above: the same bits as float32 storage at 0)
if grep -q "stored in bf16: SwiGLU's tensors yes, the attention output yes" "$tmp/lean-bf16-activationsbf16-1.out" &&
   grep -q "stored in bf16: SwiGLU's tensors no, the attention output no" "$tmp/lean-bf16-activationsbf16-0.out"; then
  ok "activations = bf16, bf16, lean: SwiGLU's tensors and O stored in bf16 (float32 at lean_activations = 0)"
else bad "activations = bf16 storage: $(grep "stored in bf16" "$tmp"/lean-bf16-activationsbf16-*.out)"; fi

# 7. activations = bf16 (PyTorch autocast's bf16) on the GPU: materialised
# against the CPU twin; the fused attention (FlashAttention's roundings, not
# model.c's S, dP and dS) against the materialised; grouped-query attention
# below
act=(bf16 "${common[@]}" --set activations=bf16)
if run act-cpu "${act[@]}" && run act-gpu "${act[@]}" --set device=gpu &&
   run act-flash "${act[@]}" --set device=gpu --set attention_kernel=flash; then
  read -r m n < <(maxrel act-cpu act-gpu)
  read -r mf nf < <(maxrel act-gpu act-flash)
  read -r m32 n32 < <(maxrel full-gpu act-gpu)
  if [ "$n" = 20 ] && [ "$nf" = 20 ] && awk -v m="$m" -v f="$mf" 'BEGIN { exit !(m <= 1e-2 && f <= 1e-2) }' &&
     [ "$(losses act-gpu | head -1)" != "$(losses full-gpu | head -1)" ]; then
    ok "activations = bf16, bf16 tiny: GPU vs CPU 20 losses within $m, flash vs materialised within $mf (vs activations = f32: $m32)"
  else bad "activations = bf16: GPU vs CPU $m over $n, flash vs materialised $mf over $nf; first losses $(losses act-gpu | head -1) / f32 $(losses full-gpu | head -1)"; fi
else bad "activations = bf16 run failed: $(tail -1 "$tmp/act-cpu.out") $(tail -1 "$tmp/act-gpu.out") $(tail -1 "$tmp/act-flash.out")"; fi
# grouped-query attention under bf16 activations: the fused kernel rounds
# each head's dK and dV before the group's sum (bf16 P and dS); against the
# materialised model.c definition; with sr P and dS it is refused
if run act-gqa-gpu "${act[@]}" --set n_kv_heads=2 --set device=gpu &&
   run act-gqa-flash "${act[@]}" --set n_kv_heads=2 --set device=gpu --set attention_kernel=flash; then
  read -r mg ng < <(maxrel act-gqa-gpu act-gqa-flash)
  if [ "$ng" = 20 ] && awk -v m="$mg" 'BEGIN { exit !(m <= 1e-2) }'; then
    ok "activations = bf16, GQA (n_kv_heads 2), bf16 tiny: flash vs materialised 20 losses within $mg"
  else bad "activations = bf16 GQA: flash vs materialised $mg over $ng"; fi
else bad "activations = bf16 GQA run failed: $(tail -1 "$tmp/act-gqa-gpu.out") $(tail -1 "$tmp/act-gqa-flash.out")"; fi
err=$("$train" --config "$configs/bf16-sr.cfg" --set data="$data" --set val_data= --set progress=0 \
        --set size=tiny --set n_kv_heads=2 --set activations=bf16 --set device=gpu \
        --set attention_kernel=flash --set run_dir="$tmp/act-gqa-sr" 2>&1 >/dev/null) && rc=0 || rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "grouped-query" <<<"$err" && [ ! -e "$tmp/act-gqa-sr" ]; then
  ok "activations = bf16, GQA, flash, sr attention: exit 2: $err"
else bad "activations = bf16 GQA flash sr: rc $rc: $err"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
