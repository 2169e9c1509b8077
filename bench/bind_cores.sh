#!/usr/bin/env bash
# Does pinning each worker to its own core (`lockstep run --bind core`) pay?
# Interleaved rounds of 2 workers x 1 thread, with and without --bind core, for
# each backend and workload; samples/s over the same timed steps, the medians
# and the ratio to the unbound run with a bootstrap interval
# (bench/summarize_rounds.py). Also one unbound single worker per round, so
# the scaling efficiency of each side can be read off.
#
#   bench/bind_cores.sh [STEPS]     (default 40 optimizer steps per run)
#
# Environment: ROUNDS (default 5), WORKLOADS (default "convnet charlstm"),
# BACKENDS (default "gloo mpi"), LOCKSTEP_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
BIN="$BUILD/lockstep"
STEPS="${1:-40}"
ROUNDS="${ROUNDS:-5}"
WORKLOADS="${WORKLOADS:-convnet charlstm}"
BACKENDS="${BACKENDS:-gloo mpi}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
bench_start

bind_side() {  # SIDE ROUND WORKLOAD; SIDE is BACKEND or BACKEND-bind
  case "$1" in
    *-bind) timed_run "$3" "$1" "$2" 2 --backend "${1%-bind}" --bind core ;;
    *) timed_run "$3" "$1" "$2" 2 --backend "$1" ;;
  esac
}
one_round() {  # ROUND
  local workload backend
  for workload in $WORKLOADS; do
    timed_run "$workload" single "$1" 1
    for backend in $BACKENDS; do in_turn "$1" "$backend" "$backend-bind" -- bind_side "$workload"; done
  done
}
rounds one_round
summarize single
