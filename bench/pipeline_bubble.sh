#!/usr/bin/env bash
# Pipeline schedules side by side (docs/model-parallel.md): the measured bubble
# against (P-1)/(M+P-1) and the activations each schedule stores, interleaved.
#
#   bench/pipeline_bubble.sh CONFIG.yaml [STEPS] [key=value ...]
#   bench/pipeline_bubble.sh configs/mlp-bench.yaml 30 'model.hidden_sizes=[784,784,784,784]' trainer.batch_size=1024
#
# For ROUNDS rounds (default 5), for each schedule of SCHEDULES (default "gpipe 1f1b",
# the order reversed every other round) runs
#   lockstep run -np P -- lockstep train CONFIG parallel.pipeline=P parallel.microbatches=M
#       parallel.schedule=S trainer.max_steps=STEPS (default 30) ...
# and reads rank 0's --result-json: samples/s, pipeline_bubble (the busiest stage's idle
# share of its pipeline time, over the timed steps) and rank 0's activation_peak_bytes (the
# most bytes forward left allocated for backward). Prints each round, then per schedule the
# median / min / max of the bubble over rounds with the theory, the mean samples/s, and the
# per-round ratio of 1F1B's stored activations to GPipe's (theory P/M).
#
# Environment: LOCKSTEP_BUILD_DIR (default build), ROUNDS, SCHEDULES, P (default 2), M
# (default 8), BACKEND (gloo or mpi; default: lockstep run's own choice), KEEP_LOGS=1 to keep
# the run logs. Nothing is built here.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/pipeline_bubble.sh CONFIG.yaml [STEPS] [key=value ...]" >&2; exit 2; }
CONFIG="$1"
shift
STEPS=30
if [ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; then STEPS="$1"; shift; fi
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
ROUNDS="${ROUNDS:-5}"
read -r -a SCHEDS <<<"${SCHEDULES:-gpipe 1f1b}"
P="${P:-2}"
BACKEND_ARGS=()
if [ -n "${BACKEND:-}" ]; then BACKEND_ARGS=(--backend "$BACKEND"); fi
M="${M:-8}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
[ -f "$CONFIG" ] || { echo "pipeline_bubble.sh: config '$CONFIG' not found" >&2; exit 2; }
scratch_dir

schedule_side() {  # S ROUND [key=value ...]: one run, its result in $OUT/r<ROUND - 1>-S.json
  local s="$1" round=$(($2 - 1)) json
  shift 2
  json="$OUT/r$round-$s.json"
  if ! "$BIN" run -np "$P" "${BACKEND_ARGS[@]}" -- "$BIN" train "$CONFIG" "parallel.pipeline=$P" "parallel.microbatches=$M" \
    "parallel.schedule=$s" "trainer.max_steps=$STEPS" trainer.validate=false checkpoint.dir=off \
    checkpoint.resume=none monitor.dir=off "$@" --result-json "$json" >"$OUT/r$round-$s.log" 2>&1; then
    echo "pipeline_bubble.sh: the $s run of round $round failed; its last lines:" >&2
    tail -20 "$OUT/r$round-$s.log" >&2
    exit 1
  fi
  printf '  round %d %-5s %8.1f samples/s, bubble %.4f (rank 0 idle %.4f), activations stored %.2f MB (rank 0)\n' \
    "$round" "$s" "$(json_number "$json" samples_per_second)" "$(json_number "$json" pipeline_bubble)" \
    "$(json_number "$json" pipeline_idle_fraction)" "$(awk -v b="$(json_number "$json" activation_peak_bytes)" 'BEGIN { print b / 1e6 }')"
}

THEORY="$(awk -v p="$P" -v m="$M" 'BEGIN { printf "%.4f", (p - 1) / (m + p - 1) }')"
echo "$CONFIG $*${BACKEND:+, backend $BACKEND}, P=$P stages, M=$M micro-batches, $STEPS steps, $ROUNDS interleaved rounds; theory bubble $THEORY"
interleave "${SCHEDS[@]}" -- schedule_side "$@"

echo "schedule  bubble median / min / max (theory $THEORY)  samples/s (mean)"
for s in "${SCHEDS[@]}"; do
  bubbles=""
  rates=""
  for ((round = 0; round < ROUNDS; round++)); do
    bubbles+="$(json_number "$OUT/r$round-$s.json" pipeline_bubble)"$'\n'
    rates+="$(json_number "$OUT/r$round-$s.json" samples_per_second)"$'\n'
  done
  printf '%-8s  %s                 %.1f\n' "$s" "$(echo -n "$bubbles" | spread_of)" \
    "$(echo -n "$rates" | awk '{ t += $1 } END { print t / NR }')"
done
if [ "${#SCHEDS[@]}" -ge 2 ]; then
  ratios=""
  for ((round = 0; round < ROUNDS; round++)); do
    ratios+="$(awk -v a="$(json_number "$OUT/r$round-${SCHEDS[1]}.json" activation_peak_bytes)" \
      -v b="$(json_number "$OUT/r$round-${SCHEDS[0]}.json" activation_peak_bytes)" 'BEGIN { printf "%.4f", a / b }')"$'\n'
  done
  echo "${SCHEDS[1]} / ${SCHEDS[0]} activations stored, rank 0, per round: median / min / max $(echo -n "$ratios" | spread_of)" \
    "(theory P/M = $(awk -v p="$P" -v m="$M" 'BEGIN { printf "%.4f", p / m }'))"
fi
