#!/usr/bin/env bash
# Builds the GPU tests, the benchmark and the verification programs with Bazel
# and copies them, with what they need, into gpu_bundle/ (git-ignored): a
# folder that runs on a machine with a GPU and no Bazel.  There:
#   cd gpu_bundle && ./gpu_run.sh [tests|bench|verify|all] [outdir]
# The binaries carry the CUDA runtime and Check statically; cuBLAS, OpenMP and
# OpenBLAS come from the GPU machine (gpu_run.sh finds cuBLAS).
set -euo pipefail
cd "$(dirname "$0")/.."
OB=(--output_base="${EXMY_BAZEL_OUTPUT_BASE:-$HOME/.cache/bazel_ob_cuda}")
TARGETS=(//cuda:bench //cuda:verify_hw //:libexmy.so
         //tests/cuda:convert_test //tests/cuda:recipes_test //tests/cuda:qgemm_test
         //tests/cuda:fast_path_test)
bazel "${OB[@]}" build -c opt "${TARGETS[@]}"
BIN=$(bazel "${OB[@]}" info -c opt bazel-bin 2>/dev/null)
rm -rf gpu_bundle
mkdir -p gpu_bundle
cp "$BIN/cuda/bench" "$BIN/cuda/verify_hw" "$BIN/libexmy.so" \
   "$BIN/tests/cuda/convert_test" "$BIN/tests/cuda/recipes_test" \
   "$BIN/tests/cuda/qgemm_test" "$BIN/tests/cuda/fast_path_test" gpu_bundle/
cp cuda/verify_mldtypes.py cuda/gpu_run.sh gpu_bundle/
chmod u+w gpu_bundle/*
du -sh gpu_bundle
