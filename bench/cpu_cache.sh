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
# shellcheck source=bench/harness.sh
. bench/harness.sh
bench_start

cache_side() {  # SIDE ROUND WORKLOAD
  local mb=1024
  [ "$1" = no-cache ] && mb=0
  LOCKSTEP_CPU_CACHE_MB="$mb" timed_run "$3" "$1" "$2" 2 -- "${EXTRA_KEYS[@]}"
}
one_round() {  # ROUND
  local workload
  for workload in $WORKLOADS; do in_turn "$1" no-cache cache -- cache_side "$workload"; done
}
rounds one_round
summarize no-cache
