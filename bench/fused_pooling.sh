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
# shellcheck source=bench/harness.sh
. bench/harness.sh
bench_start

# pooling_side SIDE ROUND NP: one run, its result line labelled convnet-npNP.
pooling_side() {
  local plain=0
  [ "$1" = libtorch ] && plain=1
  LOCKSTEP_PLAIN_POOLING="$plain" timed_run convnet "$1" "$2" "$3" -- "${EXTRA_KEYS[@]}"
  sed -i "\$ s/^convnet /convnet-np$3 /" "$OUT/results.txt"
}
one_round() {  # ROUND
  local np
  for np in $NPS; do in_turn "$1" libtorch fused -- pooling_side "$np"; done
}
rounds one_round
summarize libtorch
