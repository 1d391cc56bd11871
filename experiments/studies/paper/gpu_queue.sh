#!/usr/bin/env bash
# On the GPU machine: the campaign's runs in the background, one at a time on
# each GPU, so that one hold of the machine does as many as fit.  Two runs at
# once on one GPU are slower than one after the other (on the H200 each took
# 1.87 s a step together, 0.86 s alone), hence a queue per GPU; on a machine
# of several GPUs each GPU takes the next run of one shared list as soon as
# its last one ends (a run that diverges ends early).
#   [GPUS=0,1,2] bash experiments/studies/paper/gpu_queue.sh HOLD_START DEADLINE_MIN MINUTES_PER_RUN \
#        NAME:SEED:RECIPE_CFG[:k=v,k=v] ...
#   bash experiments/studies/paper/gpu_queue.sh --join GPU
# HOLD_START is the epoch second the machine was asked for, DEADLINE_MIN the
# minute of the hold by which runs must have ended (the hold lasts at most
# 30), MINUTES_PER_RUN what one run takes.  A run starts only if it can end
# by the deadline.  GPUS lists the GPUs to use (default: every GPU nvidia-smi
# lists); --join adds a GPU that was busy with other work to the queue
# already running.  Returns at once; experiments/runs/paper/queue.log says
# what it did ("gpu G: done" as each GPU's queue ends, "queue: done" when the
# first GPUS have all ended), and gpu_poll.sh brings the logs back.
set -euo pipefail
usage="usage: [GPUS=0,1,...] gpu_queue.sh HOLD_START DEADLINE_MIN MINUTES_PER_RUN NAME:SEED:RECIPE_CFG[:k=v,...] ... | --join GPU"
here="$(cd "$(dirname "$0")" && pwd)"
runs=experiments/runs/paper

# One GPU's queue: the next spec of the shared list (its index in queue.next,
# under flock), until the list ends or a run no longer fits before the deadline.
worker() {
  local gpu=$1 spec name seed recipe sets i now left
  export CUDA_VISIBLE_DEVICES=$gpu
  while :; do
    i=$(flock "$runs/queue.next" bash -c 'i=$(cat "$1"); echo $((i + 1)) >"$1"; echo "$i"' _ "$runs/queue.next")
    spec=$(sed -n "$((i + 1))p" "$runs/queue.specs")
    [ -n "$spec" ] || break
    IFS=: read -r name seed recipe sets <<<"$spec"
    now=$(date +%s)
    left=$(awk -v h="$hold_start" -v d="$deadline_min" -v n="$now" 'BEGIN { printf "%.1f", (h + d * 60 - n) / 60 }')
    if awk -v l="$left" -v r="$run_min" 'BEGIN { exit !(l < r) }'; then
      echo "$(date +%T) gpu $gpu: $name: not started, $left min left before the deadline"
      continue
    fi
    local args=() kv s out pid
    IFS=, read -ra kv <<<"$sets"
    for s in "${kv[@]}"; do [ -n "$s" ] && args+=(--set "$s"); done
    out=$(bash "$here/gpu_launch.sh" "$name" "$seed" "$recipe" "${args[@]}" 2>&1) || true
    echo "$(date +%T) gpu $gpu: $out ($left min left)"
    [[ "$out" == *"(pid "*")" ]] || continue
    pid=${out##*pid }
    pid=${pid%)}
    while kill -0 "$pid" 2>/dev/null; do sleep 5; done
    echo "$(date +%T) gpu $gpu: $name: $(tr '\r' '\n' <"$runs/$name.out" | grep '^train: ' | tail -1)"
  done
  echo "$(date +%T) gpu $gpu: done"
}
queue() {
  local g
  for g in ${gpus//,/ }; do worker "$g" & done
  wait
  echo "$(date +%T) queue: done"
}
start() {  # the function $1 in the background, outliving the call
  setsid nohup bash -c "$(declare -f worker queue); hold_start=$hold_start deadline_min=$deadline_min \
    run_min=$run_min gpus=$gpus here='$here' runs='$runs' $1" >>"$runs/queue.log" 2>&1 </dev/null &
}

if [ "${1:-}" = --join ]; then
  if [ $# -ne 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]] || [ ! -f "$runs/queue.env" ]; then
    echo "gpu_queue: --join takes one GPU number, and a queue must have been started" >&2
    exit 2
  fi
  # shellcheck disable=SC1091
  . "$runs/queue.env"
  start "worker $2"
  echo "gpu_queue: gpu $2 joined the queue"
  exit 0
fi
if [ $# -lt 4 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || ! [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] ||
   ! [[ "$3" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "$usage" >&2
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
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
gpus=${GPUS:-$(seq -s, 0 $(( ${n:-1} > 0 ? ${n:-1} - 1 : 0 )))}
if ! [[ "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  echo "gpu_queue: GPUS must list GPU numbers, like 0,1,2" >&2
  exit 2
fi
mkdir -p "$runs"
printf '%s\n' "$@" >"$runs/queue.specs"
echo 0 >"$runs/queue.next"
printf 'hold_start=%s deadline_min=%s run_min=%s gpus=%s\n' "$hold_start" "$deadline_min" "$run_min" "$gpus" \
  >"$runs/queue.env"
start queue
echo "gpu_queue: $# runs queued on GPU(s) $gpus (log $runs/queue.log)"
