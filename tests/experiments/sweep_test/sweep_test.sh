#!/usr/bin/env bash
# The sweep runner on 2-point grids of the `test` model (a few steps each), and
# with trainers that fail (small scripts named by SWEEP_TRAIN / SWEEP_SHARPNESS):
#  - it runs both points, a diverged point does not stop the sweep, a second
#    invocation skips finished points and resumes an interrupted one, the CSVs
#    have the right rows;
#  - a run that exits non-zero (127 as when the trainer's shared libraries are
#    missing, a crash, exit 0 without a result, a rejected config) is a failed
#    point: a FAILED line on stderr with the end of its stderr, the count in the
#    last line, a non-zero exit, no plot from it, no plot path it did not write;
#    a failed evaluation too;
#  - a sweep writes nothing outside experiments/runs/ (the published
#    experiments/results/ stays byte-identical); --publish refreshes
#    experiments/results/<study>/ with the same set of files, only after a
#    sweep in which every point finished;
#  - bad input exits 2 with one line on stderr.
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
rf=${RUNFILES_DIR:-$0.runfiles}/exmy
sweep=$rf/experiments/studies/sweep
real_train=$rf/experiments/trainer/train
export SWEEP_TRAIN=$real_train
have_gnuplot=0
if command -v gnuplot >/dev/null; then have_gnuplot=1; elif [[ -n ${CI:-} ]]; then fail "gnuplot missing in CI"; fi

# A private workspace (recipe configs, a text corpus, a published study), and
# beside it the study configs, the fake trainers and the sweeps' output.
tmp=${TEST_TMPDIR:-$(mktemp -d)}
ws=$tmp/ws cfg=$tmp/cfg bin=$tmp/bin log=$tmp/log
rm -rf "$ws" "$cfg" "$bin" "$log"
mkdir -p "$ws/experiments" "$ws/data" "$cfg" "$bin" "$log"
ln -sfn "$rf/experiments/configs" "$ws/experiments/configs"
for i in $(seq 300); do echo "the quick brown fox $i jumps over the lazy dog; sweep test line $i."; done >"$ws/data/t.txt"
export BUILD_WORKSPACE_DIRECTORY=$ws
pub=$ws/experiments/results/t-quick
mkdir -p "$pub"
for f in grid.txt summary.csv curves.csv train_curves.png train_curves.svg val_curves.png val_curves.svg; do
  echo "the published $f" >"$pub/$f"
done
# every file outside experiments/runs/, with its checksum
snapshot() { (cd "$ws" && find . -path ./experiments/runs -prune -o -type f -print0 | sort -z | xargs -0 sha256sum); }
before=$(snapshot)

cat >"$bin/loader-error" <<'EOF'
#!/bin/sh
echo "$0: error while loading shared libraries: libopenblas.so.0: cannot open shared object file: No such file or directory" >&2
exit 127
EOF
cat >"$bin/segfault" <<'EOF'
#!/bin/sh
echo "train: about to crash" >&2
kill -SEGV $$
EOF
cat >"$bin/no-result" <<'EOF'
#!/bin/sh
exit 0
EOF
cat >"$bin/seed2-crashes" <<EOF
#!/bin/sh
# the real trainer; the point of seed 2 (run or resumed) then crashes, after a
# complete run and its summary.json: the exit status decides
case " \$* " in *"/bf16_lr1e-3_s2 "*) "$real_train" "\$@" || exit; echo "train: seed 2 crashes" >&2; kill -SEGV \$\$ ;; esac
exec "$real_train" "\$@"
EOF
cat >"$bin/records-gpu" <<EOF
#!/bin/sh
# the real trainer, after it noted in its run folder the CUDA_VISIBLE_DEVICES it was given
for a in "\$@"; do case \$a in run_dir=*) d=\${a#run_dir=} ;; esac; done
mkdir -p "\$d" && echo "\${CUDA_VISIBLE_DEVICES-unset}" >"\$d/cuda_visible_devices"
exec "$real_train" "\$@"
EOF
chmod +x "$bin"/*

# the trainer settings of every study here: the test model for $1 steps on the
# small text, batches of 2, no validation file
small_run() {
  cat <<EOF
set size = test
set steps = $1
set warmup = 1
set data = $ws/data/t.txt
set val_data =
set val_batches = 1
set batch_size = 2
EOF
}

# diverge_delta 1e-9 against a learning rate of 0.3: the second point diverges within a few steps
cat >"$cfg/s.cfg" <<EOF
study = t
recipes = bf16
lrs = 1e-3
vary diverge_delta = 0 1e-9
$(small_run 6)
set val_every = 3
quick lrs = 0.3
EOF

# ---- two points that finish (one diverges) -------------------------------------
"$sweep" "$cfg/s.cfg" --quick --jobs 2 >"$log/out" 2>"$log/err" || fail "sweep exited $?: $(tail -3 "$log/err")"
res=$ws/experiments/runs/sweeps/t-quick runs=$res
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
[[ $(grep -c '^bf16_lr0.3_s1_diverge_delta-0,[36],[0-9.]*,[0-9.]\+\(,[0-9.e-]\+\)\{4\}$' "$res/curves.csv") == 2 ]] || fail "val rows in curves.csv"
[[ $(grep -c '^bf16_lr0.3_s1_diverge_delta-1e-9,' "$res/curves.csv") == $((nstep - 1)) ]] || fail "diverged curve rows"
grep -q "2/2 done, 1 diverged" "$log/out" || fail "progress line: $(cat "$log/out")"
[[ $(tail -1 "$log/out") == "sweep: 2/2 done, 1 diverged, 0 failed" ]] || fail "last line: $(tail -1 "$log/out")"
[[ ! -s $log/err ]] || fail "stderr of a sweep without failures: $(cat "$log/err")"
if ((have_gnuplot)); then
  [[ -s $res/train_curves.png && -s $res/train_curves.svg ]] || fail "no loss-curve plots"
  grep -qx "sweep: plot experiments/runs/sweeps/t-quick/train_curves.png" "$log/out" || fail "plot path not printed: $(cat "$log/out")"
fi

# resume: finished points are not run again (their logs stay byte-identical)
sum=$(cat "$runs"/*/log.jsonl | md5sum)
"$sweep" "$cfg/s.cfg" --quick >"$log/out2" || fail "second sweep exited $?"
[[ $(cat "$runs"/*/log.jsonl | md5sum) == "$sum" ]] || fail "finished points ran again"
grep -q "2/2 done, 1 diverged" "$log/out2" || fail "second progress line: $(cat "$log/out2")"

# an interrupted point (the trainer's interrupt_at stops it after step 3 with a
# checkpoint) is unfinished: exit 1 and said so; the next invocation resumes it
sed -e 's/^study = t$/study = r/' -e '/^vary/d' "$cfg/s.cfg" >"$cfg/r.cfg"
echo "set interrupt_at = 3" >>"$cfg/r.cfg"
"$sweep" "$cfg/r.cfg" >"$log/r.out" 2>&1; rc=$?
[[ $rc == 1 ]] || fail "interrupted sweep: exit $rc, want 1: $(cat "$log/r.out")"
grep -q "0/1 done, 0 diverged, 0 failed, 1 interrupted" "$log/r.out" || fail "interrupted point not reported: $(cat "$log/r.out")"
rdir=$ws/experiments/runs/sweeps/r/bf16_lr1e-3_s1
grep -q '"status":"interrupted","steps":3' "$rdir/summary.json" || fail "not interrupted: $(cat "$rdir/summary.json")"
"$sweep" "$cfg/r.cfg" >/dev/null 2>&1 || fail "resumed sweep exited $?"
grep -q '"status":"completed","steps":6' "$rdir/summary.json" || fail "not resumed to the end: $(cat "$rdir/summary.json")"
grep -q "resumed" "$rdir/train.out" || fail "the point was restarted, not resumed: $(cat "$rdir/train.out")"
[[ $(grep -c '^bf16_lr1e-3_s1,' "$ws/experiments/runs/sweeps/r/curves.csv") == 6 ]] || fail "resumed curve: want 6 rows"
if ((have_gnuplot)); then # a grid without `vary` axes plots too
  [[ -s $ws/experiments/runs/sweeps/r/train_curves.png ]] || fail "no plot for a grid without vary axes"
fi

# evaluations of kept checkpoints: the sharpness of each, shadow checks of those
# followed by 2 logged steps; a second invocation repeats neither
cat >"$cfg/e.cfg" <<EOF
study = e
recipes = fp8-te
lrs = 1e-3
$(small_run 6)
set ckpt_every = 2
set ckpt_keep = 1
sharpness = --rho 0.05 --directions 2 --batches 1
shadow = --steps 2 --threshold 0.5
plots = sharpness shadow
EOF
"$sweep" "$cfg/e.cfg" >"$log/e.out" 2>&1 || fail "evaluation sweep exited $?: $(tail -3 "$log/e.out")"
eres=$ws/experiments/runs/sweeps/e edir=$eres/fp8-te_lr1e-3_s1
[[ $(cut -d, -f1,2 "$eres/sharpness.csv" | tr '\n' ' ') == "point,step fp8-te_lr1e-3_s1,0 fp8-te_lr1e-3_s1,2 fp8-te_lr1e-3_s1,4 fp8-te_lr1e-3_s1,6 " ]] ||
  fail "sharpness.csv: want steps 0 2 4 6: $(cat "$eres/sharpness.csv")"
awk -F, 'NR > 1 && !($9 > 0 && $3 == 0.05 && $4 == 2) { exit 1 }' "$eres/sharpness.csv" ||
  fail "sharpness.csv values: $(cat "$eres/sharpness.csv")"
[[ $(cut -d, -f1-3 "$eres/shadow.csv" | tr '\n' ' ') == "point,step,steps fp8-te_lr1e-3_s1,0,2 fp8-te_lr1e-3_s1,2,2 fp8-te_lr1e-3_s1,4,2 " ]] ||
  fail "shadow.csv: want checks at steps 0 2 4: $(cat "$eres/shadow.csv")"
awk -F, 'NR > 1 && !($6 != "" && $7 == 0.5 && $8 == 0) { exit 1 }' "$eres/shadow.csv" ||
  fail "shadow.csv values: $(cat "$eres/shadow.csv")"
if ((have_gnuplot)); then
  [[ -s $eres/sharpness.png && -s $eres/shadow_gap.svg ]] || fail "no sharpness or shadow plots"
fi
sum=$(cat "$edir/sharpness.jsonl" "$edir"/shadow/*/log.jsonl | md5sum)
"$sweep" "$cfg/e.cfg" >"$log/e2.out" 2>&1 || fail "second evaluation sweep exited $?"
[[ $(cat "$edir/sharpness.jsonl" "$edir"/shadow/*/log.jsonl | md5sum) == "$sum" ]] || fail "evaluations ran again"
sed -e 's/^study = e$/study = e2/' -e '/^set ckpt_keep/d' "$cfg/e.cfg" >"$cfg/e2.cfg"
"$sweep" "$cfg/e2.cfg" >/dev/null 2>"$log/e3.err"; rc=$?
[[ $rc == 2 ]] && grep -q "ckpt_keep" "$log/e3.err" || fail "evaluations without kept checkpoints: exit $rc: $(cat "$log/e3.err")"
# a crashing evaluation is a failure too (new sharpness arguments: computed again)
sed 's/--rho 0.05/--rho 0.1/' "$cfg/e.cfg" >"$cfg/e4.cfg"
SWEEP_SHARPNESS=$bin/segfault "$sweep" "$cfg/e4.cfg" >"$log/e4.out" 2>"$log/e4.err"; rc=$?
[[ $rc == 1 ]] || fail "crashing sharpness: exit $rc, want 1: $(cat "$log/e4.err")"
grep -q "^sweep: FAILED sharpness of fp8-te_lr1e-3_s1 at step 0: killed by SIGSEGV" "$log/e4.err" ||
  fail "crashing sharpness not reported: $(cat "$log/e4.err")"
[[ $(tail -1 "$log/e4.out") == "sweep: 1/1 done, 0 diverged, 0 failed, 1 evaluation(s) failed" ]] ||
  fail "crashing sharpness, last line: $(tail -1 "$log/e4.out")"

# ---- failed runs ------------------------------------------------------------------
# expect_failed NAME CONFIG WANT_RC LAST_LINE STDERR_PATTERN [ARGS]: a sweep whose
# every run failed: its exit status, its last line, one FAILED line per point on
# stderr with the pattern, every summary.csv row "failed", no plot drawn or printed
expect_failed() {
  local name=$1 config=$2 want_rc=$3 last=$4 pattern=$5 rc work study
  shift 5
  "$sweep" "$config" "$@" >"$log/$name.out" 2>"$log/$name.err"; rc=$?
  [[ $rc == "$want_rc" ]] || fail "$name: exit $rc, want $want_rc: $(cat "$log/$name.err")"
  [[ $(tail -1 "$log/$name.out") == "sweep: $last" ]] || fail "$name: last line: $(tail -1 "$log/$name.out")"
  [[ $(grep -c "^sweep: FAILED .*: $pattern" "$log/$name.err") == 2 ]] || fail "$name: want 2 FAILED lines: $(cat "$log/$name.err")"
  grep -q "plot " "$log/$name.out" && fail "$name: printed a plot: $(cat "$log/$name.out")"
  grep -q "^sweep: no plots: no point finished$" "$log/$name.out" || fail "$name: 'no plots' not said: $(cat "$log/$name.out")"
  study=$(sed -n 's/^study = //p' "$config"); [[ " $* " == *" --quick "* ]] && study+=-quick
  work=$ws/experiments/runs/sweeps/$study
  compgen -G "$work/*.png" >/dev/null || compgen -G "$work/*.svg" >/dev/null && fail "$name: plots left in $work: $(ls "$work")"
  [[ $(cut -d, -f8 "$work/summary.csv" | tr '\n' ' ') == "status failed failed " ]] || fail "$name: summary.csv: $(cat "$work/summary.csv")"
}
# (a) the trainer cannot load its shared libraries: exit 127. Same study as
# above with other arguments, so every point runs again: the plots of the
# earlier sweep go, and none is printed.
sed 's/^set steps = 6$/set steps = 5/' "$cfg/s.cfg" >"$cfg/s5.cfg"
SWEEP_TRAIN=$bin/loader-error expect_failed loader "$cfg/s5.cfg" 1 "0/2 done, 0 diverged, 2 failed" \
  "could not be started (exit 127.*train.err: .*error while loading shared libraries" --quick --jobs 2
# (b) a crash (SIGSEGV), a run that exits 0 without a result
sed 's/^study = t$/study = c/' "$cfg/s.cfg" >"$cfg/c.cfg"
SWEEP_TRAIN=$bin/segfault expect_failed segfault "$cfg/c.cfg" 1 "0/2 done, 0 diverged, 2 failed" \
  "killed by SIGSEGV (exit 139); .*train.err: train: about to crash"
SWEEP_TRAIN=$bin/no-result expect_failed no-result "$cfg/c.cfg" 1 "0/2 done, 0 diverged, 2 failed" \
  "exit 0 without a status in summary.json"
# (b) a config the trainer rejects (exit 2): a failed point, the sweep stops
# there (bad input: exit 2); the point that ran before is in the plots
sed -e 's/^study = t$/study = b2/' -e 's/^vary diverge_delta = .*/vary diverge_delta = 0 bogus 1/' "$cfg/s.cfg" >"$cfg/b2.cfg"
"$sweep" "$cfg/b2.cfg" --jobs 1 >"$log/b2.out" 2>"$log/b2.err"; rc=$?
[[ $rc == 2 ]] || fail "rejected config: exit $rc, want 2"
[[ $(wc -l <"$log/b2.err") == 1 ]] && grep -q "^sweep: FAILED bf16_lr1e-3_s1_diverge_delta-bogus: bad input (exit 2); .*: train: .*diverge_delta.*bogus" "$log/b2.err" ||
  fail "rejected config: stderr: $(cat "$log/b2.err")"
[[ $(tail -1 "$log/b2.out") == "sweep: 1/3 done, 0 diverged, 1 failed, 1 not run" ]] || fail "rejected config: last line: $(tail -1 "$log/b2.out")"
[[ $(cut -d, -f8 "$ws/experiments/runs/sweeps/b2/summary.csv" | tr '\n' ' ') == "status completed failed not-run " ]] ||
  fail "rejected config: summary.csv: $(cat "$ws/experiments/runs/sweeps/b2/summary.csv")"

# (d) some points fail: the plots show the others and say what is missing
cat >"$cfg/m.cfg" <<EOF
study = m
recipes = bf16
lrs = 1e-3
seeds = 1 2
$(small_run 6)
set val_every = 3
plots = curves final
EOF
SWEEP_TRAIN=$bin/seed2-crashes "$sweep" "$cfg/m.cfg" --jobs 2 >"$log/m.out" 2>"$log/m.err"; rc=$?
mres=$ws/experiments/runs/sweeps/m
[[ $rc == 1 ]] || fail "mixed: exit $rc, want 1: $(cat "$log/m.err")"
[[ $(tail -1 "$log/m.out") == "sweep: 1/2 done, 0 diverged, 1 failed" ]] || fail "mixed: last line: $(tail -1 "$log/m.out")"
grep -q "^sweep: FAILED bf16_lr1e-3_s2: killed by SIGSEGV (exit 139); .*train.err: train: seed 2 crashes$" "$log/m.err" ||
  fail "mixed: stderr: $(cat "$log/m.err")"
grep -qx "sweep: the plots show 1 of 2 points; missing: bf16_lr1e-3_s2" "$log/m.out" || fail "mixed: missing points not said: $(cat "$log/m.out")"
[[ $(cut -d, -f1 "$mres/curves.csv" | sort -u | tr '\n' ' ') == "bf16_lr1e-3_s1 point " ]] || fail "mixed: curves.csv points: $(cut -d, -f1 "$mres/curves.csv" | sort -u)"
if ((have_gnuplot)); then
  for p in train_curves val_curves final_val; do
    [[ -s $mres/$p.svg ]] || fail "mixed: no $p plot"
    grep -qx "sweep: plot experiments/runs/sweeps/m/$p.png" "$log/m.out" || fail "mixed: $p not printed"
    grep -q "1 of 2 points missing" "$mres/$p.svg" || fail "mixed: $p does not say a point is missing"
  done
  grep -q "bf16_lr1e-3_s1" "$mres/train_curves.svg" || fail "mixed: the finished point is not in the curves"
  grep -q "bf16_lr1e-3_s2" "$mres/train_curves.svg" && fail "mixed: the failed point is in the curves"
fi
# the failed point wrote a "completed" summary.json before it crashed: the next
# invocation runs it again (it fails again), it does not take it as finished
SWEEP_TRAIN=$bin/seed2-crashes "$sweep" "$cfg/m.cfg" >"$log/m2.out" 2>"$log/m2.err"; rc=$?
[[ $rc == 1 && $(tail -1 "$log/m2.out") == "sweep: 1/2 done, 0 diverged, 1 failed" ]] ||
  fail "mixed, again: exit $rc: $(tail -1 "$log/m2.out")"

# ---- --gpus: each running point sees its slot's GPU -------------------------------
# 4 points, --gpus 3,5 --per-gpu 2: 4 at once, slots 0..3 on GPUs 3 5 3 5 (the
# grid's points take the slots in order); --jobs 1: every point on the first;
# without --gpus the variable is left as it was. The points run on the CPU
# (device = cpu): the variable is set all the same.
cat >"$cfg/g.cfg" <<EOF
study = g
recipes = bf16
lrs = 1e-3
seeds = 1 2 3 4
$(small_run 2)
EOF
gpus_seen() { for s in 1 2 3 4; do cat "$ws/experiments/runs/sweeps/$1/bf16_lr1e-3_s$s/cuda_visible_devices"; done | tr '\n' ' '; }
unset CUDA_VISIBLE_DEVICES
SWEEP_TRAIN=$bin/records-gpu "$sweep" "$cfg/g.cfg" --gpus 3,5 --per-gpu 2 >"$log/g.out" 2>"$log/g.err" || fail "--gpus sweep exited $?: $(cat "$log/g.err")"
grep -q "^sweep: study g, 4 points, 4 job(s) x 1 thread(s) on GPUs;" "$log/g.out" || fail "--gpus 3,5 --per-gpu 2: not 4 jobs: $(head -1 "$log/g.out")"
[[ $(gpus_seen g) == "3 5 3 5 " ]] || fail "--gpus 3,5 --per-gpu 2: the runs saw CUDA_VISIBLE_DEVICES $(gpus_seen g)"
[[ $(tail -1 "$log/g.out") == "sweep: 4/4 done, 0 diverged, 0 failed" ]] || fail "--gpus sweep: $(tail -1 "$log/g.out")"
sed 's/^study = g$/study = g1/' "$cfg/g.cfg" >"$cfg/g1.cfg"
SWEEP_TRAIN=$bin/records-gpu "$sweep" "$cfg/g1.cfg" --gpus 7,2 --jobs 1 >"$log/g1.out" 2>&1 || fail "--gpus --jobs 1 exited $?"
[[ $(gpus_seen g1) == "7 7 7 7 " ]] || fail "--gpus 7,2 --jobs 1: the runs saw $(gpus_seen g1)"
sed 's/^study = g$/study = g0/' "$cfg/g.cfg" >"$cfg/g0.cfg"
SWEEP_TRAIN=$bin/records-gpu "$sweep" "$cfg/g0.cfg" --jobs 2 >"$log/g0.out" 2>&1 || fail "sweep without --gpus exited $?"
[[ $(gpus_seen g0) == "unset unset unset unset " ]] || fail "without --gpus the runs saw $(gpus_seen g0)"

# (c) none of the sweeps above wrote outside experiments/runs/ (the published
# results byte-identical, no new file anywhere else)
after=$(snapshot)
[[ $after == "$before" ]] || fail "a sweep changed files outside experiments/runs/: $(diff <(echo "$before") <(echo "$after"))"

# ---- (e) --publish ------------------------------------------------------------------
# not after a sweep with failed points: experiments/results/ stays as it was
SWEEP_TRAIN=$bin/loader-error "$sweep" "$cfg/s5.cfg" --quick --publish >"$log/p1.out" 2>"$log/p1.err"; rc=$?
[[ $rc == 1 ]] || fail "--publish of a failed sweep: exit $rc, want 1"
grep -q "^sweep: not published (experiments/results/t-quick/ unchanged)" "$log/p1.err" || fail "--publish of a failed sweep: $(cat "$log/p1.err")"
[[ $(snapshot) == "$before" ]] || fail "--publish of a failed sweep changed experiments/results/"
# after a sweep without gaps: the same set of files, this sweep's; a stale
# published plot of a kind this sweep did not draw goes
if ((have_gnuplot)); then
  echo stale >"$pub/final_val.png"
  "$sweep" "$cfg/s.cfg" --quick --publish >"$log/p2.out" 2>"$log/p2.err" || fail "--publish exited $?: $(cat "$log/p2.err")"
  [[ $(ls "$pub" | tr '\n' ' ') == "curves.csv grid.txt summary.csv train_curves.png train_curves.svg val_curves.png val_curves.svg " ]] ||
    fail "published files: $(ls "$pub")"
  for f in "$pub"/*; do cmp -s "$f" "$res/${f##*/}" || fail "published ${f##*/} is not the sweep's"; done
  grep -q "^sweep: published experiments/results/t-quick/" "$log/p2.out" || fail "--publish not said: $(cat "$log/p2.out")"
fi

# ---- bad input: exit 2, one line on stderr ---------------------------------------
bad() { # bad DESCRIPTION CONFIG-TEXT [ARGS]
  local what=$1 text=$2; shift 2
  printf '%s\n' "$text" >"$cfg/bad.cfg"
  "$sweep" "$cfg/bad.cfg" "$@" >/dev/null 2>"$log/bad.err"
  local rc=$?
  [[ $rc == 2 ]] || fail "$what: exit $rc, want 2"
  [[ $(wc -l <"$log/bad.err") == 1 ]] || fail "$what: stderr not one line: $(cat "$log/bad.err")"
  [[ -z ${want:-} ]] || grep -q "$want" "$log/bad.err" || fail "$what: stderr lacks $want: $(cat "$log/bad.err")"
}
bad "unknown directive" $'study = b\nrecipes = bf16\nlrs = 1e-3\nfoo = 1'
bad "missing recipe" $'study = b\nrecipes = nosuchrecipe\nlrs = 1e-3'
bad "bad lr" $'study = b\nrecipes = bf16\nlrs = fast'
bad "no study" $'recipes = bf16\nlrs = 1e-3'
want=nosuchkey bad "unknown trainer key" "$(printf 'study = b\nrecipes = bf16\nlrs = 1e-3\nset size = test\nset steps = 1\nset data = %s\nset nosuchkey = 1' "$ws/data/t.txt")"
bad "bad --jobs" $'study = b\nrecipes = bf16\nlrs = 1e-3' --jobs 0
for gpus in "" "0,0" "0,a" "1," "-1"; do
  want=gpus bad "--gpus '$gpus'" $'study = b\nrecipes = bf16\nlrs = 1e-3' --gpus "$gpus"
done
want=per-gpu bad "--per-gpu 0" $'study = b\nrecipes = bf16\nlrs = 1e-3' --gpus 0 --per-gpu 0
want=per-gpu bad "--per-gpu without --gpus" $'study = b\nrecipes = bf16\nlrs = 1e-3' --per-gpu 2
SWEEP_TRAIN=$bin/nonexistent want="not an executable" bad "missing trainer" $'study = b\nrecipes = bf16\nlrs = 1e-3'
"$sweep" "$cfg/nonexistent.cfg" >/dev/null 2>&1; [[ $? == 2 ]] || fail "missing config file: want exit 2"
echo PASS
