#!/usr/bin/env bash
# The campaign table (experiments/studies/campaign.c) on the fixture runs of
# tests/experiments/campaign/runs: three groups (bf16 and e8m3 at lr 1e-3, e8m3
# at 1e-2), completed, diverged, interrupted and unreadable runs, a folder
# that is not a run.  The expected tables were checked by hand: mean 3.2 and
# sample std 0.1 of 3.1, 3.2, 3.3; intervals of 0/3, 2/3, 3/3 as scipy prints
# them; the unfinished runs counted in `runs` only; the trajectories of the two
# runs with a log (validation lines with and without the epsilon-sharpness).
# Then --reference on a synthetic campaign written below, its comparison
# worked out by hand from the hypergeometric law and the paired differences;
# --select on that campaign beside a second learning rate, with the
# Mann-Whitney test of the steps to divergence counted by hand; and the
# early-warning rule on synthetic logs, its steps worked out by hand.
# usage: campaign_test.sh CAMPAIGN_BINARY FIXTURE_DIR
set -uo pipefail
campaign=$(realpath "$1"); fixture=$(realpath "$2")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

cp -r "$fixture/runs" "$tmp/runs"
before=$(cd "$tmp/runs" && find . -type f | sort | xargs md5sum)
if "$campaign" "$tmp/runs" --out "$tmp/table" > "$tmp/out" 2>&1 &&
   diff "$tmp/table.csv" "$fixture/expected.csv" && diff "$tmp/table.md" "$fixture/expected.md" &&
   diff "$tmp/table_curves.csv" "$fixture/expected_curves.csv"; then
  ok "fixture runs: CSV and markdown tables and the trajectories as expected"
else bad "fixture tables differ: $(cat "$tmp/out")"; fi
after=$(cd "$tmp/runs" && find . -type f | sort | xargs md5sum)
[ "$before" = "$after" ] && ok "--out elsewhere: the runs' folder unchanged" || bad "the runs' folder changed"

# default output: DIR/campaign.csv and .md
if "$campaign" "$tmp/runs" > /dev/null 2>&1 && cmp -s "$tmp/runs/campaign.csv" "$fixture/expected.csv" &&
   cmp -s "$tmp/runs/campaign.md" "$fixture/expected.md"; then ok "default output DIR/campaign.{csv,md}"
else bad "default output missing or different"; fi
# its own outputs are files, not runs: a second pass gives the same table
"$campaign" "$tmp/runs" > /dev/null 2>&1
cmp -s "$tmp/runs/campaign.csv" "$fixture/expected.csv" && ok "rerun in place: same table" || bad "rerun in place differs"

# A key the trainer gained after some runs were made: a run whose config.cfg
# has it at the trainer's default (activations = f32) groups with the runs that
# lack it, and the same runs select by it; at another value it is a group of
# its own.
cp -rL "$fixture/runs" "$tmp/newkey"  # -L: real files, not links into the runfiles
rm -f "$tmp"/newkey/campaign*
echo "activations = f32" >> "$tmp/newkey/bf16_lr1e-3_s1/config.cfg"
if "$campaign" "$tmp/newkey" --out "$tmp/nk" > /dev/null 2>&1 && diff -q "$tmp/nk.csv" "$fixture/expected.csv" > /dev/null &&
   "$campaign" "$tmp/newkey" --select activations=f32 --out "$tmp/nks" > /dev/null 2>&1 &&
   [ "$(tail -n +2 "$tmp/nks.csv" | wc -l)" = "$(tail -n +2 "$fixture/expected.csv" | wc -l)" ]; then
  ok "a key absent from older runs reads as the trainer's default: the same groups, and --select by it keeps every run"
else bad "a new key at its default: $(diff "$tmp/nk.csv" "$fixture/expected.csv")"; fi
sed -i 's/^activations = f32$/activations = bf16/' "$tmp/newkey/bf16_lr1e-3_s1/config.cfg"
if "$campaign" "$tmp/newkey" --out "$tmp/nk2" > /dev/null 2>&1 && grep -q "activations=bf16" "$tmp/nk2.csv" &&
   [ "$(tail -n +2 "$tmp/nk2.csv" | wc -l)" = "$(( $(tail -n +2 "$fixture/expected.csv" | wc -l) + 1 ))" ]; then
  ok "the new key at another value: a group of its own"
else bad "a new key at another value: $(cat "$tmp/nk2.csv")"; fi

# bad input: one line on stderr, exit 2, nothing written
expect_2() { # NAME ARGS...
  local name=$1; shift
  "$campaign" "$@" > "$tmp/o" 2> "$tmp/e"; local rc=$?
  if [ $rc = 2 ] && [ "$(wc -l < "$tmp/e")" = 1 ] && [ ! -s "$tmp/o" ]; then ok "$name: exit 2, $(cat "$tmp/e")"
  else bad "$name: exit $rc, stderr $(cat "$tmp/e")"; fi
}
mkdir "$tmp/empty"
expect_2 "missing folder" "$tmp/nowhere" --out "$tmp/x"
expect_2 "no runs" "$tmp/empty"
expect_2 "unknown option" "$tmp/runs" --bogus
expect_2 "no folder" --out "$tmp/x"
[ -z "$(ls "$tmp/empty")" ] && [ ! -e "$tmp/x.csv" ] && ok "bad input wrote nothing" || bad "bad input wrote files"

# --reference: five groups, recipe=bf16 the reference.  Final validation losses
# are multiples of 1/8, exact in binary, so that equal differences are equal.
#   a     seeds 1-4 completed: 3.125 3.5 3.875 4.0
#   b     seeds 1-3 diverged
#   bf16  seeds 1-3 completed: 3.0 3.25 3.5; seed 4 interrupted (no pair, not finished)
#   c     seeds 1, 2 diverged; 3, 4 completed: 3.75 4.0
#   d     seeds 1, 2 completed: 3.5 3.75
# 16 finished runs, 5 diverged.
mkrun() { # FOLDER RECIPE SEED STATUS VAL_LOSS
  mkdir -p "$tmp/synthetic/$1"
  printf 'lr = 1e-3\nseed = %s\nrun_dir = /runs/%s\nrecipe = %s\n' "$3" "$1" "$2" \
    > "$tmp/synthetic/$1/config.cfg"
  if [ "$4" = diverged ]; then
    printf '{"status":"diverged","steps":%d,"diverged_at":%d,"val_loss":null}' "$3"00 "$3"00
  else printf '{"status":"%s","steps":1000,"val_loss":%s}' "$4" "$5"; fi > "$tmp/synthetic/$1/summary.json"
}
mkrun a_s1 a 1 completed 3.125; mkrun a_s2 a 2 completed 3.5; mkrun a_s3 a 3 completed 3.875
mkrun a_s4 a 4 completed 4.0
mkrun b_s1 b 1 diverged; mkrun b_s2 b 2 diverged; mkrun b_s3 b 3 diverged
mkrun bf16_s1 bf16 1 completed 3.0; mkrun bf16_s2 bf16 2 completed 3.25
mkrun bf16_s3 bf16 3 completed 3.5; mkrun bf16_s4 bf16 4 interrupted 9.0
mkrun c_s1 c 1 diverged; mkrun c_s2 c 2 diverged; mkrun c_s3 c 3 completed 3.75
mkrun c_s4 c 4 completed 4.0
mkrun d_s1 d 1 completed 3.5; mkrun d_s2 d 2 completed 3.75

# Fisher, P(x) = C(n, x) C(N - n, K - x) / C(N, K) for a group of n finished runs,
# K divergences among N:
#   b against bf16, 3/3 vs 0/3: P = 1 9 9 1 (/20); one-sided 1/20, two-sided 2/20
#   c against bf16, 2/4 vs 0/3: P = 3 12 6 (/21); one-sided 6/21, two-sided 9/21
#   a, d against bf16: no divergence on either side, p = 1
# against all other finished runs (N = 16, K = 5, C(16, 5) = 4368):
#   a 0/4 vs 5/12: P = 792 1980 1320 264 12: one-sided 1, two-sided 1068/4368 = 89/364
#   b 3/3 vs 2/13: P = 1287 2145 858 78: x = 3, one- and two-sided 78/4368 = 1/56
#   bf16 0/3 vs 5/13: the same P, x = 0: one-sided 1, two-sided 2223/4368 = 57/112
#   c 2/4 vs 3/12: a's P, x = 2: one-sided 1596/4368 = 19/52, two-sided 2388/4368 = 199/364
#   d 0/2 vs 5/14: P = 2002 2002 364, a tie: both sides 1
# Validation loss minus bf16's of the same seed (bf16 seed 4 did not complete):
#   a  .125 .25 .375: mean .25, std .125, t = 2 sqrt(3) = 3.46410162,
#      p = I_{2/14}(1, 1/2) = 1 - sqrt(6/7) = 0.0741799002
#   b  no pair; c  one pair, .25; d  .5 .5: std 0, no t
# Steps to divergence: bf16 has no diverged run, so no Mann-Whitney test.
cat > "$tmp/want_compare.csv" <<'CSV'
group,reference,finished,diverged,reference_finished,reference_diverged,fisher_reference_one_sided,fisher_reference_two_sided,others_finished,others_diverged,fisher_others_one_sided,fisher_others_two_sided,val_pairs,val_diff_mean,val_diff_std,val_diff_t,val_diff_p,div_step_pairs,div_step_pairs_earlier,div_step_earlier_p
recipe=a,recipe=bf16,4,0,3,0,1,1,12,5,1,0.244505495,3,0.25,0.125,3.46410162,0.0741799002,,,
recipe=b,recipe=bf16,3,3,3,0,0.05,0.1,13,2,0.0178571429,0.0178571429,0,,,,,,,
recipe=bf16,recipe=bf16,3,0,3,0,,,13,5,1,0.508928571,,,,,,,,
recipe=c,recipe=bf16,4,2,3,0,0.285714286,0.428571429,12,3,0.365384615,0.546703297,1,0.25,,,,,,
recipe=d,recipe=bf16,2,0,3,0,1,1,14,5,1,1,2,0.5,0,,,,,
CSV
# same text, or numbers within 1e-8 relative; an empty cell only where one is wanted
same_csv() { # GOT WANT
  awk -F, 'NR == FNR { want[FNR] = $0; rows = FNR; next }
    { n = split(want[FNR], w, ","); m = split($0, g, ",")
      if (n != m) { print "row " FNR ": " m " fields, want " n; bad = 1; next }
      for (i = 1; i <= n; i++) {
        numeric = w[i] ~ /^-?[0-9.]+(e-?[0-9]+)?$/ && g[i] ~ /^-?[0-9.]+(e-?[0-9]+)?$/
        d = g[i] - w[i]; if (d < 0) d = -d; s = w[i] < 0 ? -w[i] : w[i]
        if (numeric ? d > 1e-8 * (s > 1 ? s : 1) : g[i] != w[i]) {
          print "row " FNR " field " i ": " g[i] ", want " w[i]; bad = 1 } } }
    END { if (FNR != rows) { print FNR " rows, want " rows; bad = 1 }; exit bad }' "$2" "$1"
}
# expect_md_rows FILE OK_TEXT BAD_TEXT: every line of md_rows is a line of FILE
expect_md_rows() {
  local row missing=0
  for row in "${md_rows[@]}"; do grep -qxF -- "$row" "$1" || { echo "  missing: $row"; missing=1; }; done
  [ $missing = 0 ] && ok "$2" || bad "$3"
}
if "$campaign" "$tmp/synthetic" --out "$tmp/ref" --reference recipe=bf16 > "$tmp/out" 2>&1 &&
   same_csv "$tmp/ref_compare.csv" "$tmp/want_compare.csv" > "$tmp/d"; then
  ok "--reference recipe=bf16: Fisher's p values and the paired t-test as worked out by hand"
else bad "--reference comparison: $(cat "$tmp/out" "$tmp/d")"; fi
# the markdown table's rows, as they read
md_rows=("| recipe=a | 0 / 4 | 1, 1 | 5 / 12; 1, 0.245 | +0.2500 ± 0.1250, 3; t 3.464, p 0.0742 | - |"
         "| recipe=b | 3 / 3 | 0.05, 0.1 | 2 / 13; 0.0179, 0.0179 | - | - |"
         "| recipe=bf16 | 0 / 3 | (reference) | 5 / 13; 1, 0.509 | (reference) | (reference) |"
         "| recipe=c | 2 / 4 | 0.286, 0.429 | 3 / 12; 0.365, 0.547 | +0.2500, 1; - | - |"
         "| recipe=d | 0 / 2 | 1, 1 | 5 / 14; 1, 1 | +0.5000 ± 0.0000, 2; - | - |")
expect_md_rows "$tmp/ref.md" "--reference: the markdown comparison table" "--reference: markdown rows missing"
# without --reference: the same first table, nothing else
if "$campaign" "$tmp/synthetic" --out "$tmp/plain" > /dev/null 2>&1 && [ ! -e "$tmp/plain_compare.csv" ] &&
   cmp -s "$tmp/plain.csv" "$tmp/ref.csv" && cmp -s "$tmp/plain_curves.csv" "$tmp/ref_curves.csv" &&
   cmp -s "$tmp/plain.md" <(head -n "$(wc -l < "$tmp/plain.md")" "$tmp/ref.md") &&
   ! grep -q reference "$tmp/plain.md"; then
  ok "without --reference: the table unchanged, no comparison"
else bad "without --reference: the outputs differ from the first table of --reference"; fi
expect_2 "--reference matching no group" "$tmp/synthetic" --out "$tmp/y" --reference fp4
expect_2 "--reference matching two groups (recipe=b, recipe=bf16)" "$tmp/synthetic" --out "$tmp/y" --reference recipe=b
[ ! -e "$tmp/y.csv" ] && [ ! -e "$tmp/y_compare.csv" ] && ok "bad --reference wrote nothing" || bad "bad --reference wrote files"

# --select: the synthetic campaign (lr 1e-3) beside runs at lr 1e-2, where bf16
# diverges too.  Steps of divergence at lr 1e-2 (diverged_at):
#   bf16  300 350 400             (the reference)
#   b     100 150 200             all 9 pairs earlier; W = 1 + 2 + 3, the least of
#                                 C(6, 3) = 20 subsets: p = 1/20
#   c     350 500, seed 3 completed   mid-ranks 2.5 5 | 1 2.5 4: W = 7.5; the ten
#                                 2-subsets of {1, 2.5, 2.5, 4, 5} sum to 3.5 3.5 5
#                                 6 5 6.5 6.5 7.5 7.5 9: p = 9/10; pairs earlier:
#                                 350 = 350 half, 350 < 400: 1.5 of 6
#   d     seeds 1, 2 completed    no divergence, no test
#   e     250, seed 2 completed   below all three: 3 of 3 pairs, p = 1/4
# 13 finished runs at lr 1e-2, 9 diverged; Fisher against bf16 (3 / 3) and
# against the others pooled (C(13, 9) = 715), P(x) = C(n, x) C(13 - n, 9 - x) / 715:
#   b, bf16  3/3 vs 6/10: P = 10 135 360 210: one-sided 210/715 = 42/143,
#            two-sided 355/715 = 71/143; b against bf16 one table, p = 1
#   c  2/3 against bf16's 3/3: P(2) = P(3) = 1/2, both sides 1; against 7/10:
#      one-sided 570/715 = 114/143, two-sided 1
#   d  0/2 against 3/3: P = 1 6 3 (/10): one-sided 1, two-sided 1/10; against
#      9/11: P = 55 330 330: one-sided 1, two-sided 55/715 = 1/13
#   e  1/2 against 3/3: P(1) = 2/5, P(2) = 3/5: one-sided 1, two-sided 2/5;
#      against 8/11: one-sided 660/715 = 12/13, two-sided 1
# bf16 completed no run at lr 1e-2: no validation pair.
mklr() { # FOLDER RECIPE SEED STATUS VAL_LOSS_OR_DIVERGED_AT, at lr 1e-2
  mkdir -p "$tmp/lrs/$1"
  printf 'lr = 1e-2\nseed = %s\nrun_dir = /runs/%s\nrecipe = %s\n' "$3" "$1" "$2" > "$tmp/lrs/$1/config.cfg"
  if [ "$4" = diverged ]; then
    printf '{"status":"diverged","steps":%d,"diverged_at":%d,"val_loss":null}' $(($5 - 1)) "$5"
  else printf '{"status":"completed","steps":1000,"val_loss":%s}' "$5"; fi > "$tmp/lrs/$1/summary.json"
}
cp -r "$tmp/synthetic" "$tmp/lrs"
rm -f "$tmp/lrs"/*.csv "$tmp/lrs"/*.md
mklr hi_bf16_s1 bf16 1 diverged 300; mklr hi_bf16_s2 bf16 2 diverged 350; mklr hi_bf16_s3 bf16 3 diverged 400
mklr hi_b_s1 b 1 diverged 100; mklr hi_b_s2 b 2 diverged 150; mklr hi_b_s3 b 3 diverged 200
mklr hi_c_s1 c 1 diverged 350; mklr hi_c_s2 c 2 diverged 500; mklr hi_c_s3 c 3 completed 5.0
mklr hi_d_s1 d 1 completed 5.0; mklr hi_d_s2 d 2 completed 5.25
mklr hi_e_s1 e 1 diverged 250; mklr hi_e_s2 e 2 completed 5.0
cat > "$tmp/want_hi_compare.csv" <<'CSV'
group,reference,finished,diverged,reference_finished,reference_diverged,fisher_reference_one_sided,fisher_reference_two_sided,others_finished,others_diverged,fisher_others_one_sided,fisher_others_two_sided,val_pairs,val_diff_mean,val_diff_std,val_diff_t,val_diff_p,div_step_pairs,div_step_pairs_earlier,div_step_earlier_p
recipe=b,recipe=bf16,3,3,3,3,1,1,10,6,0.293706294,0.496503497,0,,,,,9,9,0.05
recipe=bf16,recipe=bf16,3,3,3,3,,,10,6,0.293706294,0.496503497,,,,,,,,
recipe=c,recipe=bf16,3,2,3,3,1,1,10,7,0.797202797,1,0,,,,,6,1.5,0.9
recipe=d,recipe=bf16,2,0,3,3,1,0.1,11,9,1,0.0769230769,0,,,,,,,
recipe=e,recipe=bf16,2,1,3,3,1,0.4,11,8,0.923076923,1,0,,,,,3,3,0.25
CSV
if "$campaign" "$tmp/lrs" --out "$tmp/hi" --select lr=1e-2 --reference recipe=bf16 > "$tmp/out" 2>&1 &&
   same_csv "$tmp/hi_compare.csv" "$tmp/want_hi_compare.csv" > "$tmp/d"; then
  ok "--select lr=1e-2: Fisher, and steps to divergence: b 9/9 pairs earlier p 1/20, c with a tie p 9/10, e alone p 1/4"
else bad "--select lr=1e-2: $(cat "$tmp/out" "$tmp/d")"; fi
md_rows=("Runs selected: lr=1e-2 (13 of the 30 runs in the folder)."
         "| recipe=b | 3 / 3 | 1, 1 | 6 / 10; 0.294, 0.497 | - | 9 / 9; 0.05 |"
         "| recipe=bf16 | 3 / 3 | (reference) | 6 / 10; 0.294, 0.497 | (reference) | (reference) |"
         "| recipe=c | 2 / 3 | 1, 1 | 7 / 10; 0.797, 1 | - | 1.5 / 6; 0.9 |"
         "| recipe=d | 0 / 2 | 1, 0.1 | 9 / 11; 1, 0.0769 | - | - |"
         "| recipe=e | 1 / 2 | 1, 0.4 | 8 / 11; 0.923, 1 | - | 3 / 3; 0.25 |")
expect_md_rows "$tmp/hi.md" "--select lr=1e-2: the selection and the markdown comparison rows" "--select lr=1e-2: markdown rows missing"
# lr 1e-3 alone is the synthetic campaign again: the same groups, names and
# comparison.  Without --select the groups carry lr in their names, recipe=bf16
# names two of them, and b's "all other runs" pools both rates: 3/3 against
# 11/26 (N = 29, K = 14), P(3) = C(26, 11) / C(29, 14) = (14 13 12) / (29 28 27)
# = 26/261 on both sides, the least probable table, against 1/56 at lr 1e-3 alone.
if "$campaign" "$tmp/lrs" --out "$tmp/lo" --select lr=1e-3 --reference recipe=bf16 > "$tmp/out" 2>&1 &&
   same_csv "$tmp/lo_compare.csv" "$tmp/want_compare.csv" > "$tmp/d" &&
   cmp -s "$tmp/lo.csv" "$tmp/ref.csv" && cmp -s "$tmp/lo_warn.csv" "$tmp/ref_warn.csv" &&
   cmp -s "$tmp/lo_curves.csv" "$tmp/ref_curves.csv" &&
   cmp -s <(tail -n +3 "$tmp/lo.md") "$tmp/ref.md" &&
   grep -qxF "campaign: 17 of 30 runs selected, in 5 groups: $tmp/lo.csv" "$tmp/out"; then
  ok "--select lr=1e-3: the synthetic campaign's tables, but for the selection's line"
else bad "--select lr=1e-3: $(cat "$tmp/out" "$tmp/d")"; fi
expect_2 "without --select, recipe=bf16 names both rates' bf16" "$tmp/lrs" --out "$tmp/y" --reference recipe=bf16
if "$campaign" "$tmp/lrs" --out "$tmp/all" --reference "lr=1e-3 recipe=bf16" > "$tmp/out" 2>&1 &&
   grep -q '^lr=1e-3 recipe=b,lr=1e-3 recipe=bf16,3,3,3,0,0.05,0.1,26,11,0.0996168582,0.0996168582,0,' "$tmp/all_compare.csv" &&
   [ "$(tail -n +2 "$tmp/all.csv" | cut -d, -f1 | sort | paste -sd'|')" = "lr=1e-2 recipe=b|lr=1e-2 recipe=bf16|lr=1e-2 recipe=c|lr=1e-2 recipe=d|lr=1e-2 recipe=e|lr=1e-3 recipe=a|lr=1e-3 recipe=b|lr=1e-3 recipe=bf16|lr=1e-3 recipe=c|lr=1e-3 recipe=d" ]; then
  ok "without --select: ten groups named by lr and recipe, b's pooled Fisher p 26/261 across rates (1/56 with --select lr=1e-3)"
else bad "without --select: $(cat "$tmp/out"; cut -d, -f1,9-12 "$tmp/all_compare.csv")"; fi
expect_2 "--select matching no run" "$tmp/lrs" --out "$tmp/y" --select lr=4e-4
expect_2 "--select with a key no run has" "$tmp/lrs" --out "$tmp/y" --select rounding=rz
expect_2 "--select lr=1e-2 and lr=1e-3 together" "$tmp/lrs" --out "$tmp/y" --select lr=1e-2 --select lr=1e-3
expect_2 "--select without =" "$tmp/lrs" --out "$tmp/y" --select lr
expect_2 "--select with an empty key" "$tmp/lrs" --out "$tmp/y" --select =1e-2
expect_2 "--select without its argument" "$tmp/lrs" --out "$tmp/y" --select
[ ! -e "$tmp/y.csv" ] && [ ! -e "$tmp/y.md" ] && [ ! -e "$tmp/y_compare.csv" ] && [ ! -e "$tmp/lrs/campaign.csv" ] &&
  ok "bad --select wrote nothing" || bad "bad --select wrote files"

# The early-warning rule (--reference): smoothed grad_norm = running median of
# the last 9 training steps, against the same seed's bf16 run, first step >= 100
# where the ratio reaches --warn-ratio.  bf16 seeds 1-3 are flat at 1.0 for 300
# steps, so each ratio is the run's own median:
#   fp8_s1   1.0, then 2.0 from step 150, diverged at 170 (log to 169): the
#            window of step 153 (145-153) holds four 2.0s, median 1.0; that of
#            154 (146-154) five, median 2.0: warned at 154, 170 - 154 = 16 ahead
#   fp8_s2   flat 1.4, completed: max ratio 1.4, no alarm at 1.5
#   fp8_s3   1.0 with a single 50.0 at step 200, completed: one high value in
#            nine never moves the median, max ratio 1.0
#   fp8_s4   diverged at 120, no bf16 seed 4: listed, cells empty
#   e5m2_s1  1.0, then 1.6 from step 200, completed: median 1.6 at 204 (five
#            of 196-204), a false alarm at 204, max ratio 1.6
#   e4m3_s1  resumed: a first attempt's log to step 180 (9.0 from step 150),
#            then steps 101-300 again at 1.0; the later lines of a step win,
#            so no alarm and max ratio 1.0
# With --warn-ratio 1.3, fp8_s2 alarms at the first watched step, 100.
mkwarn() { # FOLDER RECIPE SEED STATUS LAST_STEP GRAD_NORM_AWK_EXPRESSION_OF_s (in $warn_dir)
  local d="${warn_dir:-$tmp/warn}/$1"; mkdir -p "$d"
  printf 'lr = 1e-3\nseed = %s\nrun_dir = /runs/%s\nrecipe = %s\n' "$3" "$1" "$2" > "$d/config.cfg"
  if [ "$4" = diverged ]; then
    printf '{"status":"diverged","steps":%d,"diverged_at":%d,"val_loss":null}' "$5" $(($5 + 1))
  else printf '{"status":"completed","steps":%d,"val_loss":3.0}' "$5"; fi > "$d/summary.json"
  awk -v last="$5" -v diverged="$4" "BEGIN { for (s = 1; s <= last; s++) {
      printf \"{\\\"step\\\":%d,\\\"loss\\\":2.0,\\\"lr\\\":0.001,\\\"grad_norm\\\":%s,\\\"ms\\\":1.0}\\n\", s, $6
      if (s % 100 == 0) printf \"{\\\"step\\\":%d,\\\"val_loss\\\":3.0}\\n\", s }
    if (diverged == \"diverged\") printf \"{\\\"step\\\":%d,\\\"event\\\":\\\"diverged\\\",\\\"loss\\\":40.0}\\n\", last + 1 }" \
    > "$d/log.jsonl"
}
for seed in 1 2 3; do mkwarn bf16_s$seed bf16 $seed completed 300 1.0; done
mkwarn fp8_s1 fp8 1 diverged 169 '(s >= 150 ? 2.0 : 1.0)'
mkwarn fp8_s2 fp8 2 completed 300 1.4
mkwarn fp8_s3 fp8 3 completed 300 '(s == 200 ? 50.0 : 1.0)'
mkwarn fp8_s4 fp8 4 diverged 119 1.0
mkwarn e5m2_s1 e5m2 1 completed 300 '(s >= 200 ? 1.6 : 1.0)'
mkwarn e4m3_s1 e4m3 1 completed 180 '(s >= 150 ? 9.0 : 1.0)'
mv "$tmp/warn/e4m3_s1/log.jsonl" "$tmp/warn/e4m3_s1/first.jsonl"
mkwarn e4m3_s1 e4m3 1 completed 300 1.0
{ cat "$tmp/warn/e4m3_s1/first.jsonl"; tail -n +"$(grep -n '^{"step":101,' "$tmp/warn/e4m3_s1/log.jsonl" | cut -d: -f1)" "$tmp/warn/e4m3_s1/log.jsonl"; } > "$tmp/warn/e4m3_s1/resumed"
mv "$tmp/warn/e4m3_s1/resumed" "$tmp/warn/e4m3_s1/log.jsonl"
rm "$tmp/warn/e4m3_s1/first.jsonl"
cat > "$tmp/want_warn.csv" <<'CSV'
run,group,seed,outcome,diverged_at,warn_step,steps_ahead,max_ratio
e4m3_s1,recipe=e4m3,1,completed,,,,1
e5m2_s1,recipe=e5m2,1,completed,,204,,1.6
fp8_s1,recipe=fp8,1,diverged,170,154,16,2
fp8_s2,recipe=fp8,2,completed,,,,1.4
fp8_s3,recipe=fp8,3,completed,,,,1
fp8_s4,recipe=fp8,4,diverged,120,,,
CSV
if "$campaign" "$tmp/warn" --out "$tmp/w" --reference recipe=bf16 > "$tmp/out" 2>&1 &&
   same_csv "$tmp/w_warn.csv" "$tmp/want_warn.csv" > "$tmp/d"; then
  ok "early warning: fp8 seed 1 warned at 154, 16 steps ahead; no alarm at 1.4x or for one spike"
else bad "early warning: $(cat "$tmp/out" "$tmp/d")"; fi
md_rows=("| recipe=e5m2 | 0 / 0 | 1 / 1 |" "| recipe=fp8 | 1 / 1 | 0 / 2 |"
         "| fp8_s1 | recipe=fp8 | 1 | diverged at 170 | 154 | 16 | 2.000 |"
         "| fp8_s4 | recipe=fp8 | 4 | diverged at 120 | - | - | - |")
expect_md_rows "$tmp/w.md" "early warning: the markdown summary and rows" "early warning: markdown rows missing"
if "$campaign" "$tmp/warn" --out "$tmp/w13" --reference recipe=bf16 --warn-ratio 1.3 > /dev/null 2>&1 &&
   grep -qxF "fp8_s2,recipe=fp8,2,completed,,100,,1.4" "$tmp/w13_warn.csv" &&
   grep -qxF "fp8_s1,recipe=fp8,1,diverged,170,154,16,2" "$tmp/w13_warn.csv"; then
  ok "--warn-ratio 1.3: fp8 seed 2 alarms at step 100"
else bad "--warn-ratio 1.3: $(cat "$tmp/w13_warn.csv")"; fi
# A diverged run whose seed has no completed reference run takes the seed's
# reference run that diverged last, if that diverged after it: fp8_s5
# (2.0 from step 150, diverged at 200) against bf16_s5 (diverged at 250) warns
# at 154, 46 ahead; fp8_s6 against bf16_s6, which diverged first (150), has
# no reference.
cp -r "$tmp/warn" "$tmp/warn2"
warn_dir=$tmp/warn2
mkwarn bf16_s5 bf16 5 diverged 249 1.0
mkwarn fp8_s5 fp8 5 diverged 199 '(s >= 150 ? 2.0 : 1.0)'
mkwarn bf16_s6 bf16 6 diverged 149 1.0
mkwarn fp8_s6 fp8 6 diverged 199 '(s >= 150 ? 2.0 : 1.0)'
unset warn_dir
if "$campaign" "$tmp/warn2" --out "$tmp/w2" --reference recipe=bf16 > "$tmp/out" 2>&1 &&
   grep -qxF "fp8_s5,recipe=fp8,5,diverged,200,154,46,2" "$tmp/w2_warn.csv" &&
   grep -qxF "fp8_s6,recipe=fp8,6,diverged,200,,," "$tmp/w2_warn.csv" &&
   grep -qxF "fp8_s1,recipe=fp8,1,diverged,170,154,16,2" "$tmp/w2_warn.csv" &&
   grep -qxF "| recipe=fp8 | 2 / 2 | 0 / 2 |" "$tmp/w2.md"; then
  ok "early warning: a diverged run against its seed's reference run that diverged later (46 ahead), none against one that diverged first"
else bad "early warning with diverged references: $(cat "$tmp/out" "$tmp/w2_warn.csv")"; fi
[ ! -e "$tmp/plain_warn.csv" ] && ok "without --reference: no warn table" || bad "without --reference: a warn table"
for ratio in 0 -1 abc 1.5x; do
  expect_2 "--warn-ratio $ratio" "$tmp/warn" --out "$tmp/z" --reference recipe=bf16 --warn-ratio "$ratio"
done
[ ! -e "$tmp/z.csv" ] && [ ! -e "$tmp/z_warn.csv" ] && ok "bad --warn-ratio wrote nothing" || bad "bad --warn-ratio wrote files"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
