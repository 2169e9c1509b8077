#!/usr/bin/env bash
# A straggler against synchronous DDP and the asynchronous parameter server (docs/parameter-server.md).
#
#   bench/ps_straggler.sh [CONFIG.yaml] [STEPS] [key=value ...]
#   bench/ps_straggler.sh configs/fashion_convnet.yaml 40 optimizer.lr=0.003
#
# For ROUNDS rounds (default 5; the order flips every other round) trains the same samples twice:
#   ddp:      lockstep run -np W -- lockstep train CONFIG trainer.max_steps=STEPS
#   async_ps: lockstep run -np W+SERVERS -- lockstep train CONFIG schedule.type=async_ps ps.staleness=S
#             ps.servers=SERVERS trainer.max_steps=STEPS   (STEPS x W updates of one worker's batch)
# with worker SLOW_RANK (default 2) slowed by the documented test knob testing.slow_rank /
# testing.slow_factor (default 2: it computes at half speed). Reads rank 0's --result-json:
# samples/s and the final validation accuracy. Prints each round, then per side the median / min /
# max samples/s and accuracy over rounds, and the per-round ratio async_ps / ddp of samples/s.
#
# The statistic: ddp's samples_per_second (its timed steps: after the first, to the end of the last);
# async_ps's (every update, the first included: from the first pull to the last worker's finish).
# Both exclude the final validation.
#
# Environment: LOCKSTEP_BUILD_DIR (default build), ROUNDS, W (workers, default 3), S (staleness,
# default 4), SERVERS (parameter servers, default 1), SLOW_RANK, SLOW_FACTOR, KEEP_LOGS=1 to keep the run logs. Nothing is built here.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG="configs/fashion_convnet.yaml"
if [ $# -ge 1 ] && [[ "$1" == *.yaml ]]; then CONFIG="$1"; shift; fi
STEPS=40
if [ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; then STEPS="$1"; shift; fi
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
ROUNDS="${ROUNDS:-5}"
W="${W:-3}"
S="${S:-4}"
SERVERS="${SERVERS:-1}"
SLOW_RANK="${SLOW_RANK:-2}"
SLOW_FACTOR="${SLOW_FACTOR:-2}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
[ -f "$CONFIG" ] || { echo "ps_straggler.sh: config '$CONFIG' not found" >&2; exit 2; }
scratch_dir

run() {  # SIDE ROUND [key=value ...] -> trains, leaves $OUT/r<ROUND - 1>-SIDE.json
  local side="$1" round=$(($2 - 1)) np="$W" extra=()
  shift 2
  if [ "$side" = async_ps ]; then
    np=$((W + SERVERS))
    extra=(schedule.type=async_ps "ps.staleness=$S" "ps.servers=$SERVERS")
  fi
  local json="$OUT/r$round-$side.json"
  if ! "$BIN" run -np "$np" -- "$BIN" train "$CONFIG" "trainer.max_steps=$STEPS" "testing.slow_rank=$SLOW_RANK" \
    "testing.slow_factor=$SLOW_FACTOR" checkpoint.dir=off checkpoint.resume=none monitor.dir=off "${extra[@]}" "$@" \
    --result-json "$json" >"$OUT/r$round-$side.log" 2>&1; then
    echo "ps_straggler.sh: the $side run of round $round failed; its last lines:" >&2
    tail -20 "$OUT/r$round-$side.log" >&2
    exit 1
  fi
  printf '  round %d %-8s %8.1f samples/s, validation accuracy %.4f\n' "$round" "$side" \
    "$(json_number "$json" samples_per_second)" "$(json_number "$json" last_validation_accuracy)"
}

echo "$CONFIG $*, $W workers (rank $SLOW_RANK at 1/$SLOW_FACTOR speed), $STEPS synchronous steps = $((STEPS * W)) updates," \
  "staleness bound $S, $SERVERS server(s), $ROUNDS interleaved rounds"
interleave ddp async_ps -- run "$@"

for side in ddp async_ps; do
  rates="" accs=""
  for ((round = 0; round < ROUNDS; round++)); do
    rates+="$(json_number "$OUT/r$round-$side.json" samples_per_second)"$'\n'
    accs+="$(json_number "$OUT/r$round-$side.json" last_validation_accuracy)"$'\n'
  done
  echo "$side: samples/s median / min / max $(echo -n "$rates" | spread_of); accuracy $(echo -n "$accs" | spread_of)"
done
ratios=""
for ((round = 0; round < ROUNDS; round++)); do
  ratios+="$(awk -v a="$(json_number "$OUT/r$round-async_ps.json" samples_per_second)" \
    -v b="$(json_number "$OUT/r$round-ddp.json" samples_per_second)" 'BEGIN { printf "%.4f", a / b }')"$'\n'
done
echo "async_ps / ddp samples/s, per round: median / min / max $(echo -n "$ratios" | spread_of)"
