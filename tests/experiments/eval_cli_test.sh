#!/usr/bin/env bash
# The evaluations of kept checkpoints, end to end on the `test` size:
#  - sharpness: one JSON line per checkpoint, the step of the checkpoint read,
#    bit-identical on a second call, sharper with a larger rho's KL; bad input exit 2;
#  - shadow: the control (continuing in the run's own recipe) has gap 0 exactly at
#    every checkpoint; the bf16 continuation has a nonzero gap; a threshold below
#    the gaps flags every check; checks are not repeated; bad input exit 2.
# Usage: eval_cli_test.sh [TRAIN SHARPNESS]
set -uo pipefail
train=${1:-experiments/trainer/train} sharpness=${2:-experiments/studies/sharpness} shadow=experiments/studies/shadow.sh
export SHADOW_TRAIN=$train
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0; passed=0
ok() { echo "ok   $*"; passed=$((passed+1)); }
ko() { echo "FAIL $*"; fail=$((fail+1)); }

run=$tmp/run
"$train" --config experiments/configs/fp8-te.cfg --set size=test --set data=experiments/trainer/model.c \
  --set val_data= --set batch_size=4 --set steps=12 --set warmup=2 --set lr=1e-2 --set val_every=0 \
  --set val_batches=2 --set progress=0 --set stats_every=0 --set ckpt_every=4 --set ckpt_keep=1 \
  --set run_dir="$run" >/dev/null || { echo "FAIL training"; exit 1; }

# ---- sharpness
a=$("$sharpness" "$run" --ckpt "$run/ckpt-8.bin" --directions 2 --batches 2) || ko "sharpness exited $?"
b=$("$sharpness" "$run" --ckpt "$run/ckpt-8.bin" --directions 2 --batches 2)
c=$("$sharpness" "$run" --directions 2 --batches 2) # ckpt.bin: step 12
big=$("$sharpness" "$run" --ckpt "$run/ckpt-8.bin" --directions 2 --batches 2 --rho 0.2)
num() { sed -n "s/.*\"$1\":\([-+0-9.eE]*\).*/\1/p" <<<"$2"; }
if [[ $a == "$b" && $(num step "$a") == 8 && $(num step "$c") == 12 && $(num tokens "$a") == 128 ]] &&
   awk -v s="$(num sharpness "$a")" -v k="$(num kl_mean "$a")" -v K="$(num kl_mean "$big")" 'BEGIN { exit !(s > 0 && K > 4 * k) }'; then
  ok "sharpness: $a"
else ko "sharpness: '$a' / '$b' / '$c' / '$big'"; fi
bad() { # bad WHAT CMD...: exit 2 with one line on stderr
  local what=$1 err rc=0; shift
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  if [[ $rc == 2 && $(wc -l <<<"$err") == 1 ]]; then ok "$what: exit 2: $err"; else ko "$what: rc $rc: $err"; fi
}
bad "sharpness without a checkpoint" "$sharpness" "$tmp/nonexistent"
bad "sharpness, bad rho" "$sharpness" "$run" --rho -1
bad "sharpness, unknown tensor" "$sharpness" "$run" --tensors wq,nosuch
bad "sharpness, unknown option" "$sharpness" "$run" --nosuch 1

# ---- shadow
cp -r "$run" "$tmp/ctl"
out=$("$shadow" "$tmp/ctl" --steps 3 --recipe fp8-te) || ko "shadow (control) exited $?"
if [[ $(cut -d, -f1,5 "$tmp/ctl/shadow.csv" | tr '\n' ' ') == "step,gap 0,0 4,0 8,0 " ]]; then
  ok "shadow control (the run's own recipe): gap 0 at steps 0, 4, 8 ($out)"
else ko "shadow control: $(cat "$tmp/ctl/shadow.csv")"; fi
out=$("$shadow" "$run" --steps 3) || ko "shadow exited $?"
if [[ $(cut -d, -f1 "$run/shadow.csv" | tr '\n' ' ') == "step 0 4 8 " ]] &&
   awk -F, 'NR > 1 { if ($5 == 0 || $5 == "" || $7 != 0) exit 1 }' "$run/shadow.csv" &&
   grep -q '"status":"stopped","steps":11' "$run/shadow/8/summary.json"; then
  ok "shadow bf16: $(tail -n +2 "$run/shadow.csv" | cut -d, -f1,5 | tr '\n' ' ')($out)"
else ko "shadow bf16: $(cat "$run/shadow.csv")"; fi
sum=$(cat "$run"/shadow/*/log.jsonl | md5sum)
out=$("$shadow" "$run" --steps 3 --threshold -1)
if [[ $(cat "$run"/shadow/*/log.jsonl | md5sum) == "$sum" && $out == *"FLAGGED"* ]] &&
   awk -F, 'NR > 1 && $7 != 1 { exit 1 }' "$run/shadow.csv"; then
  ok "shadow: not repeated; threshold -1 flags every check: $out"
else ko "shadow rerun/flags: $out: $(cat "$run/shadow.csv")"; fi
bad "shadow, not a run" "$shadow" "$tmp/nonexistent"
bad "shadow, unknown recipe" "$shadow" "$run" --recipe nosuch
mkdir -p "$tmp/nokeep" && cp "$run/config.cfg" "$run/log.jsonl" "$tmp/nokeep/"
bad "shadow without kept checkpoints" "$shadow" "$tmp/nokeep"

echo "$passed passed, $fail failed"
[ $fail -eq 0 ]
