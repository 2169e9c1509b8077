#!/usr/bin/env bash
# What an elastic run costs while nothing fails (docs/elastic.md): the same `lockstep train`
# over gloo, fixed (-np NP) and elastic (-np NP --min-np 1), in interleaved rounds
# (bench/harness.sh); samples/s (global, first step excluded) of each run from rank 0's
# --result-json, then per side the median, min and max and the elastic/fixed ratio.
#
#   bench/elastic_overhead.sh [WORKLOAD] [STEPS]
#
# WORKLOAD: charlstm (default), convnet, mlp or alexnet; STEPS defaults to 30.
# Environment: ROUNDS (default 5), NP (default 2), LOCKSTEP_BUILD_DIR, KEEP_LOGS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
ROUNDS="${ROUNDS:-5}"
WORKLOADS="${1:-charlstm}"
STEPS="${2:-30}"
NP="${NP:-2}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
bench_start
side() {  # side NAME ROUND
  local extra=()
  [ "$1" = elastic ] && extra=(--min-np 1)
  timed_run "$WORKLOADS" "$1" "$2" "$NP" --backend gloo "${extra[@]}"
}
interleave fixed elastic -- side
echo "$WORKLOADS, $NP workers x 1 thread over gloo, $STEPS steps, $ROUNDS interleaved rounds: samples/s"
summarize fixed
