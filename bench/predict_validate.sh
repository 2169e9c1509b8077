#!/usr/bin/env bash
# Checks `lockstep bench predict` against measured runs: for each workload it
# predicts samples/s of 2, 3 and 4 hosts at each link speed from the two
# profiles on this machine, then measures the same points with
# bench/emulated_links.sh (bench/harness.sh's emulated hosts: network
# namespaces, tc tbf links) and prints
# predicted, measured and the error per point. Needs root (ip netns, tc).
#
#   bench/predict_validate.sh [STEPS]     (default 12 optimizer steps per run)
#
# Environment: LINKS (default "10gbit 1gbit 100mbit"), HOSTS (default "2 3 4"),
# WORKLOADS (default "convnet mlp"), LOCKSTEP_BUILD_DIR (default build),
# MAX_ERROR (e.g. 0.3: print FAILED and exit 1 when a point is further off, or
# missing; default: report only), MAX_EFFICIENCY (e.g. 0.6: print FAILED and exit 1
# when a measured point's scaling efficiency is not below it, i.e. the emulated
# link did not slow training down; default: report only).
#
# The emulated hosts share this machine's cores, so the prediction is told so
# (--shared-cores): with more hosts than cores, compute stretches by hosts/cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOCKSTEP_BUILD_DIR:-build}"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
BIN="$BUILD/lockstep"
STEPS="${1:-12}"
LINKS="${LINKS:-10gbit 1gbit 100mbit}"
HOSTS="${HOSTS:-2 3 4}"
WORKLOADS="${WORKLOADS:-convnet mlp}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
bench_start

for workload in $WORKLOADS; do
  echo "== $workload: prediction (profiles of 1 and 2 workers on this machine)" >&2
  "$BIN" bench predict "$(config_of "$workload")" --link "$(echo "$LINKS" | tr ' ' ',')" \
    --workers "$(echo "$HOSTS" | tr ' ' ',')" --threads 1 --backend gloo --shared-cores "$(nproc)" \
    --steps "$STEPS" --json generate.samples=0 > "$OUT/$workload-predict.json"
done
echo "== measured: bench/emulated_links.sh $STEPS" >&2
LINKS="$LINKS" HOSTS="$HOSTS" WORKLOADS="$WORKLOADS" LOCKSTEP_BUILD_DIR="$BUILD" bench/emulated_links.sh "$STEPS" \
  | tee "$OUT/measured.txt" >&2

# shellcheck disable=SC2086  # WORKLOADS is words
python3 - "$OUT" "${MAX_ERROR:-}" "${MAX_EFFICIENCY:-}" $WORKLOADS <<'EOF'
import json, sys
out, limit, max_efficiency, workloads = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
missing = 0
measured = {}
efficiency = {}
for line in open(f"{out}/measured.txt"):
    f = line.split()
    if len(f) >= 5 and f[0] in workloads and f[1] != "none" and f[3].isdigit():
        measured[(f[0], f[1], int(f[2]))] = float(f[3])
        efficiency[(f[0], f[1], int(f[2]))] = float(f[4])
print(f"{'workload':<9} {'link':<8} {'hosts':>5} {'predicted':>10} {'measured':>9} {'error':>7}")
errors = []
for w in workloads:
    doc = json.load(open(f"{out}/{w}-predict.json"))
    for row in doc["rows"]:
        key = (w, row["link"], row["workers"])
        if key not in measured:
            print(f"{w:<9} {row['link']:<8} {row['workers']:>5} {row['samples_per_second']:>10.0f} {'no run':>9}")
            missing += 1
            continue
        m = measured[key]
        err = row["samples_per_second"] / m - 1
        errors.append(abs(err))
        print(f"{w:<9} {row['link']:<8} {row['workers']:>5} {row['samples_per_second']:>10.0f} {m:>9.0f} "
              f"{100 * err:>+6.0f}%")
if errors:
    within = sum(e <= 0.15 for e in errors)
    print(f"{within} of {len(errors)} points within 15%; largest error {100 * max(errors):.0f}%")
failed = False
if limit:
    off = sum(e > float(limit) for e in errors)
    if off or missing or not errors:
        print(f"FAILED: {off} point(s) off by more than {100 * float(limit):.0f}%, {missing} without a measurement")
        failed = True
if max_efficiency:
    fast = {k: e for k, e in efficiency.items() if e >= float(max_efficiency)}
    if fast or not efficiency:
        print(f"FAILED: efficiency not below {max_efficiency} (the link did not show): "
              + (", ".join(f"{w} {l} {n} hosts: {e:.2f}" for (w, l, n), e in fast.items()) or "no measured point"))
        failed = True
sys.exit(1 if failed else 0)
EOF
