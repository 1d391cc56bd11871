#!/usr/bin/env bash
# The train binary end to end on the `test` size (training text: a source file):
#  - resume after an interruption (SIGINT at step 4, then --resume) gives the
#    losses of an uninterrupted run bit for bit, for recipes with state
#    (delayed scaling + COAT moments, stochastic rounding);
#  - divergence ends the run with exit 0 and "diverged at step N";
#  - bad input (unknown key, missing file) is one line on stderr and exit 2;
#  - ckpt_keep keeps ckpt-STEP.bin, stop_at stops early with the schedule of `steps`,
#    --recipe resumes a checkpoint under another recipe (its delayed-scaling states
#    dropped; under the same recipe they are kept and the losses bit-identical);
#  - msamp-o1 (grad_format): the forward of step 1 is fp8-current's, the update is
#    not (on the GPU: tests/experiments/gpu/trainer_gpu_test.c, bit for bit);
#  - activations = bf16: resumed bit for bit from its config.cfg, another first loss
#    than the bf16 recipe's, a resume under activations = f32 says so; refused
#    with Smooth-SwiGLU (on the GPU: tests/experiments/gpu/train_gpu_test.sh).
# Usage: train_cli_test.sh [TRAIN]
set -euo pipefail
train=${1:-experiments/trainer/train}
data=experiments/trainer/model.c
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--set size=test --set data=$data --set val_data= --set batch_size=4 --set steps=8
        --set warmup=2 --set val_every=4 --set val_batches=2 --set stats_every=3 --set progress=0
        --set lr=3e-3)
fail=0; passed=0

losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/log.jsonl"; }

for recipe in fp32 fp8-coat e8m3-sr mxfp8; do
  cfg=experiments/configs/$recipe.cfg
  "$train" --config "$cfg" "${common[@]}" --set run_dir="$tmp/full-$recipe" >/dev/null
  "$train" --config "$cfg" "${common[@]}" --set run_dir="$tmp/cut-$recipe" --set interrupt_at=4 >/dev/null
  grep -q '"status":"interrupted","steps":4' "$tmp/cut-$recipe/summary.json" || { echo "FAIL $recipe: not interrupted at 4"; fail=$((fail+1)); continue; }
  "$train" --config "$cfg" "${common[@]}" --set run_dir="$tmp/cut-$recipe" --resume >/dev/null
  if diff <(losses "$tmp/full-$recipe") <(losses "$tmp/cut-$recipe") >/dev/null; then
    echo "ok   resume $recipe: 8 losses bit-identical ($(losses "$tmp/full-$recipe" | tail -1))"
    passed=$((passed+1))
  else
    echo "FAIL resume $recipe:"; diff <(losses "$tmp/full-$recipe") <(losses "$tmp/cut-$recipe") || true
    fail=$((fail+1))
  fi
done

# quantization statistics are logged on statistics steps
if grep -q '"stats":\[{"site":"l0.q","use":"fwd_x","format":"float8_e4m3fn"' "$tmp/full-fp8-coat/log.jsonl"; then
  echo "ok   statistics lines in the log"; passed=$((passed+1))
else echo "FAIL no statistics in the log"; fail=$((fail+1)); fi

# gradient accumulation: batch 8 in one micro-batch = batch 4 in two (to float rounding)
"$train" --config experiments/configs/fp32.cfg "${common[@]}" --set steps=4 --set batch_size=8 --set run_dir="$tmp/acc1" >/dev/null
"$train" --config experiments/configs/fp32.cfg "${common[@]}" --set steps=4 --set batch_size=4 --set grad_accum=2 --set run_dir="$tmp/acc2" >/dev/null
worst=$(paste <(losses "$tmp/acc1" | cut -d: -f3) <(losses "$tmp/acc2" | cut -d: -f3) |
        awk '{d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d} END {printf "%.2e", w + 0}')
if awk -v w="$worst" 'BEGIN {exit !(w < 1e-5)}'; then
  echo "ok   gradient accumulation: 4 losses of 8x1 and 4x2 agree (worst rel $worst)"; passed=$((passed+1))
else echo "FAIL gradient accumulation: worst rel $worst"; fail=$((fail+1)); fi

# divergence: a huge learning rate
out=$("$train" --config experiments/configs/fp32.cfg "${common[@]}" --set lr=1000 --set grad_clip=0 \
      --set run_dir="$tmp/div" --set steps=20) && rc=0 || rc=$?
if [ $rc -eq 0 ] && grep -q "diverged at step" <<<"$out" && grep -q '"status":"diverged"' "$tmp/div/summary.json" \
   && grep -q '"event":"diverged"' "$tmp/div/log.jsonl"; then
  echo "ok   divergence: $(grep -o 'diverged at step [0-9]*' <<<"$out"), exit 0"; passed=$((passed+1))
else echo "FAIL divergence (rc $rc): $out"; fail=$((fail+1)); fi

bad() {
  local what=$1; shift
  local err rc=0
  err=$("$train" "$@" 2>&1 >/dev/null) || rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ]; then echo "ok   $what: exit 2: $err"; passed=$((passed+1))
  else echo "FAIL $what: rc $rc: $err"; fail=$((fail+1)); fi
}
# other data sources: a directory of text files, an llm.c shard (uint16 tokens)
mkdir -p "$tmp/textdir"
cp experiments/trainer/model.c "$tmp/textdir/a.txt"; cp experiments/configs/fp8-te.cfg "$tmp/textdir/b.txt"
if "$train" --config experiments/configs/fp32.cfg "${common[@]}" --set steps=2 --set data="$tmp/textdir" \
     --set run_dir="$tmp/dir" >/dev/null; then echo "ok   a directory of text files"; passed=$((passed+1))
else echo "FAIL directory data"; fail=$((fail+1)); fi
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 - "$tmp/shard.bin" <<'PY'
import struct, sys
tokens = [(i * 7919) % 300 for i in range(4000)]
header = [20240520, 1, len(tokens)] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header)); f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
  if "$train" --config experiments/configs/fp32.cfg "${common[@]}" --set steps=2 --set vocab=300 \
       --set data="$tmp/shard.bin" --set run_dir="$tmp/shard" >/dev/null; then
    echo "ok   an llm.c shard (uint16 tokens, vocab 300)"; passed=$((passed+1))
  else echo "FAIL llm.c shard"; fail=$((fail+1)); fi
  bad "shard token beyond vocab" --config experiments/configs/fp32.cfg --set size=test --set data="$tmp/shard.bin" --set run_dir="$tmp/bad"
fi

# ckpt_keep, stop_at, --recipe (the shadow check's continuation)
"$train" --config experiments/configs/fp8-te.cfg "${common[@]}" --set ckpt_every=2 --set ckpt_keep=1 \
  --set run_dir="$tmp/keep" >/dev/null
kept=$(cd "$tmp/keep" && ls ckpt-*.bin | sort -V | tr '\n' ' ')
if [ "$kept" = "ckpt-0.bin ckpt-2.bin ckpt-4.bin ckpt-6.bin ckpt-8.bin " ] && cmp -s "$tmp/keep/ckpt-8.bin" "$tmp/keep/ckpt.bin" \
   && ! cmp -s "$tmp/keep/ckpt-4.bin" "$tmp/keep/ckpt.bin"; then
  echo "ok   ckpt_keep: $kept"; passed=$((passed+1))
else echo "FAIL ckpt_keep: $kept"; fail=$((fail+1)); fi
cont() { # cont NAME RECIPE_FILE: ckpt-4 of the fp8-te run continued to step 6 under RECIPE_FILE
  mkdir -p "$tmp/$1" && cp "$tmp/keep/config.cfg" "$tmp/$1/" && cp "$tmp/keep/ckpt-4.bin" "$tmp/$1/ckpt.bin"
  "$train" --resume "$tmp/$1" --recipe "$2" --set stop_at=6 --set ckpt_keep=0 --set progress=0 2>"$tmp/$1.err" >/dev/null
}
cont same experiments/configs/fp8-te.cfg
if diff <(losses "$tmp/keep" | sed -n '5,6p') <(losses "$tmp/same") >/dev/null && [ ! -s "$tmp/same.err" ] \
   && grep -q '"status":"stopped","steps":6' "$tmp/same/summary.json"; then
  echo "ok   --recipe of the run's own recipe, stop_at 6: steps 5-6 bit-identical, states kept"; passed=$((passed+1))
else echo "FAIL same-recipe continuation: $(cat "$tmp/same.err")"; diff <(losses "$tmp/keep" | sed -n '5,6p') <(losses "$tmp/same"); fail=$((fail+1)); fi
cont bf16 experiments/configs/bf16.cfg
if grep -q "delayed-scaling states are dropped" "$tmp/bf16.err" && [ "$(losses "$tmp/bf16" | wc -l)" = 2 ] \
   && ! diff <(losses "$tmp/keep" | sed -n '5,6p') <(losses "$tmp/bf16") >/dev/null \
   && grep -q '^format_w = bf16$' "$tmp/bf16/config.cfg" && grep -q '^scaling = none$' "$tmp/bf16/config.cfg"; then
  echo "ok   --recipe bf16 from an fp8-te checkpoint: $(cat "$tmp/bf16.err")"; passed=$((passed+1))
else echo "FAIL bf16 continuation: $(cat "$tmp/bf16.err")"; fail=$((fail+1)); fi
# and the other way: a bf16 checkpoint (no states) continued under delayed scaling
"$train" --config experiments/configs/bf16.cfg "${common[@]}" --set steps=2 --set run_dir="$tmp/b2" >/dev/null
if "$train" --resume "$tmp/b2" --recipe experiments/configs/fp8-te.cfg --set steps=4 --set progress=0 >/dev/null 2>&1 \
   && grep -q '"status":"completed","steps":4' "$tmp/b2/summary.json"; then
  echo "ok   --recipe fp8-te from a bf16 checkpoint"; passed=$((passed+1))
else echo "FAIL fp8-te continuation of a bf16 checkpoint"; fail=$((fail+1)); fi

# msamp-o1: same GEMM recipe as fp8-current, so step 1 (before any update) has its loss; then FP8
# gradients (AdamW's first step is lr * sign(g), blind to their rounding: compare step 3)
"$train" --config experiments/configs/msamp-o1.cfg "${common[@]}" --set steps=3 --set run_dir="$tmp/msamp" >/dev/null
"$train" --config experiments/configs/fp8-current.cfg "${common[@]}" --set steps=3 --set run_dir="$tmp/cur" >/dev/null
if [ "$(losses "$tmp/msamp" | head -1)" = "$(losses "$tmp/cur" | head -1)" ] &&
   [ "$(losses "$tmp/msamp" | sed -n 3p)" != "$(losses "$tmp/cur" | sed -n 3p)" ]; then
  echo "ok   msamp-o1: step 1 loss = fp8-current's, step 3 differs ($(losses "$tmp/msamp" | sed -n 3p) vs $(losses "$tmp/cur" | sed -n 3p | cut -d: -f3))"
  passed=$((passed+1))
else echo "FAIL msamp-o1 vs fp8-current: $(losses "$tmp/msamp") / $(losses "$tmp/cur")"; fail=$((fail+1)); fi

# activations = bf16 (the CPU twin of PyTorch autocast's bf16): resume, and a change on resume
act=(--config experiments/configs/bf16.cfg "${common[@]}" --set activations=bf16)
"$train" "${act[@]}" --set run_dir="$tmp/act-full" >/dev/null
"$train" "${act[@]}" --set run_dir="$tmp/act-cut" --set interrupt_at=4 >/dev/null
cp -r "$tmp/act-cut" "$tmp/act-switch"
"$train" --resume "$tmp/act-cut" --set progress=0 >/dev/null
"$train" --config experiments/configs/bf16.cfg "${common[@]}" --set steps=1 --set run_dir="$tmp/act-f32" >/dev/null
if diff <(losses "$tmp/act-full") <(losses "$tmp/act-cut") >/dev/null && grep -q '^activations = bf16$' "$tmp/act-full/config.cfg" \
   && [ "$(losses "$tmp/act-full" | head -1)" != "$(losses "$tmp/act-f32" | head -1)" ]; then
  echo "ok   activations = bf16: resumed from its config.cfg, 8 losses bit-identical; step 1 $(losses "$tmp/act-full" | head -1 | cut -d: -f3) vs bf16's $(losses "$tmp/act-f32" | head -1 | cut -d: -f3)"
  passed=$((passed+1))
else echo "FAIL activations = bf16 resume"; diff <(losses "$tmp/act-full") <(losses "$tmp/act-cut"); fail=$((fail+1)); fi
"$train" --resume "$tmp/act-switch" --set activations=f32 --set progress=0 2>"$tmp/act-switch.err" >/dev/null
if grep -q "resuming under another recipe (activations: bf16 -> f32)" "$tmp/act-switch.err" \
   && grep -q '^activations = f32$' "$tmp/act-switch/config.cfg"; then
  echo "ok   a resume under activations = f32 says so: $(cat "$tmp/act-switch.err")"; passed=$((passed+1))
else echo "FAIL activations change on resume: $(cat "$tmp/act-switch.err")"; fail=$((fail+1)); fi

# bad input: exit 2, one line
bad "unknown key" --config experiments/configs/fp32.cfg --set no_such_key=1 --set run_dir="$tmp/bad"
bad "missing config" --config /nonexistent.cfg
bad "missing data" --config experiments/configs/fp32.cfg --set size=test --set data=/nonexistent --set run_dir="$tmp/bad"
bad "unknown format" --config experiments/configs/fp32.cfg --set format_w=e9m9 --set run_dir="$tmp/bad"
bad "hadamard on one dW input" --config experiments/configs/nvfp4.cfg --set format_a=fp32 --set run_dir="$tmp/bad"
bad "2-D blocks without block scaling" --config experiments/configs/mxfp4.cfg --set weight_block_rows=32 --set run_dir="$tmp/bad"
bad "unknown moments" --config experiments/configs/fp8-deepseek.cfg --set moments=fp8 --set run_dir="$tmp/bad"
bad "unknown activations" --config experiments/configs/bf16.cfg --set activations=fp16 --set run_dir="$tmp/bad"
bad "activations = bf16 with Smooth-SwiGLU" --config experiments/configs/fp8-smooth-swiglu.cfg --set activations=bf16 --set run_dir="$tmp/bad"
bad "missing --recipe file" --config experiments/configs/fp32.cfg --recipe /nonexistent.cfg --set run_dir="$tmp/bad"

echo "$passed passed, $fail failed"
[ $fail -eq 0 ]
