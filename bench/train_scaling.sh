#!/usr/bin/env bash
# Training throughput of a config with 1 and 2 workers, measured back to back
# in one run so the ratio is meaningful on a shared machine.
#   bench/train_scaling.sh [CONFIG] [STEPS]
# CONFIG defaults to configs/charlstm-bench.yaml (the charlstm benchmark shapes);
# configs/fashion_convnet.yaml gives the convnet workload. STEPS defaults to 30.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
CONFIG="${1:-configs/charlstm-bench.yaml}"
STEPS="${2:-30}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir
run() {  # name, lockstep run flags...
  local name="$1"; shift
  "$BIN" run "$@" -- "$BIN" train "$CONFIG" trainer.max_steps="$STEPS" trainer.validate=false \
      checkpoint.dir="$OUT/$name" checkpoint.resume=none > "$OUT/$name.log" 2>&1
  grep -o 'done: .*' "$OUT/$name.log" | sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p'
}
one=$(run np1 -np 1 --threads 1)
two=$(run np2 -np 2 --threads 1)
onefull=$(run np1-2threads -np 1 --threads 2)
echo "$CONFIG, $STEPS steps each (samples/s, global, first step excluded)"
printf '  1 worker  x 1 thread : %6s\n' "$one"
awk -v a="$one" -v b="$two" 'BEGIN { printf "  2 workers x 1 thread : %6s   speed-up %.2fx over 1 worker, scaling efficiency %.0f%%\n", b, b / a, 100 * b / (2 * a) }'
printf '  1 worker  x 2 threads: %6s   (one process using both cores)\n' "$onefull"
awk -v a="$onefull" -v b="$two" 'BEGIN { printf "  2 workers / 1 worker x 2 threads: %.2fx\n", b / a }'
