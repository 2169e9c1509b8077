#!/usr/bin/env bash
# Allreduce latency of lockstep's Gloo communicator against c10d's
# ProcessGroupGloo called directly (bench/raw_gloo_allreduce.cpp), 2 workers
# x 1 thread on this machine, in interleaved rounds (raw lockstep, lockstep
# raw, ...: bench/harness.sh) so machine noise hits both; prints every round
# and the median per size.
#   bench/raw_gloo_vs_lockstep.sh [ROUNDS] [SIZES]
# ROUNDS defaults to 5, SIZES to 4K,1M. Needs a build with
# -DLOCKSTEP_BUILD_BENCHMARKS=ON (LOCKSTEP_BUILD_DIR, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
BIN="$BUILD/lockstep"
RAW="$BUILD/bench/raw_gloo_allreduce"
ROUNDS="${1:-5}"
SIZES="${2:-4K,1M}"
[ -x "$RAW" ] || { echo "raw_gloo_vs_lockstep: $RAW not built (configure with -DLOCKSTEP_BUILD_BENCHMARKS=ON)" >&2; exit 2; }
# shellcheck source=bench/harness.sh
. bench/harness.sh
scratch_dir
side() {  # raw|lockstep ROUND: one run, its rows "SIDE ROUND BYTES US" appended to $OUT/all
  if [ "$1" = raw ]; then
    "$BIN" run -np 2 --threads 1 --no-prefix -- "$RAW" "$SIZES" 200 2>&1 |
        awk -v r="$2" '$1 ~ /^[0-9]+$/ { print "raw", r, $1, $4 }' >> "$OUT/all"
  else
    "$BIN" run -np 2 --threads 1 --backend gloo --no-prefix -- "$BIN" bench allreduce --bytes "$SIZES" --iters 200 2>&1 |
        awk -v r="$2" '$1 ~ /^[0-9]+$/ { print "lockstep", r, $1, $4 }' >> "$OUT/all"
  fi
}
interleave raw lockstep -- side
echo "allreduce, 2 workers x 1 thread, Gloo, float32 sum, 200 iterations, $ROUNDS alternating rounds (µs per allreduce)"
for size in $(awk '{ print $3 }' "$OUT/all" | sort -n | uniq); do
  printf '%10s bytes  raw:' "$size"
  awk -v s="$size" '$1 == "raw" && $3 == s { printf " %.0f", $4 }' "$OUT/all"
  printf '   lockstep:'
  awk -v s="$size" '$1 == "lockstep" && $3 == s { printf " %.0f", $4 }' "$OUT/all"
  median() { awk -v w="$1" -v s="$size" '$1 == w && $3 == s { print $4 }' "$OUT/all" | median_of; }
  awk -v r="$(median raw)" -v l="$(median lockstep)" 'BEGIN { printf "   median %.0f vs %.0f (lockstep/raw %.2fx)\n", r, l, l / r }'
done
