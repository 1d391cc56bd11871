#!/usr/bin/env bash
# Runs one Python test with Debian's python3 (python3-numpy, python3-torch)
# against the package in lib/python, the library and the test shim from the
# runfiles.  Skips when /usr/bin/python3 or its numpy / torch is missing,
# unless CI=true (then that is a failure).
#   run_python_test.sh TEST.py [args...]
set -euo pipefail
py=${EXMY_TEST_PYTHON:-/usr/bin/python3}  # another interpreter on a GPU machine, if need be
name=$(basename "$1" .py)
if ! "$py" -c "import numpy, torch" 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then echo "$name: FAIL: $py with numpy and torch is missing"; exit 1; fi
  echo "$name: SKIPPED: install python3-numpy python3-torch (setup.sh does)"; exit 0
fi
export PYTHONPATH="$PWD/lib/python"
export EXMY_LIBRARY="$PWD/libexmy.so"
export EXMY_TEST_SHIM="$PWD/tests/python/libtrainer_shim.so"
if [ -e cuda/libexmy_cuda.so ]; then export EXMY_CUDA_LIBRARY="$PWD/cuda/libexmy_cuda.so"; fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
exec "$py" "$@"
