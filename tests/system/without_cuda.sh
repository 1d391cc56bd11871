#!/usr/bin/env bash
# Runs a command as on a machine without the CUDA Toolkit, for real: in a
# private mount namespace an empty tmpfs covers every toolkit folder
# (/usr/local/cuda and what it points to, $CUDA_PATH, $CUDA_HOME), every
# folder holding an nvcc leaves PATH, and the variables are unset.  The
# command's Bazel must use a fresh output base (a running server would still
# see the toolkit).  Needs root (unshare, mount).
#   tests/system/without_cuda.sh COMMAND [ARG...]
set -euo pipefail
if [ "$#" -eq 0 ]; then
  echo "without_cuda.sh: usage: without_cuda.sh COMMAND [ARG...]" >&2
  exit 2
fi
if [ -z "${EXMY_CUDA_HIDDEN:-}" ]; then
  exec unshare --mount --propagation private env EXMY_CUDA_HIDDEN=1 bash "$0" "$@"
fi

hide=()
for d in /usr/local/cuda /usr/local/cuda-* "${CUDA_PATH:-}" "${CUDA_HOME:-}"; do
  [ -n "$d" ] && [ -d "$d" ] && hide+=("$(readlink -f "$d")")
done
for d in $(printf '%s\n' "${hide[@]}" | sort -u); do
  mount -t tmpfs -o size=1m,mode=755 exmy-no-cuda "$d"
done
path=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [ -x "$d/nvcc" ] && continue
  path="${path:+$path:}$d"
done
export PATH="$path"
unset CUDA_PATH CUDA_HOME EXMY_CUDA_HIDDEN

# The toolkit must really be gone, or this proves nothing.
if command -v nvcc >/dev/null || [ -e /usr/local/cuda/bin/nvcc ] ||
   ls /usr/local/cuda*/include/cuda_runtime.h >/dev/null 2>&1; then
  echo "without_cuda.sh: could not hide the CUDA Toolkit" >&2
  exit 1
fi
echo "without_cuda.sh: CUDA Toolkit hidden (${hide[*]:-nothing to hide}); running: $*"
exec "$@"
