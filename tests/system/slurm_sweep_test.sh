#!/usr/bin/env bash
# sweep --backend slurm on a real Slurm: munged, slurmctld and slurmd on
# localhost, configured in a temporary folder, stopped and removed at the end.
# A 4-point CPU study of the `test` model:
#  - the sweep as a job array (--jobs 2: at most 2 tasks at once) writes the
#    same summary.csv (but for tokens/s) and curves.csv as the local backend;
#    --partition and --time reach sbatch;
#  - while the array runs, the CSVs show the tasks that ended (partial
#    results), and a second sweep of the study is refused (exit 2);
#  - tasks that crash are FAILED lines with the end of their stderr, exit 1;
#    the next invocation resubmits only those points;
#  - Ctrl-C interrupts the running task (a checkpoint) and cancels the
#    pending one (not run).
# Slurm that cannot start is a failure, with the reason (./setup.sh installs
# slurm-wlm and munge).
#   bazel test //tests/system:slurm_sweep_test   (or run it as root with a built sweep:
#   RUNFILES_DIR=bazel-bin/tests/system/slurm_sweep_test.runfiles tests/system/slurm_sweep_test.sh)
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
rf=${RUNFILES_DIR:-$0.runfiles}/exmy
sweep=$rf/experiments/studies/sweep
real_train=$rf/experiments/trainer/train
[[ -x $sweep && -x $real_train ]] || fail "no sweep or trainer in the runfiles ($rf)"
export PATH=$PATH:/usr/sbin:/sbin
for p in munged slurmctld slurmd sbatch squeue scancel sinfo scontrol; do
  command -v "$p" >/dev/null || fail "$p not found: Slurm or munge is not installed (./setup.sh installs slurm-wlm and munge)"
done

# ---- a one-node cluster in a temporary folder ------------------------------------
# under /tmp: munged's socket path must stay short (108 bytes)
sl=$(mktemp -d /tmp/exmy-slurm-XXXXXX) || fail "mktemp"
chmod 755 "$sl"
export SLURM_CONF=$sl/slurm.conf
stop() {
  scontrol shutdown >/dev/null 2>&1
  for _ in $(seq 50); do
    pgrep -F "$sl/slurmctld.pid" >/dev/null 2>&1 || pgrep -F "$sl/slurmd.pid" >/dev/null 2>&1 || break
    sleep 0.2
  done
  for f in slurmctld.pid slurmd.pid munge/pid; do [[ -s $sl/$f ]] && kill "$(cat "$sl/$f")" 2>/dev/null; done
  rm -rf "$sl"
}
trap stop EXIT
# what the daemons said, with the reason they did not start
logs() { for f in "$sl"/log/* "$sl"/munge/log; do [[ -f $f ]] && { echo "== $f"; tail -n 8 "$f"; }; done; }
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    port_free "$p" && port_free $((p + 1)) && { echo "$p"; return; }
  done
  fail "no free port pair for slurmctld and slurmd"
}
port=$(pick_port)
user=$(id -un)
mkdir -p "$sl/state" "$sl/spool" "$sl/log" "$sl/munge"
chmod 755 "$sl/munge"
head -c 1024 /dev/urandom >"$sl/munge/munge.key" && chmod 600 "$sl/munge/munge.key"
munged --force --socket="$sl/munge/sock" --key-file="$sl/munge/munge.key" --log-file="$sl/munge/log" \
  --pid-file="$sl/munge/pid" --seed-file="$sl/munge/seed" || fail "munged did not start: $(logs)"
cat >"$SLURM_CONF" <<EOF
ClusterName=exmytest
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sl/munge/sock
SlurmUser=$user
SlurmdUser=$user
StateSaveLocation=$sl/state
SlurmdSpoolDir=$sl/spool
SlurmctldPidFile=$sl/slurmctld.pid
SlurmdPidFile=$sl/slurmd.pid
SlurmctldLogFile=$sl/log/slurmctld.log
SlurmdLogFile=$sl/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -i -f "$SLURM_CONF" || fail "slurmctld did not start: $(logs)"
slurmd -f "$SLURM_CONF" -N localhost || fail "slurmd did not start: $(logs)"
for _ in $(seq 100); do
  [[ $(sinfo --noheader --format=%T 2>/dev/null) == idle ]] && break
  sleep 0.3
done
[[ $(sinfo --noheader --format=%T 2>&1) == idle ]] || fail "the node is not idle: $(sinfo 2>&1) $(logs)"

# ---- the study, on both backends ------------------------------------------------------
tmp=${TEST_TMPDIR:-$sl}
cfg=$tmp/cfg bin=$tmp/bin log=$tmp/log
rm -rf "$cfg" "$bin" "$log" "$tmp/ws-local" "$tmp/ws-slurm"
mkdir -p "$cfg" "$bin" "$log"
for w in ws-local ws-slurm; do
  mkdir -p "$tmp/$w/experiments" "$tmp/$w/data"
  ln -sfn "$rf/experiments/configs" "$tmp/$w/experiments/configs"
done
for i in $(seq 300); do echo "the quick brown fox $i jumps over the lazy dog; sweep test line $i."; done >"$tmp/t.txt"
# diverge_delta 1e-9 against a learning rate of 0.3: those points diverge within a few steps
cat >"$cfg/s.cfg" <<EOF
study = t
recipes = bf16
lrs = 0.3
seeds = 1 2
vary diverge_delta = 0 1e-9
set size = test
set steps = 6
set warmup = 1
set data = $tmp/t.txt
set val_data =
set val_every = 3
set val_batches = 1
set batch_size = 2
EOF
# the real trainer; the points of seed 2 wait for a file, then crash (before
# they train: the next invocation runs them afresh)
cat >"$bin/seed2-waits-and-crashes" <<EOF
#!/bin/sh
case " \$* " in *"/bf16_lr0.3_s2_"*)
  while [ ! -e "$tmp/release" ]; do sleep 0.2; done
  echo "train: seed 2 crashes" >&2; kill -SEGV \$\$ ;;
esac
exec "$real_train" "\$@"
EOF
chmod +x "$bin"/*
export SWEEP_TRAIN=$real_train SWEEP_SLURM_POLL=1
local_res=$tmp/ws-local/experiments/runs/sweeps/t res=$tmp/ws-slurm/experiments/runs/sweeps/t
BUILD_WORKSPACE_DIRECTORY=$tmp/ws-local "$sweep" "$cfg/s.cfg" --jobs 2 >"$log/local.out" 2>&1 ||
  fail "the local sweep exited $?: $(tail -3 "$log/local.out")"
[[ $(tail -1 "$log/local.out") == "sweep: 4/4 done, 2 diverged, 0 failed" ]] || fail "local sweep: $(tail -1 "$log/local.out")"

export BUILD_WORKSPACE_DIRECTORY=$tmp/ws-slurm
SWEEP_TRAIN=$bin/seed2-waits-and-crashes "$sweep" "$cfg/s.cfg" --backend slurm --jobs 2 --partition debug --time 5 \
  >"$log/a.out" 2>"$log/a.err" &
sweep_pid=$!
# partial results: the tasks of seed 1 ended, those of seed 2 wait
partial=
for _ in $(seq 300); do
  partial=$(cut -d, -f1,8 "$res/summary.csv" 2>/dev/null | tr '\n' ' ')
  [[ $partial == "point,status bf16_lr0.3_s1_diverge_delta-0,completed bf16_lr0.3_s1_diverge_delta-1e-9,diverged bf16_lr0.3_s2_diverge_delta-0,queued bf16_lr0.3_s2_diverge_delta-1e-9,queued " ]] && break
  kill -0 $sweep_pid 2>/dev/null || break
  sleep 0.2
done
[[ $partial == *"s1_diverge_delta-0,completed"*"s2_diverge_delta-1e-9,queued "* ]] ||
  { touch "$tmp/release"; fail "no partial summary.csv while the array ran: '$partial' $(cat "$log/a.out" "$log/a.err")"; }
[[ $(grep -c '^bf16_lr0.3_s1_diverge_delta-0,' "$res/curves.csv") == 6 ]] || { touch "$tmp/release"; fail "partial curves.csv: $(cat "$res/curves.csv")"; }
job=$(sed -n 's/^sweep: Slurm job \([0-9]*\): tasks 0-3 .*/\1/p' "$log/a.out")
[[ -n $job ]] || { touch "$tmp/release"; fail "no 'Slurm job N: tasks 0-3' line: $(cat "$log/a.out")"; }
# what reached sbatch
show=$(scontrol show job "$job" 2>&1)
[[ $show == *"Partition=debug"* && $show == *"TimeLimit=00:05:00"* && $show == *"ArrayTaskThrottle=2"* ]] ||
  { touch "$tmp/release"; fail "sbatch did not get --partition, --time, --array ...%2: $show"; }
# a second sweep of the study while its array runs: refused, nothing started
"$sweep" "$cfg/s.cfg" --backend slurm >"$log/twice.out" 2>"$log/twice.err"; rc=$?
[[ $rc == 2 && $(wc -l <"$log/twice.err") == 1 ]] && grep -q "Slurm job $job of an earlier sweep of t is still queued or running" "$log/twice.err" ||
  { touch "$tmp/release"; fail "a second sweep during the array: exit $rc: $(cat "$log/twice.err")"; }
touch "$tmp/release"
wait $sweep_pid; rc=$?
[[ $rc == 1 ]] || fail "a sweep with crashed tasks: exit $rc, want 1: $(cat "$log/a.err")"
[[ $(tail -1 "$log/a.out") == "sweep: 2/4 done, 1 diverged, 2 failed" ]] || fail "crashed tasks, last line: $(tail -1 "$log/a.out")"
for p in bf16_lr0.3_s2_diverge_delta-0 bf16_lr0.3_s2_diverge_delta-1e-9; do
  grep -q "^sweep: FAILED $p: killed by SIGSEGV (exit 139); .*/$p/train.err: train: seed 2 crashes$" "$log/a.err" ||
    fail "crashed task $p not reported: $(cat "$log/a.err")"
done
[[ $(cut -d, -f8 "$res/summary.csv" | tr '\n' ' ') == "status completed diverged failed failed " ]] || fail "summary.csv: $(cat "$res/summary.csv")"

# the same command again: only the failed points are resubmitted
sum=$(cat "$res"/bf16_lr0.3_s1_*/log.jsonl | md5sum)
"$sweep" "$cfg/s.cfg" --backend slurm --jobs 2 >"$log/b.out" 2>"$log/b.err" || fail "the second Slurm sweep exited $?: $(cat "$log/b.err")"
grep -q "^sweep: Slurm job [0-9]*: tasks 0-1 " "$log/b.out" || fail "not 2 tasks resubmitted: $(cat "$log/b.out")"
[[ $(cat "$res"/bf16_lr0.3_s1_*/log.jsonl | md5sum) == "$sum" ]] || fail "finished points ran again"
[[ $(tail -1 "$log/b.out") == "sweep: 4/4 done, 2 diverged, 0 failed" ]] || fail "second Slurm sweep: $(tail -1 "$log/b.out")"

# the local backend's results, but for the timing column
diff <(cut -d, -f1-12 "$local_res/summary.csv") <(cut -d, -f1-12 "$res/summary.csv") >"$log/diff" ||
  fail "summary.csv differs from the local backend's: $(cat "$log/diff")"
cmp -s "$local_res/curves.csv" "$res/curves.csv" || fail "curves.csv differs from the local backend's"
[[ $(wc -l <"$res/summary.csv") == 5 ]] || fail "summary.csv rows: $(cat "$res/summary.csv")"
if command -v gnuplot >/dev/null; then
  [[ -s $res/train_curves.png ]] || fail "no plots"
  grep -qx "sweep: plot experiments/runs/sweeps/t/train_curves.png" "$log/b.out" || fail "plot not printed: $(cat "$log/b.out")"
fi

# Ctrl-C: the running task is interrupted (it saves a checkpoint), the pending
# one is cancelled (not run); nothing of the array stays in the queue
sed -e 's/^study = t$/study = c/' -e 's/^lrs = 0.3$/lrs = 1e-3/' -e 's/^seeds = 1 2$/seeds = 1/' -e 's/^set steps = 6$/set steps = 1000000/' \
  "$cfg/s.cfg" >"$cfg/c.cfg"
"$sweep" "$cfg/c.cfg" --backend slurm --jobs 1 >"$log/c.out" 2>"$log/c.err" &
sweep_pid=$!
cres=$tmp/ws-slurm/experiments/runs/sweeps/c
for _ in $(seq 300); do [[ -s $cres/bf16_lr1e-3_s1_diverge_delta-0/log.jsonl ]] && break; sleep 0.2; done
[[ -s $cres/bf16_lr1e-3_s1_diverge_delta-0/log.jsonl ]] || fail "Ctrl-C: the first task did not start: $(cat "$log/c.out" "$log/c.err")"
kill -INT $sweep_pid
wait $sweep_pid; rc=$?
[[ $rc == 1 ]] || fail "Ctrl-C: exit $rc, want 1: $(cat "$log/c.err")"
[[ $(tail -1 "$log/c.out") == "sweep: 0/2 done, 0 diverged, 0 failed, 1 interrupted (run the same command again to resume), 1 not run" ]] ||
  fail "Ctrl-C: last line: $(tail -1 "$log/c.out") $(cat "$log/c.err")"
grep -q '"status":"interrupted"' "$cres/bf16_lr1e-3_s1_diverge_delta-0/summary.json" || fail "Ctrl-C: not interrupted with a checkpoint"
[[ -z $(squeue --noheader 2>&1) ]] || fail "Ctrl-C: left in the queue: $(squeue 2>&1)"
echo PASS
