#!/usr/bin/env bash
# experiments/studies/paper/plot.sh on the campaign's committed runs: the four
# figures drawn as PNG and SVG, the gradient-norm figure with a key entry per run
# that has a log, a TAG and REGEX drawing the matching runs alone, the runs'
# folder otherwise unchanged; bad input one line, exit 2.
set -u
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
plot=$(pwd)/experiments/studies/paper/plot.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -rL experiments/results/paper-120m "$tmp/runs"  # -L: real files, not links into the runfiles
rm -f "$tmp"/runs/paper_*
before=$(cd "$tmp/runs" && find . -type f | sort | xargs md5sum)
if ! command -v gnuplot >/dev/null; then echo "skip: no gnuplot"; exit 0; fi
names=$(bash "$plot" "$tmp/runs" 2>"$tmp/err") || bad "plot.sh failed: $(cat "$tmp/err")"
for n in paper_train_loss paper_val_loss paper_grad_norm paper_sharpness; do
  if grep -qx "$n" <<<"$names" && [ -s "$tmp/runs/$n.png" ] && grep -q "<svg" "$tmp/runs/$n.svg"; then
    ok "$n drawn (PNG and SVG)"; else bad "$n missing"; fi
done
runs=$(ls -d "$tmp"/runs/*/ | while read -r d; do [ -f "$d/log.jsonl" ] && echo x; done | wc -l)
lines=$(grep -c "<text>[^<]*-s[0-9]*</text>" "$tmp/runs/paper_grad_norm.svg")
[ "$runs" -gt 0 ] && [ "$lines" -ge "$runs" ] && ok "gradient norm: a key entry for each of the $runs runs" \
  || bad "gradient norm: $lines key entries for $runs runs"
after=$(cd "$tmp/runs" && find . -type f ! -name 'paper_*' | sort | xargs md5sum)
[ "$before" = "$after" ] && ok "the runs' files unchanged" || bad "plot.sh changed the runs' files"
# TAG and REGEX: only the matching runs, into paper_TAG_*
names=$(bash "$plot" "$tmp/runs" seed1 '-s1$' 2>"$tmp/err") || bad "plot.sh with a tag failed: $(cat "$tmp/err")"
keys=$(grep -o "<text>[^<]*-s[0-9]*</text>" "$tmp/runs/paper_seed1_grad_norm.svg" | sort -u)
want=$(ls -d "$tmp"/runs/*-s1/ | while read -r d; do [ -f "$d/log.jsonl" ] && echo x; done | wc -l)
if grep -qx paper_seed1_val_loss <<<"$names" && [ -s "$tmp/runs/paper_seed1_val_loss.png" ] &&
   [ "$(grep -c . <<<"$keys")" = "$want" ] && ! grep -q -- "-s[02-9]</text>" <<<"$keys"; then
  ok "a tag and a regex: paper_seed1_* with the $want seed-1 runs alone"
else bad "tagged figures: $names / keys: $keys"; fi
for args in "x" "x (" "x zzz-no-run" "bad/tag -s1\$"; do
  out=$(bash "$plot" "$tmp/runs" $args 2>&1); rc=$?
  [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && ok "bad tag or regex '$args': one line, exit 2" \
    || bad "bad tag or regex '$args': exit $rc: $out"
done
mkdir "$tmp/empty"
for arg in "" "$tmp/empty" "$tmp/nowhere"; do
  out=$(bash "$plot" $arg 2>&1); rc=$?
  [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && ok "bad input '${arg##*/}': one line, exit 2" \
    || bad "bad input '$arg': exit $rc: $out"
done
exit $fail
