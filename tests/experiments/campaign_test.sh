#!/usr/bin/env bash
# The campaign table (experiments/studies/campaign.c) on the fixture runs of
# tests/experiments/campaign/runs: three groups (bf16 and e8m3 at lr 1e-3, e8m3
# at 1e-2), completed, diverged, interrupted and unreadable runs, a folder
# that is not a run.  The expected tables were checked by hand: mean 3.2 and
# sample std 0.1 of 3.1, 3.2, 3.3; intervals of 0/3, 2/3, 3/3 as scipy prints
# them; the unfinished runs counted in `runs` only; the trajectories of the two
# runs with a log (validation lines with and without the epsilon-sharpness).
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

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
