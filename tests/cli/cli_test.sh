#!/usr/bin/env bash
# Tests of the exmy CLI through its binary: help, table and info facts,
# round trips of every code, quantize == decode(encode(x)) in every mode,
# stdin/stdout, stochastic rounding across chunk boundaries, and the error
# contract (exit 2, one stderr line "exmy: ...", no output file, an existing
# OUT untouched).  Usage: cli_test.sh EXMY GEN_DATA
set -uo pipefail

EXMY="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
GEN="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
T="${TEST_TMPDIR:-$(mktemp -d)}/cli"
rm -rf "$T" && mkdir -p "$T" && cd "$T" || exit 1

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# same A B LABEL: the files are byte-identical, else say where they differ
same() {
  if ! cmp -s "$1" "$2"; then
    fail "$3: $1 and $2 differ: $(cmp "$1" "$2" 2>&1 | head -1)," \
      "$(cmp -l "$1" "$2" 2>/dev/null | wc -l) bytes differ"
  fi
}
run() { "$EXMY" "$@" || fail "exmy $* exited with $?"; }

# ------------------------------------------------------------------ data
"$GEN" floats 65537 > floats.bin        # 65536 values: all signs, exponents, inf, NaN
"$GEN" codes 1 256 > codes8.bin
"$GEN" codes 1 64 > codes6.bin
"$GEN" codes 1 16 > codes4.bin
printf '\x00\x00\xe0\x43\x00\x00\x80\x3f' > f448_1.bin   # 448.0f, 1.0f

# ------------------------------------------------------------------ help
"$EXMY" --help > help.txt || fail "exmy --help exited with $?"
for c in quantize encode decode info table; do
  grep -q "^  $c " help.txt || fail "--help does not list $c"
  "$EXMY" help "$c" | grep -q "usage: exmy $c" || fail "exmy help $c: no usage line"
  "$EXMY" "$c" --help | grep -q "usage: exmy $c" || fail "exmy $c --help: no usage line"
done

# ------------------------------------------------------------------ table
run table e4m3 > t.txt
[ "$(wc -l < t.txt)" -eq 256 ] || fail "table e4m3: $(wc -l < t.txt) lines, want 256"
grep -q '^0x7e  0|1111|110  448 .*0x1\.cp+8 .*normal$' t.txt || fail "table e4m3: no 0x7e = 448 line: $(grep '^0x7e' t.txt)"
grep -q '^0xfe  1|1111|110  -448 ' t.txt || fail "table e4m3: no 0xfe = -448 line"
[ "$(grep -c ' nan$' t.txt)" -eq 2 ] || fail "table e4m3: $(grep -c ' nan$' t.txt) nan lines, want 2 (0x7f, 0xff)"
grep -q '^0x7f .* nan$' t.txt && grep -q '^0xff .* nan$' t.txt || fail "table e4m3: 0x7f/0xff not nan"
grep -q '^0x01  0|0000|001  0.001953125 .*0x1p-9 .*subnormal$' t.txt || fail "table e4m3: smallest subnormal line: $(grep '^0x01' t.txt)"
run table e2m1 > t.txt
[ "$(wc -l < t.txt)" -eq 16 ] || fail "table e2m1: $(wc -l < t.txt) lines, want 16"
grep -q '^0x07  0|11|1  6 ' t.txt || fail "table e2m1: 0x07 is not 6: $(grep '^0x07' t.txt)"
run table e8m0 > t.txt
grep -q '^0x7f  01111111  1 ' t.txt || fail "table e8m0: 0x7f is not 1: $(grep '^0x7f' t.txt)"
grep -q '^0xff  11111111  nan ' t.txt || fail "table e8m0: 0xff is not nan"

# ------------------------------------------------------------------ info
run info e5m2 > i.txt
grep -q '^max  *57344  0x1\.cp+15$' i.txt || fail "info e5m2: max line is '$(grep '^max' i.txt)'"
grep -q '^bias  *15$' i.txt || fail "info e5m2: bias line is '$(grep '^bias' i.txt)'"
grep -q '^min subnormal  *1.52587891e-05  0x1p-16$' i.txt || fail "info e5m2: '$(grep '^min sub' i.txt)'"
grep -q '^inf  *yes' i.txt || fail "info e5m2: no inf"
run info e4m3 > i.txt
grep -q '^max  *448  0x1\.cp+8$' i.txt || fail "info e4m3: max line is '$(grep '^max' i.txt)'"
grep -q '^inf  *no' i.txt || fail "info e4m3: says it has inf"
grep -q '^finite values  *253$' i.txt || fail "info e4m3: '$(grep '^finite values' i.txt)'"

# ------------------------------------------------- known values, both ways
run encode --format e4m3 f448_1.bin c.bin
[ "$(od -An -tx1 c.bin | tr -d ' ')" = "7e38" ] || fail "encode e4m3 of 448, 1: $(od -An -tx1 c.bin), want 7e 38"
run decode --format e4m3 c.bin v.bin
same f448_1.bin v.bin "decode e4m3 of 0x7e, 0x38"

# ----------------------------------------------------- round trips of codes
# decode -> encode -> decode gives the same values for every code; codes come
# back unchanged except non-canonical NaN codes (IEEE-like formats only).
roundtrip() { # FORMAT CODES_FILE CODES_MUST_MATCH
  run decode --format "$1" "$2" v1.bin
  run encode --format "$1" v1.bin c2.bin
  run decode --format "$1" c2.bin v2.bin
  same v1.bin v2.bin "$1: decode(encode(decode(codes)))"
  [ "$3" = yes ] && same "$2" c2.bin "$1: encode(decode(codes))"
}
for f in e4m3 float8_e4m3fnuz float8_e5m2fnuz e8m0; do roundtrip "$f" codes8.bin yes; done
for f in e2m3 e3m2 e6m0; do roundtrip "$f" codes6.bin yes; done
roundtrip e2m1 codes4.bin yes
for f in e5m2 float8_e3m4 float8_e4m3 e4m3 e3m4; do
  roundtrip "$f" codes8.bin no
  # only the non-canonical NaN codes may change: one per sign fewer than all NaN codes
  nans=$("$EXMY" info "$f" | sed -n 's/^nan *yes: \([0-9]*\) codes.*/\1/p')
  changed=$(cmp -l codes8.bin c2.bin | wc -l)
  [ "$changed" -eq $((nans - 2)) ] || fail "$f: $changed codes changed in a round trip, want $((nans - 2)) (NaN codes $nans)"
done
for f in bf16 fp16 e8m3 e8m4 e8m5 e8m6 e5m10 e2m5; do
  bits=$("$EXMY" info "$f" | sed -n 's/^bits *\([0-9]*\) .*/\1/p')
  "$GEN" codes 2 $((1 << bits)) > codes16.bin
  roundtrip "$f" codes16.bin no
done

# -------------------------------------- quantize == decode(encode(x)), all modes
for f in e4m3 e5m2 float8_e4m3fnuz e2m3 e2m1 e8m0 bf16 fp16 e8m3 fp32; do
  flag_sets=("")
  case $f in e4m3|e5m2|e2m1|bf16) flag_sets+=("--saturate" "--no-subnormals --seed 7 --sr-bits 8");; esac
  for r in rne rna rz ru rd ro sr; do
    for flags in "${flag_sets[@]}"; do
      # shellcheck disable=SC2086
      run quantize --format "$f" --round "$r" $flags floats.bin q.bin
      # shellcheck disable=SC2086
      run encode --format "$f" --round "$r" $flags floats.bin c.bin
      run decode --format "$f" c.bin d.bin
      same q.bin d.bin "quantize vs decode(encode) $f --round $r $flags"
    done
  done
done
# modes and options matter (guards against options being ignored)
run quantize --format e4m3 floats.bin a.bin
run quantize --format e4m3 --round rz floats.bin b.bin
cmp -s a.bin b.bin && fail "e4m3: rne and rz gave identical output"
run quantize --format e5m2 --saturate floats.bin b.bin
cmp -s a.bin b.bin && fail "e5m2: --saturate changed nothing"
run quantize --format e4m3 --round sr --seed 1 floats.bin a.bin
run quantize --format e4m3 --round sr --seed 2 floats.bin b.bin
cmp -s a.bin b.bin && fail "e4m3 sr: seeds 1 and 2 gave identical output"

# ---------------------------------------------------------- stdin / stdout
run quantize --format e5m2 --round ru floats.bin a.bin
"$EXMY" quantize --format e5m2 --round ru - - < floats.bin > b.bin || fail "quantize - - exited with $?"
same a.bin b.bin "quantize through stdin/stdout"
cat floats.bin | "$EXMY" encode --format=bf16 --round=rna - c.bin || fail "encode from a pipe exited with $?"
run encode --format bf16 --round rna floats.bin c2.bin
same c.bin c2.bin "encode from a pipe"

# --------------------- sr across chunks (1 Mi elements): one stream, any split
"$GEN" mixed $(( (1 << 20) + 5000 )) > big.bin    # more than one chunk
n=$(( $(stat -c %s big.bin) / 4 ))
run quantize --format e4m3 --round sr --seed 42 big.bin whole.bin
head -c $((1000 * 4)) big.bin > part1.bin
tail -c +$((1000 * 4 + 1)) big.bin > part2.bin
run quantize --format e4m3 --round sr --seed 42 part1.bin q1.bin
run quantize --format e4m3 --round sr --seed 42 --offset 1000 part2.bin q2.bin
cat q1.bin q2.bin > split.bin
same whole.bin split.bin "sr over $n values: whole file vs split at 1000 with --offset"
"$EXMY" encode --format e4m3 --round sr --seed 42 - - < big.bin > c.bin || fail "encode sr via pipes"
run decode --format e4m3 c.bin d.bin
same whole.bin d.bin "sr encode through pipes vs quantize"

# ---------------------------------------------------------- error contract
# check_error LABEL OUT COMMAND: COMMAND (a shell string) must exit 2 with one
# stderr line "exmy: ...", leave no OUT when there was none, and leave an
# existing OUT as it was.  Run twice, without and with an existing OUT.
check_error() {
  local label=$1 out=$2 cmd=$3 rc lines
  for existing in no yes; do
    rm -f "$out"
    if [ "$existing" = yes ]; then
      [ -d "$(dirname "$out")" ] || continue   # OUT in a missing directory
      echo precious > "$out"
    fi
    eval "$cmd" > stdout.txt 2> stderr.txt
    rc=$?
    lines=$(wc -l < stderr.txt)
    [ "$rc" -eq 2 ] || fail "$label: exit status $rc, want 2 (stderr: $(head -c 200 stderr.txt))"
    [ "$lines" -eq 1 ] || fail "$label: $lines stderr lines, want 1: $(head -c 300 stderr.txt)"
    grep -q '^exmy: ' stderr.txt || fail "$label: stderr does not start with 'exmy: ': $(head -c 200 stderr.txt)"
    if [ "$existing" = no ]; then
      [ -e "$out" ] && fail "$label: $out was created"
    else
      [ "$(cat "$out" 2>/dev/null)" = precious ] || fail "$label: existing $out was changed"
    fi
  done
  rm -f "$out"
}
printf '\x00\x00\x80\x3f\x00' > trunc5.bin        # 5 bytes: not whole float32s
printf '\x00\x00\x00' > trunc3.bin                # 3 bytes: not whole bf16 codes
printf '\x01\x10' > badcode.bin                   # 0x10 is no e2m1 code
mkdir -p adir
E='"$EXMY"'
check_error "unknown format"      out.bin "$E quantize --format e9m3 floats.bin out.bin"
check_error "unknown format name" out.bin "$E encode --format float8_e4m3fnx floats.bin out.bin"
check_error "unknown mode"        out.bin "$E quantize --format e4m3 --round rnx floats.bin out.bin"
check_error "unknown option"      out.bin "$E quantize --format e4m3 --fast floats.bin out.bin"
check_error "short option"        out.bin "$E quantize --format e4m3 -x floats.bin out.bin"
check_error "decode --round"      out.bin "$E decode --format e4m3 --round rz codes8.bin out.bin"
check_error "missing --format"    out.bin "$E quantize floats.bin out.bin"
check_error "missing value"       out.bin "$E quantize floats.bin out.bin --format"
check_error "flag with value"     out.bin "$E quantize --format e4m3 --saturate=1 floats.bin out.bin"
check_error "bad seed"            out.bin "$E quantize --format e4m3 --round sr --seed -1 floats.bin out.bin"
check_error "bad seed text"       out.bin "$E quantize --format e4m3 --round sr --seed 12x floats.bin out.bin"
check_error "bad sr-bits"         out.bin "$E quantize --format e4m3 --round sr --sr-bits 33 floats.bin out.bin"
check_error "extra argument"      out.bin "$E quantize --format e4m3 floats.bin out.bin more.bin"
check_error "missing IN"          out.bin "$E quantize --format e4m3 nonexistent.bin out.bin"
check_error "IN is a directory"   out.bin "$E quantize --format e4m3 adir out.bin"
check_error "truncated values"    out.bin "$E quantize --format e4m3 trunc5.bin out.bin"
check_error "truncated via stdin" out.bin "cat floats.bin trunc5.bin | $E encode --format e5m2 - out.bin"
check_error "truncated codes"     out.bin "$E decode --format bf16 trunc3.bin out.bin"
check_error "code out of range"   out.bin "$E decode --format e2m1 badcode.bin out.bin"
check_error "no such directory"   nodir/out.bin "$E quantize --format e4m3 floats.bin nodir/out.bin"
check_error "missing OUT"         out.bin "$E quantize --format e4m3 floats.bin"
check_error "missing IN and OUT"  out.bin "$E encode --format e4m3"
check_error "table of 16 bits"    out.bin "$E table bf16"
check_error "info unknown"        out.bin "$E info e4m9x"
check_error "info no format"      out.bin "$E info"
check_error "no command"          out.bin "$E"
check_error "unknown command"     out.bin "$E frobnicate"
# OUT is a directory: it must stay a directory, with nothing written into it
"$EXMY" quantize --format e4m3 floats.bin adir > /dev/null 2> stderr.txt
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l < stderr.txt)" -eq 1 ] || fail "OUT is a directory: exit $rc, stderr: $(cat stderr.txt)"
[ -d adir ] && [ -z "$(ls -A adir)" ] || fail "OUT is a directory: adir changed"
# no temporary file may survive a failure
leftovers=$(find . -name '.exmy-tmp-*' | head -3)
[ -z "$leftovers" ] || fail "temporary files left behind: $leftovers"
# OUT may be IN: the result is renamed into place only when complete
cp floats.bin inplace.bin
run quantize --format e5m2 --round rd inplace.bin inplace.bin
run quantize --format e5m2 --round rd floats.bin a.bin
same a.bin inplace.bin "quantize with OUT = IN"
# success replaces an existing OUT
echo precious > out.bin
run quantize --format e4m3 floats.bin out.bin
run quantize --format e4m3 floats.bin a.bin
same a.bin out.bin "success overwrites an existing OUT"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
