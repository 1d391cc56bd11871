#!/usr/bin/env bash
# experiments/studies/paper/gpu_queue.sh, the campaign's queue on the GPU
# machine, against a stub of gpu_launch.sh (a run that sleeps): runs start one
# after another on a GPU with their --set options, a run that cannot end by
# the deadline is not started, several GPUs share one list (each run on one
# GPU, never two runs at once on a GPU), a GPU joins a running queue, and bad
# input is one line and exit 2.
set -u
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
queue=$(pwd)/experiments/studies/paper/gpu_queue.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/experiments/studies/paper" "$tmp/cfg"
cp "$queue" "$tmp/experiments/studies/paper/"
touch "$tmp/cfg/a.cfg"
cat >"$tmp/experiments/studies/paper/gpu_launch.sh" <<'STUB'
mkdir -p experiments/runs/paper
(echo "start $(date +%s.%N) $*"; echo "gpu ${CUDA_VISIBLE_DEVICES:-unset}"; sleep 1; echo "train: completed $1"; echo "end $(date +%s.%N)") \
  >experiments/runs/paper/$1.out 2>&1 &
echo "gpu_launch: $1 started (pid $!)"
STUB
cd "$tmp"
q=experiments/studies/paper/gpu_queue.sh
# a hold that began now with 0.2 minutes to its deadline; runs of 0.05 minutes
GPUS=0 bash $q "$(date +%s)" 0.2 0.05 r1:1:cfg/a.cfg:rounding=rz,lr=4e-3 r2:2:cfg/a.cfg >q.out 2>&1 \
  || bad "queue refused good input: $(cat q.out)"
# (the waits below end when the queue is done; their limits, 60 s and 30 s,
# only bound a machine too loaded to run 1-second stubs in 10)
for _ in $(seq 600); do grep -q "queue: done" experiments/runs/paper/queue.log 2>/dev/null && break; sleep 0.1; done
grep -q "queue: done" experiments/runs/paper/queue.log || bad "queue did not finish"
if grep -q "start .* r1 1 cfg/a.cfg --set rounding=rz --set lr=4e-3$" experiments/runs/paper/r1.out; then
  ok "the first run got its seed, recipe and --set options"; else bad "r1's arguments: $(cat experiments/runs/paper/r1.out)"; fi
end1=$(awk '/^end/ {print $2}' experiments/runs/paper/r1.out)
start2=$(awk '/^start/ {print $2}' experiments/runs/paper/r2.out)
if [ -n "$end1" ] && [ -n "$start2" ] && awk -v a="$end1" -v b="$start2" 'BEGIN { exit !(b >= a) }'; then
  ok "the second run started after the first ended"; else bad "runs overlapped (r1 ended $end1, r2 started $start2)"; fi
grep -q "r2: train: completed r2" experiments/runs/paper/queue.log && ok "the log has each run's last trainer line" \
  || bad "queue.log lacks r2's outcome: $(cat experiments/runs/paper/queue.log)"
# a deadline already passed: nothing starts
GPUS=0 bash $q "$(( $(date +%s) - 3600 ))" 28 13 late:1:cfg/a.cfg >/dev/null 2>&1
for _ in $(seq 300); do [ "$(grep -c "queue: done" experiments/runs/paper/queue.log)" = 2 ] && break; sleep 0.1; done
if grep -q "late: not started" experiments/runs/paper/queue.log && [ ! -e experiments/runs/paper/late.out ]; then
  ok "a run that cannot end by the deadline is not started"; else bad "the late run started"; fi
# two GPUs, five runs of 1 s, and a third GPU joining: every run once, on
# one of the GPUs, and no GPU with two runs at once
rm -rf experiments/runs
GPUS=3,5 bash $q "$(date +%s)" 1 0.01 m1:1:cfg/a.cfg m2:1:cfg/a.cfg m3:1:cfg/a.cfg m4:1:cfg/a.cfg m5:1:cfg/a.cfg \
  >q.out 2>&1 || bad "a queue on GPUS=3,5 refused good input: $(cat q.out)"
bash $q --join 7 >>q.out 2>&1 || bad "--join refused: $(cat q.out)"
for _ in $(seq 600); do [ "$(grep -c ' gpu [357]: done$' experiments/runs/paper/queue.log 2>/dev/null)" = 3 ] && break; sleep 0.1; done
runs_ok=1
for m in m1 m2 m3 m4 m5; do
  [ "$(grep -c "gpu_launch: $m started" experiments/runs/paper/queue.log)" = 1 ] || runs_ok=0
  grep -q -E '^gpu [357]$' experiments/runs/paper/$m.out 2>/dev/null || runs_ok=0
done
[ $runs_ok = 1 ] && ok "five runs, each started once, on GPU 3, 5 or 7" \
  || bad "runs on several GPUs: $(cat experiments/runs/paper/queue.log)"
overlap=$(for m in m1 m2 m3 m4 m5; do
  f=experiments/runs/paper/$m.out
  printf '%s %s %s\n' "$(awk '/^gpu/ {print $2}' $f)" "$(awk '/^start/ {print $2}' $f)" "$(awk '/^end/ {print $2}' $f)"
done | sort -k1,1 -k2,2n | awk '$1 == g && $2 < e { print "overlap on gpu " $1 } { g = $1; e = $3 }')
[ -z "$overlap" ] && ok "no GPU ran two runs at once" || bad "$overlap"
used=$(grep -o -E 'gpu [357]: gpu_launch' experiments/runs/paper/queue.log | sort -u | wc -l)
[ "$used" -ge 2 ] && ok "the runs went to $used GPUs" || bad "only $used GPU took runs"
# bad input
for args in "x 28 13 a:1:cfg/a.cfg" "1 28 13 a:1:cfg/missing.cfg" "1 28 13 :1:cfg/a.cfg" "1 28" "--join x" "--join"; do
  out=$(bash $q $args 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ]; then ok "bad input '$args': one line, exit 2"
  else bad "bad input '$args': exit $rc, output: $out"; fi
done
out=$(GPUS=a,b bash $q 1 28 13 a:1:cfg/a.cfg 2>&1); rc=$?
if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ]; then ok "bad GPUS: one line, exit 2"
else bad "bad GPUS: exit $rc, output: $out"; fi
rm -rf experiments/runs
out=$(bash $q --join 1 2>&1); rc=$?
if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ]; then ok "--join with no queue started: one line, exit 2"
else bad "--join with no queue: exit $rc, output: $out"; fi
exit $fail
