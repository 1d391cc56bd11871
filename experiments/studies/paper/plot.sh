#!/usr/bin/env bash
# The campaign's figures, from a folder of its runs (each NAME/log.jsonl) and
# the curves that `campaign` wrote beside them (campaign_curves.csv):
#   bash experiments/studies/paper/plot.sh experiments/results/paper-120m [TAG REGEX]
# draws, as PNG and SVG into that folder (with TAG and REGEX: only the runs
# whose folder name matches the extended regular expression REGEX, into
# paper_TAG_train_loss and so on; TAG in letters, digits, '_' and '-'),
#   paper_train_loss   training loss, running mean of 20 steps, per run
#   paper_val_loss     validation loss per run
#   paper_grad_norm    gradient norm before clipping (log scale), running
#                      median of 9 steps: the early warning of a divergence
#   paper_sharpness    epsilon-sharpness of the final token's logits
#                      (eps = 1e-3) at each validation
# one colour per format, one dash pattern per seed; a run that diverged ends
# where the trainer stopped it.  Prints the names drawn.  Without gnuplot:
# one line on stderr, exit 0.  A folder without runs: one line, exit 2.
set -euo pipefail
dir=${1:-} tag=${2:-} regex=${3:-}
if [ -z "$dir" ] || [ ! -f "$dir/campaign_curves.csv" ] || [ $# -gt 3 ] || [ $# = 2 ]; then
  echo "plot: usage: plot.sh DIR [TAG REGEX] (DIR/campaign_curves.csv from bazel run //experiments/studies:campaign -- DIR)" >&2
  exit 2
fi
if [ $# = 3 ] && { ! [[ "$tag" =~ ^[A-Za-z0-9_-]+$ ]] || [ -z "$regex" ]; }; then
  echo "plot: TAG must be letters, digits, '_' and '-', and REGEX not empty" >&2
  exit 2
fi
command -v gnuplot >/dev/null || { echo "plot: gnuplot not found (apt-get install gnuplot-nox): no figures" >&2; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
colors=("#000000" "#e41a1c" "#377eb8" "#4daf4a" "#984ea3" "#ff7f00" "#a65628" "#f781bf")
declare -A color_of=()
runs=$(awk -F, 'NR > 1 { print $2 }' "$dir/campaign_curves.csv" | uniq)
[ -n "$runs" ] || { echo "plot: no runs in $dir/campaign_curves.csv" >&2; exit 2; }
prefix=paper
if [ -n "$tag" ]; then
  set +e
  runs=$(grep -E -- "$regex" <<<"$runs" 2>/dev/null); rc=$?
  set -e
  [ $rc -le 1 ] || { echo "plot: REGEX '$regex' is not an extended regular expression" >&2; exit 2; }
  [ -n "$runs" ] || { echo "plot: no run's name matches '$regex'" >&2; exit 2; }
  prefix=paper_$tag
fi

# style RUN: the colour of its format (the name up to "-s<seed>"), the dash of its seed
style() {
  local fmt=${1%-s*} seed=${1##*-s}
  [[ -n ${color_of[$fmt]:-} ]] || color_of[$fmt]=${colors[${#color_of[@]} % ${#colors[@]}]}
  [[ $seed =~ ^[0-9]+$ ]] || seed=1
  STYLE="lw 1.5 lc rgb '${color_of[$fmt]}' dt $seed"
}
draw() { # NAME TITLE YLABEL EXTRA PLOT
  local name=$1
  for term in png svg; do
    local t="pngcairo size 1100,650"
    [ $term = svg ] && t="svg size 1100,650"
    gnuplot <<EOF
set datafile separator ","
set terminal $t noenhanced font ",10"
set output "$dir/$name.$term"
set title "$2"; set xlabel "step"; set ylabel "$3"; set grid; set key outside right
$4
plot $5
EOF
  done
  echo "$name"
}

train="" val="" grad="" sharp="" i=0
for run in $runs; do
  style "$run"
  awk -F, -v r="$run" '$2 == r { w[n % 20] = $4; n++; s = 0; k = n < 20 ? n : 20;
    for (j = 0; j < k; j++) s += w[j]; print $3 "," s / k }' "$dir/campaign_curves.csv" >"$tmp/t$i"
  awk -F, -v r="$run" '$2 == r && $5 != "" { print $3 "," $5 }' "$dir/campaign_curves.csv" >"$tmp/v$i"
  awk -F, -v r="$run" '$2 == r && $6 != "" { print $3 "," $6 }' "$dir/campaign_curves.csv" >"$tmp/s$i"
  if [ -f "$dir/$run/log.jsonl" ]; then
    grep -o '"step":[0-9]*,"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,}]*' "$dir/$run/log.jsonl" |
      awk -F'[:,]' '{ w[n % 9] = $8 + 0; n++; k = n < 9 ? n : 9
        for (j = 0; j < k; j++) { x = w[j]; for (l = j; l > 0 && v[l - 1] > x; l--) v[l] = v[l - 1]; v[l] = x }
        print $2 "," v[int((k - 1) / 2)] }' >"$tmp/g$i"
  fi
  [ -s "$tmp/t$i" ] && train+="${train:+, }'$tmp/t$i' using 1:2 with lines $STYLE title '$run'"
  [ -s "$tmp/v$i" ] && val+="${val:+, }'$tmp/v$i' using 1:2 with linespoints $STYLE pt 7 ps 0.6 title '$run'"
  [ -s "$tmp/s$i" ] && sharp+="${sharp:+, }'$tmp/s$i' using 1:2 with linespoints $STYLE pt 7 ps 0.6 title '$run'"
  [ -s "$tmp/g$i" ] && grad+="${grad:+, }'$tmp/g$i' using 1:2 with lines $STYLE title '$run'"
  i=$((i + 1))
done
name=$(basename "$dir")${tag:+ ($tag)}
[ -n "$train" ] && draw ${prefix}_train_loss "$name: training loss (running mean of 20 steps)" "loss (nats/token)" "set yrange [1:5]" "$train"
[ -n "$val" ] && draw ${prefix}_val_loss "$name: validation loss" "loss (nats/token)" "set yrange [1.9:*]" "$val"
[ -n "$grad" ] && draw ${prefix}_grad_norm "$name: gradient norm before clipping (running median of 9 steps)" "gradient norm" "set logscale y" "$grad"
[ -n "$sharp" ] && draw ${prefix}_sharpness "$name: epsilon-sharpness of the final token's logits (eps 1e-3)" "sharpness" "" "$sharp"
exit 0
