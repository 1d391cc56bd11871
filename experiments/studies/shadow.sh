#!/usr/bin/env bash
# shadow: the shadow check of a low-precision run (study 7; a practice
# reported by 01.AI): from every kept checkpoint of the run, continue a copy in
# bf16 for a few steps and compare its losses with the run's own.
#
#   bazel run //experiments/studies:shadow -- RUN_DIR [--steps N] [--threshold X] [--recipe R] [--threads T]
#   shadow.sh --train TRAIN RUN_DIR ...   (bazel run passes its trainer; else SHADOW_TRAIN)
#
# RUN_DIR must have been trained with ckpt_keep = 1 (checkpoints ckpt-S.bin every
# ckpt_every steps). For each S whose steps S+1..S+N the run has logged, the
# copy RUN_DIR/shadow/S resumes ckpt-S.bin with the recipe replaced by
# experiments/configs/R.cfg (default bf16; `train --recipe`) and stops after step
# S+N (stop_at): same weights, optimizer state, data order and schedule, only
# the precision differs. Its losses are the bf16 counterpart of the run's own
# S+1..S+N (resuming is bit-identical, so the run's log is its own continuation).
#   gap(S) = mean run loss - mean shadow loss over those N steps (nats; > 0: the
#            low-precision run is behind bf16)
# and the check is flagged when gap > X (default 0.05). Writes RUN_DIR/shadow.csv
# (step,steps,run_loss,shadow_loss,gap,threshold,flagged) and prints the flagged steps.
# Checks already made with the same N and R are not repeated, so the command can
# be run again while the run goes on. Bad input: one line on stderr, exit 2; a
# shadow run that fails otherwise (crash, killed, trainer missing): exit 1 with
# the end of its stderr (RUN_DIR/shadow/S/train.err).
set -u
{
die() { echo "shadow: $*" >&2; exit 2; }

ws=${BUILD_WORKSPACE_DIRECTORY:-$PWD}
train=${SHADOW_TRAIN:-} configs=$ws/experiments/configs

run="" steps=10 threshold=0.05 recipe=bf16 threads=0
while (($#)); do
  case $1 in
    --steps) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--steps needs a positive integer"; steps=$2; shift ;;
    --threshold) [[ ${2:-} =~ ^-?[0-9.]+([eE][-+]?[0-9]+)?$ ]] || die "--threshold needs a number"; threshold=$2; shift ;;
    --recipe) [[ -n ${2:-} ]] || die "--recipe needs a name"; recipe=$2; shift ;;
    --threads) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--threads needs an integer"; threads=$2; shift ;;
    --train) [[ -n ${2:-} ]] || die "--train needs a path"; train=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *) [[ -z $run ]] || die "more than one run directory ('$run', '$1')"; run=$1 ;;
  esac
  shift
done
[[ -n $run ]] || die "usage: shadow RUN_DIR [--steps N] [--threshold X] [--recipe R]"
[[ $run == /* ]] || run=$ws/$run
[[ -f $run/config.cfg && -f $run/log.jsonl ]] || die "'$run' is not a run directory"
[[ -n $train ]] || die "no trainer: --train TRAIN (bazel run passes it) or SHADOW_TRAIN"
[[ $train == */* && $train != /* ]] && train=$PWD/$train
[[ -r $configs/$recipe.cfg ]] || die "no recipe config '$recipe.cfg' in $configs"

# the run's own losses: step,loss (the last line of a step wins: a resumed run repeats steps)
losses() { awk '/"loss":/ && !/"event"/ { match($0, /"step":[0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7) + 0
  match($0, /"loss":[-+0-9.eEnaif]+/); l[s] = substr($0, RSTART + 7, RLENGTH - 7); if (s > m) m = s }
  END { for (s = 1; s <= m; s++) if (s in l) print s "," l[s] }' "$1"; }
# mean of column 2 of "step,loss" lines for steps in (from, to]; empty if any is missing
mean_loss() { awk -F, -v a="$2" -v b="$3" '$1 > a && $1 <= b { s += $2; n++ } END { if (n == b - a) printf "%.9g", s / n }' "$1"; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
losses "$run/log.jsonl" >"$tmp/run.csv"
ckpts=$(ls "$run" | sed -n 's/^ckpt-\([0-9]*\)\.bin$/\1/p' | sort -n)
[[ -n $ckpts ]] || die "no kept checkpoints (ckpt-S.bin) in '$run': train with ckpt_keep = 1"

out=$run/shadow.csv
echo "step,steps,run_loss,shadow_loss,gap,threshold,flagged" >"$out.tmp"
flagged="" n=0
for s in $ckpts; do
  end=$((s + steps))
  fp=$(mean_loss "$tmp/run.csv" "$s" "$end")
  [[ -n $fp ]] || continue # the run has not logged (or did not reach) steps s+1..s+N
  d=$run/shadow/$s
  if ! [[ $(cat "$d/shadow_args" 2>/dev/null) == "$recipe $steps" && -f $d/summary.json ]]; then
    rm -rf "$d" && mkdir -p "$d" || die "cannot create '$d'"
    cp "$run/config.cfg" "$d/config.cfg"
    ln "$run/ckpt-$s.bin" "$d/ckpt.bin" 2>/dev/null || cp "$run/ckpt-$s.bin" "$d/ckpt.bin"
    # { } 2>/dev/null: the shell's own "Segmentation fault" line; the exit status says it
    { "$train" --resume "$d" --recipe "$configs/$recipe.cfg" --set "stop_at=$end" --set progress=0 \
      --set ckpt_every=0 --set ckpt_keep=0 --set stats_every=0 --set val_every=0 \
      --set "threads=$threads" >"$d/train.out" 2>"$d/train.err"; } 2>/dev/null
    rc=$?
    ((rc == 2)) && die "the shadow run of step $s failed: $(tail -1 "$d/train.err")"
    if ((rc != 0)); then
      echo "shadow: the shadow run of step $s exited $rc; ${d#"$ws"/}/train.err ends:" >&2
      tail -3 "$d/train.err" | sed 's/^/    /' >&2
      exit 1
    fi
    echo "$recipe $steps" >"$d/shadow_args"
  fi
  losses "$d/log.jsonl" >"$tmp/shadow.csv"
  bf=$(mean_loss "$tmp/shadow.csv" "$s" "$end")
  if [[ -z $bf ]]; then # the shadow diverged before S+N: a failed check
    echo "$s,$steps,$fp,,,$threshold,1" >>"$out.tmp"; flagged+=" $s(shadow diverged)"; n=$((n + 1)); continue
  fi
  read -r gap flag < <(awk -v a="$fp" -v b="$bf" -v t="$threshold" 'BEGIN { g = a - b; printf "%.6g %d\n", g, (g > t) }')
  echo "$s,$steps,$fp,$bf,$gap,$threshold,$flag" >>"$out.tmp"
  ((flag)) && flagged+=" $s(gap $gap)"
  n=$((n + 1))
done
mv "$out.tmp" "$out"
if [[ -n $flagged ]]; then
  echo "shadow: $n checks of $steps $recipe steps, FLAGGED (gap > $threshold) at step$flagged; $out"
else
  echo "shadow: $n checks of $steps $recipe steps, none flagged (gap <= $threshold); $out"
fi
exit 0
}
