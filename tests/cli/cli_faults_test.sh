#!/usr/bin/env bash
# The exmy CLI against hostile outputs and options:
#  - OUT by its kind: a character device and a FIFO are written in place and stay what
#    they are; a symbolic link's target is replaced (the link stays, the target keeps its
#    mode); a read-only file, a hard-linked file, a link to nothing and a directory are
#    refused with exit 2, one line, nothing changed;
#  - one option parser for every command: stats refuses what quantize refuses (" -1",
#    "group: 4", an option twice); integers are decimal ("010" is ten); a --margin that
#    puts the scale outside float32's normal range is refused; an argument holding a
#    newline still gives one line.
# Usage: cli_faults_test.sh EXMY
set -uo pipefail
EXMY="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
T="${TEST_TMPDIR:-$(mktemp -d)}/faults"
rm -rf "$T" && mkdir -p "$T" && cd "$T" || exit 1
fail=0 passed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
state() { ls -la --time-style=+ "$@" 2>&1; md5sum "$@" 2>&1; } # what a refused command must not change

# refused WHAT PATTERN FILES... -- CMD...: exit 2, one stderr line matching PATTERN, FILES unchanged
refused() {
  local what=$1 pattern=$2 files=() before err rc=0
  shift 2
  while [[ $1 != -- ]]; do files+=("$1"); shift; done
  shift
  before=$(state "${files[@]}")
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  if [[ $rc != 2 || $(wc -l <<<"$err") != 1 || $err != "exmy: "* ]]; then ko "$what: exit $rc: $err"
  elif ! grep -qE -- "$pattern" <<<"$err"; then ko "$what: '$err' does not match '$pattern'"
  elif [[ $(state "${files[@]}") != "$before" ]]; then ko "$what: changed: $(state "${files[@]}")"
  elif [[ -n $(find . -name '.exmy-tmp-*') ]]; then ko "$what: a temporary file is left"
  else ok "$what: $err"; fi
}

# 1.0, 2.0, 1000.0, 0.0 as little-endian float32
printf '\000\000\200\077\000\000\000\100\000\000\172\104\000\000\000\000' >x.bin
"$EXMY" quantize --format e4m3 x.bin want.bin || ko "quantize to a regular file"

# ---- outputs
# a character device of our own (the null device) where we may make one; /dev/null
# itself only where we cannot replace it anyway (not root)
dev=
if mknod null c 1 3 2>/dev/null; then dev=$PWD/null
elif [[ $(id -u) != 0 ]]; then dev=/dev/null; fi
if [[ -n $dev ]]; then
  if "$EXMY" quantize --format e4m3 x.bin "$dev" && [[ -c $dev ]]; then
    ok "OUT a character device ($dev): written, still a character device"
  else ko "OUT a character device: $(ls -la "$dev")"; fi
else echo "skip OUT a character device: cannot make one, and /dev/null is not ours to risk"; fi
mkfifo fifo
timeout 10 cat fifo >from_fifo.bin & # (if OUT replaced the FIFO, no writer would come)
reader=$!
timeout 10 "$EXMY" quantize --format e4m3 x.bin fifo
rc=$?
wait $reader
if [[ $rc == 0 && -p fifo ]] && cmp -s from_fifo.bin want.bin; then
  ok "OUT a FIFO: the values arrive through it, still a FIFO"
else ko "OUT a FIFO: rc $rc, $(ls -la fifo)"; fi
echo old >target.bin && chmod 640 target.bin && ln -s target.bin link.bin
if "$EXMY" quantize --format e4m3 x.bin link.bin && [[ -L link.bin ]] && cmp -s target.bin want.bin &&
   [[ $(stat -c %a target.bin) == 640 ]]; then
  ok "OUT a symbolic link: its target replaced (mode 640 kept), the link kept"
else ko "OUT a symbolic link: $(ls -la link.bin target.bin)"; fi
echo old >mode.bin && chmod 604 mode.bin
if "$EXMY" quantize --format e4m3 x.bin mode.bin && [[ $(stat -c %a mode.bin) == 604 ]] && cmp -s mode.bin want.bin; then
  ok "OUT an existing file: replaced, its mode (604) kept"
else ko "OUT an existing file's mode: $(stat -c %a mode.bin)"; fi
echo precious >ro.bin && chmod 444 ro.bin
refused "OUT a read-only file" "read-only" ro.bin -- "$EXMY" quantize --format e4m3 x.bin ro.bin
echo precious >h1.bin && ln h1.bin h2.bin
refused "OUT a file with two hard links" "2 hard links" h1.bin h2.bin -- "$EXMY" encode --format e4m3 x.bin h2.bin
ln -s nowhere.bin dangling.bin
refused "OUT a symbolic link to nothing" "symbolic link to nothing" dangling.bin -- "$EXMY" quantize --format e4m3 x.bin dangling.bin
[[ -e nowhere.bin ]] && ko "a link to nothing: its target was created"
mkdir adir
refused "OUT a directory" "is a directory" adir -- "$EXMY" quantize --format e4m3 x.bin adir
refused "OUT a link to a read-only file" "read-only" ro.bin -- "$EXMY" quantize --format e4m3 x.bin "$(ln -s ro.bin rolink.bin && echo rolink.bin)"

# ---- one option parser
for cmd in "quantize --format e4m3 x.bin out.bin" "stats --format e4m3 x.bin"; do
  c=${cmd%% *}
  # shellcheck disable=SC2086
  refused "$c --seed ' -1'" "--seed wants an unsigned" x.bin -- "$EXMY" $cmd --round sr --seed " -1"
  # shellcheck disable=SC2086
  refused "$c --seed +5" "--seed wants an unsigned" x.bin -- "$EXMY" $cmd --round sr --seed +5
  # shellcheck disable=SC2086
  refused "$c --format twice" "--format given twice" x.bin -- "$EXMY" $cmd --format e5m2
  # shellcheck disable=SC2086
  refused "$c --sr-bits ' 8'" "--sr-bits wants an integer" x.bin -- "$EXMY" $cmd --round sr --sr-bits " 8"
done
refused "quantize --scaling (a stats option)" "unknown option '--scaling'" x.bin -- \
  "$EXMY" quantize --format e4m3 --scaling tensor x.bin out.bin
refused "stats --scaling 'group: 4'" "group:G wants an integer" x.bin -- "$EXMY" stats --format e4m3 --scaling "group: 4" x.bin
refused "stats --scaling group:-4" "group:G wants an integer" x.bin -- "$EXMY" stats --format e4m3 --scaling group:-4 x.bin
refused "stats --margin 128 (scale 1.3e-39)" "--margin 128 puts the scale" x.bin -- "$EXMY" stats --format e4m3 --scaling tensor --margin 128 x.bin
refused "stats --margin 150 (scale 3e-46)" "--margin 150 puts the scale" x.bin -- "$EXMY" stats --format e4m3 --scaling group:2 --margin 150 x.bin
refused "stats --margin -200" "--margin -200 puts the scale" x.bin -- "$EXMY" stats --format e4m3 --scaling tensor --margin -200 x.bin
refused "stats --margin ' 1'" "--margin wants an integer" x.bin -- "$EXMY" stats --format e4m3 --scaling tensor --margin " 1" x.bin
# a margin that keeps the scale normal: every value underflows, and the sums say so
out=$("$EXMY" stats --format e4m3 --scaling tensor --margin 120 x.bin)
if grep -q '^underflow_ratio 0.75$' <<<"$out" && grep -q '^cosine 0$' <<<"$out" && grep -q '^mse 250001.25$' <<<"$out"; then
  ok "stats --margin 120: underflow 0.75, mse 250001.25, cosine 0"
else ko "stats --margin 120: $out"; fi
head -c 4096 /dev/urandom >r.bin # values that stochastic rounding moves
for s in 010 10 0xa 8; do "$EXMY" quantize --format e4m3 --round sr --seed $s r.bin s$s.bin; done
if cmp -s s010.bin s10.bin && cmp -s s10.bin s0xa.bin && ! cmp -s s10.bin s8.bin; then
  ok "--seed 010 = 10 = 0xa, not 8 (decimal unless 0x)"
else ko "--seed 010 / 10 / 0xa / 8"; fi
refused "a newline inside an argument" "unknown format 'e4m3\?x'" x.bin -- "$EXMY" quantize --format $'e4m3\nx' x.bin out.bin

echo "$passed passed, $fail failed"
[[ $fail == 0 ]]
