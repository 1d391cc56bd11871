#!/usr/bin/env bash
# Runs the bundle made by cuda/bundle.sh on a GPU machine without Bazel.
#   ./gpu_run.sh [tests|bench|verify|trainer|trainer-bench|golden|python|calibrate|
#                 calibrate-blockscaled|fp8-deepseek|all] [outdir]
#   (default: all, .)
# calibrate: captures cuBLASLt's FP8 GEMMs (torch._scaled_mm) into outdir
# (capture.py, the script behind tests/lib/h100_fp8/; not part of all), to
# calibrate the accumulation model offline with tests/lib/h100_fp8/calibrate.py.
# calibrate-blockscaled: cuBLASLt's own block-scaled FP8 GEMM, 1 x 128
# against 128 x 128 (vec-blk) and 1 x 128 against 1 x 128 (vec-vec, the
# weight gradient's), against the model fp8-deepseek runs under
# (blockscaled_lt_calibrate; not part of all): its table goes to
# outdir/blockscaled_lt_calibrate.log, summed up in all and per pairing;
# BLOCKSCALED_ARGS are passed on (e.g. --quick, --pairing vec-vec).
# fp8-deepseek: its block-scaled GEMMs (not part of all): accum_fp8_gpu_test's
# accum_fp8_block case (the one-call block-scaled path and the per-slice one
# against the emulation, bit for bit), then fp8-deepseek's step at 120m
# (batch FP8_DEEPSEEK_BATCH, default 32; 8 steps, the median of steps 4..)
# with the one-call path and per slice (EXMY_FP8_BLOCK_BATCHED=1).
# golden: the CPU trainer on this machine's host CPU against the losses
# committed in tests/experiments/golden/ (bit for bit, 1 to 3 threads), after
# the CPU accumulation kernels (every vector kernel the host has, AVX-512
# included) against the scalar model (cpu_qgemm_accum_test).
# Logs go to outdir; the exit status is non-zero if a test or check failed.
set -uo pipefail
cd "$(dirname "$0")"
what=${1:-all}
out=${2:-.}
mkdir -p "$out"
# cuBLAS: the toolkit's, or the one a Python wheel (nvidia-cublas) brought
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for lib in "$d"/libcublasLt.so.1* "$d"/nvidia/cublas/lib/libcublasLt.so.1* \
             "$d"/nvidia/cu13/lib/libcublasLt.so.1*; do
    [ -e "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break 2
  done
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in fast_path_test group_dre_test convert_test recipes_test qgemm_test qgemm_accum_test \
           accum_fp8_gpu_test; do
    ./$t > "$out/$t.log" 2>&1
    rc=$?
    echo "$t: exit $rc; $(grep -E '^[0-9]+%' "$out/$t.log" | tail -1)"
    [ $rc -ne 0 ] && status=1 && grep -E "differ|gpu|Fail|fail|Error" "$out/$t.log" | head -20
  done
fi
if [ "$what" = trainer ] || [ "$what" = all ]; then
  for t in layers_gpu_test flash_attention_gpu_test trainer_gpu_test; do
    ./$t > "$out/$t.log" 2>&1
    rc=$?
    echo "$t: exit $rc; $(grep -E '^[0-9]+%' "$out/$t.log" | tail -1)"
    [ $rc -ne 0 ] && status=1 && grep -E "Fail|fail|Error|error" "$out/$t.log" | head -20
  done
  ./train_gpu_test.sh ./train ./configs > "$out/train_gpu_test.log" 2>&1 || status=1
  grep -E "^(ok|FAIL)|passed," "$out/train_gpu_test.log"
fi
if [ "$what" = golden ] || [ "$what" = all ]; then
  echo "golden: host CPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  ./cpu_qgemm_accum_test > "$out/cpu_qgemm_accum_test.log" 2>&1 || status=1
  grep -E "^[0-9]+%|kernel: |not tested" "$out/cpu_qgemm_accum_test.log"
  ./golden_loss_test.sh ./train ./configs ./golden > "$out/golden_loss_test.log" 2>&1 || status=1
  grep -E "^(ok|FAIL|note)|passed," "$out/golden_loss_test.log"
fi
if [ "$what" = trainer-bench ]; then
  ./bench_gpu.sh "$out" || status=1
fi
if [ "$what" = verify ] || [ "$what" = all ]; then
  ./verify_hw > "$out/verify_hw.log" 2>&1 || status=1
  tail -1 "$out/verify_hw.log"
  PYTHONUNBUFFERED=1 python3 verify_mldtypes.py libexmy.so 380 > "$out/verify_mldtypes.log" 2>&1 || status=1
  tail -1 "$out/verify_mldtypes.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  ./bench ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log" || status=1
fi
if [ "$what" = python ] || [ "$what" = all ]; then
  # ./gpu_run.sh python [outdir]: the Python package on CUDA tensors (against the CPU,
  # ml_dtypes and torch), then its speed
  py_env=(env PYTHONPATH=python EXMY_LIBRARY=./libexmy.so EXMY_CUDA_LIBRARY=./libexmy_cuda.so
          EXMY_CONFIG_DIR=./configs)
  "${py_env[@]}" python3 python/gpu_test.py > "$out/python_gpu_test.log" 2>&1 || status=1
  grep -E "^(FAIL|INFO)|^  FAIL|^gpu_test:" "$out/python_gpu_test.log"
  "${py_env[@]}" python3 python/gpu_bench.py 2>&1 | tee "$out/python_gpu_bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = calibrate ]; then
  PYTHONUNBUFFERED=1 python3 capture.py "$out" 2>&1 | tee "$out/capture.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = calibrate-blockscaled ]; then
  ./blockscaled_lt_calibrate ${BLOCKSCALED_ARGS:-} > "$out/blockscaled_lt_calibrate.log" 2>&1
  rc=$?
  echo "blockscaled_lt_calibrate: exit $rc"
  log="$out/blockscaled_lt_calibrate.log"
  grep -E "^device|configurations ran|every configuration|misread" "$log" | sort | uniq -c
  echo "$(grep -c 'identical all ' "$log") of $(grep -c ': identical ' "$log") algorithm runs" \
       "bit-identical to the model; $(grep -c ': refused' "$log") configurations refused"
  # per pairing: vec-blk's lines name W=A(BLK) or W=B(BLK), vec-vec's G=A(VEC128) or G=B(VEC128)
  for pairing in 'vec-blk W=[AB]\(BLK\)' 'vec-vec G=[AB]\(VEC128\)'; do
    lines=$(grep -E "${pairing#* }" "$log")
    echo "  ${pairing%% *}: $(grep -c 'identical all ' <<< "$lines") of" \
         "$(grep -c ': identical ' <<< "$lines") algorithm runs bit-identical to the model;" \
         "$(grep -c ': refused' <<< "$lines") configurations refused"
  done
  [ $rc -ne 0 ] && status=1
fi
if [ "$what" = fp8-deepseek ]; then
  log="$out/accum_fp8_block.log"
  CK_RUN_CASE=accum_fp8_block ./accum_fp8_gpu_test > "$log" 2>&1
  rc=$?
  echo "accum_fp8_block: exit $rc; $(grep -E '^[0-9]+%' "$log" | tail -1)"
  [ $rc -ne 0 ] && status=1 && grep -E "Fail|fail|Error" "$log" | head -20
  grep -E "^fp8-deepseek|^trainer" "$log"
  grep -oE "fp8 block-scaled plan [0-9x ]+: (one call|no algorithm.*|descriptors.*)" "$log" |
    sort | uniq -c
  tmp=$(mktemp -d)
  tr -cd "a-zA-Z0-9 _.,\n" < ./train | head -c 8000000 > "$tmp/text.u8"
  for batched in 0 1; do
    run="$out/fp8_deepseek_120m_batched$batched.log"
    EXMY_FP8_BLOCK_BATCHED=$batched ./train --config configs/fp8-deepseek.cfg \
      --set size=120m --set batch_size="${FP8_DEEPSEEK_BATCH:-32}" --set steps=8 --set warmup=2 \
      --set lr=3e-4 --set device=gpu --set attention_kernel=flash --set val_every=0 \
      --set val_batches=1 --set ckpt_every=0 --set stats_every=0 --set diverge_delta=0 \
      --set progress=0 --set data="$tmp/text.u8" --set val_data= --set run_dir="$tmp/run$batched" \
      > "$run" 2>&1 || { status=1; echo "fp8-deepseek 120m: failed: $(tail -1 "$run")"; }
    ms=$(grep -o '"ms":[0-9.]*' "$tmp/run$batched/log.jsonl" 2>/dev/null | tail -n +4 |
         cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "fp8-deepseek 120m, $([ $batched = 1 ] && echo "per slice" || echo "one call"):" \
         "median ${ms:-?} ms a step"
    grep -E "^train: (block-scaled|GEMMs under)" "$run"
  done
  rm -rf "$tmp"
fi
exit $status
