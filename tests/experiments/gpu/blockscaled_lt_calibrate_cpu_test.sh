#!/usr/bin/env bash
# The calibration program's CPU side where no GPU is: the data, the group
# quantizer and the promotion hypotheses, whose per-slice partials must
# reassemble into the model's own result (else its hints mean nothing),
# in both pairings (--quick runs vec-vec's 128^3 alone; one shape more with
# five slices along K), and --pairing's bad usage.
set -euo pipefail
out=$("$1" --cpu-only --quick --sample 256)
echo "$out"
grep -q "^== vec-blk " <<< "$out"
grep -q "^== vec-vec " <<< "$out"
"$1" --cpu-only --pairing vec-vec --shape 256x384x640 --sample 256
rc=0
"$1" --pairing vec-gec 2> /dev/null || rc=$?
[ "$rc" -eq 2 ] || { echo "--pairing vec-gec: exit $rc, not 2"; exit 1; }
