#!/usr/bin/env bash
# profile_summary.py on a hand-made ncu raw CSV: durations summed by kernel
# name (argument lists dropped), units converted, the ranking, the total
# beside the step without ncu; bad files give exit 2 and one line.
set -euo pipefail
summary=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat > "$tmp/raw.csv" <<'CSV'
==PROF== Connected to process 1234
"ID","Process ID","Process Name","Kernel Name","Context","gpu__time_duration.sum"
"","","","","","usecond"
"0","1234","train","void k_rmsnorm<float>(const float *, float *, int)","1","1,500.5"
"1","1234","train","sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64(Params)","1","2000"
"2","1234","train","void k_rmsnorm<float>(const float *, float *, int)","1","499.5"
"3","1234","train","k_adamw(float *, const float *, int)","1","250"
train: completed 4 steps
CSV
python3 "$summary" "$tmp/raw.csv" 5.0 2 > "$tmp/out.txt" || fail "exit $? on a good file"
cat "$tmp/out.txt"
# rmsnorm: 1500.5 + 499.5 us = 2.000 ms in 2 launches, the GEMM 2.000 ms: 2 / 4.25 = 47.1% each;
# adamw 0.25 ms = 5.9%, the one kernel past TOP = 2
grep -Eq '^void k_rmsnorm<float> +2 +2\.000 +47\.1%$' "$tmp/out.txt" || fail "k_rmsnorm row"
grep -Eq '^sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64 +1 +2\.000 +47\.1%$' "$tmp/out.txt" ||
  fail "GEMM row"
grep -Eq '^\(1 other kernels\) +1 +0\.250 +5\.9%$' "$tmp/out.txt" || fail "the rest"
grep -q 'kernels: 4 launches, 4.250 ms of GPU time, one at a time; the step without ncu: 5.000 ms' \
  "$tmp/out.txt" || fail "total line"
# nanoseconds
sed -e 's/"usecond"/"nsecond"/' "$tmp/raw.csv" > "$tmp/ns.csv"
python3 "$summary" "$tmp/ns.csv" | grep -q 'kernels: 4 launches, 0.004 ms' || fail "nanoseconds"
# bad input: no duration column, no launch, a unit it does not know, no file
printf '"ID","Kernel Name"\n"0","k"\n' > "$tmp/nocol.csv"
head -3 "$tmp/raw.csv" > "$tmp/empty.csv"
sed -e 's/"usecond"/"furlong"/' "$tmp/raw.csv" > "$tmp/unit.csv"
for f in nocol empty unit missing; do
  set +e; python3 "$summary" "$tmp/$f.csv" > "$tmp/o" 2> "$tmp/e"; rc=$?; set -e
  [ $rc -eq 2 ] || fail "$f: exit $rc, want 2"
  [ "$(wc -l < "$tmp/e")" -eq 1 ] || fail "$f: want one line on stderr: $(cat "$tmp/e")"
  [ ! -s "$tmp/o" ] || fail "$f: printed a table"
done
echo "profile_summary_test: ok"
