#!/usr/bin/env bash
# On the GPU machine: several campaign runs one after another, in the
# background, so that one hold of the machine does as many as fit.  Two runs
# at once on one GPU are slower than one after the other (on the H200 each
# took 1.87 s a step together, 0.86 s alone), hence a queue.
#   bash experiments/studies/paper/gpu_queue.sh HOLD_START DEADLINE_MIN MINUTES_PER_RUN \
#        NAME:SEED:RECIPE_CFG[:k=v,k=v] ...
# HOLD_START is the epoch second the machine was asked for, DEADLINE_MIN the
# minute of the hold by which runs must have ended (the hold lasts at most
# 30), MINUTES_PER_RUN what one run takes.  A run starts only if it can end
# by the deadline; a run that diverges ends early and the next one starts.
# Returns at once; experiments/runs/paper/queue.log says what it did, and
# gpu_poll.sh brings the logs back.
set -euo pipefail
if [ $# -lt 4 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || ! [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] ||
   ! [[ "$3" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "usage: gpu_queue.sh HOLD_START DEADLINE_MIN MINUTES_PER_RUN NAME:SEED:RECIPE_CFG[:k=v,...] ..." >&2
  exit 2
fi
hold_start=$1 deadline_min=$2 run_min=$3
shift 3
for spec in "$@"; do
  IFS=: read -r name seed recipe sets <<<"$spec"
  if [ -z "$name" ] || [ -z "$seed" ] || [ ! -f "$recipe" ]; then
    echo "gpu_queue: '$spec' is not NAME:SEED:RECIPE_CFG[:k=v,...] with an existing RECIPE_CFG" >&2
    exit 2
  fi
done
here="$(cd "$(dirname "$0")" && pwd)"
runs=experiments/runs/paper
mkdir -p "$runs"
queue() {
  for spec in "$@"; do
    IFS=: read -r name seed recipe sets <<<"$spec"
    local now left
    now=$(date +%s)
    left=$(awk -v h="$hold_start" -v d="$deadline_min" -v n="$now" 'BEGIN { printf "%.1f", (h + d * 60 - n) / 60 }')
    if awk -v l="$left" -v r="$run_min" 'BEGIN { exit !(l < r) }'; then
      echo "$(date +%T) $name: not started, $left min left before the deadline"
      continue
    fi
    local args=()
    IFS=, read -ra kv <<<"$sets"
    for s in "${kv[@]}"; do [ -n "$s" ] && args+=(--set "$s"); done
    local out pid
    out=$(bash "$here/gpu_launch.sh" "$name" "$seed" "$recipe" "${args[@]}")
    pid=${out##*pid }
    pid=${pid%)}
    echo "$(date +%T) $out ($left min left)"
    while kill -0 "$pid" 2>/dev/null; do sleep 5; done
    echo "$(date +%T) $name: $(tr '\r' '\n' <"$runs/$name.out" | grep '^train: ' | tail -1)"
  done
  echo "$(date +%T) queue: done"
}
setsid nohup bash -c "$(declare -f queue); hold_start=$hold_start deadline_min=$deadline_min \
  run_min=$run_min here='$here' runs='$runs' queue $(printf '%q ' "$@")" \
  >>"$runs/queue.log" 2>&1 </dev/null &
echo "gpu_queue: $# runs queued (log $runs/queue.log)"
