#!/usr/bin/env bash
# Fuzzes what exmy reads from untrusted hands, with libFuzzer (Debian's clang),
# AddressSanitizer and UBSan (any undefined behaviour aborts):
#   fuzz_config      the trainer's config parser
#   fuzz_checkpoint  the checkpoint reader (as is, and with checksums recomputed)
#   fuzz_cli         the exmy CLI: arguments, input file, outputs
# For each: build (clang, outside Bazel, in a temporary directory), replay every
# input in regressions/NAME/ (every crash found so far), then fuzz from
# corpus/NAME/ for FUZZ_SECONDS (default 45) seconds.  A crash, a leak, a
# timeout or a broken property is saved into regressions/NAME/ (commit it with
# its fix) and makes the script exit 1.
#
#   bash tests/fuzz/run.sh [NAME...]      FUZZ_SECONDS=600 bash tests/fuzz/run.sh fuzz_cli
#   bash tests/fuzz/run.sh --make-seeds   rewrite corpus/fuzz_checkpoint/ (after a format change)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${FUZZ_SECONDS:-45}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cd "$root"

command -v clang >/dev/null || { echo "fuzz: clang not found (setup.sh installs it)" >&2; exit 2; }
flags=(-g -O1 -std=c11 -D_GNU_SOURCE -march=x86-64-v2 -fopenmp -ffp-contract=off -I"$root" -DEXMY_NO_CLONES
       -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
       -Wno-unknown-pragmas -Wno-macro-redefined -Wno-comment)
fuzz=(-fsanitize=fuzzer-no-link)
# the library and the trainer's parts, compiled once (instrumented for coverage)
lib=(lib/format.c lib/reference.c lib/accum.c cpu/accum_vector.c cpu/bulk.c cpu/gemm.c cpu/mx.c
     cpu/qgemm.c cpu/quantize_scaled.c cpu/scaling.c cpu/stats.c)
trainer=(experiments/trainer/{config,recipe,model,qgemm,checkpoint,crc32c}.c)
cli=(cpu/cli/*.c)
echo "fuzz: building with $(clang --version | head -1)"
compile() { # compile OUTDIR EXTRA_FLAGS... -- SOURCES...
  local out=$1 extra=()
  shift
  while [[ $1 != -- ]]; do extra+=("$1"); shift; done
  shift
  mkdir -p "$out"
  printf '%s\n' "$@" | xargs -P 2 -I{} sh -c \
    'clang "$@" -c "{}" -o "'"$out"'/$(echo "{}" | tr / _).o"' _ "${flags[@]}" "${fuzz[@]}" "${extra[@]}"
}
compile "$build/lib" -- "${lib[@]}" "${trainer[@]}"
compile "$build/cli" -DEXMY_CLI_NO_MAIN -DCLI_CHUNK_ELEMENTS=64 -- "${cli[@]}"
link() { # link NAME OBJDIRS...
  local name=$1 objs=() d
  shift
  for d; do objs+=("$d"/*.o); done
  clang "${flags[@]}" -fsanitize=fuzzer "$here/$name.c" "${objs[@]}" -lopenblas -lm -o "$build/$name"
}
link fuzz_config "$build/lib"
link fuzz_checkpoint "$build/lib"
link fuzz_cli "$build/lib" "$build/cli"

if [[ ${1:-} == --make-seeds ]]; then
  clang "${flags[@]}" -DFUZZ_MAKE_SEEDS "$here/fuzz_checkpoint.c" "$build"/lib/*.o -lopenblas -lm \
    -o "$build/make_seeds"
  rm -rf "$here/corpus/fuzz_checkpoint" && mkdir -p "$here/corpus/fuzz_checkpoint"
  "$build/make_seeds" "$here/corpus/fuzz_checkpoint"
  ls -l "$here/corpus/fuzz_checkpoint"
  exit 0
fi

export OMP_NUM_THREADS=1 TMPDIR=$build # fuzz_cli's scratch directory goes with the build
export ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1
names=("$@")
((${#names[@]})) || names=(fuzz_config fuzz_checkpoint fuzz_cli)
status=0
for name in "${names[@]}"; do
  regressions=$here/regressions/$name
  mkdir -p "$regressions"
  mapfile -t cases < <(find "$regressions" -type f ! -name '.*' | sort)
  if ((${#cases[@]})); then
    if "$build/$name" -close_fd_mask=3 "${cases[@]}" >"$build/$name.replay" 2>&1; then
      echo "fuzz: $name: ${#cases[@]} regression inputs pass"
    else
      echo "fuzz: $name: a regression input fails:" && tail -40 "$build/$name.replay"
      status=1
      continue
    fi
  fi
  work=$build/$name.corpus
  mkdir -p "$work"
  # new inputs go to the first directory (scratch), the committed seeds are only read
  dict=()
  [[ -f $here/$name.dict ]] && dict=(-dict="$here/$name.dict")
  if "$build/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 "${dict[@]}" \
       -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$regressions/" \
       "$work" "$here/corpus/$name" >"$build/$name.log" 2>&1; then
    echo "fuzz: $name: clean for ${seconds}s ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$name.log" | grep -o '[0-9]*$') runs, $(ls "$work" | wc -l) new corpus inputs, $(grep -o 'cov: [0-9]*' "$build/$name.log" | tail -1))"
  else
    echo "fuzz: $name: FOUND A FAILURE (saved in $regressions/):"
    grep -E 'ERROR|SUMMARY|fuzz_|Test unit written' "$build/$name.log" | head -20
    tail -60 "$build/$name.log"
    status=1
  fi
done
exit $status
