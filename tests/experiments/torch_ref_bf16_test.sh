#!/usr/bin/env bash
# Runs torch_ref_bf16_test.py with Debian's python3 (python3-torch, python3-numpy).
set -euo pipefail
py=/usr/bin/python3
if [ ! -x "$py" ]; then
  if [ "${CI:-}" = "true" ]; then echo "torch_ref_bf16_test: FAIL: $py missing"; exit 1; fi
  echo "torch_ref_bf16_test: SKIPPED: $py missing"; exit 0
fi
exec "$py" tests/experiments/torch_ref_bf16_test.py experiments/trainer/export_ref experiments/reference \
  experiments/configs/bf16.cfg
