#!/usr/bin/env bash
# Does the CPU allocator's block cache pay (common/tensor_memory.h,
# LOCKSTEP_CPU_CACHE_MB)? Interleaved rounds of 2 workers x 1 thread with the
# default backend, the cache on (the default) and off (LOCKSTEP_CPU_CACHE_MB=0);
# samples/s over the same timed steps, the medians and the ratio to the run
# without the cache with a bootstrap interval (bench/summarize_rounds.py).
#
#   bench/cpu_cache.sh [STEPS]     (default 30 optimizer steps per run)
#
# Environment: ROUNDS (default 5), WORKLOADS (default "charlstm convnet mlp"),
# EXTRA (more key=value overrides for every run, e.g. optimizer.type=adam),
# LOCKSTEP_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
BIN="$BUILD/lockstep"
STEPS="${1:-30}"
ROUNDS="${ROUNDS:-5}"
WORKLOADS="${WORKLOADS:-charlstm convnet mlp}"
read -r -a EXTRA_KEYS <<< "${EXTRA:-}"
# shellcheck source=bench/workloads.sh
. bench/workloads.sh  # config_of, timed_run, bench_start
bench_start

for ((r = 1; r <= ROUNDS; r++)); do
  for workload in $WORKLOADS; do
    # The order of the sides alternates from round to round.
    if ((r % 2)); then
      LOCKSTEP_CPU_CACHE_MB=0 timed_run "$workload" no-cache "$r" 2 -- "${EXTRA_KEYS[@]}"
      LOCKSTEP_CPU_CACHE_MB=1024 timed_run "$workload" cache "$r" 2 -- "${EXTRA_KEYS[@]}"
    else
      LOCKSTEP_CPU_CACHE_MB=1024 timed_run "$workload" cache "$r" 2 -- "${EXTRA_KEYS[@]}"
      LOCKSTEP_CPU_CACHE_MB=0 timed_run "$workload" no-cache "$r" 2 -- "${EXTRA_KEYS[@]}"
    fi
  done
done
python3 bench/summarize_rounds.py "$OUT/results.txt" no-cache
