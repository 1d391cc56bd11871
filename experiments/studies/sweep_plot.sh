#!/usr/bin/env bash
# sweep_plot RESULTS "PLOTS" [RUNS]: draw a sweep's CSVs with gnuplot, each figure as
# PNG and SVG into RESULTS, and print the name of each figure drawn (stdout).
# The figures show the finished points (completed, diverged) only; their titles
# say how many points are missing. Nothing is drawn when no point finished.
# RUNS holds stats.csv (default: RESULTS).
#
#   curves  train_curves: training loss (running mean of 10 steps) per point; val_curves
#   lr      final_val_vs_lr: mean final validation loss over the seeds that did not
#           diverge, per group; diverged_fraction: diverged runs per group and lr
#   final   final_val: final validation loss of every run, one column per group
#   speed   tokens_per_s: mean throughput per group
#   debug   stats_<metric>: per layer and operand, every statistic over the steps,
#           one panel per (point, use): the tensor that goes bad first stands out
#   sharpness  sharpness: the logit sharpness (2 KL / rho^2) of every kept checkpoint
#           against its step, per point, above the loss increase under the same
#           perturbations (sharpness.csv)
#   shadow  shadow_gap: the shadow check's loss gap (run - bf16 continuation)
#           against the checkpoint step, per point, with the threshold (shadow.csv)
# Without gnuplot the CSVs stay and a one-line warning says so.
set -eu
results=$1 plots=$2 runs=${3:-$1}
command -v gnuplot >/dev/null || { echo "sweep: gnuplot not found (apt-get install gnuplot-nox): CSVs only" >&2; exit 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# draw NAME GNUPLOT_BODY: the same plot commands into NAME.png and NAME.svg
draw() {
  local name=$1 body=$2
  if gnuplot 2>"$tmp/gnuplot.err" <<EOF; then echo "$name"; else echo "sweep: no plot $name: $(grep -m1 -v '^ *$' "$tmp/gnuplot.err")" >&2; rm -f "$results/$name".{png,svg}; fi
set datafile separator ","
set terminal pngcairo size ${WIDTH:-1100},700 noenhanced font ",10"
set output "$results/$name.png"
$body
set terminal svg size ${WIDTH:-1100},700 noenhanced font ",10"
set output "$results/$name.svg"
$body
EOF
}

# Line style: the colour follows the recipe (and variant), the dash pattern the
# other overrides (e.g. rz dashed, rne solid), so that 10+ lines stay legible.
colors=(black "#e41a1c" "#377eb8" "#4daf4a" "#984ea3" "#ff7f00" "#a65628" "#f781bf" "#999999" "#17becf" "#bcbd22" "#1f3f7f")
declare -A color_of=() dash_of=()
style() { # style COLOR_KEY DASH_KEY: sets STYLE (an empty key is a key: "-")
  local c=${1:--} d=${2:--}
  [[ -n ${color_of[$c]:-} ]] || color_of[$c]=${colors[${#color_of[@]} % ${#colors[@]}]}
  [[ -n ${dash_of[$d]:-} ]] || dash_of[$d]=$((${#dash_of[@]} + 1))
  STYLE="lw 1.5 lc rgb '${color_of[$c]}' dt ${dash_of[$d]}" # a variable, not output: no subshell loses the maps
}

# Lines are titled by what differs between points: the group alone when every
# group has one lr and one seed.
single=$(awk -F, 'NR > 1 { n[$2]++ } END { m = 0; for (g in n) if (n[g] > m) m = n[g]; print (m <= 1) }' "$results/summary.csv")
# Points that did not finish (failed, interrupted, not run) are in no figure; the titles say so.
read -r nfinished nmissing < <(awk -F, 'NR > 1 { if ($8 == "completed" || $8 == "diverged") f++; else m++ } END { print f + 0, m + 0 }' "$results/summary.csv")
((nfinished > 0)) || { echo "sweep: no plots: no point finished" >&2; exit 0; }
missing=""; ((nmissing)) && missing=" ($nmissing of $((nfinished + nmissing)) points missing: failed or unfinished)"

if [[ " $plots " == *" curves "* ]]; then
  for col in train val; do
    cmd="" i=0
    while IFS=, read -r point group recipe variant overrides lr seed _; do
      f=$tmp/$col-$i.dat i=$((i + 1))
      if [[ $col == train ]]; then # running mean of 10 steps: the per-batch noise hides the formats' gaps
        awk -F, -v p="$point" '$1 == p { w[n % 10] = $3; n++; s = 0; k = n < 10 ? n : 10; for (j = 0; j < k; j++) s += w[j]; print $2 "," s / k }' "$results/curves.csv" >"$f"
      else
        awk -F, -v p="$point" '$1 == p && $4 != "" { print $2 "," $4 }' "$results/curves.csv" >"$f"
      fi
      [[ -s $f ]] || continue
      title=$point; ((single)) && title=$group
      style "$recipe $variant" "$overrides lr$lr s$seed" # a group's seeds (and lrs): one colour, dashes apart
      cmd+="${cmd:+, }'$f' using 1:2 with lines $STYLE title '$title'"
    done < <(tail -n +2 "$results/summary.csv")
    [[ -n $cmd ]] || continue
    # y range: the part after the first 20% of steps, where the formats separate
    ymax=$(cat "$tmp"/$col-*.dat | awk -F, '{ s[NR] = $1; v[NR] = $2; if ($1 > m) m = $1 }
      END { y = -1e30; for (i in s) if (s[i] >= 0.2 * m && v[i] > y && v[i] < 1e30) y = v[i]; print (y > -1e30 ? y * 1.02 : "*") }')
    draw ${col}_curves "set title '$(basename "$results"): $col loss$missing'
set xlabel 'step'; set ylabel '$col loss (nats/byte)'; set key outside right; set grid; set yrange [*:$ymax]
plot $cmd"
  done
fi

if [[ " $plots " == *" lr "* ]]; then
  # per group and lr: mean final val over non-diverged seeds, fraction diverged
  awk -F, 'NR > 1 && ($8 == "completed" || $8 == "diverged") { k = $2 "," $6; n[k]++; if ($8 == "diverged") d[k]++; else if ($11 != "") { s[k] += $11; c[k]++ } }
    END { for (k in n) printf "%s,%s,%g\n", k, (k in c) ? s[k] / c[k] : "", (d[k] + 0) / n[k] }' \
    "$results/summary.csv" | sort -t, -k1,1 -k2,2g >"$tmp/lr.csv"
  cmd_v="" cmd_d="" i=0
  for g in $(cut -d, -f1 "$tmp/lr.csv" | uniq); do
    awk -F, -v g="$g" '$1 == g' "$tmp/lr.csv" >"$tmp/lr-$i.csv"
    IFS=, read -r recipe variant overrides < <(awk -F, -v g="$g" '$2 == g { print $3 "," $4 "," $5; exit }' "$results/summary.csv")
    style "$recipe $variant" "$overrides"
    cmd_v+="${cmd_v:+, }'$tmp/lr-$i.csv' using 2:3 with linespoints $STYLE pt 7 title '$g'"
    cmd_d+="${cmd_d:+, }'$tmp/lr-$i.csv' using 2:4 with linespoints $STYLE pt 7 title '$g'"
    i=$((i + 1))
  done
  draw final_val_vs_lr "set title '$(basename "$results"): final validation loss (mean over seeds that did not diverge)$missing'
set logscale x; set xlabel 'peak learning rate'; set ylabel 'final val loss'; set key outside right; set grid
plot $cmd_v"
  draw diverged_fraction "set title '$(basename "$results"): fraction of seeds diverged$missing'
set logscale x; set xlabel 'peak learning rate'; set ylabel 'diverged fraction'; set yrange [-0.05:1.05]; set key outside right; set grid
plot $cmd_d"
fi

if [[ " $plots " == *" final "* ]]; then
  # one column per group, one point per run: the spread of the seeds is the noise
  awk -F, 'NR > 1 && $11 != "" { if (!($2 in idx)) idx[$2] = ++n; print idx[$2] "," $2 "," $11 "," $7 }' \
    "$results/summary.csv" >"$tmp/final.csv"
  ndiv=$(awk -F, 'NR > 1 && $8 == "diverged"' "$results/summary.csv" | wc -l)
  tics=$(awk -F, '!($1 in t) { t[$1]; printf "%s\"%s\" %d", n++ ? ", " : "", $2, $1 }' "$tmp/final.csv")
  # the seeds told apart by colour and mark
  seed_colors=("#984ea3" "#ff7f00" "#4daf4a" "#377eb8" "#e41a1c" "#a65628") cmd="" k=0
  for seed in $(cut -d, -f4 "$tmp/final.csv" | sort -un); do
    cmd+="${cmd:+, }'$tmp/final.csv' using 1:(\$4 == $seed ? \$3 : 1/0) with points pt $((k % 4 * 2 + 5)) ps 1.5 lc rgb '${seed_colors[k % ${#seed_colors[@]}]}' title 'seed $seed'"
    k=$((k + 1))
  done
  [[ -s $tmp/final.csv ]] && draw final_val "set title '$(basename "$results"): final validation loss per run ($ndiv diverged runs not shown)$missing'
set xtics ($tics) rotate by -45; set xlabel 'recipe and overrides'; set ylabel 'final val loss'; set grid y; set key outside right top
set xrange [0.5:$(cut -d, -f1 "$tmp/final.csv" | sort -n | tail -1).5]; set offsets 0, 0, graph 0.05, graph 0.05
plot $cmd"
fi

if [[ " $plots " == *" speed "* ]]; then
  awk -F, 'NR > 1 && $13 != "" { s[$2] += $13; c[$2]++ } END { for (g in s) printf "%s,%g\n", g, s[g] / c[g] }' \
    "$results/summary.csv" | sort >"$tmp/speed.csv"
  draw tokens_per_s "set title '$(basename "$results"): throughput (CPU emulation: the cost of rounding, not FP8 hardware speed)'
set style data histograms; set style fill solid 0.6; set boxwidth 0.8; set xtics rotate by -45; set rmargin 14; set bmargin 14; set ylabel 'tokens/s'; set grid y
set yrange [0:*]; plot '$tmp/speed.csv' using 2:xtic(1) notitle"
fi

if [[ " $plots " == *" debug "* && -s $runs/stats.csv ]]; then
  points=$(cut -d, -f1 "$runs/stats.csv" | tail -n +2 | sort -u)
  np=$(echo "$points" | wc -l)
  sites=$(cut -d, -f3 "$runs/stats.csv" | tail -n +2 | sort -u)
  # one file per (point, use, site): step,amax,underflow,overflow,mse,cosine,scale,delayed_over_current
  awk -F, -v d="$tmp" 'NR > 1 { f = d "/st_" $1 "_" $4 "_" $3 ".csv"; print $2 "," $6 "," $7 "," $8 "," $9 "," $10 "," $11 "," $12 > f }' "$runs/stats.csv"
  color_of=() dash_of=() # the GEMMs take the palette from its start
  col=2
  for metric in amax underflow overflow mse cosine scale delayed_over_current; do
    [[ $metric == scale ]] && { col=$((col + 1)); continue; } # the scale itself: delayed_over_current compares it with the current one
    col=$((col + 1)) body="set multiplot layout $np,3 title 'per-operand $metric over steps'
set key outside right font ',7'; set grid; set xlabel 'step'"
    [[ $metric =~ ^(mse|amax|delayed_over_current|scale)$ ]] && body+="; set logscale y"
    for p in $points; do
      for use in fwd_x fwd_w dx_dy; do
        cmd=""
        for s in $sites; do
          f=$tmp/st_${p}_${use}_$s.csv
          # colour: the GEMM (q, k, ..., w3); dash: the layer (l0 solid, l1 dashed, ...)
          style "${s#*.}" "${s%%.*}"
          [[ -s $f ]] && cmd+="${cmd:+, }'$f' using 1:$((col - 1)) with lines $STYLE title '$s'"
        done
        [[ -n $cmd ]] && body+="
set title '$p: $use' font ',9'
plot $cmd"
      done
    done
    body+="
unset multiplot"
    if gnuplot 2>/dev/null <<EOF; then echo "stats_$metric"; else echo "sweep: no plot stats_$metric" >&2; rm -f "$results/stats_$metric".{png,svg}; fi
set datafile separator ","
set terminal pngcairo size 1800,$((500 * np)) noenhanced font ",9"
set output "$results/stats_$metric.png"
$body
set terminal svg size 1800,$((500 * np)) noenhanced font ",9"
set output "$results/stats_$metric.svg"
$body
EOF
  done
fi

if [[ " $plots " == *" sharpness "* && -s $results/sharpness.csv ]]; then
  # one column of panels per learning rate (and seed): sharpness above, loss increase below
  color_of=() dash_of=()
  cols=$(awk -F, 'NR > 1 { print $6 "," $7 }' "$results/summary.csv" | sort -u -t, -k1,1g -k2,2n)
  ncol=$(wc -l <<<"$cols")
  rho=$(awk -F, 'NR == 2 { print $3 }' "$results/sharpness.csv")
  body="set multiplot layout 2,$ncol title '$(basename "$results"): sharpness of the checkpoints (filter-normalised random directions, rho $rho)$missing'
set key top left font ',8'; set grid; set xlabel 'step'"
  for what in sharpness loss; do
    for lrseed in $cols; do
      cmd="" i=0
      while IFS=, read -r point group recipe variant overrides lr seed _; do
        [[ $lr,$seed == "$lrseed" ]] || continue
        f=$tmp/sh-$what-$lrseed-$i.dat i=$((i + 1))
        if [[ $what == sharpness ]]; then awk -F, -v p="$point" '$1 == p { print $2 "," $9 }' "$results/sharpness.csv" >"$f"
        else awk -F, -v p="$point" '$1 == p { print $2 "," $6 - $5 }' "$results/sharpness.csv" >"$f"; fi
        [[ -s $f ]] || continue
        style "$recipe $variant" "$overrides"
        cmd+="${cmd:+, }'$f' using 1:2 with linespoints $STYLE pt 7 ps 0.5 title '$group'"
      done < <(tail -n +2 "$results/summary.csv")
      [[ -n $cmd ]] || continue
      ylabel="logit sharpness 2 KL / rho^2"; [[ $what == loss ]] && ylabel="loss increase (nats)"
      body+="
set title 'lr ${lrseed%,*}, seed ${lrseed#*,}' font ',9'; set ylabel '$ylabel'
plot $cmd"
    done
  done
  WIDTH=$((550 * ncol + 200)) draw sharpness "$body
unset multiplot"
fi

if [[ " $plots " == *" shadow "* && -s $results/shadow.csv ]]; then
  color_of=() dash_of=()
  cmd="" i=0
  while IFS=, read -r point group recipe variant overrides lr seed status _ _ _ div _; do
    f=$tmp/shadow-$i.dat i=$((i + 1))
    awk -F, -v p="$point" '$1 == p && $6 != "" { print $2 "," $6 "," $8 }' "$results/shadow.csv" >"$f"
    [[ -s $f ]] || continue
    title=$point; [[ $status == diverged ]] && title+=" (diverged at $div)"
    style "$recipe $variant" "$overrides lr$lr s$seed" # the dash tells the learning rates apart
    cmd+="${cmd:+, }'$f' using 1:2 with linespoints $STYLE pt 7 ps 0.7 title '$title'"
    cmd+=", '$f' using 1:(\$3 > 0 ? \$2 : 1/0) with points pt 6 ps 2.2 lc rgb 'red' notitle"
  done < <(tail -n +2 "$results/summary.csv")
  read -r thr steps < <(awk -F, 'NR == 2 { print $7, $3 }' "$results/shadow.csv")
  [[ -n $cmd ]] && draw shadow_gap "set title '$(basename "$results"): shadow check: mean loss of the run - of its $steps-step bf16 continuation (circled: flagged)$missing'
set key outside right; set grid; set xlabel 'checkpoint step'; set ylabel 'loss gap (nats)'
plot $cmd, $thr with lines lc rgb 'red' dt 2 title 'threshold $thr', 0 with lines lc rgb 'black' lw 0.5 notitle"
fi
exit 0
