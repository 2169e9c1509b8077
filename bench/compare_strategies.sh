#!/usr/bin/env bash
# Training strategies (or any other setting) side by side on one config,
# interleaved (docs/memory.md).
#
#   bench/compare_strategies.sh CONFIG.yaml [STEPS] [key=value ...]
#   KEY=precision STRATEGIES="fp32 bf16" bench/compare_strategies.sh configs/mlp-bench.yaml 20
#
# For ROUNDS rounds (default 5) runs, for every value S in STRATEGIES
# (default "ddp zero1 zero2"; the order reversed every other round, so drifts of
# this shared machine hit every side alike) of the config key KEY (default
# strategy.type):
#   lockstep run -np NP --threads THREADS [--backend BACKEND] -- lockstep train CONFIG KEY=S
#       trainer.max_steps=STEPS (default 40) trainer.validate=false checkpoint.dir=off ...
# and reads rank 0's --result-json. Prints, per strategy, the mean over rounds
# of samples/s (global, first step excluded) and of the mean step time, rank
# 0's forward+backward peak of tensor bytes (docs/memory.md), and
# the per-round ratio of each strategy's step time to the first strategy's in
# the same round: min / median / max over the rounds.
#
# Environment: LOCKSTEP_BUILD_DIR (default build), ROUNDS, KEY, STRATEGIES, NP (default 2), BACKEND
# (gloo or mpi; default: lockstep run's own choice),
# THREADS (default 1), KEEP_LOGS=1 to keep the run logs. Nothing is built here.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/compare_strategies.sh CONFIG.yaml [STEPS] [key=value ...]" >&2; exit 2; }
CONFIG="$1"
shift
STEPS=40
if [ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; then STEPS="$1"; shift; fi
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
ROUNDS="${ROUNDS:-5}"
read -r -a STRATS <<<"${STRATEGIES:-ddp zero1 zero2}"
KEY="${KEY:-strategy.type}"
NP="${NP:-2}"
THREADS="${THREADS:-1}"
BACKEND_ARGS=()
if [ -n "${BACKEND:-}" ]; then BACKEND_ARGS=(--backend "$BACKEND"); fi
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
[ -f "$CONFIG" ] || { echo "compare_strategies.sh: config '$CONFIG' not found" >&2; exit 2; }
scratch_dir

strategy_side() {  # S ROUND [key=value ...]: one run, its result in $OUT/r<ROUND - 1>-S.json
  local s="$1" round=$(($2 - 1)) json
  shift 2
  json="$OUT/r$round-$s.json"
  if ! "$BIN" run -np "$NP" --threads "$THREADS" "${BACKEND_ARGS[@]}" -- "$BIN" train "$CONFIG" "$KEY=$s" \
    "trainer.max_steps=$STEPS" trainer.validate=false checkpoint.dir=off checkpoint.resume=none \
    generate.samples=0 monitor.dir=off "$@" --result-json "$json" >"$OUT/r$round-$s.log" 2>&1; then
    echo "compare_strategies.sh: the $s run of round $round failed; its last lines:" >&2
    tail -20 "$OUT/r$round-$s.log" >&2
    exit 1
  fi
  printf '  round %d %-6s %8.1f samples/s, step %.2f ms, forward+backward peak %.1f MB (rank 0)\n' "$round" "$s" \
    "$(json_number "$json" samples_per_second)" "$(awk -v s="$(json_number "$json" step_seconds)" 'BEGIN { print s * 1000 }')" \
    "$(awk -v b="$(json_number "$json" step_peak_bytes)" 'BEGIN { print b / 1e6 }')"
}

echo "$CONFIG, $NP workers x $THREADS thread(s)${BACKEND:+, backend $BACKEND}, $STEPS steps, $ROUNDS interleaved rounds: $KEY = ${STRATS[*]}"
interleave "${STRATS[@]}" -- strategy_side "$@"

echo "$KEY  samples/s (mean)  step ms (mean)  step time / ${STRATS[0]}'s, same round: min / median / max"
for s in "${STRATS[@]}"; do
  rates=""
  steps=""
  ratios=""
  for ((round = 0; round < ROUNDS; round++)); do
    rates+="$(json_number "$OUT/r$round-$s.json" samples_per_second) "
    steps+="$(json_number "$OUT/r$round-$s.json" step_seconds) "
    ratios+="$(awk -v a="$(json_number "$OUT/r$round-$s.json" step_seconds)" \
      -v b="$(json_number "$OUT/r$round-${STRATS[0]}.json" step_seconds)" 'BEGIN { printf "%.4f", a / b }') "
  done
  mean() { tr ' ' '\n' | awk 'NF { t += $1; n++ } END { printf "%.6f", t / n }'; }
  sorted="$(echo "$ratios" | tr ' ' '\n' | awk NF | sort -g | tr '\n' ' ')"
  read -r -a r <<<"$sorted"
  printf '%-8s  %16.1f  %14.2f  %s / %s / %s   peak %.1f MB\n' "$s" "$(echo "$rates" | mean)" \
    "$(echo "$steps" | mean | awk '{ print $1 * 1000 }')" "${r[0]}" "${r[$(((${#r[@]} - 1) / 2))]}" "${r[-1]}" \
    "$(awk -v b="$(json_number "$OUT/r0-$s.json" step_peak_bytes)" 'BEGIN { print b / 1e6 }')"
done
