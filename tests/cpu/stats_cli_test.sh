#!/usr/bin/env bash
# `exmy stats` on a hand-computed file: {1, 2, 1000, 0} in E4M3.
set -euo pipefail
exmy="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# little-endian float32: 1.0, 2.0, 1000.0, 0.0
printf '\000\000\200\077\000\000\000\100\000\000\172\104\000\000\000\000' > "$tmp/x.bin"

expect() { # expect OUTPUT NAME VALUE
  local got
  got=$(printf '%s\n' "$1" | awk -v k="$2" '$1 == k {print $2}')
  if [ "$got" != "$3" ]; then
    echo "FAIL: $2 = '$got', want '$3'"; printf '%s\n' "$1"; exit 1
  fi
}

# no scaling: 1000 > 448 overflows (to NaN: E4M3 has no inf, so it is left
# out of the error sums); 1, 2, 0 are exact
out=$("$exmy" stats --format e4m3 "$tmp/x.bin")
[ "$(printf '%s\n' "$out" | wc -l)" -eq 11 ] || { echo "FAIL: want 11 lines"; echo "$out"; exit 1; }
expect "$out" n 4
expect "$out" amax 1000
expect "$out" min_nonzero 1
expect "$out" overflow_ratio 0.25
expect "$out" underflow_ratio 0
expect "$out" mse 0
expect "$out" scale 1

# --saturate: 1000 -> 448, squared error 552^2 / 4 = 76176
out=$("$exmy" stats --format e4m3 --saturate "$tmp/x.bin")
expect "$out" mse 76176

# tensor scaling, power of two: s = 2^floor(log2(448/1000)) = 0.25 ->
# 0.25, 0.5, 250 -> 256 (E4M3 step 16 there): errors 0, 0, 24, 0
out=$("$exmy" stats --format e4m3 --scaling tensor --pow2 "$tmp/x.bin")
expect "$out" scale 0.25
expect "$out" overflow_ratio 0
expect "$out" mse 144

# groups of 2 with pow2 scales: {1, 2}: s = 128, exact; {1000, 0}: s = 0.25
out=$("$exmy" stats --format e4m3 --scaling group:2 --pow2 "$tmp/x.bin")
expect "$out" mse 144
expect "$out" scale nan

# mx: one block, X = floor(log2 1000) - 8 = 1: 1000 / 2 = 500 -> 448 (saturated)
out=$("$exmy" stats --format e4m3 --scaling mx "$tmp/x.bin")
expect "$out" overflow_ratio 0.25

# errors: one line, status 2
if "$exmy" stats --format e4m3 --scaling bogus "$tmp/x.bin" 2> "$tmp/err"; then
  echo "FAIL: bad --scaling accepted"; exit 1
fi
grep -q '^exmy: stats: --scaling' "$tmp/err" || { echo "FAIL: error message"; cat "$tmp/err"; exit 1; }
echo PASS
