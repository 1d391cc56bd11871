#!/usr/bin/env bash
# Builds the GPU tests, the benchmark and the verification programs with Bazel
# and copies them, with what they need, into gpu_bundle/ (git-ignored): a
# folder that runs on a machine with a GPU and no Bazel.  There:
#   cd gpu_bundle && ./gpu_run.sh [tests|bench|verify|all] [outdir]
# The binaries carry the CUDA runtime and Check statically; cuBLAS, OpenMP and
# OpenBLAS come from the GPU machine (gpu_run.sh finds cuBLAS); the CPU
# trainer's results do not depend on that OpenBLAS (its GEMMs are
# exmy_sgemm's unless gemm = openblas).
set -euo pipefail
cd "$(dirname "$0")/.."
# One output base per checkout (as Bazel's own default is): two checkouts
# bundling at once must not copy each other's binaries out of a shared one.
ob_default="$HOME/.cache/bazel_ob_cuda_$(pwd -P | sha256sum | cut -c1-12)"
OB=(--output_base="${EXMY_BAZEL_OUTPUT_BASE:-$ob_default}")
# --symlink_prefix=/: no convenience links (bazel-bin, bazel-<folder>, ...).
# Pointed into this second output base, they would be walked into by the
# checkout's own `bazel build //...` (as .ci/run explains); the binaries
# are found through `bazel info` instead.
TARGETS=(//cuda:bench //cuda:verify_hw //:libexmy.so
         //tests/cuda:convert_test //tests/cuda:recipes_test //tests/cuda:qgemm_test
         //tests/cuda:fast_path_test //tests/cuda:group_dre_test //tests/cuda:qgemm_accum_test
         //experiments/trainer:train //tests/experiments/gpu:layers_gpu_test
         //tests/experiments/gpu:flash_attention_gpu_test //tests/experiments/gpu:trainer_gpu_test
         //tests/experiments/gpu:accum_fp8_gpu_test //tests/experiments/gpu:blockscaled_lt_calibrate
         //tests/cpu:qgemm_accum_test)
bazel "${OB[@]}" build -c opt --symlink_prefix=/ "${TARGETS[@]}"
BIN=$(bazel "${OB[@]}" info -c opt bazel-bin 2>/dev/null)
rm -rf gpu_bundle
mkdir -p gpu_bundle
cp "$BIN/cuda/bench" "$BIN/cuda/verify_hw" "$BIN/libexmy.so" \
   "$BIN/tests/cuda/convert_test" "$BIN/tests/cuda/recipes_test" \
   "$BIN/tests/cuda/qgemm_test" "$BIN/tests/cuda/qgemm_accum_test" \
   "$BIN/tests/cuda/fast_path_test" "$BIN/tests/cuda/group_dre_test" gpu_bundle/
cp cuda/verify_mldtypes.py tests/lib/h100_fp8/capture.py cuda/gpu_run.sh gpu_bundle/
# the trainer: binary, tests, recipe configs, sweeps, benchmark, PyTorch reference
cp "$BIN/experiments/trainer/train" "$BIN/tests/experiments/gpu/layers_gpu_test" \
   "$BIN/tests/experiments/gpu/flash_attention_gpu_test" \
   "$BIN/tests/experiments/gpu/trainer_gpu_test" "$BIN/tests/experiments/gpu/accum_fp8_gpu_test" \
   "$BIN/tests/experiments/gpu/blockscaled_lt_calibrate" \
   tests/experiments/gpu/train_gpu_test.sh \
   experiments/gpu/bench_gpu.sh experiments/gpu/profile_gpu.sh experiments/gpu/profile_summary.py \
   experiments/reference/llama_torch.py \
   experiments/reference/bench_torch_gpu.py experiments/reference/profile_torch_gpu.py \
   experiments/reference/torch_gpu_step.py gpu_bundle/
mkdir -p gpu_bundle/configs && cp experiments/configs/*.cfg gpu_bundle/configs/
# the Python package (lib/python): libexmy_cuda.so, the package, its GPU test and benchmark
bazel "${OB[@]}" build -c opt --symlink_prefix=/ //cuda:libexmy_cuda.so
mkdir -p gpu_bundle/python/exmy
cp "$BIN/cuda/libexmy_cuda.so" gpu_bundle/
cp lib/python/exmy/*.py gpu_bundle/python/exmy/
cp tests/python/gpu_test.py tests/python/common.py lib/python/benchmarks/gpu_bench.py gpu_bundle/python/
# the sweep runner, with the runfiles it looks for beside itself (the
# trainer, the sharpness tool, the plot and shadow scripts); run it from a
# checkout (the study configs and experiments/configs are read from there):
#   SWEEP_TRAIN=gpu_bundle/train gpu_bundle/sweep experiments/studies/sweeps/S.cfg --gpus 0,1
bazel "${OB[@]}" build -c opt --symlink_prefix=/ //experiments/studies:sweep //experiments/studies:sharpness
rf=gpu_bundle/sweep.runfiles/exmy/experiments
mkdir -p "$rf/studies" "$rf/trainer"
cp "$BIN/experiments/studies/sweep" gpu_bundle/
cp "$BIN/experiments/studies/sharpness" experiments/studies/sweep_plot.sh \
   experiments/studies/shadow.sh "$rf/studies/"
ln -s ../../../../train "$rf/trainer/train"
# the golden CPU losses (same config, same bits on the GPU machine's host CPU),
# and the CPU accumulation kernels' test (the GPU machine's host has AVX-512)
mkdir -p gpu_bundle/golden && cp tests/experiments/golden/* gpu_bundle/golden/
cp "$BIN/tests/cpu/qgemm_accum_test" gpu_bundle/cpu_qgemm_accum_test
cp tests/experiments/golden_loss_test.sh gpu_bundle/
chmod -R u+w gpu_bundle
du -sh gpu_bundle
