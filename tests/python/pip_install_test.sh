#!/usr/bin/env bash
# pip install of lib/python, offline, as the README shows it: a copy of the
# source tree (lib/python, experiments/configs, bazel-bin/libexmy.so) is
# installed with --no-build-isolation into a temporary --target; the package
# must then import from there alone (library and recipes bundled), from
# another directory and with no EXMY_* variable.  Skips without pip unless
# CI=true.
set -euo pipefail
py=/usr/bin/python3
if ! "$py" -m pip --version >/dev/null 2>&1 || ! "$py" -c "import setuptools, wheel, numpy" 2>/dev/null; then
  if [ "${CI:-}" = "true" ]; then echo "pip_install_test: FAIL: python3-pip/setuptools/wheel missing"; exit 1; fi
  echo "pip_install_test: SKIPPED: install python3-pip python3-setuptools python3-wheel"; exit 0
fi
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/pip_install_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo/lib/python/exmy" "$tmp/repo/experiments/configs" "$tmp/repo/bazel-bin"
cp -L lib/python/setup.py lib/python/pyproject.toml "$tmp/repo/lib/python/"
cp -L lib/python/exmy/*.py "$tmp/repo/lib/python/exmy/"
cp -L experiments/configs/*.cfg "$tmp/repo/experiments/configs/"
cp -L libexmy.so "$tmp/repo/bazel-bin/"
unset EXMY_LIBRARY EXMY_CUDA_LIBRARY EXMY_CONFIG_DIR PYTHONPATH
"$py" -m pip install --no-build-isolation --no-deps --no-index --disable-pip-version-check \
  -q --target "$tmp/site" "$tmp/repo/lib/python" > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
rm -rf "$tmp/repo"  # the installed package must not need the source tree
cd "$tmp"
PYTHONPATH="$tmp/site" "$py" - "$tmp/site" <<'PY'
import os, sys
import numpy as np
import exmy
site = sys.argv[1]
assert exmy.__file__.startswith(site), exmy.__file__
assert exmy.library_path == os.path.join(site, "exmy", "libexmy.so"), exmy.library_path
y = exmy.quantize(np.array([1.3, 500.0], np.float32), "e4m3", saturate=True)
assert y.tolist() == [1.25, 448.0], y
r = exmy.recipe.Recipe.load("e8m3")
assert r.source.startswith(site) and r.operands()["w"].format.name == "e8m3", r.source
print(f"pip_install_test: PASSED (installed in {site}, {len(exmy.recipe.available())} recipes)")
PY
