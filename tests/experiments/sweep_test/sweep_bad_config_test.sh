#!/usr/bin/env bash
# A bad study config (or bad arguments): exit 2, one line on stderr, and not a
# file or folder created or changed in the workspace.
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
rf=${RUNFILES_DIR:-$0.runfiles}/exmy
sweep=$rf/experiments/studies/sweep
tmp=${TEST_TMPDIR:-$(mktemp -d)}
ws=$tmp/ws
rm -rf "$ws" && mkdir -p "$ws/experiments" && ln -s "$rf/experiments/configs" "$ws/experiments/configs"
export BUILD_WORKSPACE_DIRECTORY=$ws SWEEP_TRAIN=$rf/experiments/trainer/train
listing() { (cd "$ws" && find . -printf '%p %s %T@\n' | sort); }
before=$(listing)
n=0
bad() { # bad WHAT CONFIG-TEXT [ARGS]
  local what=$1 rc
  printf '%s\n' "$2" >"$tmp/bad.cfg"
  shift 2
  "$sweep" "$tmp/bad.cfg" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [[ $rc == 2 ]] || fail "$what: exit $rc, want 2: $(cat "$tmp/err")"
  [[ $(wc -l <"$tmp/err") == 1 && $(head -c 7 "$tmp/err") == "sweep: " ]] || fail "$what: stderr not one line: $(cat "$tmp/err")"
  [[ $(listing) == "$before" ]] || fail "$what: created or changed: $(diff <(echo "$before") <(listing))"
  n=$((n + 1))
}
ok=$'study = b\nrecipes = bf16\nlrs = 1e-3'
bad "unknown directive" "$ok"$'\nfoo = 1'
bad "unknown trainer key" "$ok"$'\nset nosuchkey = 1'
bad "bad trainer value" "$ok"$'\nset steps = -3'
bad "bad variant key" "$ok"$'\nvariant v = nosuch=1'
bad "unknown axis key" "$ok"$'\nvary nosuch = 1 2'
bad "missing recipe" $'study = b\nrecipes = nosuchrecipe\nlrs = 1e-3'
bad "bad lr" $'study = b\nrecipes = bf16\nlrs = fast'
bad "no study" $'recipes = bf16\nlrs = 1e-3'
bad "a control character in a value" "$ok"$'\nset steps = 1\x01'
bad "evaluations without kept checkpoints" "$ok"$'\nsharpness = --rho 0.1'
bad "bad --jobs" "$ok" --jobs 0
bad "unknown option" "$ok" --fast
for gpus in "" "0,0" "0,,1" "x" "1,"; do bad "--gpus '$gpus'" "$ok" --gpus "$gpus"; done
bad "--per-gpu 0" "$ok" --gpus 0,1 --per-gpu 0
bad "--per-gpu x" "$ok" --gpus 0,1 --per-gpu x
bad "--per-gpu without --gpus" "$ok" --per-gpu 2
bad "--gpus on Slurm" "$ok" --gpus 0 --backend slurm
bad "unknown backend" "$ok" --backend pbs
bad "sbatch options without Slurm" "$ok" --partition gpu
"$sweep" "$tmp/nonexistent.cfg" >/dev/null 2>"$tmp/err"; [[ $? == 2 && $(wc -l <"$tmp/err") == 1 ]] || fail "missing config file"
[[ $(listing) == "$before" ]] || fail "missing config file: created something"
echo "PASS ($n bad configs)"
