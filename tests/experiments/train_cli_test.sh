#!/usr/bin/env bash
# The train binary end to end on the `test` size (training text: a source file):
#  - resume after an interruption (SIGINT at step 4, then --resume) gives the
#    losses of an uninterrupted run bit for bit, for recipes with state
#    (delayed scaling + COAT moments, stochastic rounding);
#  - divergence ends the run with exit 0 and "diverged at step N";
#  - bad input (unknown key, missing file) is one line on stderr and exit 2.
set -euo pipefail
train=experiments/train
data=experiments/model.c
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
cp experiments/model.c "$tmp/textdir/a.txt"; cp experiments/configs/fp8-te.cfg "$tmp/textdir/b.txt"
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

# bad input: exit 2, one line
bad "unknown key" --config experiments/configs/fp32.cfg --set no_such_key=1 --set run_dir="$tmp/bad"
bad "missing config" --config /nonexistent.cfg
bad "missing data" --config experiments/configs/fp32.cfg --set size=test --set data=/nonexistent --set run_dir="$tmp/bad"
bad "unknown format" --config experiments/configs/fp32.cfg --set format_w=e9m9 --set run_dir="$tmp/bad"

echo "$passed passed, $fail failed"
[ $fail -eq 0 ]
