#!/usr/bin/env bash
# The CUDA Toolkit installed but unknown to the dynamic loader, as NVIDIA's
# runfile installer leaves it: in a private mount namespace /etc/ld.so.cache
# is replaced by one made without the toolkit's folders, and LD_LIBRARY_PATH
# is unset.  Then, with the trainer built with CUDA (bazel-bin of the normal
# build):
#   - a CPU run trains (no CUDA library is needed to start);
#   - the cuBLAS loader finds the toolkit's libraries by itself (the folder of
#     the toolkit that built it);
#   - device = gpu on a machine without a GPU exits 2 with one line;
#   - with the toolkit's folder hidden as well, the loader says in one line
#     what is missing.
# Needs root.  Usage: tests/system/cuda_unregistered.sh BAZEL_BIN
set -euo pipefail
BIN=$(readlink -f "${1:?usage: cuda_unregistered.sh BAZEL_BIN}")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${EXMY_LOADER_HIDDEN:-}" ]; then
  exec unshare --mount --propagation private env EXMY_LOADER_HIDDEN=1 bash "$0" "$@"
fi
unset LD_LIBRARY_PATH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the loader's folders, less every one of a CUDA toolkit
cat /etc/ld.so.conf.d/*.conf 2>/dev/null | grep -v '^#' | grep -vi cuda | grep . >"$tmp/ld.so.conf" || true
ldconfig -C "$tmp/ld.so.cache" -f "$tmp/ld.so.conf"
mount --bind "$tmp/ld.so.cache" /etc/ld.so.cache

pass=0 fail=0
check() { # name, then a command that must succeed
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); echo "ok: $name"; else fail=$((fail + 1)); echo "FAILED: $name"; fi
}
check "the loader's cache knows no cuBLAS" bash -c '! ldconfig -p | grep -q libcublas'
check "train needs no library the loader cannot find" bash -c "! ldd '$BIN/experiments/trainer/train' | grep -q 'not found'"

cd "$ROOT"
run_cpu() {
  rm -rf "$tmp/cpu"
  "$BIN/experiments/trainer/train" --config experiments/configs/e8m3.cfg --set steps=3 --set size=test \
    --set run_dir="$tmp/cpu" --set progress=0 >"$tmp/cpu.out" 2>&1 &&
    grep -q '"step":3' "$tmp/cpu/log.jsonl"
}
check "a CPU run trains" run_cpu

run_gpu() {
  local rc=0
  "$BIN/experiments/trainer/train" --config experiments/configs/e8m3.cfg --set steps=3 --set size=test \
    --set device=gpu --set run_dir="$tmp/gpu" >"$tmp/gpu.out" 2>"$tmp/gpu.err" || rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/gpu.err")" -eq 1 ] && grep -q '^train: ' "$tmp/gpu.err" &&
    [ ! -e "$tmp/gpu" ] && echo "  device=gpu said: $(cat "$tmp/gpu.err")"
}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "skip: this machine has a GPU (device = gpu would train)"
else
  check "device = gpu without a GPU: exit 2, one line, no run directory" run_gpu
fi

check "the cuBLAS loader finds the toolkit's libraries by itself" \
  "$BIN/tests/cuda/cublas_loader_test" loaded
toolkit=$(readlink -f /usr/local/cuda)
hidden_loader() {
  mount -t tmpfs -o size=1m exmy-no-cuda "$toolkit" &&
    "$BIN/tests/cuda/cublas_loader_test" missing
}
if [ -d "$toolkit" ]; then
  check "with the toolkit gone too, the loader says what is missing" \
    unshare --mount --propagation private bash -c "$(declare -f hidden_loader); toolkit=$toolkit BIN=$BIN hidden_loader"
fi
echo "cuda_unregistered: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
