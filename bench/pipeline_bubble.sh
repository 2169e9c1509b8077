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
[ -x "$BIN" ] || { echo "pipeline_bubble.sh: $BIN not found; build lockstep first (scripts/build.sh)" >&2; exit 1; }
[ -f "$CONFIG" ] || { echo "pipeline_bubble.sh: config '$CONFIG' not found" >&2; exit 2; }
OUT="$(mktemp -d)"
if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs: $OUT"; else trap 'rm -rf "$OUT"' EXIT; fi

field() {  # FILE KEY -> the first number after "KEY": in the result JSON (rank 0's for per-rank keys)
  sed -n "s/.*\"$2\": *\([-0-9.eE+]*\).*/\1/p" "$1" | head -1
}

THEORY="$(awk -v p="$P" -v m="$M" 'BEGIN { printf "%.4f", (p - 1) / (m + p - 1) }')"
echo "$CONFIG $*${BACKEND:+, backend $BACKEND}, P=$P stages, M=$M micro-batches, $STEPS steps, $ROUNDS interleaved rounds; theory bubble $THEORY"
for ((round = 0; round < ROUNDS; round++)); do
  order=("${SCHEDS[@]}")
  if ((round % 2 == 1)); then
    order=()
    for ((i = ${#SCHEDS[@]} - 1; i >= 0; i--)); do order+=("${SCHEDS[i]}"); done
  fi
  for s in "${order[@]}"; do
    json="$OUT/r$round-$s.json"
    if ! "$BIN" run -np "$P" "${BACKEND_ARGS[@]}" -- "$BIN" train "$CONFIG" "parallel.pipeline=$P" "parallel.microbatches=$M" \
      "parallel.schedule=$s" "trainer.max_steps=$STEPS" trainer.validate=false checkpoint.dir=off \
      checkpoint.resume=none monitor.dir=off "$@" --result-json "$json" >"$OUT/r$round-$s.log" 2>&1; then
      echo "pipeline_bubble.sh: the $s run of round $round failed; its last lines:" >&2
      tail -20 "$OUT/r$round-$s.log" >&2
      exit 1
    fi
    printf '  round %d %-5s %8.1f samples/s, bubble %.4f (rank 0 idle %.4f), activations stored %.2f MB (rank 0)\n' \
      "$round" "$s" "$(field "$json" samples_per_second)" "$(field "$json" pipeline_bubble)" \
      "$(field "$json" pipeline_idle_fraction)" "$(awk -v b="$(field "$json" activation_peak_bytes)" 'BEGIN { print b / 1e6 }')"
  done
done

stats() {  # numbers on stdin -> "median / min / max"
  sort -g | awk '{ v[NR] = $1 } END { printf "%.4f / %.4f / %.4f", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
echo "schedule  bubble median / min / max (theory $THEORY)  samples/s (mean)"
for s in "${SCHEDS[@]}"; do
  bubbles=""
  rates=""
  for ((round = 0; round < ROUNDS; round++)); do
    bubbles+="$(field "$OUT/r$round-$s.json" pipeline_bubble)"$'\n'
    rates+="$(field "$OUT/r$round-$s.json" samples_per_second)"$'\n'
  done
  printf '%-8s  %s                 %.1f\n' "$s" "$(echo -n "$bubbles" | stats)" \
    "$(echo -n "$rates" | awk '{ t += $1 } END { print t / NR }')"
done
if [ "${#SCHEDS[@]}" -ge 2 ]; then
  ratios=""
  for ((round = 0; round < ROUNDS; round++)); do
    ratios+="$(awk -v a="$(field "$OUT/r$round-${SCHEDS[1]}.json" activation_peak_bytes)" \
      -v b="$(field "$OUT/r$round-${SCHEDS[0]}.json" activation_peak_bytes)" 'BEGIN { printf "%.4f", a / b }')"$'\n'
  done
  echo "${SCHEDS[1]} / ${SCHEDS[0]} activations stored, rank 0, per round: median / min / max $(echo -n "$ratios" | stats)" \
    "(theory P/M = $(awk -v p="$P" -v m="$M" 'BEGIN { printf "%.4f", p / m }'))"
fi
