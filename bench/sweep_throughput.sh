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
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir
cat > "$OUT/spec.yaml" <<SPEC
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
declare -A ELAPSED  # jobs -> seconds of this round's sweep
sweep_side() {  # JOBS ROUND: one sweep of the spec with -j JOBS
  local start end
  start=$(date +%s.%N)
  "$BIN" sweep "$OUT/spec.yaml" -j "$1" --threads 1 --dir "$OUT/j$1-r$2" > "$OUT/j$1-r$2.log" 2>&1 ||
    echo "sweep_throughput.sh: the -j $1 sweep of round $2 failed ($OUT/j$1-r$2.log)" >&2
  end=$(date +%s.%N)
  ELAPSED[$1]=$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')
}
echo "sweep of $TRIALS trials ($STEPS steps each, 1 thread per trial); trials/hour"
ratios=()
one_round() {  # ROUND
  local ta tb ratio
  in_turn "$1" 1 2 -- sweep_side
  ta=$(awk -v t="$TRIALS" -v s="${ELAPSED[1]}" 'BEGIN {print 3600 * t / s}')
  tb=$(awk -v t="$TRIALS" -v s="${ELAPSED[2]}" 'BEGIN {print 3600 * t / s}')
  ratio=$(awk -v x="$tb" -v y="$ta" 'BEGIN {print x / y}')
  ratios+=("$ratio")
  printf 'round %d: -j 1 %.0f, -j 2 %.0f trials/hour: %.2fx\n' "$1" "$ta" "$tb" "$ratio"
}
rounds one_round
printf '%s\n' "${ratios[@]}" | sort -g | awk '{v[NR]=$1} END {printf "median -j 2 / -j 1: %.2fx (min %.2fx, max %.2fx, %d rounds)\n", v[int((NR+1)/2)], v[1], v[NR], NR}'
