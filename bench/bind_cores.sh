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
# shellcheck source=bench/workloads.sh
. bench/workloads.sh  # config_of, timed_run, bench_start
bench_start

for ((r = 1; r <= ROUNDS; r++)); do
  for workload in $WORKLOADS; do
    timed_run "$workload" single "$r" 1
    for backend in $BACKENDS; do
      # The order of the sides alternates from round to round.
      if ((r % 2)); then
        timed_run "$workload" "$backend" "$r" 2 --backend "$backend"
        timed_run "$workload" "$backend-bind" "$r" 2 --backend "$backend" --bind core
      else
        timed_run "$workload" "$backend-bind" "$r" 2 --backend "$backend" --bind core
        timed_run "$workload" "$backend" "$r" 2 --backend "$backend"
      fi
    done
  done
done
python3 bench/summarize_rounds.py "$OUT/results.txt" single
