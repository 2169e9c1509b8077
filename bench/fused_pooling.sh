#!/usr/bin/env bash
# Does the convnet's one-pass ReLU + 2x2 max pooling pay (nn/pooling.h)?
# Interleaved rounds of the Fashion-MNIST convnet with lockstep's kernel (the
# default) and with LibTorch's relu + max_pool2d (LOCKSTEP_PLAIN_POOLING=1),
# for each worker count in NPS, 1 thread per worker, the default backend;
# samples/s over the same timed steps, the medians and the ratio to LibTorch's
# ops with a bootstrap interval (bench/summarize_rounds.py).
#
#   bench/fused_pooling.sh [STEPS]     (default 40 optimizer steps per run)
#
# Environment: ROUNDS (default 5), NPS (default "1 2"), EXTRA (more key=value
# overrides for every run, e.g. precision=bf16), LOCKSTEP_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
BIN="$BUILD/lockstep"
STEPS="${1:-40}"
ROUNDS="${ROUNDS:-5}"
NPS="${NPS:-1 2}"
WORKLOADS=convnet
read -r -a EXTRA_KEYS <<< "${EXTRA:-}"
# shellcheck source=bench/workloads.sh
. bench/workloads.sh  # config_of, timed_run, bench_start
bench_start

# run SIDE PLAIN ROUND NP: one run, its result line labelled convnet-npNP.
run() {
  LOCKSTEP_PLAIN_POOLING="$2" timed_run convnet "$1" "$3" "$4" -- "${EXTRA_KEYS[@]}"
  sed -i "\$ s/^convnet /convnet-np$4 /" "$OUT/results.txt"
}
for ((r = 1; r <= ROUNDS; r++)); do
  for np in $NPS; do
    if ((r % 2)); then  # the order of the sides alternates from round to round
      run libtorch 1 "$r" "$np"
      run fused 0 "$r" "$np"
    else
      run fused 0 "$r" "$np"
      run libtorch 1 "$r" "$np"
    fi
  done
done
python3 bench/summarize_rounds.py "$OUT/results.txt" libtorch
