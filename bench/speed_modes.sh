#!/usr/bin/env bash
# Is a slow single-worker run lockstep's doing or the machine's? Each round runs
#   1. a probe that has nothing to do with lockstep: one core copying and adding
#      32 MiB arrays (bench/memory_bandwidth.cpp, best GB/s of 20 passes), and
#      the microseconds the kernel takes to hand out a fresh zeroed page, and
#   2. `lockstep run -np 1 --threads 1 -- lockstep train configs/fashion_convnet.yaml`
#      (STEPS steps, validation and augmentation off), once as is and once with
#      the allocator's block cache off (LOCKSTEP_CPU_CACHE_MB=0: every large
#      tensor in fresh pages, as PyTorch's allocator does), the order alternating,
# and prints them next to the CPU time stolen by the hypervisor (/proc/stat) and
# the cores' clock (/proc/cpuinfo) during the runs. If the training's speed moves
# with the probe's, the machine changed speed; if the probe holds still while
# training slows, the cause is in the training process; if only the run without
# the cache slows, along with the fresh-page price, page faults are the cause.
#
#   bench/speed_modes.sh [ROUNDS] [STEPS]     (default 12 rounds of 40 steps, 2 runs each)
#
# Environment: LOCKSTEP_BUILD_DIR (default build), PIN ("taskset -c 0" to pin
# the probe and the runs to one vCPU).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
BIN="$BUILD/lockstep"
ROUNDS="${1:-12}"
STEPS="${2:-40}"
PIN="${PIN:-}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir
g++ -O2 -o "$OUT/probe" bench/memory_bandwidth.cpp

# steal and total jiffies of all cores, from /proc/stat's first line
jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t }' /proc/stat; }
mhz() { awk -F: '/cpu MHz/ { s += $2; n++ } END { if (n) printf "%.0f", s / n; else print "?" }' /proc/cpuinfo; }

# train cache|nocache ROUND: one single-worker run with the block cache (1024 MB) or without it,
# its result in $OUT/cache.json or $OUT/nocache.json
train() {
  local mb=1024
  [ "$1" = nocache ] && mb=0
  # shellcheck disable=SC2086  # PIN is words
  LOCKSTEP_CPU_CACHE_MB="$mb" $PIN "$BIN" run -np 1 --threads 1 -- "$BIN" train configs/fashion_convnet.yaml \
    trainer.max_steps="$STEPS" trainer.validate=false data.random_flip=false data.crop_padding=0 checkpoint.dir=off \
    checkpoint.resume=none monitor.dir=off --result-json "$OUT/$1.json" > "$OUT/run.log" 2>&1 ||
    { echo "round $2 failed:"; tail -5 "$OUT/run.log"; exit 1; }
}

printf '%5s %6s %6s %7s | %10s %7s %7s %8s | %10s %7s %7s | %6s %6s\n' round copy add fresh samples/s "fwd ms" \
  "bwd ms" "optim ms" "no cache" "fwd ms" "bwd ms" steal% MHz
printf '%5s %6s %6s %7s | %10s %7s %7s %8s | %10s %7s %7s | %6s %6s\n' "" GB/s GB/s us/page "" "" "" "" \
  samples/s "" "" "" ""
one_round() {  # ROUND: the probe, then both runs, then the round's line
  local r="$1" copy add fresh steal0 total0 steal1 total1
  # shellcheck disable=SC2086  # PIN is words
  read -r copy add fresh < <($PIN "$OUT/probe" |
    sed -n 's/.*copy \([0-9.]*\) GB\/s, add \([0-9.]*\) GB\/s, fresh page \([0-9.]*\) us.*/\1 \2 \3/p')
  read -r steal0 total0 < <(jiffies)
  in_turn "$r" cache nocache -- train
  read -r steal1 total1 < <(jiffies)
  python3 - "$OUT/cache.json" "$OUT/nocache.json" "$r" "$copy" "$add" "$fresh" "$((steal1 - steal0))" \
    "$((total1 - total0))" "$(mhz)" <<'EOF'
import json, sys
cache, nocache = (json.load(open(f)) for f in sys.argv[1:3])
r, copy, add, fresh, steal, total, mhz = sys.argv[3:]
p, q = cache["phases_seconds"], nocache["phases_seconds"]
print(f"{r:>5} {float(copy):>6.1f} {float(add):>6.1f} {float(fresh):>7.2f} | {cache['samples_per_second']:>10.0f} "
      f"{1e3 * p['forward']:>7.1f} {1e3 * p['backward']:>7.1f} {1e3 * p['optimizer']:>8.2f} | "
      f"{nocache['samples_per_second']:>10.0f} {1e3 * q['forward']:>7.1f} {1e3 * q['backward']:>7.1f} | "
      f"{100 * int(steal) / max(1, int(total)):>6.1f} {mhz:>6}")
EOF
}
rounds one_round
