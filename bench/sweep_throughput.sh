#!/usr/bin/env bash
# Trials per hour of `lockstep sweep -j 2` against `-j 1` on 1-thread trials (every trial a
# 1-worker, 1-thread Fashion-MNIST MLP run), ROUNDS interleaved rounds in one command; prints each
# round's trials/hour per side and their ratio, then the median ratio and its spread.
#   bench/sweep_throughput.sh [ROUNDS=5] [TRIALS=8] [STEPS=1500]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-5}"
TRIALS="${2:-8}"
STEPS="${3:-1500}"
BIN="${LOCKSTEP_BIN:-build/lockstep}"
WORK="$(mktemp -d /tmp/sweep-throughput-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/spec.yaml" <<SPEC
base: $PWD/configs/mlp-bench.yaml
overrides: {trainer.max_steps: $STEPS, trainer.batch_size: 64, model.hidden_sizes: [256], trainer.validate: true,
            data.num_workers: 0, monitor.trace_steps: 0, monitor.system_interval: 0, checkpoint.every: 0}
space:
  optimizer.lr: {type: loguniform, low: 0.001, high: 0.3}
objective: {metric: validation_accuracy, mode: max}
budget: {trials: $TRIALS}
algorithm: random
seed: 1
SPEC
run() {  # jobs round -> seconds
  local start end
  start=$(date +%s.%N)
  "$BIN" sweep "$WORK/spec.yaml" -j "$1" --threads 1 --dir "$WORK/j$1-r$2" > "$WORK/j$1-r$2.log" 2>&1
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN {print b - a}'
}
echo "sweep of $TRIALS trials ($STEPS steps each, 1 thread per trial); trials/hour"
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then a=$(run 1 "$r"); b=$(run 2 "$r"); else b=$(run 2 "$r"); a=$(run 1 "$r"); fi
  ta=$(awk -v t="$TRIALS" -v s="$a" 'BEGIN {print 3600 * t / s}')
  tb=$(awk -v t="$TRIALS" -v s="$b" 'BEGIN {print 3600 * t / s}')
  ratio=$(awk -v x="$tb" -v y="$ta" 'BEGIN {print x / y}')
  ratios+=("$ratio")
  printf 'round %d: -j 1 %.0f, -j 2 %.0f trials/hour: %.2fx\n' "$r" "$ta" "$tb" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{v[NR]=$1} END {printf "median -j 2 / -j 1: %.2fx (min %.2fx, max %.2fx, %d rounds)\n", v[int((NR+1)/2)], v[1], v[NR], NR}'
