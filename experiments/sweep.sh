#!/usr/bin/env bash
# sweep: run a study's grid with the trainer, then aggregate CSVs and draw plots.
#
#   bazel run //experiments:sweep -- experiments/sweeps/<study>.cfg [--quick] [--jobs N]
#
# The grid is recipes x variants x lrs x seeds x every `vary` axis (format:
# experiments/sweeps/README.md). Runs go to experiments/runs/sweeps/<study>[-quick]/<point>/
# (git-ignored); the CSVs and plots to experiments/results/<study>[-quick]/.
# A point whose run finished (completed or diverged) with the same arguments is
# skipped, an interrupted one is resumed from its checkpoint: an interrupted sweep
# continues where it stopped. A diverged run is a result, not an error. Then the
# evaluations of kept checkpoints the config asks for (sharpness, shadow check)
# run on every finished point; they too are not repeated.
# Bad input: one line on stderr, exit 2.
set -u
# The whole script is one { } block: bash parses it before running it, so editing
# this file during a sweep cannot derail the running one.
{

die() { echo "sweep: $*" >&2; exit 2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the helper scripts: beside this one, or in bazel's runfiles
[[ -x $here/sweep_collect.sh ]] || here=${RUNFILES_DIR:-$0.runfiles}/exmy/experiments
ws=${BUILD_WORKSPACE_DIRECTORY:-$PWD}
# The trainer: SWEEP_TRAIN, else the one bazel put in our runfiles, else bazel-bin.
train=${SWEEP_TRAIN:-}
for c in "${RUNFILES_DIR:-$0.runfiles}/exmy/experiments/train" "$here/train" "$ws/bazel-bin/experiments/train"; do
  [[ -z $train && -x $c ]] && train=$c
done
sharpness=${SWEEP_SHARPNESS:-}
for c in "${RUNFILES_DIR:-$0.runfiles}/exmy/experiments/sharpness" "$here/sharpness" "$ws/bazel-bin/experiments/sharpness"; do
  [[ -z $sharpness && -x $c ]] && sharpness=$c
done

cfg="" quick=0 jobs=1
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --jobs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer"; jobs=$2; shift ;;
    --jobs=*) jobs=${1#--jobs=}; [[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer" ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *) [[ -z $cfg ]] || die "more than one sweep config ('$cfg', '$1')"; cfg=$1 ;;
  esac
  shift
done
[[ -n $cfg ]] || die "usage: sweep STUDY.cfg [--quick] [--jobs N]"
[[ $cfg == /* ]] || cfg=$ws/$cfg
[[ -r $cfg ]] || die "cannot read sweep config '$cfg'"
[[ -n $train ]] || die "trainer binary not found (set SWEEP_TRAIN)"

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

runs=$ws/experiments/runs/sweeps/$study
results=$ws/experiments/results/$study
mkdir -p "$runs" "$results" || die "cannot create $runs or $results"

# ---- expand the grid: one line per point, name|recipe|variant|lr|seed|axes|args (not tabs: read merges empty tab fields)
threads=$(( $(nproc) / jobs )); ((threads < 1)) && threads=1
grid=$results/grid.txt
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
echo "sweep: study $study, $total points, $jobs job(s) x $threads thread(s); runs in $runs"

# ---- run ---------------------------------------------------------------------
# status of a finished run, from its summary.json: completed | diverged | interrupted | ""
run_status() { sed -n 's/.*"status":"\([a-z]*\)".*/\1/p' "$1/summary.json" 2>/dev/null; }

run_point() { # run_point NAME RECIPE ARGS  (in a subshell; exit status 2 = bad input)
  local name=$1 recipe=$2 args=$3 dir=$runs/$1 a
  local -a set=(--set "threads=$threads") # before the study's sets: a study may fix threads
  for a in $args; do set+=(--set "$a"); done
  if [[ -f $dir/sweep_args && $(cat "$dir/sweep_args") == "$recipe $args" && -f $dir/ckpt.bin ]]; then
    "$train" --resume "$dir" --set progress=0 --set "threads=$threads" >>"$dir/train.out" 2>&1
  else
    rm -rf "$dir" && mkdir -p "$dir" && echo "$recipe $args" >"$dir/sweep_args"
    "$train" --config "$ws/experiments/configs/$recipe.cfg" "${set[@]}" --set "run_dir=$dir" \
      --set progress=0 >"$dir/train.out" 2>&1
  fi
}

done_n=0 div_n=0 ran=0 start=$(date +%s) failed=""
progress() {
  local now el eta="?"
  now=$(date +%s) el=$((now - start))
  ((ran > 0)) && eta=$((el * (total - done_n) / ran))
  ((done_n == total)) && eta=0
  [[ $eta != "?" ]] && eta=$(printf '%dm%02ds' $((eta / 60)) $((eta % 60)))
  local line
  line=$(printf 'sweep: %d/%d done, %d diverged, elapsed %dm%02ds, ETA %s' \
    "$done_n" "$total" "$div_n" $((el / 60)) $((el % 60)) "$eta")
  # one live line on a terminal; a line per change in a log (stderr stays for errors)
  if [[ -t 2 ]]; then printf '\r%s   ' "$line" >&2
  elif [[ $line != "${last_line:-}" ]]; then echo "$line"; fi
  last_line=$line
}
declare -A pid_name=()
reap() { # wait for one job, account for it
  local pid rc
  wait -n -p pid 2>/dev/null; rc=$?
  [[ -z ${pid:-} ]] && return
  local name=${pid_name[$pid]}; unset "pid_name[$pid]"
  if ((rc == 2)); then failed="$name: $(tail -1 "$runs/$name/train.out")"; fi
  done_n=$((done_n + 1)) ran=$((ran + 1))
  [[ $(run_status "$runs/$name") == diverged ]] && div_n=$((div_n + 1))
  progress
}
while IFS='|' read -r name recipe variant lr seed axes args; do
  st=$(run_status "$runs/$name")
  if [[ ($st == completed || $st == diverged) && $(cat "$runs/$name/sweep_args" 2>/dev/null) == "$recipe $args" ]]; then
    done_n=$((done_n + 1)); [[ $st == diverged ]] && div_n=$((div_n + 1))
    continue
  fi
  while ((${#pid_name[@]} >= jobs)); do reap; done
  [[ -n $failed ]] && break
  run_point "$name" "$recipe" "$args" &
  pid_name[$!]=$name
  progress
done <"$grid"
while ((${#pid_name[@]})); do reap; done
progress; [[ -t 2 ]] && echo >&2
[[ -n $failed ]] && die "a run failed on bad input: $failed"

# ---- evaluations of the kept checkpoints (ckpt_keep = 1) -------------------------
kept() { ls "$1" | sed -n 's/^ckpt-\([0-9]*\)\.bin$/\1/p' | sort -n; }
if [[ -n $sharp_args$shadow_args ]]; then
  all_threads=$(nproc)
  while IFS='|' read -r name _; do
    dir=$runs/$name st=$(run_status "$runs/$name")
    [[ $st == completed || $st == diverged ]] || continue
    [[ -n $(kept "$dir") ]] || die "$name: no kept checkpoints (the study needs 'set ckpt_keep = 1')"
    if [[ -n $sharp_args ]]; then
      # one JSON line per kept checkpoint; computed again only when the arguments change
      [[ $(cat "$dir/sharpness_args" 2>/dev/null) == "$sharp_args" ]] || { rm -f "$dir/sharpness.jsonl"; echo "$sharp_args" >"$dir/sharpness_args"; }
      new=0
      for s in $(kept "$dir"); do
        grep -q "^{\"step\":$s," "$dir/sharpness.jsonl" 2>/dev/null && continue
        line=$(OMP_NUM_THREADS=$all_threads "$sharpness" "$dir" --ckpt "$dir/ckpt-$s.bin" $sharp_args 2>"$dir/sharpness.err") ||
          die "sharpness of $name step $s: $(tail -1 "$dir/sharpness.err")"
        echo "$line" >>"$dir/sharpness.jsonl"; new=$((new + 1))
      done
      ((new)) && echo "sweep: sharpness of $name: $new checkpoint(s)"
    fi
    if [[ -n $shadow_args ]]; then
      SHADOW_TRAIN=$train "$here/shadow.sh" "$dir" $shadow_args --threads "$all_threads" >"$dir/shadow.out" 2>&1 ||
        die "shadow check of $name: $(tail -1 "$dir/shadow.out")"
      echo "sweep: $(sed "s|; .*||" "$dir/shadow.out" | tail -1) ($name)"
    fi
  done <"$grid"
fi

# ---- aggregate and plot --------------------------------------------------------
"$here/sweep_collect.sh" "$grid" "$runs" "$results" || exit 1
"$here/sweep_plot.sh" "$results" "$plots" || exit 1
echo "sweep: $done_n/$total runs, $div_n diverged; summary $results/summary.csv"
for f in "$results"/*.png; do [[ -f $f ]] && echo "sweep: plot ${f#$ws/}"; done
exit 0
}
