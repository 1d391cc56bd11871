#!/usr/bin/env bash
# sweep: run a study's grid with the trainer, then aggregate CSVs and draw plots.
#
#   bazel run //experiments/studies:sweep -- experiments/studies/sweeps/<study>.cfg [--quick] [--jobs N] [--publish]
#
# The grid is recipes x variants x lrs x seeds x every `vary` axis (format:
# experiments/studies/sweeps/README.md). Everything a sweep writes goes to the git-ignored
# experiments/runs/sweeps/<study>[-quick]/: a folder per point, the CSVs, the plots.
# --publish then refreshes the published copy in experiments/results/<study>[-quick]/
# (the CSVs and plots the repository keeps), and only when every point finished.
# A point whose run finished (completed or diverged) with the same arguments is
# skipped, an interrupted one is resumed from its checkpoint: an interrupted sweep
# continues where it stopped. A diverged run is a result, not an error. A run that
# exits non-zero (the trainer cannot start, crashes, is killed, rejects its config)
# is a failed point: reported with the end of its stderr, left out of the plots.
# Then the evaluations of kept checkpoints the config asks for (sharpness, shadow
# check) run on every finished point; they too are not repeated.
# Exit status: 0 every point finished; 1 a point failed or is unfinished, or an
# evaluation failed; 2 bad input (one line on stderr; a run that rejected its config
# stops the sweep and counts too). SWEEP_TRAIN / SWEEP_SHARPNESS name the binaries.
set -u
# The whole script is one { } block: bash parses it before running it, so editing
# this file during a sweep cannot derail the running one.
{

die() { echo "sweep: $*" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the helper scripts: beside this one, or in bazel's runfiles
[[ -x $here/sweep_collect.sh ]] || here=${RUNFILES_DIR:-$0.runfiles}/exmy/experiments/studies
ws=${BUILD_WORKSPACE_DIRECTORY:-$PWD}
# The trainer: SWEEP_TRAIN, else the one bazel put in our runfiles, else bazel-bin.
train=${SWEEP_TRAIN:-}
for c in "${RUNFILES_DIR:-$0.runfiles}/exmy/experiments/trainer/train" "$here/../trainer/train" "$ws/bazel-bin/experiments/trainer/train"; do
  [[ -z $train && -x $c ]] && train=$c
done
sharpness=${SWEEP_SHARPNESS:-}
for c in "${RUNFILES_DIR:-$0.runfiles}/exmy/experiments/studies/sharpness" "$here/sharpness" "$ws/bazel-bin/experiments/studies/sharpness"; do
  [[ -z $sharpness && -x $c ]] && sharpness=$c
done

cfg="" quick=0 jobs=1 publish=0
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --jobs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer"; jobs=$2; shift ;;
    --jobs=*) jobs=${1#--jobs=}; [[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer" ;;
    --publish) publish=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *) [[ -z $cfg ]] || die "more than one sweep config ('$cfg', '$1')"; cfg=$1 ;;
  esac
  shift
done
[[ -n $cfg ]] || die "usage: sweep STUDY.cfg [--quick] [--jobs N] [--publish]"
[[ $cfg == /* ]] || cfg=$ws/$cfg
[[ -r $cfg ]] || die "cannot read sweep config '$cfg'"
[[ -n $train ]] || die "trainer binary not found (set SWEEP_TRAIN)"
[[ -f $train && -x $train ]] || die "trainer '$train' is not an executable file"
# a published figure must not go stale beside its refreshed CSVs
((publish)) && ! command -v gnuplot >/dev/null && die "--publish needs gnuplot (apt-get install gnuplot-nox)"

# ---- parse -------------------------------------------------------------------
study="" recipes="" lrs="" seeds="1" plots="curves"
declare -a sets=() qsets=() vary_keys=() vary_vals=() var_names=() var_sets=()
q_recipes="" q_lrs="" q_seeds="" sharp_args="" shadow_args="" q_sharp="" q_shadow=""
lineno=0
while IFS= read -r line || [[ -n $line ]]; do
  lineno=$((lineno + 1))
  line=${line%%#*}
  [[ $line =~ ^[[:space:]]*$ ]] && continue
  [[ $line == *=* ]] || die "$cfg:$lineno: expected 'name = value'"
  lhs=$(echo "${line%%=*}" | xargs) rhs=$(echo "${line#*=}" | xargs)
  read -r -a w <<<"$lhs"
  case "${w[0]}:${#w[@]}" in
    study:1) [[ $rhs =~ ^[A-Za-z0-9_.-]+$ ]] || die "$cfg:$lineno: bad study name '$rhs'"; study=$rhs ;;
    recipes:1) recipes=$rhs ;;
    lrs:1) lrs=$rhs ;;
    seeds:1) seeds=$rhs ;;
    plots:1) plots=$rhs ;;
    sharpness:1) sharp_args=$rhs ;;
    shadow:1) shadow_args=$rhs ;;
    set:2) sets+=("${w[1]}=$rhs") ;;
    vary:2) [[ -n $rhs ]] || die "$cfg:$lineno: empty axis"; vary_keys+=("${w[1]}"); vary_vals+=("$rhs") ;;
    variant:2) [[ ${w[1]} =~ ^[A-Za-z0-9.+-]+$ ]] || die "$cfg:$lineno: bad variant name"
      var_names+=("${w[1]}"); var_sets+=("$rhs") ;;
    quick:2) case ${w[1]} in
        recipes) q_recipes=$rhs ;; lrs) q_lrs=$rhs ;; seeds) q_seeds=$rhs ;;
        sharpness) q_sharp=$rhs ;; shadow) q_shadow=$rhs ;;
        *) qsets+=("${w[1]}=$rhs") ;;
      esac ;;
    *) die "$cfg:$lineno: unknown directive '$lhs'" ;;
  esac
done <"$cfg"
[[ -n $study ]] || die "$cfg: no 'study = NAME'"
if ((quick)); then
  [[ -n $q_recipes ]] && recipes=$q_recipes
  [[ -n $q_lrs ]] && lrs=$q_lrs
  [[ -n $q_seeds ]] && seeds=$q_seeds
  [[ -n $q_sharp ]] && sharp_args=$q_sharp
  [[ -n $q_shadow ]] && shadow_args=$q_shadow
  study=$study-quick
  sets+=("${qsets[@]}")
fi
[[ -n $recipes ]] || die "$cfg: no recipes"
[[ -n $lrs ]] || die "$cfg: no lrs"
for r in $recipes; do [[ -r $ws/experiments/configs/$r.cfg ]] || die "$cfg: no recipe config experiments/configs/$r.cfg"; done
for l in $lrs; do [[ $l =~ ^[0-9.]+([eE][-+]?[0-9]+)?$ ]] || die "$cfg: bad learning rate '$l'"; done
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || die "$cfg: bad seed '$s'"; done
for p in $plots; do [[ $p =~ ^(curves|final|lr|debug|speed|sharpness|shadow)$ ]] || die "$cfg: unknown plot '$p'"; done
[[ -z $sharp_args || -n $sharpness ]] || die "sharpness binary not found (set SWEEP_SHARPNESS)"
((${#var_names[@]})) || { var_names=("-"); var_sets=(""); }

# the sweep's own folder (git-ignored); the published copy only under --publish
work=$ws/experiments/runs/sweeps/$study
published=$ws/experiments/results/$study
mkdir -p "$work" || die "cannot create $work"

# ---- expand the grid: one line per point, name|recipe|variant|lr|seed|axes|args (not tabs: read merges empty tab fields)
threads=$(( $(nproc) / jobs )); ((threads < 1)) && threads=1
grid=$work/grid.txt
: >"$grid"
expand() { # expand AXIS_INDEX NAME AXES ARGS...
  local i=$1 name=$2 axes=$3; shift 3
  if ((i == ${#vary_keys[@]})); then
    printf '%s|%s|%s|%s|%s|%s|%s\n' "$name" "$P_recipe" "$P_variant" "$P_lr" "$P_seed" "$axes" "$*" >>"$grid"
    return
  fi
  local k=${vary_keys[i]} v
  for v in ${vary_vals[i]}; do
    expand $((i + 1)) "${name}_$k-$v" "${axes:+$axes;}$k=$v" "$@" "$k=$v"
  done
}
for P_recipe in $recipes; do
  for vi in "${!var_names[@]}"; do
    P_variant=${var_names[vi]}
    for P_lr in $lrs; do
      for P_seed in $seeds; do
        base=$P_recipe; [[ $P_variant != - ]] && base+=_$P_variant
        expand 0 "${base}_lr${P_lr}_s${P_seed}" "" "${sets[@]}" ${var_sets[vi]} "lr=$P_lr" "seed=$P_seed"
      done
    done
  done
done
total=$(wc -l <"$grid")
echo "sweep: study $study, $total points, $jobs job(s) x $threads thread(s); runs in ${work#"$ws"/}"

# ---- run ---------------------------------------------------------------------
# status of a run, from its summary.json: completed | diverged | interrupted | stopped | ""
run_status() { sed -n 's/.*"status":"\([a-z]*\)".*/\1/p' "$1/summary.json" 2>/dev/null; }

# exit_reason RC: why a process that exited RC did not give a result
exit_reason() {
  local rc=$1
  if ((rc == 2)); then echo "bad input (exit 2)"
  elif ((rc == 126)); then echo "could not be started (exit 126: not executable)"
  elif ((rc == 127)); then echo "could not be started (exit 127: a program or shared library not found)"
  elif ((rc > 128 && rc <= 128 + 64)); then echo "killed by SIG$(kill -l $((rc - 128))) (exit $rc)"
  else echo "exit $rc"; fi
}

# classify RC RUN_DIR: what one run of the trainer came to, from its exit status
# and its summary.json; the one place that decides it. The trainer exits 0 when
# it stopped by itself (summary.json says how) and 2 on bad input.
#   completed | diverged     finished: a result (a divergence is one)
#   interrupted | stopped    exit 0 before the last step (Ctrl-C, interrupt_at,
#                            stop_at): unfinished, the next sweep resumes it
#   failed: WHY              anything else: no result
classify() {
  local rc=$1 st
  st=$(run_status "$2")
  if ((rc != 0)); then echo "failed: $(exit_reason "$rc")"; return; fi
  case $st in
    completed | diverged | interrupted | stopped) echo "$st" ;;
    *) echo "failed: exit 0 without a status in summary.json" ;;
  esac
}

# report_failure WHAT WHY STDERR_FILE: on stderr, one line with the file and its
# last line, or a line and the file's last three lines
report_failure() {
  local what=$1 why=$2 err=$3 last
  last=$(grep -v '^[[:space:]]*$' "$err" 2>/dev/null | tail -3)
  [[ -t 2 ]] && echo >&2 # below the live progress line
  if [[ -z $last ]]; then echo "sweep: FAILED $what: $why; nothing on stderr (${err#"$ws"/})" >&2
  elif [[ $last != *$'\n'* ]]; then echo "sweep: FAILED $what: $why; ${err#"$ws"/}: $last" >&2
  else
    echo "sweep: FAILED $what: $why; ${err#"$ws"/} ends:" >&2
    sed 's/^/    /' <<<"$last" >&2
  fi
}

run_point() { # run_point NAME RECIPE ARGS  (in the background; its exit status is the trainer's)
  local name=$1 recipe=$2 args=$3 dir=$work/$1 a
  local -a set=(--set "threads=$threads") # before the study's sets: a study may fix threads
  for a in $args; do set+=(--set "$a"); done
  # { } 2>/dev/null: the shell's own "Segmentation fault" line; classify says it
  if [[ -f $dir/sweep_args && $(cat "$dir/sweep_args") == "$recipe $args" && -f $dir/ckpt.bin ]]; then
    rm -f "$dir/sweep_failed"
    { "$train" --resume "$dir" --set progress=0 --set "threads=$threads" >>"$dir/train.out" 2>>"$dir/train.err"; } 2>/dev/null
  else
    rm -rf "$dir" && mkdir -p "$dir" && echo "$recipe $args" >"$dir/sweep_args" || exit 1
    { "$train" --config "$ws/experiments/configs/$recipe.cfg" "${set[@]}" --set "run_dir=$dir" \
      --set progress=0 >"$dir/train.out" 2>"$dir/train.err"; } 2>/dev/null
  fi
}

# done_n counts the finished points (diverged ones too), fail_n the failed ones,
# unfinished_n the interrupted ones; outcome[point] is what classify said
declare -A outcome=() pid_name=()
done_n=0 div_n=0 fail_n=0 unfinished_n=0 ran=0 bad_input=0 start=$(date +%s)
account() { # account POINT OUTCOME
  outcome[$1]=$2
  case $2 in
    completed) done_n=$((done_n + 1)) ;;
    diverged) done_n=$((done_n + 1)) div_n=$((div_n + 1)) ;;
    interrupted | stopped) unfinished_n=$((unfinished_n + 1)) ;;
    *) fail_n=$((fail_n + 1)) ;;
  esac
}
progress() {
  local now el eta="?" settled=$((done_n + fail_n + unfinished_n))
  now=$(date +%s) el=$((now - start))
  ((ran > 0)) && eta=$((el * (total - settled) / ran))
  ((settled == total)) && eta=0
  [[ $eta != "?" ]] && eta=$(printf '%dm%02ds' $((eta / 60)) $((eta % 60)))
  local line
  line=$(printf 'sweep: %d/%d done, %d diverged, %d failed, elapsed %dm%02ds, ETA %s' \
    "$done_n" "$total" "$div_n" "$fail_n" $((el / 60)) $((el % 60)) "$eta")
  # one live line on a terminal; a line per change in a log (stderr stays for errors)
  if [[ -t 2 ]]; then printf '\r%s   ' "$line" >&2
  elif [[ $line != "${last_line:-}" ]]; then echo "$line"; fi
  last_line=$line
}
reap() { # wait for one run, account for it
  local pid rc
  wait -n -p pid 2>/dev/null; rc=$?
  [[ -z ${pid:-} ]] && return
  local name=${pid_name[$pid]} o
  unset "pid_name[$pid]"
  o=$(classify "$rc" "$work/$name")
  account "$name" "$o"
  ran=$((ran + 1))
  if [[ $o == failed:* ]]; then
    # a run can fail after writing a "completed" summary.json: this marks it failed for the next sweep
    echo "${o#failed: }" >"$work/$name/sweep_failed"
    report_failure "$name" "${o#failed: }" "$work/$name/train.err"
    ((rc == 2)) && bad_input=1 # the same config would fail the other points too
  fi
  progress
}
while IFS='|' read -r name recipe variant lr seed axes args; do
  st=$(run_status "$work/$name")
  if [[ ($st == completed || $st == diverged) && ! -e $work/$name/sweep_failed &&
        $(cat "$work/$name/sweep_args" 2>/dev/null) == "$recipe $args" ]]; then
    account "$name" "$st"
    continue
  fi
  while ((${#pid_name[@]} >= jobs)); do reap; done
  ((bad_input)) && break
  run_point "$name" "$recipe" "$args" &
  pid_name[$!]=$name
  progress
done <"$grid"
while ((${#pid_name[@]})); do reap; done
progress; [[ -t 2 ]] && echo >&2
not_run_n=$((total - done_n - fail_n - unfinished_n))

# ---- evaluations of the kept checkpoints (ckpt_keep = 1) of the finished points --
kept() { ls "$1" | sed -n 's/^ckpt-\([0-9]*\)\.bin$/\1/p' | sort -n; }
eval_fail_n=0
eval_failed() { # eval_failed WHAT RC STDERR_FILE
  report_failure "$1" "$(exit_reason "$2")" "$3"
  eval_fail_n=$((eval_fail_n + 1))
  (($2 == 2)) && bad_input=1
}
finished() { [[ ${outcome[$1]:-} == completed || ${outcome[$1]:-} == diverged ]]; }
if [[ -n $sharp_args$shadow_args ]]; then
  all_threads=$(nproc)
  while IFS='|' read -r name _; do
    dir=$work/$name
    finished "$name" || continue
    [[ -n $(kept "$dir") ]] || die "$name: no kept checkpoints (the study needs 'set ckpt_keep = 1')"
    if [[ -n $sharp_args ]]; then
      # one JSON line per kept checkpoint; computed again only when the arguments change
      [[ $(cat "$dir/sharpness_args" 2>/dev/null) == "$sharp_args" ]] || { rm -f "$dir/sharpness.jsonl"; echo "$sharp_args" >"$dir/sharpness_args"; }
      new=0
      for s in $(kept "$dir"); do
        grep -q "^{\"step\":$s," "$dir/sharpness.jsonl" 2>/dev/null && continue
        line=$({ OMP_NUM_THREADS=$all_threads "$sharpness" "$dir" --ckpt "$dir/ckpt-$s.bin" $sharp_args 2>"$dir/sharpness.err"; } 2>/dev/null)
        rc=$?
        ((rc == 0)) || { eval_failed "sharpness of $name at step $s" "$rc" "$dir/sharpness.err"; break; }
        echo "$line" >>"$dir/sharpness.jsonl"; new=$((new + 1))
      done
      ((new)) && echo "sweep: sharpness of $name: $new checkpoint(s)"
    fi
    if [[ -n $shadow_args ]]; then
      SHADOW_TRAIN=$train "$here/shadow.sh" "$dir" $shadow_args --threads "$all_threads" >"$dir/shadow.out" 2>"$dir/shadow.err"
      rc=$?
      if ((rc == 0)); then echo "sweep: $(sed "s|; .*||" "$dir/shadow.out" | tail -1) ($name)"
      else eval_failed "shadow check of $name" "$rc" "$dir/shadow.err"; fi
    fi
  done <"$grid"
fi

# ---- aggregate and plot: the plots show the finished points only ---------------
tmp=$(mktemp -d) || die "cannot create a temporary folder"
trap 'rm -rf "$tmp"' EXIT
while IFS='|' read -r name _; do
  o=${outcome[$name]:-not-run}
  echo "$name|${o%%:*}"
done <"$grid" >"$tmp/outcomes"
"$here/sweep_collect.sh" "$grid" "$work" "$work" "$tmp/outcomes" || { echo "sweep: collecting the CSVs failed" >&2; exit 1; }
rm -f "$work"/*.png "$work"/*.svg # an earlier invocation's: the folder shows this one
written=() plot_rc=0
if ((done_n == 0)); then
  echo "sweep: no plots: no point finished"
else
  plotted=$("$here/sweep_plot.sh" "$work" "$plots") || plot_rc=$?
  [[ -n $plotted ]] && mapfile -t written <<<"$plotted"
  if ((done_n < total)); then
    missing=$(awk -F'|' '$2 != "completed" && $2 != "diverged" { printf "%s%s", n++ ? " " : "", $1 }' "$tmp/outcomes")
    echo "sweep: the plots show $done_n of $total points; missing: $missing"
  fi
fi
echo "sweep: summary ${work#"$ws"/}/summary.csv"
for n in "${written[@]}"; do echo "sweep: plot ${work#"$ws"/}/$n.png"; done

# ---- publish: the repository's copy, only of a sweep without gaps ---------------
# Replaces the published files of the kinds a sweep writes (the CSVs, grid.txt,
# the plots); each file is copied beside its target and renamed over it.
publish() {
  local f keep
  mkdir -p "$published" || return 1
  local -a files=(grid.txt summary.csv curves.csv)
  for f in sharpness.csv shadow.csv; do [[ -f $work/$f ]] && files+=("$f"); done
  for f in "${written[@]}"; do files+=("$f.png" "$f.svg"); done
  for f in "${files[@]}"; do
    cp "$work/$f" "$published/.$f.tmp" && mv "$published/.$f.tmp" "$published/$f" || return 1
  done
  for f in "$published"/{grid.txt,summary.csv,curves.csv,sharpness.csv,shadow.csv} "$published"/*.png "$published"/*.svg; do
    [[ -f $f ]] || continue
    keep=0
    for k in "${files[@]}"; do [[ ${f##*/} == "$k" ]] && keep=1; done
    ((keep)) || rm -f "$f"
  done
  echo "sweep: published ${published#"$ws"/}/: ${files[*]}"
}
if ((publish)); then
  if ((done_n == total && eval_fail_n == 0 && plot_rc == 0)); then
    publish || { echo "sweep: publishing into ${published#"$ws"/}/ failed" >&2; exit 1; }
  else
    echo "sweep: not published (${published#"$ws"/}/ unchanged): $((total - done_n)) point(s) did not finish, $eval_fail_n evaluation(s) failed" >&2
  fi
fi

tally="$done_n/$total done, $div_n diverged, $fail_n failed"
((unfinished_n)) && tally+=", $unfinished_n interrupted (run the same command again to resume)"
((not_run_n)) && tally+=", $not_run_n not run"
((eval_fail_n)) && tally+=", $eval_fail_n evaluation(s) failed"
echo "sweep: $tally"
((bad_input)) && exit 2
((done_n < total || eval_fail_n || plot_rc)) && exit 1
exit 0
}
