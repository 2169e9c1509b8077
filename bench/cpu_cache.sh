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
[ -x "$BIN" ] || { echo "cpu_cache.sh: $BIN not found; build lockstep first (scripts/build.sh)" >&2; exit 1; }
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# shellcheck source=bench/workloads.sh
. bench/workloads.sh  # config_of
for workload in $WORKLOADS; do config_of "$workload" > /dev/null; done  # an unknown name stops here

# run WORKLOAD SIDE ROUND CACHE_MB: one run, its samples/s appended to the results file.
run() {
  local workload="$1" side="$2" round="$3" cache="$4"
  local rate=fail
  if LOCKSTEP_CPU_CACHE_MB="$cache" "$BIN" run -np 2 --threads 1 -- "$BIN" train "$(config_of "$workload")" \
      trainer.max_steps="$STEPS" trainer.validate=false checkpoint.dir=off checkpoint.resume=none monitor.dir=off \
      generate.samples=0 "${EXTRA_KEYS[@]}" --result-json "$OUT/run.json" > "$OUT/run.log" 2>&1; then
    rate="$(python3 -c "import json; print(json.load(open('$OUT/run.json'))['samples_per_second'])")"
  else
    tail -3 "$OUT/run.log" | sed "s/^/    $workload $side: /" >&2
  fi
  echo "$workload $side $round $rate" | tee -a "$OUT/results.txt" >&2
}

for ((r = 1; r <= ROUNDS; r++)); do
  for workload in $WORKLOADS; do
    # The order of the sides alternates from round to round.
    if ((r % 2)); then
      run "$workload" no-cache "$r" 0
      run "$workload" cache "$r" 1024
    else
      run "$workload" cache "$r" 1024
      run "$workload" no-cache "$r" 0
    fi
  done
done
python3 bench/summarize_rounds.py "$OUT/results.txt" no-cache
