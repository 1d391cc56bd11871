#!/usr/bin/env bash
# What bad input, a crash and a full disk may cost the trainer (README, "Guarantees"):
#  - a checkpoint is verified before anything is used: a flipped byte in any section or
#    header field, appended or missing bytes, and forged but well-sealed files (delayed-
#    scaling position out of range, bad scale, step or data position out of range, an old
#    version) are refused with exit 2 and one line, and the run directory is unchanged;
#    after a failed resume (wrong model size) a plain --resume still continues the run;
#  - a run directory that holds a run is refused unless --overwrite; stale temporaries
#    are removed on resume; kill -9 loses only the steps since the last checkpoint and
#    the log holds each step once;
#  - configs: out-of-range and malformed values, duplicate keys, a directory, binary
#    files, overlong comment lines and values: exit 2, one line, no run directory; out
#    of memory: exit 1, one line with the train: prefix;
#  - a full disk (RLIMIT_FSIZE; a small tmpfs where mounting is permitted): exit 1, the
#    last checkpoint intact and resumable, never "completed" nor "checkpoint written";
#  - sharpness: a corrupt checkpoint and an allocation that fails: exit 2, one line.
# Usage: train_faults_test.sh checkpoints|inputs|all [TRAIN CKPT_EDIT SHARPNESS]
set -uo pipefail
section=${1:-all}
train=${2:-experiments/trainer/train} edit=${3:-tests/experiments/ckpt_edit}
sharpness=${4:-experiments/studies/sharpness}
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--set size=test --set data=experiments/trainer/model.c --set val_data= --set batch_size=4
        --set steps=8 --set warmup=2 --set val_every=4 --set val_batches=2 --set stats_every=0
        --set progress=0 --set lr=3e-3)
cfg=experiments/configs/fp8-te.cfg # delayed scaling: its states are in the checkpoint
fail=0 passed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1/log.jsonl"; }
# every file and directory under $1 with the checksums of the files
snapshot() { (cd "$1" 2>/dev/null && find . | sort && find . -type f | sort | xargs -r md5sum); }

# stderr of CMD... without AddressSanitizer's notes on allocations it refused (sanitizer builds)
stderr_of() { "$@" 2>&1 >/dev/null | { grep -v '^==[0-9]*==WARNING: AddressSanitizer failed to allocate' || true; }; }

# refused WHAT DIR PATTERN CMD...: exit 2, one stderr line matching PATTERN, DIR unchanged
refused() {
  local what=$1 dir=$2 pattern=$3 before err rc=0
  shift 3
  before=$(snapshot "$dir")
  err=$(stderr_of "$@") || rc=$?
  if [[ $rc != 2 ]]; then ko "$what: exit $rc, want 2: $err"
  elif [[ $(wc -l <<<"$err") != 1 ]]; then ko "$what: not one line: $err"
  elif ! grep -qE -- "$pattern" <<<"$err"; then ko "$what: '$err' does not match '$pattern'"
  elif [[ $(snapshot "$dir") != "$before" ]]; then ko "$what: $dir changed"
  else ok "$what: $err"; fi
}

"$train" --config $cfg "${common[@]}" --set run_dir="$tmp/ref" >/dev/null || ko "reference run"
"$train" --config $cfg "${common[@]}" --set run_dir="$tmp/base" --set stop_at=4 >/dev/null ||
  ko "base run (stop_at 4)"
at() { "$edit" "$tmp/base/ckpt.bin" offset "$1"; }
flip() { "$edit" "$3" flip "$(($(at "$1") + $2))"; } # flip SECTION DELTA FILE

checkpoints() {

# ---- checkpoints: damaged and forged copies of the step-4 checkpoint
damaged() { # damaged NAME PATTERN EDIT...: a copy of base, edited, must be refused
  local name=$1 pattern=$2 d=$tmp/ck-$1
  shift 2
  rm -rf "$d" && cp -r "$tmp/base" "$d" && "$@" "$d/ckpt.bin" || { ko "$name: editing failed"; return; }
  refused "checkpoint: $name" "$d" "$pattern" "$train" --resume "$d" --set stop_at=0
}
damaged "flipped byte in the first moments" "first moments fail their checksum" flip mom1 100
damaged "flipped byte in the parameters" "parameters fail their checksum" flip params 7
damaged "flipped byte in the second moments" "second moments fail their checksum" flip mom2 0
damaged "flipped byte in the delayed-scaling states" "states fail their checksum" flip states 9
damaged "flipped byte in the config text" "config text fails its checksum" flip text 3
damaged "flipped byte in the step field" "header fails its checksum" flip step 0
damaged "flipped byte in the data index" "header fails its checksum" flip data_index 1
damaged "flipped magic" "not an exmy checkpoint" flip header 0
appendb() { printf 'extra' >>"$1"; }
damaged "appended bytes" "not the length its header gives" appendb
truncb() { truncate -s -100 "$1"; }
damaged "truncated" "not the length its header gives" truncb
garbage() { head -c 4000 /dev/urandom >"$1"; }
damaged "random bytes" "not an exmy checkpoint" garbage
emptyf() { : >"$1"; }
damaged "empty file" "not an exmy checkpoint" emptyf
dirf() { rm "$1" && mkdir "$1"; }
damaged "a directory" "not a regular file" dirf
forge() { "$edit" "${@: -1}" "${@:1:$#-1}"; } # forge ARGS... FILE: ckpt_edit FILE ARGS
# (latest -5: the next update writes before the history's buffer)
damaged "forged delayed-scaling position (latest -5)" "position is out of range" forge state 0 latest -5
damaged "forged delayed-scaling position (latest 99)" "position is out of range" forge state 3 latest 99
damaged "forged delayed-scaling count" "position is out of range" forge state 1 count 17
damaged "forged delayed-scaling scale (nan)" "scale is invalid" forge state 0 scale nan
damaged "forged delayed-scaling inverse" "scale is invalid" forge state 0 scale_inv 3
damaged "forged amax history (inf)" "amax history is invalid" forge state 2 amax0 inf
damaged "forged history length" "history length" forge state 0 history_len 8
damaged "forged step beyond steps" "step 100, outside" forge header step 100
damaged "forged negative step" "invalid position" forge header step -1
damaged "forged data index" "data position" forge header data_index 99999999
damaged "forged data epoch" "data position" forge header data_epoch 1000000
damaged "forged running minimum (nan)" "invalid position" forge header running_min nan
damaged "version 1 (no checksums)" "format version 1" forge header version 1

# a failed resume (another model size) changes nothing: a plain --resume then continues
rm -rf "$tmp/size" && cp -r "$tmp/base" "$tmp/size"
refused "resume with another model size" "$tmp/size" "another model configuration" \
  "$train" --resume "$tmp/size" --set dim=32
touch "$tmp/size/ckpt.bin.tmp" && head -c 5000 /dev/urandom >"$tmp/size/ckpt.bin.tmp"
echo '{' >"$tmp/size/summary.json.tmp"
if "$train" --resume "$tmp/size" --set stop_at=0 >/dev/null && diff <(losses "$tmp/ref") <(losses "$tmp/size") >/dev/null &&
   [[ -z $(find "$tmp/size" -name '*.tmp') ]]; then
  ok "then --resume: 8 losses bit-identical to an uninterrupted run, stale temporaries removed"
else ko "resume after a refused one: $(diff <(losses "$tmp/ref") <(losses "$tmp/size")); $(ls "$tmp/size")"; fi

# ---- kill -9: a crash after step 6 (last checkpoint at 4) costs steps 5-6, logged once
"$train" --config $cfg "${common[@]}" --set run_dir="$tmp/crash" --set ckpt_every=4 --set crash_at=6 \
  >/dev/null 2>&1
rc=$?
n6=$(losses "$tmp/crash" | wc -l)
if [[ $rc == 137 && $n6 == 6 ]] && "$train" --resume "$tmp/crash" --set crash_at=0 >/dev/null &&
   diff <(losses "$tmp/ref") <(losses "$tmp/crash") >/dev/null; then
  ok "kill -9 after step 6: resumed from step 4, each of the 8 steps logged once, losses bit-identical"
else ko "kill -9: rc $rc, $n6 steps before resuming; $(diff <(losses "$tmp/ref") <(losses "$tmp/crash"))"; fi

}

inputs() {
# ---- run directories
refused "a new run in a directory that holds one" "$tmp/ref" "already holds a run.*--overwrite" \
  "$train" --config $cfg "${common[@]}" --set run_dir="$tmp/ref"
refused "--overwrite with --resume" "$tmp/ref" "cannot resume" "$train" --resume "$tmp/ref" --overwrite
"$train" --config $cfg "${common[@]}" --set steps=4 --set ckpt_every=2 --set ckpt_keep=1 \
  --set run_dir="$tmp/keep" >/dev/null
touch "$tmp/keep/train.out" # not the trainer's: kept
"$train" --config $cfg "${common[@]}" --set steps=2 --set run_dir="$tmp/keep" --overwrite >/dev/null
if [[ $(cd "$tmp/keep" && ls | tr '\n' ' ') == "ckpt.bin config.cfg log.jsonl summary.json train.out " ]] &&
   grep -q '"status":"completed","steps":2' "$tmp/keep/summary.json" && [[ $(losses "$tmp/keep" | wc -l) == 2 ]]; then
  ok "--overwrite: the old run's files (kept checkpoints included) replaced by the new run's"
else ko "--overwrite: $(ls "$tmp/keep")"; fi
mkdir -p "$tmp/sweepdir" && echo "fp32 lr=1" >"$tmp/sweepdir/sweep_args"
if "$train" --config $cfg "${common[@]}" --set steps=1 --set run_dir="$tmp/sweepdir" >/dev/null; then
  ok "a directory with other files only (a sweep's) is a new run's"
else ko "a directory with a sweep's files"; fi

# ---- configs: exit 2, one line, no run directory
bad() { # bad WHAT PATTERN ARGS...
  local what=$1 pattern=$2
  shift 2
  rm -rf "$tmp/bad"
  refused "config: $what" "$tmp/bad" "$pattern" "$train" "$@"
  [[ -e $tmp/bad ]] && ko "config: $what: the run directory was created"
}
b=(--config $cfg "${common[@]}" --set run_dir="$tmp/bad")
bad "steps 2^32 + 1" "'steps' must be an integer in 1\.\." "${b[@]}" --set steps=4294967297
bad "lr nan" "'lr' must be a number" "${b[@]}" --set lr=nan
bad "lr -1" "'lr' must be a number" "${b[@]}" --set lr=-1
bad "lr inf" "'lr' must be a number" "${b[@]}" --set lr=inf
bad "lr 1e-3x" "'lr' must be a number" "${b[@]}" --set lr=1e-3x
bad "warmup -1" "'warmup' must be an integer" "${b[@]}" --set warmup=-1
bad "beta1 2" "'beta1' must be a number in \[0, 1\)" "${b[@]}" --set beta1=2
bad "beta2 1" "'beta2' must be a number in \[0, 1\)" "${b[@]}" --set beta2=1
bad "adam_eps 0" "'adam_eps'" "${b[@]}" --set adam_eps=0
bad "grad_clip -1" "'grad_clip'" "${b[@]}" --set grad_clip=-1
bad "n_heads -4" "'n_heads' must be an integer" "${b[@]}" --set n_heads=-4
bad "seed -1" "'seed' must be an integer" "${b[@]}" --set seed=-1
bad "batch_size 0x10" "'batch_size' must be an integer" "${b[@]}" --set batch_size=0x10
bad "ckpt_keep 2" "'ckpt_keep' must be 0 or 1" "${b[@]}" --set ckpt_keep=2
bad "device tpu" "'device' must be one of cpu\|gpu" "${b[@]}" --set device=tpu
bad "mx block -32" "'mx_block' must be an integer" --config experiments/configs/mxfp8.cfg \
  "${common[@]}" --set run_dir="$tmp/bad" --set mx_block=-32
bad "rounding of an unused role" "rounding_a: unknown rounding" "${b[@]}" --set rounding_a=bogus
bad "unknown argument" "unknown argument '--bogus'" "${b[@]}" --bogus
bad "--config without a value" "--config needs a value" --config
bad "a micro-batch beyond int indexing" "must be below 2\^31" "${b[@]}" --set batch_size=1048576 --set seq_len=4096
mkdir -p "$tmp/cfgdir"
bad "--config naming a directory" "is a directory" --config "$tmp/cfgdir" "${common[@]}" --set run_dir="$tmp/bad"
printf 'lr = 1e-3\nsteps = 4\nlr = 2e-3\n' >"$tmp/dup.cfg"
bad "a key twice in a file" "dup.cfg:3: key 'lr' already set on line 1" --config "$tmp/dup.cfg" --set run_dir="$tmp/bad"
printf 'lr = 1e-3\nsteps = 4\0junk\n' >"$tmp/nul.cfg"
bad "a NUL byte" "nul.cfg:2: a NUL byte" --config "$tmp/nul.cfg" --set run_dir="$tmp/bad"
printf 'data = %s\n' "$(printf 'x%.0s' {1..600})" >"$tmp/long.cfg"
bad "a value of 600 characters" "too long" --config "$tmp/long.cfg" --set run_dir="$tmp/bad"
# a comment longer than any buffer: its tail is still a comment
{ printf '# %s seed = 99\n' "$(printf 'x%.0s' {1..5000})"; cat $cfg; } >"$tmp/comment.cfg"
if "$train" --config "$tmp/comment.cfg" "${common[@]}" --set steps=1 --set run_dir="$tmp/comment" >/dev/null &&
   grep -q '^seed = 1337$' "$tmp/comment/config.cfg"; then
  ok "config: a 5000-character comment line stays a comment (seed 1337, not 99)"
else ko "config: long comment: $(grep '^seed' "$tmp/comment/config.cfg")"; fi
# out of memory: exit 1, one line, the train: prefix, no run directory
rm -rf "$tmp/bad"
err=$(stderr_of "$train" "${b[@]}" --set dim=65536 --set n_layers=4096) && rc=0 || rc=$?
if [[ $rc == 1 && $(wc -l <<<"$err") == 1 && $err == "train: out of memory"* && ! -e $tmp/bad ]]; then
  ok "out of memory: exit 1: $err"
else ko "out of memory: rc $rc: $err"; fi

# ---- a full disk: RLIMIT_FSIZE below a checkpoint's size (163 kB here) makes its writes fail
limited() { (ulimit -f "$1" && shift && exec "$@"); } # limited KIB CMD...
out=$(limited 100 "$train" --config $cfg "${common[@]}" --set run_dir="$tmp/full" 2>"$tmp/full.err")
rc=$?
if [[ $rc == 1 && ! -e $tmp/full/ckpt.bin && -z $(find "$tmp/full" -name '*.tmp') && $out != *completed* ]] &&
   grep -q "ckpt.bin: File too large; no checkpoint was saved" "$tmp/full.err" &&
   grep -q '"status":"failed"' "$tmp/full/summary.json"; then
  ok "disk full at the only checkpoint: exit 1, no ckpt.bin, no temporary, summary 'failed': $(cat "$tmp/full.err")"
else ko "disk full, fresh run: rc $rc: $out / $(cat "$tmp/full.err") / $(ls "$tmp/full")"; fi
rm -rf "$tmp/full" && cp -r "$tmp/base" "$tmp/full" && cp "$tmp/base/ckpt.bin" "$tmp/full4.bin"
limited 100 "$train" --resume "$tmp/full" --set stop_at=0 >/dev/null 2>"$tmp/full.err"
rc=$?
if [[ $rc == 1 ]] && cmp -s "$tmp/full/ckpt.bin" "$tmp/full4.bin" &&
   grep -q "the last checkpoint is of step 4" "$tmp/full.err" &&
   "$train" --resume "$tmp/full" --set stop_at=0 >/dev/null && diff <(losses "$tmp/ref") <(losses "$tmp/full") >/dev/null; then
  ok "disk full at step 8: exit 1, the step-4 checkpoint intact; resumed later: 8 losses bit-identical"
else ko "disk full after a checkpoint: rc $rc: $(cat "$tmp/full.err")"; fi
out=$(limited 100 "$train" --config $cfg "${common[@]}" --set run_dir="$tmp/fullint" --set interrupt_at=2 2>"$tmp/full.err")
rc=$?
if [[ $rc == 1 && $out != *"checkpoint written"* && ! -e $tmp/fullint/ckpt.bin ]]; then
  ok "disk full on an interrupt: exit 1, no 'checkpoint written': $(cat "$tmp/full.err")"
else ko "disk full on an interrupt: rc $rc: $out / $(cat "$tmp/full.err")"; fi
limited 3 "$train" --config $cfg "${common[@]}" --set run_dir="$tmp/fulllog" --set ckpt_every=0 --set steps=200 \
  --set stats_every=1 >/dev/null 2>"$tmp/full.err"
rc=$?
if [[ $rc == 1 ]] && grep -q "log.jsonl: File too large" "$tmp/full.err"; then
  ok "log full: exit 1: $(cat "$tmp/full.err")"
else ko "log full: rc $rc: $(cat "$tmp/full.err")"; fi
# a real full file system, where this machine lets us mount one
mkdir -p "$tmp/tiny"
if mount -t tmpfs -o size=64k tmpfs "$tmp/tiny" 2>/dev/null; then
  trap 'umount "$tmp/tiny" 2>/dev/null' EXIT
  out=$("$train" --config $cfg "${common[@]}" --set run_dir="$tmp/tiny/run" 2>"$tmp/full.err")
  rc=$?
  if [[ $rc == 1 && ! -e $tmp/tiny/run/ckpt.bin && -z $(find "$tmp/tiny" -name '*.tmp') && $out != *completed* ]] &&
     grep -q "No space left on device" "$tmp/full.err" && { [[ ! -e $tmp/tiny/run/summary.json ]] || [[ -s $tmp/tiny/run/summary.json ]]; }; then
    ok "tmpfs of 64 kB: exit 1, no ckpt.bin, no temporary, no empty summary: $(cat "$tmp/full.err")"
  else ko "tmpfs of 64 kB: rc $rc: $out / $(cat "$tmp/full.err") / $(ls -la "$tmp/tiny/run")"; fi
  umount "$tmp/tiny"
else
  echo "skip tmpfs of 64 kB: mounting is not permitted here (RLIMIT_FSIZE above covers the writes)"
fi

# ---- sharpness
rm -rf "$tmp/shflip" && cp -r "$tmp/base" "$tmp/shflip" && flip params 7 "$tmp/shflip/ckpt.bin"
refused "sharpness: a flipped byte" "$tmp/shflip" "fail their checksum" "$sharpness" "$tmp/shflip"
refused "sharpness: an allocation that fails" "$tmp/base" "out of memory" \
  "$sharpness" "$tmp/base" --batches 1048576
refused "sharpness: --batches 1e9" "$tmp/base" "--batches wants an integer" \
  "$sharpness" "$tmp/base" --batches 1000000000
}

case $section in
  checkpoints) checkpoints ;;
  inputs) inputs ;;
  all) checkpoints && inputs ;;
  *) echo "unknown section '$section'"; exit 2 ;;
esac
echo "$passed passed, $fail failed"
[[ $fail == 0 ]]
