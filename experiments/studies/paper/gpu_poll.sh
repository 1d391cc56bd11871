#!/usr/bin/env bash
# On the GPU machine: the last line of every campaign run's console, and the
# runs' logs and configurations (no checkpoints) packed into $OUT/paper-logs.tgz
# for the call to bring back.
#   bash experiments/studies/paper/gpu_poll.sh
runs=experiments/runs/paper
if [ ! -d "$runs" ]; then
  echo "gpu_poll: no runs in $runs"
  exit 0
fi
for f in "$runs"/*.out; do
  [ -f "$f" ] || continue
  printf '%s: %s\n' "$(basename "$f" .out)" "$(tr '\r' '\n' <"$f" | grep . | tail -1)"
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/paper-logs.tgz" -C "$runs" --exclude='*.bin' --exclude='ckpt*' . 2>/dev/null
  echo "gpu_poll: logs in \$OUT/paper-logs.tgz"
fi
exit 0
