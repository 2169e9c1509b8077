#!/usr/bin/env bash
# How fast the dashboard answers for a long run: trains the tiny pet-name LSTM
# on 2 workers for STEPS steps, logging every step (so metrics.jsonl and each
# phases/rank<R>.jsonl get STEPS lines), serves the run with `lockstep
# dashboard`, and times GET /api/runs/long with curl: three requests, then one
# more after a line is appended to metrics.jsonl (the incremental read).
#   bench/dashboard_latency.sh [STEPS]     (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${LOCKSTEP_BUILD_DIR:-build}/lockstep")"
STEPS="${1:-10000}"
# shellcheck source=bench/harness.sh
. bench/harness.sh
need_lockstep
scratch_dir
DASH=""  # the dashboard this script starts, stopped at exit
stop_dashboard() { [ -z "$DASH" ] || kill "$DASH" 2>/dev/null || true; }
at_exit stop_dashboard
cat > "$OUT/long.yaml" <<YAML
model:
  hidden: 16
  layers: 2
  window: 8
data:
  sources: [faker-pets]
  validation_fraction: 0.1
trainer:
  batch_size: 16
  seed: 7
  max_steps: $STEPS
  log_every: 1
optimizer:
  type: adam
  lr: 0.01
generate:
  samples: 0
YAML
echo "training $STEPS steps on 2 workers (the run to serve)..."
(cd "$OUT" && "$BIN" run -np 2 --no-prefix -- "$BIN" train long.yaml > train.log 2>&1)
wc -l "$OUT/runs/long/metrics.jsonl" "$OUT"/runs/long/phases/rank*.jsonl
"$BIN" dashboard --logdir "$OUT/runs" --port 0 > "$OUT/dashboard.log" 2>&1 &
DASH=$!
for _ in $(seq 100); do grep -q "http://" "$OUT/dashboard.log" && break; sleep 0.1; done
URL="$(grep -o 'http://[^ ]*' "$OUT/dashboard.log" | head -n1)api/runs/long"
fetch() { curl -s -o /dev/null -w "$1: %{time_total} s, %{size_download} bytes\n" "$URL"; }
fetch "first request (parses every file)"
fetch "second"
fetch "third"
# shellcheck disable=SC2094  # the file's last line, appended to it again
tail -n1 "$OUT/runs/long/metrics.jsonl" >> "$OUT/runs/long/metrics.jsonl"
fetch "after appending a line"
