#!/usr/bin/env bash
# sweep_collect GRID RUNS RESULTS [OUTCOMES]: the per-run JSON of a sweep into CSVs.
#
# OUTCOMES (from sweep.sh): one "point|status" line per point, the status the
# sweep gave it (completed, diverged, interrupted, stopped, failed, not-run);
# without it the status is the run's summary.json's. Only finished points
# (completed, diverged) give rows to curves.csv, stats.csv and the evaluations'
# CSVs; summary.csv has a row for every point, without numbers for a failed one.
#
#   RESULTS/summary.csv  one row per grid point (the grid's order)
#   RESULTS/curves.csv   point,step,train_loss,val_loss (val_loss only on validation steps)
#   RUNS/stats.csv       the quantization statistics lines (large: stays with the runs)
#   RESULTS/sharpness.csv  point,step,rho,directions,loss,loss_perturbed,kl_mean,kl_max,sharpness
#                          (when the runs have a sharpness.jsonl: `sharpness =` in the study)
#   RESULTS/shadow.csv     point,step,steps,run_loss,shadow_loss,gap,threshold,flagged
#                          (when the runs have a shadow.csv: `shadow =` in the study)
#
# awk, not jq: the trainer's JSON is flat and one object per line, and awk is
# on every machine the sweep must run on.
set -eu
grid=$1 runs=$2 results=$3 outcomes=${4:-}

# the sweep's status of a point, else its summary.json's ("" when it has none)
status_of() {
  if [[ -n $outcomes ]]; then awk -F'|' -v p="$1" '$1 == p { print $2; exit }' "$outcomes"
  else sed -n 's/.*"status":"\([a-z]*\)".*/\1/p' "$runs/$1/summary.json" 2>/dev/null || true; fi
}
finished() { [[ $(status_of "$1") =~ ^(completed|diverged)$ ]]; }

num() { # num KEY FILE: a number field of a one-line JSON object ("" when absent or null)
  sed -n "s/.*\"$1\":\([-+0-9.eE]*\).*/\1/p" "$2" 2>/dev/null | head -1
}

{
  echo "point,group,recipe,variant,overrides,lr,seed,status,steps,final_train_loss,final_val_loss,diverged_step,tokens_per_s"
  while IFS='|' read -r name recipe variant lr seed axes args; do
    s=$runs/$name/summary.json
    group=$recipe; [[ $variant != - ]] && group+=_$variant; [[ -n $axes ]] && group+=_${axes//;/_}
    status=$(status_of "$name")
    [[ $status =~ ^(completed|diverged|interrupted|stopped)$ ]] || s=/dev/null # a failed run's numbers are not results
    val=$(num val_loss "$s"); [[ $status == diverged ]] && val=""
    echo "$name,$group,$recipe,${variant/-/},${axes//;/ },$lr,$seed,${status:-missing},$(num steps "$s"),$(num last_loss "$s"),$val,$(num diverged_at "$s"),$(num tokens_per_s "$s")"
  done <"$grid"
} >"$results/summary.csv"

# Curves: the last line for a step wins (a resumed run repeats the steps after its checkpoint).
echo "point,step,train_loss,val_loss" >"$results/curves.csv"
echo "point,step,site,use,format,amax,underflow,overflow,mse,cosine,scale,delayed_over_current" >"$runs/stats.csv"
cut -d'|' -f1 "$grid" | while read -r name; do
  log=$runs/$name/log.jsonl
  [[ -f $log ]] && finished "$name" || continue
  awk -v p="$name" -v stats="$runs/stats.csv" '
    function field(s, k,   m) {  # the value of "k": in s, "" when null/absent
      if (match(s, "\"" k "\":[^,}]*")) { m = substr(s, RSTART + length(k) + 3, RLENGTH - length(k) - 3); gsub(/"/, "", m); return m == "null" ? "" : m }
      return ""
    }
    /"stats":\[/ {
      st = field($0, "step"); n = split($0, objs, /\},\{/)
      for (i = 1; i <= n; i++) {
        o = objs[i]
        printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", p, st, field(o, "site"), field(o, "use"), field(o, "format"),
          field(o, "amax"), field(o, "underflow"), field(o, "overflow"), field(o, "mse"), field(o, "cosine"),
          field(o, "scale"), field(o, "delayed_over_current") >> stats
      }
      next
    }
    /"val_loss"/ { s = field($0, "step") + 0; val[s] = field($0, "val_loss"); next }
    /"loss"/ && !/"event"/ { s = field($0, "step") + 0; tr[s] = field($0, "loss"); if (s > maxs) maxs = s }
    END { for (s = 1; s <= maxs; s++) if (s in tr) printf "%s,%d,%s,%s\n", p, s, tr[s], (s in val) ? val[s] : "" }
  ' "$log" >>"$results/curves.csv"
done

# Evaluations of kept checkpoints, one row per (point, checkpoint step).
rm -f "$results/sharpness.csv" "$results/shadow.csv"
cut -d'|' -f1 "$grid" | while read -r name; do
  f=$runs/$name/sharpness.jsonl
  [[ -f $f ]] && finished "$name" || continue
  [[ -f $results/sharpness.csv ]] || echo "point,step,rho,directions,loss,loss_perturbed,kl_mean,kl_max,sharpness" >"$results/sharpness.csv"
  awk -v p="$name" '
    function field(s, k,   m) { if (match(s, "\"" k "\":[^,}]*")) { m = substr(s, RSTART + length(k) + 3, RLENGTH - length(k) - 3); gsub(/"/, "", m); return m } return "" }
    { print field($0, "step") "," p "," field($0, "rho") "," field($0, "directions") "," field($0, "loss") "," field($0, "loss_perturbed") "," field($0, "kl_mean") "," field($0, "kl_max") "," field($0, "sharpness") }
  ' "$f" | sort -t, -k1,1n | awk -F, -v OFS=, '{ s = $1; $1 = $2; $2 = s; print }' >>"$results/sharpness.csv"
done
cut -d'|' -f1 "$grid" | while read -r name; do
  f=$runs/$name/shadow.csv
  [[ -f $f ]] && finished "$name" || continue
  [[ -f $results/shadow.csv ]] || echo "point,$(head -1 "$f")" >"$results/shadow.csv"
  tail -n +2 "$f" | sed "s|^|$name,|" >>"$results/shadow.csv"
done
exit 0
