#!/usr/bin/env bash
# PowerSGD's cost in training quality: the 20 M-parameter MLP (configs/mlp-bench.yaml,
# SGD with momentum, Fashion-MNIST) on 2 workers for STEPS steps with plain allreduce and
# with ddp.compression=powersgd (defaults: rank 4, from step 100), one after the other,
# for each seed in SEEDS; prints each run's training loss over the last 200 steps (the
# mean of the logged per-interval losses) and validation accuracy, the relative loss
# difference per seed, and their mean over the seeds. One seed's difference is mostly
# the trajectory's luck (plain runs of seeds 0 and 1 differ by 4 %): compare means.
#
#   bench/powersgd_quality.sh [STEPS]      (default 1000)
#
# Environment: SEEDS (default "0"; the documented figure uses "0 1 2 3 4"),
# LOCKSTEP_BUILD_DIR (default build), EXTRA (overrides for every run).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
STEPS="${1:-1000}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir

run() {  # name overrides...
  local name="$1" file="$OUT/${1/\//-}"
  shift
  # shellcheck disable=SC2086  # EXTRA is words
  if ! "$BIN" run -np 2 -- "$BIN" train configs/mlp-bench.yaml trainer.max_steps="$STEPS" trainer.log_every=50 \
    trainer.validate=true checkpoint.dir=off checkpoint.resume=none monitor.dir=off "$@" ${EXTRA:-} \
    > "$file.log" 2>&1; then
    echo "powersgd_quality.sh: the $name run failed:" >&2
    tail -5 "$file.log" >&2
    exit 1
  fi
  local loss acc rate
  loss=$(grep -o 'step [0-9]*/[0-9]* epoch [0-9]* loss [0-9.]*' "$file.log" |
         awk -v s="$STEPS" '{ split($2, a, "/"); if (a[1] > s - 200) { t += $6; n++ } } END { printf "%.4f", t / n }')
  acc=$({ grep -o 'validation accuracy [0-9.]*%' "$file.log" || true; } | tail -1 | awk '{print $3}')
  rate=$({ grep -o '[0-9]* samples/s (global' "$file.log" || true; } | tail -1 | awk '{print $1}')
  printf '%-10s loss (last 200 steps) %s  validation accuracy %s  %s samples/s\n' "$name" "$loss" "$acc" "$rate"
  echo "$loss" > "$file.loss"
}

for seed in ${SEEDS:-0}; do
  run "plain/$seed" trainer.seed="$seed"
  run "powersgd/$seed" trainer.seed="$seed" ddp.compression=powersgd
  awk -v a="$(cat "$OUT/plain-$seed.loss")" -v b="$(cat "$OUT/powersgd-$seed.loss")" -v s="$seed" \
    'BEGIN { printf "seed %s: powersgd / plain training loss %.3f (%+.1f%%)\n", s, b / a, 100 * (b / a - 1) }' |
    tee -a "$OUT/ratios"
done
awk '{ r = $8; t += r; n++; if (n == 1 || r < lo) lo = r; if (n == 1 || r > hi) hi = r }
     END { printf "powersgd / plain training loss over %d seed(s): mean %.3f (%+.1f%%), min %.3f, max %.3f\n",
                  n, t / n, 100 * (t / n - 1), lo, hi }' "$OUT/ratios"
