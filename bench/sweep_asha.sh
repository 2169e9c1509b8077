#!/usr/bin/env bash
# ASHA against random search on a real objective: for seeds 1..S, the same N random
# configurations of a Fashion-MNIST MLP (learning rate, batch size, width) trained
#   random: every trial MAX steps;
#   asha:   early_stop {resource: steps, min_resource: MAX/9, max_resource: MAX, reduction_factor: 3}
# Prints per seed the best validation accuracy and the optimizer steps spent, then the median best of
# random search and how much of random's step budget ASHA needed to reach it.
#   bench/sweep_asha.sh [SEEDS=5] [TRIALS=27] [MAX=1800] [JOBS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS="${1:-5}"
TRIALS="${2:-27}"
MAX="${3:-1800}"
JOBS="${4:-2}"
BIN="${LOCKSTEP_BIN:-build/lockstep}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir
spec() {  # seed asha(0|1)
  cat <<SPEC
base: $PWD/configs/mlp-bench.yaml
overrides: {trainer.max_steps: $MAX, trainer.validate: true, data.num_workers: 0, monitor.trace_steps: 0,
            monitor.system_interval: 0, checkpoint.every: 0, checkpoint.keep_last: 1}
space:
  optimizer.lr: {type: loguniform, low: 0.0003, high: 0.5}
  trainer.batch_size: [16, 32, 64, 128, 256]
  model.hidden_sizes: [[32], [128], [512], [256, 128]]
objective: {metric: validation_accuracy, mode: max}
budget: {trials: $TRIALS}
algorithm: random
seed: $1
SPEC
  if [ "$2" = 1 ]; then
    echo "early_stop: {type: asha, resource: steps, min_resource: $((MAX / 9)), max_resource: $MAX, reduction_factor: 3}"
  fi
}
summary() {  # trials.jsonl -> "best steps"
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
best, steps = 0.0, 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t["objective"] is not None and (not t["rungs"] or len(t["rungs"]) == max(len(x["rungs"]) for x in map(json.loads, open(sys.argv[1])))):
        best = max(best, t["objective"])
    steps += t["steps"]
print(best, steps)
PY
}
echo "| seed | random: best accuracy | random: steps | ASHA: best accuracy | ASHA: steps | ASHA steps / random steps |"
echo "|---|---|---|---|---|---|"
randomBest=()
for s in $(seq 1 "$SEEDS"); do
  for a in 0 1; do
    spec "$s" "$a" > "$OUT/s$s-a$a.yaml"
    "$BIN" sweep "$OUT/s$s-a$a.yaml" -j "$JOBS" --dir "$OUT/s$s-a$a" > "$OUT/s$s-a$a.log" 2>&1
  done
  read -r rb rs < <(summary "$OUT/s$s-a0/trials.jsonl")
  read -r ab as < <(summary "$OUT/s$s-a1/trials.jsonl")
  randomBest+=("$rb")
  echo "$s $rb $rs $ab $as" >> "$OUT/rows"
  awk -v s="$s" -v rb="$rb" -v rs="$rs" -v ab="$ab" -v as="$as" \
    'BEGIN {printf "| %d | %.4f | %d | %.4f | %d | %.2f |\n", s, rb, rs, ab, as, as / rs}'
done
median=$(printf '%s\n' "${randomBest[@]}" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
ashaMedian=$(awk '{print $4}' "$OUT/rows" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
awk -v m="$median" -v am="$ashaMedian" '{ if ($4 >= $2) same++; share += $5 / $3 } END {
  printf "median best: random search %.4f, ASHA %.4f; ASHA matched random search'"'"'s best in %d of %d seeds, spending %.2f of its steps on average\n", m, am, same, NR, share / NR }' "$OUT/rows"
