#!/usr/bin/env bash
# What the DDP knobs are worth on this machine: 2 workers training CONFIG for
# STEPS steps under each variant, the variants interleaved round by round (so
# noise hits all alike), median samples/s per variant and its ratio to the
# first one.
#   bench/tuning.sh [CONFIG] [STEPS] [ROUNDS]
# Defaults: configs/mlp-bench.yaml (the comm-heavy MLP), 40 steps, 3 rounds; the
# variants' order is reversed every other round (bench/harness.sh).
# VARIANTS (optional) selects variants by name, e.g. VARIANTS="base bf16".
# Every variant but monitor-on runs with monitoring off (monitor.dir=off);
# VARIANTS="base monitor-on" measures what monitoring costs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${LOCKSTEP_BUILD_DIR:-build}/lockstep"
CONFIG="${1:-configs/mlp-bench.yaml}"
STEPS="${2:-40}"
ROUNDS="${3:-3}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir

# name | lockstep run flags | config overrides
ALL_VARIANTS=(
  "base|--backend gloo --threads 1|"
  "mpi|--backend mpi --threads 1|"
  "mpi-noprogress|--backend mpi --threads 1|LOCKSTEP_MPI_PROGRESS_US=0"
  "bucket-1MB|--backend gloo --threads 1|ddp.bucket_cap_mb=1"
  "bucket-5MB|--backend gloo --threads 1|ddp.bucket_cap_mb=5"
  "bucket-100MB|--backend gloo --threads 1|ddp.bucket_cap_mb=100"
  "mpi-bucket-100MB|--backend mpi --threads 1|ddp.bucket_cap_mb=100"
  "mpi-bucket-1MB|--backend mpi --threads 1|ddp.bucket_cap_mb=1"
  "bf16|--backend gloo --threads 1|ddp.compression=bf16"
  "mpi-bf16|--backend mpi --threads 1|ddp.compression=bf16"
  "2-threads|--backend gloo --threads 2|"
  "monitor-on|--backend gloo --threads 1|monitor.dir=@OUT@/monitor"
)
selected=()
names=()
declare -A VARIANT  # name -> "run flags|overrides"
for v in "${ALL_VARIANTS[@]}"; do
  name="${v%%|*}"
  if [[ -z "${VARIANTS:-}" || " $VARIANTS " == *" $name "* ]]; then
    selected+=("$v")
    names+=("$name")
    VARIANT[$name]="${v#*|}"
  fi
done

run_variant() {  # name, run flags, overrides (LOCKSTEP_* words become environment)
  local name="$1" flags="$2" overrides="$3" envs=() args=()
  overrides="${overrides//@OUT@/$OUT}"
  for word in $overrides; do
    if [[ "$word" == LOCKSTEP_* ]]; then envs+=("$word"); else args+=("$word"); fi
  done
  # shellcheck disable=SC2086
  env "${envs[@]}" "$BIN" run -np 2 $flags -- "$BIN" train "$CONFIG" trainer.max_steps="$STEPS" \
      trainer.validate=false trainer.log_every=1000 checkpoint.dir="$OUT/ckpt-$name" checkpoint.resume=none \
      monitor.dir=off "${args[@]}" > "$OUT/$name.log" 2>&1 || { echo "variant $name failed:" >&2; tail -5 "$OUT/$name.log" >&2; return 1; }
  grep -o 'done: .*' "$OUT/$name.log" | sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p'
}

tuning_side() {  # NAME ROUND: one run of the variant, "NAME samples/s" appended to $OUT/results
  local flags overrides
  IFS='|' read -r flags overrides <<< "${VARIANT[$1]}"
  echo "$1 $(run_variant "$1" "$flags" "$overrides")" >> "$OUT/results"
}
interleave "${names[@]}" -- tuning_side

echo "$CONFIG, 2 workers, $STEPS steps per run, $ROUNDS interleaved rounds (median samples/s, global)"
first=""
for v in "${selected[@]}"; do
  IFS='|' read -r name flags overrides <<< "$v"
  med=$(awk -v n="$name" '$1 == n { print $2 }' "$OUT/results" | median_of)
  [[ -z "$first" ]] && first="$med"
  all=$(awk -v n="$name" '$1 == n { printf "%s ", $2 }' "$OUT/results")
  awk -v n="$name" -v m="$med" -v f="$first" -v f2="$flags $overrides" -v all="$all" \
      'BEGIN { printf "  %-15s %8.0f  %5.2fx   (%s; runs: %s)\n", n, m, m / f, f2, all }'
done
