#!/usr/bin/env bash
# links_alone_test.sh LIBRARY.so HEADER...: every function HEADER declares
# (comments stripped, function names taken where a name meets its "(") is
# defined by LIBRARY.so, the library linked on its own (tests/link/BUILD).
set -euo pipefail
so=$1
shift
defined=$(nm -D --defined-only "$so" | awk '{print $NF}')
checked=0 missing=0
for header; do
  names=$(cpp -fpreprocessed -dD -P "$header" | grep -oE '\bexmy_[a-z0-9_]+[[:space:]]*\(' |
          grep -oE 'exmy_[a-z0-9_]+' | sort -u)
  [[ -n $names ]] || { echo "FAIL: no function declarations found in $header" >&2; exit 1; }
  for name in $names; do
    checked=$((checked + 1))
    if ! grep -qx "$name" <<<"$defined"; then
      echo "FAIL: $header declares $name, which ${so##*/} (linked alone) does not define" >&2
      missing=$((missing + 1))
    fi
  done
done
if ((missing)); then
  echo "$missing of $checked declared functions undefined" >&2
  exit 1
fi
echo "ok: ${so##*/} defines all $checked functions of $*"
