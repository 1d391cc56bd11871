#!/usr/bin/env bash
# Starts one run of the paper-scale campaign in the background on the GPU
# machine and returns at once (the run outlives the call while the machine is
# held).  From the repository root there, after experiments/data/gpu_prepare.sh
# has written the shards, with the bundle of cuda/bundle.sh carried as
# BUNDLE (default .gpu_extra/bundle.tar.xz, a tar.xz of gpu_bundle/):
#   bash experiments/studies/paper/gpu_launch.sh NAME SEED RECIPE_CFG [--set k=v ...]
# e.g. NAME e8m5-rz-s2, SEED 2, RECIPE_CFG experiments/configs/e8m5.cfg,
# --set rounding=rz.  The run directory is experiments/runs/paper/NAME; its
# console output NAME.out beside it.  gpu_poll.sh packs what came so far.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: gpu_launch.sh NAME SEED RECIPE_CFG [--set k=v ...]" >&2
  exit 2
fi
name=$1 seed=$2 recipe=$3
shift 3
if ! [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || ! [[ "$seed" =~ ^[0-9]+$ ]] || [ ! -f "$recipe" ]; then
  echo "gpu_launch: NAME must be [A-Za-z0-9._-]+, SEED an integer and RECIPE_CFG a file" >&2
  exit 2
fi
runs=experiments/runs/paper
if [ -e "$runs/$name" ]; then
  echo "gpu_launch: $runs/$name exists; a run is launched once" >&2
  exit 2
fi
[ -f data/corpus/shards/SHA256SUMS ] || { echo "gpu_launch: no shards; run experiments/data/gpu_prepare.sh first" >&2; exit 2; }
bundle=${BUNDLE:-.gpu_extra/bundle.tar.xz}
unpacked=/tmp/exmy-bundle
mkdir -p "$unpacked"
# under flock: the queues of several GPUs launch at once
flock "$unpacked" bash -c '[ -x "$1/gpu_bundle/train" ] || tar xJf "$2" -C "$1"' _ "$unpacked" "$bundle"
# cuBLAS from where gpu_run.sh finds it (the toolkit or a Python wheel)
for d in /usr/local/cuda/lib64 $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for lib in "$d"/libcublasLt.so.1* "$d"/nvidia/cublas/lib/libcublasLt.so.1* "$d"/nvidia/cu13/lib/libcublasLt.so.1*; do
    [ -e "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break 2
  done
done
mkdir -p "$runs"
setsid nohup "$unpacked/gpu_bundle/train" --config experiments/configs/runs/paper-120m.cfg \
  --recipe "$recipe" --set device=gpu --set attention_kernel=flash --set seed="$seed" \
  --set run_dir="$runs/$name" "$@" >"$runs/$name.out" 2>&1 </dev/null &
echo "gpu_launch: $name started (pid $!)"
