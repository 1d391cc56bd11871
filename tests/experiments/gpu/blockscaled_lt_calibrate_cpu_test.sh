#!/usr/bin/env bash
# The calibration program's CPU side where no GPU is: the data, the group
# quantizer and the promotion hypotheses, whose per-slice partials must
# reassemble into the model's own result (else its hints mean nothing).
set -euo pipefail
"$1" --cpu-only --quick --sample 256
