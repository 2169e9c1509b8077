#!/usr/bin/env bash
# Allreduce latency and bandwidth of the Gloo and MPI backends, 2 workers on
# this machine, in interleaved rounds (gloo mpi, mpi gloo, ...: bench/harness.sh)
# so machine noise hits both; prints the median per size and the ratio, then
# each side's median / min / max time per size.
#   bench/allreduce_backends.sh [ROUNDS] [SIZES]
# ROUNDS defaults to 5, SIZES to 4K,64K,1M,32M.
# With BASE_LIBS=FOLDER (a copy of an earlier build's liblockstep*.so) it
# compares Gloo on those libraries ("base") with Gloo on this build instead:
#   BASE_LIBS=/tmp/base bench/allreduce_backends.sh 5 1M,32M,80M
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
ROUNDS="${1:-5}"
SIZES="${2:-4K,64K,1M,32M}"
NP="${NP:-2}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir
A=gloo B=mpi
[ -n "${BASE_LIBS:-}" ] && A=base B=gloo
side() {  # side NAME ROUND: one run of the benchmark, its rows tagged NAME, appended to $OUT/all
  local backend="$1" path="${LD_LIBRARY_PATH:-}"
  # base: the earlier libraries first (no empty entry, which would mean the current directory)
  [ "$1" = base ] && backend=gloo path="$BASE_LIBS${path:+:$path}"
  LD_LIBRARY_PATH="$path" "$BIN" run -np "$NP" --threads 1 --backend "$backend" \
      --no-prefix -- "$BIN" bench allreduce --bytes "$SIZES" 2>&1 |
    awk -v b="$1" '$1 ~ /^[0-9]+$/ { print b, $1, $4, $6 }' >> "$OUT/all"
}
interleave "$A" "$B" -- side
echo "allreduce, $NP workers x 1 thread, float32 sum, $ROUNDS alternating rounds per side (median)"
printf '%12s %14s %14s %12s %12s %10s\n' "bytes" "$A us" "$B us" "$A busbw" "$B busbw" "$B/$A"
for size in $(awk '{ print $2 }' "$OUT/all" | sort -n | uniq); do
  median() { awk -v b="$1" -v s="$size" -v col="$2" '$1 == b && $2 == s { print $col }' "$OUT/all" | median_of; }
  gt=$(median "$A" 3); mt=$(median "$B" 3); gb=$(median "$A" 4); mb=$(median "$B" 4)
  awk -v s="$size" -v gt="$gt" -v mt="$mt" -v gb="$gb" -v mb="$mb" \
      'BEGIN { printf "%12d %14.1f %14.1f %9.3f GB/s %7.3f GB/s %9.2fx\n", s, gt, mt, gb, mb, gt / mt }'
done
echo "time per allreduce, us: median / min / max over the rounds"
for size in $(awk '{ print $2 }' "$OUT/all" | sort -n | uniq); do
  for side in "$A" "$B"; do
    printf '%12d %6s  %s\n' "$size" "$side" \
      "$(awk -v b="$side" -v s="$size" '$1 == b && $2 == s { print $3 }' "$OUT/all" | spread_of)"
  done
done
