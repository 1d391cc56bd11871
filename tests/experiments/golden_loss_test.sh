#!/usr/bin/env bash
# The CPU trainer's losses, bit for bit, against the ones committed in
# tests/experiments/golden/ (RECIPE.txt: "STEP LOSS" per step, then "val LOSS",
# each a float32 printed with %.9g, which tells every float32 apart).  A short
# `tiny` run on golden/text.txt per recipe, each run several ways: 2 threads,
# 1, 3, every core (where there are more than 3), and 2 threads with
# exmy_sgemm's AVX2 kernel forced.  Same config, same
# bits: on any x86-64 CPU with AVX2 and any thread count (cuda/gpu_run.sh runs
# this on the GPU machine's host CPU, a different CPU and distribution).
# usage: golden_loss_test.sh TRAIN CONFIG_DIR GOLDEN_DIR [--write]
#   --write: write GOLDEN_DIR/RECIPE.txt from the 2-thread runs (then check the
#   other three ways against them)
set -euo pipefail
train=$1; configs=$2; golden=$3; write=${4:-}
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
recipes=(fp32 bf16 e8m3 e8m3-sr mxfp8 mxfp4 nvfp4 fp8-deepseek fp8-smooth-swiglu fp8-adam)
common=(--set size=tiny --set data="$golden/text.txt" --set val_data= --set batch_size=2
        --set steps=6 --set warmup=2 --set lr=3e-3 --set seed=1337 --set val_every=0
        --set val_batches=1 --set stats_every=0 --set ckpt_every=0 --set progress=0)
fail=0; passed=0

# the losses of a run directory, one "STEP LOSS" per line, then "val LOSS"
losses() {
  grep -o '"step":[0-9]*,"loss":[^,]*' "$1/log.jsonl" | sed 's/"step":\([0-9]*\),"loss":/\1 /'
  grep -o '"val_loss":[^,}]*' "$1/log.jsonl" | sed 's/"val_loss":/val /'
}

# run NAME RECIPE [VAR=VALUE...] [--set ...]: env assignments first, then train options
run() {
  local name=$1 recipe=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env ${envs[@]+"${envs[@]}"} "$train" --config "$configs/$recipe.cfg" "${common[@]}" "$@" \
    --set run_dir="$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err" || true
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores," \
     "AVX-512: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
avx2=1
if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
  avx2=0; echo "note: this CPU has no AVX2 + FMA; the forced-AVX2 runs are skipped"
fi
for recipe in "${recipes[@]}"; do
  run "$recipe-t2" "$recipe" --set threads=2
  if [ "$write" = --write ]; then
    losses "$tmp/$recipe-t2" > "$golden/$recipe.txt"
    echo "wrote $golden/$recipe.txt"
  fi
  ways=("t2:2 threads" "t1:1 thread" "t3:3 threads")
  run "$recipe-t1" "$recipe" --set threads=1
  run "$recipe-t3" "$recipe" --set threads=3
  cores=$(nproc)
  if [ "$cores" -gt 3 ]; then
    run "$recipe-tall" "$recipe" --set threads="$cores"; ways+=("tall:$cores threads")
  fi
  if [ $avx2 = 1 ]; then
    run "$recipe-avx2" "$recipe" EXMY_SGEMM_KERNEL=avx2 --set threads=2
    if grep -q "sgemm kernel avx2" "$tmp/$recipe-avx2.err"; then
      ways+=("avx2:2 threads, AVX2 kernel")
    else
      echo "FAIL $recipe: EXMY_SGEMM_KERNEL=avx2 not taken: $(cat "$tmp/$recipe-avx2.err")"
      fail=$((fail+1))
    fi
  fi
  for way in "${ways[@]}"; do
    tag=${way%%:*}; what=${way#*:}
    if [ "$(losses "$tmp/$recipe-$tag" | wc -l)" -lt 7 ]; then
      echo "FAIL $recipe ($what): run incomplete"; cat "$tmp/$recipe-$tag.err"; fail=$((fail+1))
    elif diff "$golden/$recipe.txt" <(losses "$tmp/$recipe-$tag") >"$tmp/diff"; then
      echo "ok   $recipe ($what): 6 losses and val loss bit-identical to the golden ones ($(tail -1 "$golden/$recipe.txt"))"
      passed=$((passed+1))
    else
      echo "FAIL $recipe ($what): losses differ from $golden/$recipe.txt (< golden, > this run):"
      cat "$tmp/diff"; fail=$((fail+1))
    fi
  done
done

# a GEMM the trainer does not know is bad input: one line on stderr, exit 2
if "$train" --config "$configs/fp32.cfg" "${common[@]}" --set gemm=mkl --set run_dir="$tmp/bad" \
     >/dev/null 2>"$tmp/bad.err"; then rc=0; else rc=$?; fi
if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] && grep -q "gemm.*exmy.*openblas.*mkl" "$tmp/bad.err"; then
  echo "ok   gemm=mkl: exit 2, $(cat "$tmp/bad.err")"; passed=$((passed+1))
else echo "FAIL gemm=mkl: exit $rc, stderr: $(cat "$tmp/bad.err")"; fail=$((fail+1)); fi

echo "$passed passed, $fail failed"
[ $fail -eq 0 ]
