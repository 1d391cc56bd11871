#!/usr/bin/env bash
# The sweep runner on a 2-point grid of the `test` model (a few steps each):
# it runs both points, a diverged point does not stop the sweep, a second
# invocation skips finished points and resumes an interrupted one, the CSVs
# have the right rows, and bad input exits 2 with one line on stderr.
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
rf=${RUNFILES_DIR:-$0.runfiles}/exmy
sweep=$rf/experiments/sweep.sh
export SWEEP_TRAIN=$rf/experiments/train

# A private workspace: the recipe configs, a text corpus, the study config.
ws=${TEST_TMPDIR:-$(mktemp -d)}/ws
mkdir -p "$ws/experiments" "$ws/data"
ln -sfn "$rf/experiments/configs" "$ws/experiments/configs"
for i in $(seq 300); do echo "the quick brown fox $i jumps over the lazy dog; sweep test line $i."; done >"$ws/data/t.txt"
export BUILD_WORKSPACE_DIRECTORY=$ws
# diverge_delta 1e-9 against a learning rate of 0.3: the second point diverges within a few steps
cat >"$ws/s.cfg" <<EOF
study = t
recipes = bf16
lrs = 1e-3
vary diverge_delta = 0 1e-9
set size = test
set steps = 6
set warmup = 1
set data = $ws/data/t.txt
set val_data =
set val_every = 3
set val_batches = 1
set batch_size = 2
quick lrs = 0.3
EOF

"$sweep" "$ws/s.cfg" --quick --jobs 2 >"$ws/out" 2>"$ws/err" || fail "sweep exited $?: $(tail -3 "$ws/err")"
res=$ws/experiments/results/t-quick runs=$ws/experiments/runs/sweeps/t-quick
[[ -f $res/summary.csv ]] || fail "no summary.csv"
[[ $(wc -l <"$res/summary.csv") == 3 ]] || fail "summary.csv: want header + 2 rows: $(cat "$res/summary.csv")"
head -1 "$res/summary.csv" | grep -q '^point,group,recipe,variant,overrides,lr,seed,status,steps,final_train_loss,final_val_loss,diverged_step,tokens_per_s$' ||
  fail "summary.csv header: $(head -1 "$res/summary.csv")"
ok=$(grep -c '^bf16_lr0.3_s1_diverge_delta-0,.*,0.3,1,completed,6,[0-9.]*,[0-9.]*,,[0-9.]*$' "$res/summary.csv")
[[ $ok == 1 ]] || fail "the completed point's row: $(cat "$res/summary.csv")"
div=$(grep '^bf16_lr0.3_s1_diverge_delta-1e-9,' "$res/summary.csv")
[[ $div =~ ,diverged,([0-9]+),[^,]*,,([0-9]+), ]] || fail "the diverged point's row: $div"
nstep=${BASH_REMATCH[2]}
# curves: 6 training rows for the completed point, val at steps 3 and 6; the diverged point's rows stop before it
[[ $(grep -c '^bf16_lr0.3_s1_diverge_delta-0,' "$res/curves.csv") == 6 ]] || fail "curves rows: $(cat "$res/curves.csv")"
[[ $(grep -c '^bf16_lr0.3_s1_diverge_delta-0,[36],[0-9.]*,[0-9.]\+$' "$res/curves.csv") == 2 ]] || fail "val rows in curves.csv"
[[ $(grep -c '^bf16_lr0.3_s1_diverge_delta-1e-9,' "$res/curves.csv") == $((nstep - 1)) ]] || fail "diverged curve rows"
grep -q "2/2 done, 1 diverged" "$ws/out" || fail "progress line: $(cat "$ws/out")"
if command -v gnuplot >/dev/null; then
  [[ -s $res/train_curves.png && -s $res/train_curves.svg ]] || fail "no loss-curve plots"
elif [[ -n ${CI:-} ]]; then fail "gnuplot missing in CI"; fi

# resume: finished points are not run again (their logs stay byte-identical)
sum=$(cat "$runs"/*/log.jsonl | md5sum)
"$sweep" "$ws/s.cfg" --quick >"$ws/out2" || fail "second sweep exited $?"
[[ $(cat "$runs"/*/log.jsonl | md5sum) == "$sum" ]] || fail "finished points ran again"
grep -q "2/2 done, 1 diverged" "$ws/out2" || fail "second progress line: $(cat "$ws/out2")"

# an interrupted point (the trainer's interrupt_at stops it after step 3 with a
# checkpoint) is resumed, not restarted, by the next invocation
sed -e 's/^study = t$/study = r/' -e '/^vary/d' "$ws/s.cfg" >"$ws/r.cfg"
echo "set interrupt_at = 3" >>"$ws/r.cfg"
"$sweep" "$ws/r.cfg" >/dev/null 2>&1 || fail "interrupted sweep exited $?"
rdir=$ws/experiments/runs/sweeps/r/bf16_lr1e-3_s1
grep -q '"status":"interrupted","steps":3' "$rdir/summary.json" || fail "not interrupted: $(cat "$rdir/summary.json")"
"$sweep" "$ws/r.cfg" >/dev/null 2>&1 || fail "resumed sweep exited $?"
grep -q '"status":"completed","steps":6' "$rdir/summary.json" || fail "not resumed to the end: $(cat "$rdir/summary.json")"
grep -q "resumed" "$rdir/train.out" || fail "the point was restarted, not resumed: $(cat "$rdir/train.out")"
[[ $(grep -c '^bf16_lr1e-3_s1,' "$ws/experiments/results/r/curves.csv") == 6 ]] || fail "resumed curve: want 6 rows"
if command -v gnuplot >/dev/null; then # a grid without `vary` axes plots too
  [[ -s $ws/experiments/results/r/train_curves.png ]] || fail "no plot for a grid without vary axes"
fi

# evaluations of kept checkpoints: the sharpness of each, shadow checks of those
# followed by 2 logged steps; a second invocation repeats neither
cat >"$ws/e.cfg" <<EOF
study = e
recipes = fp8-te
lrs = 1e-3
set size = test
set steps = 6
set warmup = 1
set data = $ws/data/t.txt
set val_data =
set val_batches = 1
set batch_size = 2
set ckpt_every = 2
set ckpt_keep = 1
sharpness = --rho 0.05 --directions 2 --batches 1
shadow = --steps 2 --threshold 0.5
plots = sharpness shadow
EOF
"$sweep" "$ws/e.cfg" >"$ws/e.out" 2>&1 || fail "evaluation sweep exited $?: $(tail -3 "$ws/e.out")"
eres=$ws/experiments/results/e edir=$ws/experiments/runs/sweeps/e/fp8-te_lr1e-3_s1
[[ $(cut -d, -f1,2 "$eres/sharpness.csv" | tr '\n' ' ') == "point,step fp8-te_lr1e-3_s1,0 fp8-te_lr1e-3_s1,2 fp8-te_lr1e-3_s1,4 fp8-te_lr1e-3_s1,6 " ]] ||
  fail "sharpness.csv: want steps 0 2 4 6: $(cat "$eres/sharpness.csv")"
awk -F, 'NR > 1 && !($9 > 0 && $3 == 0.05 && $4 == 2) { exit 1 }' "$eres/sharpness.csv" ||
  fail "sharpness.csv values: $(cat "$eres/sharpness.csv")"
[[ $(cut -d, -f1-3 "$eres/shadow.csv" | tr '\n' ' ') == "point,step,steps fp8-te_lr1e-3_s1,0,2 fp8-te_lr1e-3_s1,2,2 fp8-te_lr1e-3_s1,4,2 " ]] ||
  fail "shadow.csv: want checks at steps 0 2 4: $(cat "$eres/shadow.csv")"
awk -F, 'NR > 1 && !($6 != "" && $7 == 0.5 && $8 == 0) { exit 1 }' "$eres/shadow.csv" ||
  fail "shadow.csv values: $(cat "$eres/shadow.csv")"
if command -v gnuplot >/dev/null; then
  [[ -s $eres/sharpness.png && -s $eres/shadow_gap.svg ]] || fail "no sharpness or shadow plots"
fi
sum=$(cat "$edir/sharpness.jsonl" "$edir"/shadow/*/log.jsonl | md5sum)
"$sweep" "$ws/e.cfg" >"$ws/e2.out" 2>&1 || fail "second evaluation sweep exited $?"
[[ $(cat "$edir/sharpness.jsonl" "$edir"/shadow/*/log.jsonl | md5sum) == "$sum" ]] || fail "evaluations ran again"
sed -e 's/^study = e$/study = e2/' -e '/^set ckpt_keep/d' "$ws/e.cfg" >"$ws/e2.cfg"
"$sweep" "$ws/e2.cfg" >/dev/null 2>"$ws/e3.err"; rc=$?
[[ $rc == 2 ]] && grep -q "ckpt_keep" "$ws/e3.err" || fail "evaluations without kept checkpoints: exit $rc: $(cat "$ws/e3.err")"

# bad input: exit 2, one line on stderr
bad() { # bad DESCRIPTION CONFIG-TEXT [ARGS]
  local what=$1 text=$2; shift 2
  printf '%s\n' "$text" >"$ws/bad.cfg"
  "$sweep" "$ws/bad.cfg" "$@" >/dev/null 2>"$ws/bad.err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$what: exit $rc, want 2"
  [[ $(wc -l <"$ws/bad.err") == 1 ]] || fail "$what: stderr not one line: $(cat "$ws/bad.err")"
  [[ -z ${want:-} ]] || grep -q "$want" "$ws/bad.err" || fail "$what: stderr lacks $want: $(cat "$ws/bad.err")"
}
bad "unknown directive" $'study = b\nrecipes = bf16\nlrs = 1e-3\nfoo = 1'
bad "missing recipe" $'study = b\nrecipes = nosuchrecipe\nlrs = 1e-3'
bad "bad lr" $'study = b\nrecipes = bf16\nlrs = fast'
bad "no study" $'recipes = bf16\nlrs = 1e-3'
want=nosuchkey bad "unknown trainer key" "$(printf 'study = b\nrecipes = bf16\nlrs = 1e-3\nset size = test\nset steps = 1\nset data = %s\nset nosuchkey = 1' "$ws/data/t.txt")"
bad "bad --jobs" $'study = b\nrecipes = bf16\nlrs = 1e-3' --jobs 0
"$sweep" "$ws/nonexistent.cfg" >/dev/null 2>&1; [[ $? == 2 ]] || fail "missing config file: want exit 2"
echo PASS
