#!/usr/bin/env bash
# Elastic soak (docs/elastic.md, "Soak"): the tiny pet-name `lockstep train` on NP workers under
# `lockstep run --min-np 2 --max-restarts 1000`, one running worker killed (SIGKILL) or preempted
# (SIGTERM), in turn, every INTERVAL seconds for DURATION seconds; the launcher starts a newcomer
# in each lost slot. Then: how the run ended, `lockstep samples` on its trainer.sample_log (every
# sample of each epoch trained exactly once in the kept steps), the recovery seconds of the new
# generations (median, p95, from metrics.jsonl), the steps trained again per failure.
#
#   bench/elastic_soak.sh [DURATION] [INTERVAL]     defaults: 180 and 10
#
# Environment: NP (default 4), LOCKSTEP_BUILD_DIR, KEEP=1 keeps the run's directory.
# Exit status: 0 when the run finished without a whole-group restart and the audit found every
# sample once.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${LOCKSTEP_BUILD_DIR:-build}/lockstep")"
DURATION="${1:-180}"
INTERVAL="${2:-10}"
NP="${NP:-4}"
dir="$(mktemp -d /tmp/lockstep_soak.XXXXXX)"
trap '[ "${KEEP:-0}" = 1 ] && echo "kept $dir" || rm -rf "$dir"' EXIT
config() {  # config MAX_STEPS
  printf '%s\n' "model:" "  hidden: 16" "  layers: 2" "  window: 8" "data:" "  sources: [faker-pets]" \
    "  validation_fraction: 0.1" "trainer:" "  batch_size: 16" "  seed: 7" "  max_steps: $1" "  log_every: 50" \
    "  sample_log: samples" "optimizer:" "  type: adam" "  lr: 0.01" "generate:" "  samples: 0" \
    "monitor:" "  progress: lines"
}
# Steps for DURATION and a third more at the speed of a run without faults.
config 60 >"$dir/calibrate.yaml"
(cd "$dir" && "$BIN" run -np "$NP" --backend gloo -- "$BIN" train calibrate.yaml trainer.sample_log= \
  --result-json calibrate.json >calibrate.log 2>&1)
steps=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
print(int(r['samples_per_second'] / r['global_batch'] * $DURATION * 4 / 3))" "$dir/calibrate.json")
config "$steps" >"$dir/soak.yaml"
echo "soak: $NP workers, $steps steps, a worker lost every ${INTERVAL} s for ${DURATION} s ($(lscpu | sed -n 's/^Model name: *//p'))"
(cd "$dir" && exec "$BIN" run -np "$NP" --backend gloo --min-np 2 --max-restarts 1000 -- "$BIN" train soak.yaml \
  >run.log 2>&1) &
launcher=$!
start=$(date +%s)
kills=0
terms=0
sleep "$INTERVAL"
while kill -0 "$launcher" 2>/dev/null && [ $(($(date +%s) - start)) -lt "$DURATION" ]; do
  mapfile -t workers < <(pgrep -P "$launcher" -f ' train soak.yaml' || true)
  if [ "${#workers[@]}" -gt 0 ]; then
    victim="${workers[RANDOM % ${#workers[@]}]}"
    if [ $(((kills + terms) % 2)) = 0 ]; then
      kill -KILL "$victim" 2>/dev/null && kills=$((kills + 1))
    else
      kill -TERM "$victim" 2>/dev/null && terms=$((terms + 1))
    fi
  fi
  sleep "$INTERVAL"
done
rc=0
wait "$launcher" || rc=$?
# Every lost or preempted slot is refilled in the running job: a restart of the whole group from a
# checkpoint (--max-restarts' fallback below --min-np) counts as a failure of the soak.
restarts=$(grep -c 'restarting all' "$dir/run.log" || true)
echo "faults: $kills SIGKILL, $terms SIGTERM over $(($(date +%s) - start)) s; the job exited $rc;" \
  "whole-group restarts: $restarts"
audit=0
"$BIN" samples "$dir/samples" >"$dir/audit.txt" || audit=$?
"$BIN" samples "$dir/samples" --json >"$dir/audit.json" || true
sed 's/^/  /' "$dir/audit.txt" | tail -4
python3 - "$dir" "$((kills + terms))" <<'PY'
import json, statistics, sys
run_dir, faults = sys.argv[1], int(sys.argv[2])
gens = [json.loads(l) for l in open(f"{run_dir}/runs/soak/metrics.jsonl") if '"kind":"generation"' in l]
def spread(xs):
    if not xs: return "none"
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    return f"median {statistics.median(xs):.2f} s, p95 {p95:.2f} s, max {xs[-1]:.2f} s (n={len(xs)})"
# A newcomer that arrives while the survivors of a loss meet joins the same generation.
kinds = {"smaller": 0, "as large": 0, "larger": 0}
for g in gens:
    d = g["world_size"] - g["previous_world_size"]
    kinds["smaller" if d < 0 else "larger" if d > 0 else "as large"] += 1
audit = json.load(open(f"{run_dir}/audit.json"))
print(f"generations after the first: {len(gens)} in metrics.jsonl ({kinds['smaller']} smaller, "
      f"{kinds['as large']} as large (a loss and a newcomer at once), {kinds['larger']} larger)")
print(f"recovery (the failed collective or the newcomer's arrival to the next generation's strategy): {spread([g['recovery_seconds'] for g in gens])}")
per = audit["redone_steps"] / faults if faults else 0
print(f"steps trained again: {audit['redone_steps']} ({per:.2f} per fault), of them completed by a member "
      f"and lost with it: {audit['rolled_back_steps']}; kept {audit['kept_steps']} of {audit['total_steps']}")
PY
[ "$rc" = 0 ] && [ "$audit" = 0 ] && [ "$restarts" = 0 ]
